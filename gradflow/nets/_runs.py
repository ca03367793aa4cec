"""Run-folder I/O: JSON-lines metrics, checkpoints and spectra measurements.

Layout of a run folder (written by ``_loop.run``)::

    metrics.jsonl           one JSON object per line, appended as produced
    ranks.jsonl             InRank runs: one record per rank check
    checkpoint/state.eqx    latest model + optimiser state (equinox serialisation of whole host arrays)
    checkpoint/meta.json    step and the run's description (configs, seed, data; see ``check_resumable``)
    checkpoint/init.eqx     the model as given (reference for the perturbation spectra)
    spectra/init.npz        ViT/GPT runs: spectra of W_K W_Qᵀ, W_V W_Oᵀ at initialisation
    spectra/step_XXXXXXXX.npz  spectra of the perturbations at that step
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib

import equinox as eqx
import jax
import numpy as np

from ._spectra import HeadSpectra


def _atomic_write(path: pathlib.Path, write) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        write(f)
    os.replace(tmp, path)


class MetricsLog:
    """Append-only JSON-lines file, flushed after every record."""

    def __init__(self, path: pathlib.Path):
        self.path = pathlib.Path(path)

    def append(self, record: dict) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")

    def truncate_after(self, step: int) -> None:
        """Drop the records of steps after ``step`` (a resumed run re-produces them)."""
        if not self.path.exists():
            return
        keep = [line for line in self.path.read_text().splitlines() if line and json.loads(line)["step"] <= step]
        _atomic_write(self.path, lambda f: f.write("".join(line + "\n" for line in keep).encode()))


def read_metrics(path) -> list[dict]:
    """All records of a metrics.jsonl file."""
    return [json.loads(line) for line in pathlib.Path(path).read_text().splitlines() if line]


def describe(**fields) -> dict:
    """A run description (what a checkpoint must match to be resumed) as JSON values: tuples become lists,
    dataclasses dicts, dtypes their names."""

    def default(v):
        if dataclasses.is_dataclass(v):
            return dataclasses.asdict(v)
        if isinstance(v, np.dtype) or (isinstance(v, type) and issubclass(v, np.generic)):
            return np.dtype(v).name
        raise TypeError(f"cannot describe {v!r} in a run description")

    return json.loads(json.dumps(fields, default=default))


def fingerprint(tree) -> str:
    """A short hash of the array leaves of ``tree`` (shapes, dtypes and bytes): identifies initial weights."""
    h = hashlib.blake2b(digest_size=8)
    for leaf in jax.tree_util.tree_leaves(eqx.filter(tree, eqx.is_array)):
        a = np.asarray(leaf)
        h.update(f"{a.shape}{a.dtype}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _differences(stored, current, prefix: str = "") -> list[str]:
    if isinstance(stored, dict) and isinstance(current, dict):
        return [
            d
            for k in sorted(set(stored) | set(current), key=str)
            for d in _differences(stored.get(k), current.get(k), f"{prefix}{k}.")
        ]
    if stored == current:
        return []
    return [f"{prefix[:-1]} is {stored!r} in the checkpoint, {current!r} in this run"]


def check_resumable(folder, meta: dict, description: dict) -> None:
    """Refuse to resume from the checkpoint in ``folder`` unless its ``meta`` records the run ``description``
    (from :func:`describe`: configs, seed, init scale, mode, data set...): the error names every differing field,
    nested fields with dots (``config.lr``)."""
    diffs = _differences({k: meta.get(k) for k in description}, description)
    if diffs:
        raise ValueError(
            f"cannot resume from {folder}: it was written by a different run: {'; '.join(diffs)}. "
            "Resume with the options the run was started with, or start a fresh run in another output "
            "folder (--out), or without resume (which overwrites this one)."
        )


def save_checkpoint(folder, tree, meta: dict) -> None:
    """Write ``tree`` (params and optimiser state, whole host arrays) and ``meta`` (JSON-able, with ``step``)
    atomically."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    _atomic_write(folder / "state.eqx", lambda f: eqx.tree_serialise_leaves(f, tree))
    _atomic_write(folder / "meta.json", lambda f: f.write(json.dumps(meta, indent=1).encode()))


def load_checkpoint(folder, like):
    """The tree saved in ``folder`` with whole NumPy arrays (for any placement on devices); ``like`` gives the tree
    structure, shapes and dtypes (arrays, or ``jax.ShapeDtypeStruct`` from ``eqx.filter_eval_shape``)."""

    def host(x):
        return np.empty(x.shape, x.dtype) if isinstance(x, (jax.Array, jax.ShapeDtypeStruct)) else x

    like = jax.tree_util.tree_map(host, like)
    return eqx.tree_deserialise_leaves(pathlib.Path(folder) / "state.eqx", like)


def checkpoint_meta(folder) -> dict:
    """The ``meta`` of the checkpoint in ``folder`` (e.g. to build the ``like`` tree of ``load_checkpoint``)."""
    return json.loads((pathlib.Path(folder) / "meta.json").read_text())


def has_checkpoint(folder) -> bool:
    folder = pathlib.Path(folder)
    return (folder / "state.eqx").exists() and (folder / "meta.json").exists()


def clear_checkpoint(folder) -> None:
    """Delete the checkpoint in ``folder``, if any (a fresh run must not be resumable from an older one)."""
    folder = pathlib.Path(folder)
    for name in ("state.eqx", "meta.json"):
        (folder / name).unlink(missing_ok=True)


def save_tree(path, tree) -> None:
    _atomic_write(pathlib.Path(path), lambda f: eqx.tree_serialise_leaves(f, tree))


def load_tree(path, like):
    return eqx.tree_deserialise_leaves(pathlib.Path(path), like)


def save_spectra(folder, name: str, spectra: HeadSpectra, step: int) -> None:
    """One measurement as ``folder/name.npz`` (arrays of ``spectra`` plus ``step``)."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {k: np.asarray(v) for k, v in vars(spectra).items()}
    _atomic_write(folder / f"{name}.npz", lambda f: np.savez(f, step=np.int64(step), **arrays))


def spectra_name(step: int) -> str:
    return f"step_{step:08d}"


def prune_spectra_after(folder, step: int) -> None:
    """Delete the measurements of steps after ``step``."""
    for p in pathlib.Path(folder).glob("step_*.npz"):
        if int(p.stem[5:]) > step:
            p.unlink()


class SpectraHistory(eqx.Module):
    """Measurements of a run stacked along a leading step axis, plus the spectra at initialisation."""

    steps: np.ndarray
    delta: HeadSpectra
    init: HeadSpectra


def load_spectra(folder) -> SpectraHistory:
    """All measurements in a run's ``spectra`` folder, ordered by step."""
    folder = pathlib.Path(folder)
    files = sorted(folder.glob("step_*.npz"))
    if not files:
        raise FileNotFoundError(f"no spectra measurements in {folder}")
    loaded = [np.load(p) for p in files]
    fields = ("kq", "vo", "kq_stable_rank", "vo_stable_rank")
    delta = HeadSpectra(*(np.stack([d[k] for d in loaded]) for k in fields))
    init_file = np.load(folder / "init.npz")
    init = HeadSpectra(*(init_file[k] for k in fields))
    return SpectraHistory(steps=np.array([int(d["step"]) for d in loaded]), delta=delta, init=init)

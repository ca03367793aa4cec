"""Run-folder I/O: JSON-lines metrics, checkpoints and spectra measurements.

Layout of a run folder (written by ``_loop.run`` through :class:`RunFolder`)::

    metrics.jsonl           one JSON object per line, appended as produced
    ranks.jsonl             InRank runs: one record per rank check
    checkpoint/state.eqx    latest model + optimiser state (equinox serialisation of whole host arrays)
    checkpoint/meta.json    step and the run's description (configs, seed, data; see ``check_resumable``),
                            written at step 0 and with every checkpoint
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
        return [d for k in current for d in _differences(stored.get(k), current[k], f"{prefix}{k}.")]
    if stored == current:
        return []
    return [f"{prefix[:-1]} is {stored!r} in the checkpoint, {current!r} in this run"]


def check_resumable(folder, meta: dict, description: dict) -> None:
    """Refuse to resume from the checkpoint in ``folder`` unless its ``meta`` records the run ``description``
    (from :func:`describe`: configs, seed, init scale, mode, data set...): the error names every differing field,
    nested fields with dots (``config.lr``)."""
    diffs = _differences(meta, description)
    if diffs:
        raise ValueError(
            f"cannot resume from {folder}: it was written by a different run: {'; '.join(diffs)}. "
            "Resume with the options the run was started with, start a fresh run in another output folder "
            "(--out), or start this one again with --overwrite (overwrite=True)."
        )


class RunExistsError(FileExistsError):
    """The run folder holds an earlier run, and neither resuming nor overwriting it was asked for."""


def earlier_run(folder) -> str | None:
    """What ``folder`` holds of an earlier run (e.g. ``"a run at step 120 of 1000"``), or None."""
    folder = pathlib.Path(folder)
    if (folder / "checkpoint" / "meta.json").exists():
        meta = checkpoint_meta(folder / "checkpoint")
        return f"a run at step {meta['step']} of {meta['total_steps']}"
    if (folder / "checkpoint").exists() or (folder / "metrics.jsonl").exists():
        return "the start of a run"
    return None


def refuse_overwrite(folder, *, resume: bool, overwrite: bool) -> None:
    """Raise ``RunExistsError`` if ``folder`` holds an earlier run and neither ``resume`` nor ``overwrite`` is
    set."""
    found = None if resume or overwrite else earlier_run(folder)
    if found:
        raise RunExistsError(
            f"{folder} holds {found}: pass --resume (resume=True) to continue it, or --overwrite (overwrite=True) "
            "to start it again"
        )


def checkpoint_meta(folder) -> dict:
    """The ``meta`` of the checkpoint in ``folder``."""
    return json.loads((pathlib.Path(folder) / "meta.json").read_text())


def save_tree(path, tree) -> None:
    _atomic_write(pathlib.Path(path), lambda f: eqx.tree_serialise_leaves(f, tree))


def _host_like(like):
    """``like`` with whole NumPy arrays for its arrays (``jax.ShapeDtypeStruct`` too): to load for any placement."""

    def host(x):
        return np.empty(x.shape, x.dtype) if isinstance(x, (jax.Array, jax.ShapeDtypeStruct)) else x

    return jax.tree_util.tree_map(host, like)


class RunFolder:
    """The files of one run in ``path`` (module docstring): its JSON-lines logs (``log_names``: ``metrics`` and
    any other), its checkpoint, and the rule that keeps an earlier run's files unless asked to resume or overwrite
    them. Only the writer process writes (``writer``); every process reads."""

    def __init__(self, path, log_names, *, writer: bool):
        self.path = pathlib.Path(path)
        self.checkpoint = self.path / "checkpoint"
        self.logs = {name: MetricsLog(self.path / f"{name}.jsonl") for name in log_names}
        self.writer = writer

    def resumable(self, description: dict, total_steps: int, *, resume: bool, overwrite: bool) -> dict | None:
        """The ``meta`` of the checkpoint to continue from, or None to start afresh. Refuses (``RunExistsError``)
        to start over an earlier run unless ``overwrite``, and, with ``resume``, a checkpoint written by a
        different run (:func:`check_resumable`) or one past ``total_steps``."""
        refuse_overwrite(self.path, resume=resume, overwrite=overwrite)
        if not resume or not (self.checkpoint / "meta.json").exists():
            return None
        meta = checkpoint_meta(self.checkpoint)
        check_resumable(self.checkpoint, meta, description)
        if meta["step"] > total_steps:
            raise ValueError(
                f"cannot resume from {self.checkpoint}: it is at step {meta['step']}, past the {total_steps} steps "
                f"of this run; ask for {meta['step']} steps or more (--steps)"
            )
        return meta if meta["step"] > 0 else None

    def start(self, init_model, meta: dict) -> None:
        """Start afresh: delete an earlier run's checkpoint and logs, save ``init_model`` (host arrays) and
        ``meta`` (at step 0: the description that a resume checks)."""
        if not self.writer:
            return
        self.checkpoint.mkdir(parents=True, exist_ok=True)
        (self.checkpoint / "state.eqx").unlink(missing_ok=True)
        for log in self.logs.values():
            log.path.unlink(missing_ok=True)
        save_tree(self.checkpoint / "init.eqx", init_model)
        self._save_meta(meta)

    def resume(self, step: int) -> dict[str, list[dict]]:
        """The records of each log up to ``step``; the later ones are deleted (the resumed run makes them again)."""
        records = {
            name: [r for r in read_metrics(log.path) if r["step"] <= step] if log.path.exists() else []
            for name, log in self.logs.items()
        }
        if self.writer:
            for log in self.logs.values():
                log.truncate_after(step)
        return records

    def append(self, name: str, record: dict) -> None:
        if self.writer and name in self.logs:
            self.logs[name].append(record)

    def save(self, tree, meta: dict) -> None:
        """Checkpoint ``tree`` (whole host arrays) and ``meta`` (JSON-able, with ``step``), each file atomically,
        the state first."""
        if self.writer:
            save_tree(self.checkpoint / "state.eqx", tree)
            self._save_meta(meta)

    def _save_meta(self, meta: dict) -> None:
        _atomic_write(self.checkpoint / "meta.json", lambda f: f.write(json.dumps(meta, indent=1).encode()))

    def load(self, like):
        """The checkpointed tree; ``like`` gives its structure, shapes and dtypes (e.g. ``eqx.filter_eval_shape``)."""
        return eqx.tree_deserialise_leaves(self.checkpoint / "state.eqx", _host_like(like))

    def load_init(self, like):
        """The model the run started from."""
        return eqx.tree_deserialise_leaves(self.checkpoint / "init.eqx", _host_like(like))


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

"""A greedy path's finished stages on disk, so that an interrupted path resumes where it stopped
(``greedy_limit(checkpoint=...)``), and what identifies the model they belong to."""

import dataclasses
import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import equinox as eqx
import jax
import numpy as np

from .._io import config_hash, load_result, save_result


def fingerprint(model, probe: Callable) -> str:
    """What identifies ``model``: a hash of its arrays (the data) and of ``probe(model)``, the loss and gradient at a
    fixed generic point, which tell its ``h`` (or loss) apart from another's on the same data."""
    digest = hashlib.sha256()
    for leaf in jax.tree_util.tree_leaves(model):
        if eqx.is_array(leaf) or isinstance(leaf, np.ndarray):
            arr = np.ascontiguousarray(np.asarray(leaf))
            digest.update(f"{arr.dtype}{arr.shape}".encode())
            digest.update(arr.tobytes())
    for value in jax.tree_util.tree_leaves(probe(model)):
        digest.update(np.array2string(np.asarray(value, dtype=np.float64), precision=10, threshold=10**9).encode())
    return digest.hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class Kept:
    """A checkpoint's contents: a greedy path's finished records, what they were computed from (``key``) and the
    state of the generator of Assumption 4.4's perturbations after them."""

    key: str
    stages: tuple
    transitions: tuple
    rng: dict


class Checkpoint:
    """The file ``path`` that keeps a greedy path's finished stages: written (atomically) after every stage, and
    resumed from by a later run whose ``key`` (the model's :func:`fingerprint` and the options) is the same.
    ``rng``, the generator of the perturbations, continues as it would have."""

    def __init__(self, path: str | os.PathLike, key: dict, rng: np.random.Generator):
        self.path, self.key, self.rng = Path(path), config_hash(key, length=32), rng

    def load(self) -> tuple[list, list] | None:
        """The stages and transitions kept, or None where there is no checkpoint yet."""
        if not self.path.exists():
            return None
        kept = load_result(self.path)  # a damaged file: one line (DamagedFile), which says to delete it
        if not isinstance(kept, Kept) or kept.key != self.key:
            raise ValueError(
                f"checkpoint {self.path} keeps the stages of another greedy path (another model, data or options): "
                "give another checkpoint file, or delete it to start again."
            )
        self.rng.bit_generator.state = kept.rng
        return list(kept.stages), list(kept.transitions)

    def start(self, first, max_stages: int | None, progress: bool) -> tuple[list, list]:
        """The stages and transitions to start from: those kept (at most ``max_stages`` transitions), else the
        stage record ``first``."""
        stages, transitions = self.load() or ([first], [])
        if max_stages is not None:
            stages, transitions = stages[: max_stages + 1], transitions[:max_stages]
        if progress and transitions:
            print(f"greedy stages 1–{len(transitions)} resumed from {self.path}", flush=True)
        return stages, transitions

    def save(self, stages: list, transitions: list) -> None:
        save_result(self.path, Kept(self.key, tuple(stages), tuple(transitions), self.rng.bit_generator.state))

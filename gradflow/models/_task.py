"""A built-in task: a model with its data, a seeded initialisation direction, and its teacher."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .._diagonal import DiagonalModel
from .._factorized import FactorizedModel
from .._kit._checks import check_int


@dataclasses.dataclass(frozen=True)
class Task:
    """A model, an initialisation direction ``θ⁰ = (u0, v0)`` and the teacher that made the labels.

    For a [`FactorizedModel`][gradflow.FactorizedModel], ``u0`` and ``v0`` are tuples of factor matrices
    ``U_j, V_j`` and ``teacher_beta`` is the tuple of the teacher's weight matrices ``W*_j``.

    The initialisation of the flow is ``θ(0) = α (u0, v0)`` (docs/math.md, *Small initialisation and the conservation law*). ``u0, v0`` are i.i.d.
    N(0, 1), as in the paper's appendix A ("θ(0) = α θ₀ for some random Gaussian θ₀").
    """

    name: str
    model: DiagonalModel | FactorizedModel
    u0: np.ndarray | tuple[np.ndarray, ...]
    v0: np.ndarray | tuple[np.ndarray, ...]
    teacher_beta: np.ndarray | tuple[np.ndarray, ...]
    config: dict[str, Any]


def check_seed(seed) -> int:
    """The task's seed: an integer >= 0."""
    return check_int(seed, "seed", minimum=0)


def gaussian_init(p: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded i.i.d. N(0, 1) initialisation directions ``u0, v0 ∈ R^p``."""
    rng = np.random.default_rng([seed, 1])
    return rng.standard_normal(p), rng.standard_normal(p)


def sparse_gaussian(rng: np.random.Generator, size: int, nonzero: int | None, name: str) -> np.ndarray:
    """A vector with ``nonzero`` N(0, 1) entries on a random support (dense if ``nonzero`` is None); ``name`` is the
    argument that set ``nonzero``, for the error."""
    out = np.zeros(size)
    k = size if nonzero is None else nonzero
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k <= size:
        raise ValueError(
            f"{name}: the teacher's number of nonzero entries must lie in [0, {size}] (an integer, or None for "
            f"dense); got {nonzero!r}."
        )
    idx = rng.choice(size, size=k, replace=False)
    out[idx] = rng.standard_normal(k)
    return out

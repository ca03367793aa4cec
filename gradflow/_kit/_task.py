"""A built-in task: a model with its data, a seeded initialisation direction, and its teacher; and how a family
lists its built-in tasks (:class:`Builtin`) with the options the sweep takes (:class:`SweepOption`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ._checks import check_int


@dataclasses.dataclass(frozen=True)
class Task:
    """A model, an initialisation direction ``θ⁰ = (u0, v0)`` and the teacher that made the labels.

    For a [`FactorizedModel`][gradflow.FactorizedModel], ``u0`` and ``v0`` are tuples of factor matrices
    ``U_j, V_j`` and ``teacher_beta`` is the tuple of the teacher's weight matrices ``W*_j``.

    The initialisation of the flow is ``θ(0) = α (u0, v0)`` (docs/math.md, *Small initialisation and the conservation law*). ``u0, v0`` are i.i.d.
    N(0, 1), as in the paper's appendix A ("θ(0) = α θ₀ for some random Gaussian θ₀").
    """

    name: str
    model: Any
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


@dataclasses.dataclass(frozen=True)
class SweepOption:
    """How a sweep's TOML writes one option of a built-in task: ``check`` normalises a single value or raises
    ``ValueError`` (the message then says ``expected``); ``is_single`` tells a single value from a list of them."""

    expected: str
    check: Callable[[Any], Any]
    is_single: Callable[[Any], bool] = lambda v: not isinstance(v, list)


@dataclasses.dataclass(frozen=True)
class Builtin:
    """A built-in task: the function that builds it, the names of its size options (its keyword arguments
    that set the sizes; ``seed`` applies to all), the name of its model's family, its keyword arguments that set
    the teacher's singular values (full weights), and the options a sweep may vary (by name, each with how the
    TOML writes it; none: the sweep does not take the task)."""

    build: Callable[..., Task]
    sizes: tuple[str, ...]
    family: str = "diagonal"
    teacher: tuple[str, ...] = ()
    sweep: Mapping[str, SweepOption] = dataclasses.field(default_factory=dict)


def task_named(tasks: Mapping[str, Builtin], name: str) -> Builtin:
    """``tasks[name]``, or a ``ValueError`` naming the choices."""
    if name not in tasks:
        raise ValueError(f"unknown model {name!r}; choose one of {sorted(tasks)}.")
    return tasks[name]


DENSE = "dense"  # the TOML spelling of a dense teacher (the builders' None)


def _int(low: int) -> Callable[[Any], int]:
    def check(v):
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise ValueError
        return v

    return check


def _non_negative(v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v >= 0):
        raise ValueError
    return float(v)


def _bool(v) -> bool:
    if not isinstance(v, bool):
        raise ValueError
    return v


def _sparsity(v) -> int | None:
    return None if v == DENSE else _int(0)(v)


def _pair(v) -> tuple[int | None, int | None]:
    """A pair ``[KQ, VO]``, or one value for both."""
    if not isinstance(v, (list, tuple)):
        return (_sparsity(v), _sparsity(v))
    if len(v) != 2:
        raise ValueError
    return (_sparsity(v[0]), _sparsity(v[1]))


def _positive_numbers(v) -> tuple[float, ...]:
    """A list of positive numbers (a teacher's singular values)."""
    if not isinstance(v, (list, tuple)) or not v:
        raise ValueError
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0 for x in v):
        raise ValueError
    return tuple(float(x) for x in v)


POSITIVE = SweepOption("a positive integer", _int(1))
NON_NEGATIVE = SweepOption("a non-negative number", _non_negative)
BOOLEAN = SweepOption("true or false", _bool)
SPARSITY = SweepOption(f'a number of nonzero teacher entries (an integer >= 0) or "{DENSE}"', _sparsity)
SPARSITY_PAIR = SweepOption(
    f'a pair [KQ, VO] of numbers of nonzero teacher entries (integers >= 0 or "{DENSE}"), or one for both',
    _pair,
    lambda v: not (isinstance(v, list) and v and isinstance(v[0], list)),
)
SINGULAR_VALUES = SweepOption(
    "a list of positive singular values",
    _positive_numbers,
    lambda v: not (isinstance(v, list) and v and isinstance(v[0], list)),
)
"""A teacher's singular values: a list of positive numbers (a list of lists is an axis of the grid)."""

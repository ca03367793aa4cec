"""The built-in tasks by name, with the size options each takes (what the demo and the command line offer)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from types import MappingProxyType

from ._attention import diagonal_attention
from ._factorized import attention_full, matrix_factorization, matrix_sensing
from ._linear import diagonal_linear
from ._task import Task
from ._transformer import diagonal_transformer


@dataclasses.dataclass(frozen=True)
class Builtin:
    """A built-in task: the function that builds it, the names of its size options (its keyword arguments
    that set the sizes; ``seed`` applies to all), the name of its model's family (``"diagonal"`` or
    ``"factorized"``) and its keyword arguments that set the teacher's singular values (full weights)."""

    build: Callable[..., Task]
    sizes: tuple[str, ...]
    family: str = "diagonal"
    teacher: tuple[str, ...] = ()


BUILTIN: Mapping[str, Builtin] = MappingProxyType(
    {
        "diagonal_linear": Builtin(diagonal_linear, ("n", "p")),
        "diagonal_attention": Builtin(diagonal_attention, ("n", "tokens", "dim")),
        "diagonal_transformer": Builtin(diagonal_transformer, ("n", "tokens", "dim", "layers", "heads")),
    }
)
"""The built-in tasks with diagonal weights by name (what the demo, the sweep and the command line offer)."""

FACTORIZED: Mapping[str, Builtin] = MappingProxyType(
    {
        "matrix_factorization": Builtin(matrix_factorization, ("m", "n"), "factorized", ("singular_values",)),
        "matrix_sensing": Builtin(matrix_sensing, ("m", "n", "measurements"), "factorized", ("singular_values",)),
        "attention_full": Builtin(attention_full, ("n", "tokens", "dim"), "factorized", ("teacher_kq", "teacher_vo")),
    }
)
"""The built-in tasks with full, factorised weights (a [`FactorizedModel`][gradflow.FactorizedModel]) by name."""


def builtin(name: str, *, factorized: bool | None = None) -> Builtin:
    """``BUILTIN[name]`` (``FACTORIZED[name]`` with ``factorized=True``; either with ``None``), with an error naming
    the choices for an unknown ``name``."""
    table = {True: FACTORIZED, False: BUILTIN, None: {**BUILTIN, **FACTORIZED}}[factorized]
    if name not in table:
        raise ValueError(f"unknown model {name!r}; choose one of {sorted(table)}.")
    return table[name]

"""The model families gradflow knows: one entry per family (docs/extending.md). The entry points find a model's
family from its exact type; the command line, the demo, the sweep and ``gradflow.models`` loop over the entries."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from ._diagonal import DIAGONAL
from ._factorized import FACTORIZED
from ._kit._family import ModelFamily
from ._kit._task import Builtin

FAMILIES: tuple[ModelFamily, ...] = (DIAGONAL, FACTORIZED)

_BY_TYPE: Mapping[type, ModelFamily] = MappingProxyType({f.model_type: f for f in FAMILIES})
_BY_NAME: Mapping[str, ModelFamily] = MappingProxyType({f.name: f for f in FAMILIES})

TASKS: Mapping[str, Builtin] = MappingProxyType({name: task for f in FAMILIES for name, task in f.tasks.items()})
"""Every family's built-in tasks by name (``gradflow.models.TASKS``); ``TASKS[name].family`` names the model's
family."""


def family_of(model) -> ModelFamily:
    """The family of ``model``'s exact type, or a ``TypeError`` that names the model types gradflow takes."""
    family = _BY_TYPE.get(type(model))
    if family is not None:
        return family
    kinds = " or ".join(f"a gradflow.{t.__name__}" for t in _BY_TYPE)
    parent = next((t for t in _BY_TYPE if isinstance(model, t)), None)
    if parent is not None:
        raise TypeError(
            f"model must be {kinds}; got a {type(model).__name__}, a subclass of gradflow.{parent.__name__}: gradflow "
            f"finds the family from the exact type (build a gradflow.{parent.__name__} with your functions instead)."
        )
    raise TypeError(f"model must be {kinds}; got {type(model).__name__}.")


def family_named(name: str) -> ModelFamily:
    """The family called ``name`` (``"diagonal"``, ``"factorized"``), or a ``ValueError`` naming the choices."""
    if name not in _BY_NAME:
        raise ValueError(f"unknown model family {name!r}; choose one of {sorted(_BY_NAME)}.")
    return _BY_NAME[name]


def builtin(name: str, family: str | None = None) -> Builtin:
    """The built-in task ``name`` (of the family called ``family``, if given), with an error naming the choices."""
    table = TASKS if family is None else family_named(family).tasks
    if name not in table:
        raise ValueError(f"unknown model {name!r}; choose one of {sorted(table)}.")
    return table[name]

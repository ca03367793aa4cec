"""The model families gradflow knows: one entry per family (docs/extending.md). The entry points find a model's
family from its type (a dict from model type to family); the command line, the demo, the sweep and ``gradflow.models`` loop over the entries."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from ._deep_linear import DEEP_LINEAR
from ._depth import DEPTH
from ._diagonal import DIAGONAL
from ._factorized import FACTORIZED
from ._kit._family import ModelFamily
from ._kit._task import Builtin, task_named

FAMILIES: tuple[ModelFamily, ...] = (DIAGONAL, FACTORIZED, DEPTH, DEEP_LINEAR)

_BY_TYPE: Mapping[type, ModelFamily] = MappingProxyType({f.model_type: f for f in FAMILIES})
_BY_NAME: Mapping[str, ModelFamily] = MappingProxyType({f.name: f for f in FAMILIES})

TASKS: Mapping[str, Builtin] = MappingProxyType({name: task for f in FAMILIES for name, task in f.tasks.items()})
"""Every family's built-in tasks by name (``gradflow.models.TASKS``); ``TASKS[name].family`` names the model's
family."""


def family_of(model) -> ModelFamily:
    """The family of ``model``'s type, or a ``TypeError`` that names the model types gradflow takes.

    The type's own entry, else that of its nearest registered base class along its method resolution order (a
    ``DiagonalModel`` subclass that writes ``g`` out by hand stays diagonal): never the order of ``FAMILIES``.
    """
    for cls in type(model).__mro__:
        if cls in _BY_TYPE:
            return _BY_TYPE[cls]
    kinds = " or ".join(f"a gradflow.{t.__name__}" for t in _BY_TYPE)
    raise TypeError(f"model must be {kinds}; got {type(model).__name__}.")


def family_named(name: str) -> ModelFamily:
    """The family called ``name`` (``"diagonal"``, ``"factorized"``), or a ``ValueError`` naming the choices."""
    if name not in _BY_NAME:
        raise ValueError(f"unknown model family {name!r}; choose one of {sorted(_BY_NAME)}.")
    return _BY_NAME[name]


def builtin(name: str, family: str | None = None) -> Builtin:
    """The built-in task ``name`` (of the family called ``family``, if given), with an error naming the choices."""
    return task_named(TASKS if family is None else family_named(family).tasks, name)


def family_of_result(result) -> ModelFamily:
    """The family whose results (flow, gradient descent, greedy path or comparison) ``result`` is one of, or a
    ``TypeError`` that says what gradflow draws and reports."""
    for family in FAMILIES:
        if isinstance(result, family.result_types):
            return family
    kinds = ", ".join(f"gradflow.{t.__name__}" for f in FAMILIES for t in f.result_types)
    raise TypeError(f"expected one of gradflow's results ({kinds}); got {type(result).__name__}.")

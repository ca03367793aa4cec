"""The built-in tasks of every registered family by name (``gradflow._registry``), with the size options each takes
(what the demo, the sweep and the command line offer); and the names they had before, for one release."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from types import MappingProxyType

from .._kit._task import Builtin
from .._registry import TASKS as TASKS
from .._registry import builtin as _builtin

_UNSET = object()


def builtin(name: str, *, family: str | None = None, factorized=_UNSET) -> Builtin:
    """``TASKS[name]`` (of the family called ``family``, e.g. ``"diagonal"``, if given), with an error naming the
    choices for an unknown ``name``. ``factorized=True``/``False`` is the deprecated spelling of
    ``family="factorized"``/``"diagonal"``."""
    if factorized is not _UNSET:
        spelled = {True: "family='factorized'", False: "family='diagonal'", None: "no family"}[factorized]
        warnings.warn(
            f"gradflow.models.builtin(..., factorized=...) is deprecated; pass {spelled} instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        if factorized is not None:
            family = "factorized" if factorized else "diagonal"
    return _builtin(name, family)


def _family_table(family: str) -> Mapping[str, Builtin]:
    return MappingProxyType({k: v for k, v in TASKS.items() if v.family == family})


DEPRECATED = {
    "BUILTIN": ("diagonal", "gradflow.models.TASKS (every family's tasks; each entry's family says which)"),
    "FACTORIZED": ("factorized", "gradflow.models.TASKS (every family's tasks; each entry's family says which)"),
}
"""Old names of the per-family tables: ``gradflow.models.BUILTIN`` (diagonal) and ``FACTORIZED``."""


def deprecated(name: str) -> Mapping[str, Builtin]:
    """The table an old name stood for, with a ``DeprecationWarning``."""
    family, instead = DEPRECATED[name]
    warnings.warn(f"gradflow.models.{name} is deprecated; use {instead}.", DeprecationWarning, stacklevel=3)
    return _family_table(family)

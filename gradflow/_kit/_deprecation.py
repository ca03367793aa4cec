"""Renamed names that keep working for one release (CHANGELOG.md, *Vocabulary*): each use warns with a
``DeprecationWarning`` that names the replacement."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

_PACKAGE = str(Path(__file__).resolve().parents[1])

REMOVED_IN = "0.3.0"
"""The release that removes the old names (they work in 0.2.x)."""


def warn_renamed(old: str, new: str) -> None:
    """Warn that ``old`` is deprecated in favour of ``new``, at the caller's line (the first frame outside gradflow
    and equinox, which wraps the results' methods)."""
    frame, level = sys._getframe(0), 1
    while frame is not None and (
        frame.f_code.co_filename.startswith(_PACKAGE) or "equinox" in frame.f_code.co_filename
    ):
        frame, level = frame.f_back, level + 1
    warnings.warn(
        f"{old} is deprecated and will be removed in gradflow {REMOVED_IN}; use {new} (CHANGELOG.md, Vocabulary).",
        DeprecationWarning,
        stacklevel=level,
    )


def renamed(new: str, old: str, owner: str) -> property:
    """A read-only property ``owner.old`` that warns and returns ``self.new``."""

    def get(self):
        warn_renamed(f"{owner}.{old}", f"{owner}.{new}")
        return getattr(self, new)

    get.__doc__ = f"Deprecated: use ``{new}``."
    return property(get)


def renamed_method(new: str, old: str, owner: str):
    """A method ``owner.old`` that warns and calls ``self.new``."""

    def method(self, *args, **kwargs):
        warn_renamed(f"{owner}.{old}()", f"{owner}.{new}()")
        return getattr(self, new)(*args, **kwargs)

    method.__name__ = old
    method.__doc__ = f"Deprecated: use ``{new}``."
    return method


class RenamedKeys(dict):
    """A ``dict`` whose old keys (``renamed``: old → new) still read, each with a ``DeprecationWarning`` naming
    ``owner[new]``."""

    def __init__(self, data, renamed: dict[str, str], owner: str):
        super().__init__(data)
        self._renamed, self._owner = renamed, owner

    def __missing__(self, key):
        if key not in self._renamed:
            raise KeyError(key)
        new = self._renamed[key]
        warn_renamed(f'{self._owner}["{key}"]', f'{self._owner}["{new}"]')
        return self[new]


def renamed_scales(renamed: dict, alpha, log_alpha, *, who: str):
    """``(alpha, log_alpha)`` with the deprecated keywords ``alphas``/``log_alphas`` of ``who`` (in ``renamed``, the
    other keywords it was given) taken in, each with a ``DeprecationWarning``."""
    for old, new in (("alphas", "alpha"), ("log_alphas", "log_alpha")):
        if old in renamed:
            warn_renamed(f"{who}({old}=...)", f"{who}({new}=...)")
            value = renamed.pop(old)
            if (alpha if new == "alpha" else log_alpha) is not None:
                raise TypeError(f"{who}: give {new}= alone ({old}= is its deprecated name).")
            alpha, log_alpha = (value, log_alpha) if new == "alpha" else (alpha, value)
    if renamed:
        raise TypeError(f"{who}() got an unexpected keyword argument {next(iter(renamed))!r}")
    return alpha, log_alpha

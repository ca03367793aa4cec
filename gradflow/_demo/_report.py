"""What the pipelines' Markdown reports share: the facts of a run (the task's options, the scales, the horizon) and
the sentence that defines the comparison's windows.

Everything printed is computed from the results passed in; nothing is hard-coded.
"""

from __future__ import annotations

from typing import NamedTuple

from .._kit._report import format_alpha


class RunFacts(NamedTuple):
    """What a report says of a run: the task's ``options`` (``name=value, ...``), its scales ``alphas`` (``α`` or
    ``log α``, comma-separated) and the ``horizon``, the last window's end."""

    options: str
    alphas: str
    horizon: float


def run_facts(task, comparison) -> RunFacts:
    """The facts of ``comparison``'s runs of ``task``."""
    return RunFacts(
        options=", ".join(f"{k}={v}" for k, v in dict(task.config).items()),
        alphas=", ".join(format_alpha(la) for la in comparison.log_alpha),
        horizon=float(comparison.window_end[-1]),
    )


def windows_text(comparison) -> str:
    """The comparison's windows ``[T_k + δ, T_{k+1} − δ]``, with ``δ`` and where the last one ends."""
    return (
        f"Windows are [T_k + δ, T_{{k+1}} − δ] with δ = {comparison.delta:.4g} "
        f"(the last window ends at τ = {float(comparison.window_end[-1]):.4g}). "
    )

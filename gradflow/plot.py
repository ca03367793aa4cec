"""Figures of any model family's results: the loss, the weights (their singular values for full weights), their log
scales ``b``, and the convergence of a comparison, each with the greedy limit dashed black over the runs.

Every function takes the runs as a comparison (it keeps its flows and its greedy limit: nothing is solved again), a
batched result, a single run, or a sequence of them, of any family, and returns a ``matplotlib.figure.Figure`` (not
attached to pyplot; ``figure.savefig(...)``, or :func:`save`). Runs are coloured by α, darker for smaller α::

    comparison = gradflow.compare_limits(model, log_alpha=[-8, -32, -128], u0=u0, v0=v0)
    gradflow.plot.b(comparison)                  # the flows' log scales and the limit's, over each other
    gradflow.plot.loss(flow[1:], path)           # some of a batch of flows, with the limit's staircase
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ._kit._comparison import AbstractComparison, each_run
from ._kit._plots import plot_convergence, plot_loss, save_figure
from ._registry import family_of_result

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["b", "convergence", "loss", "save", "weights"]


def _runs(results, path):
    """``(runs, path, names, family)``: the single runs of ``results``, the greedy ``path`` (a comparison's own
    unless given), the model's names where ``results`` knows them, and their family (a comparison's, or the first
    run's)."""
    names, family = None, None
    if isinstance(results, AbstractComparison):
        family = family_of_result(results)
        if results.runs is None:
            raise ValueError(
                "this comparison holds no runs (it was made or saved by gradflow before 0.2): pass the flows, "
                "gradflow.plot.loss(flows, path)."
            )
        names = results.names
        path = results.path if path is None else path
        results = results.runs
    runs = each_run(results)
    if not runs:
        raise ValueError("nothing to draw: no runs given.")
    return runs, path, names, family or family_of_result(runs[0])


def loss(results, path=None, *, title: str = "Loss") -> Figure:
    """The loss against rescaled time of every run, the greedy limit's staircase ``L(θ^k)`` dashed (the paper's
    Figure 6)."""
    runs, path, _, _ = _runs(results, path)
    return plot_loss(runs, path, title=title)


def weights(results, path=None, *, names=None, title: str = "") -> Figure:
    """The weights against rescaled time: every ``β_i`` for diagonal weights (the paper's Figures 7–8; the
    coordinates that grow large labelled), every singular value of every ``W_j`` for full weights (Figure 2 d–f);
    the greedy limit's dashed. ``names``: the model's coordinates or weight matrices (default: a comparison's, or
    numbers)."""
    runs, path, known, family = _runs(results, path)
    return family.plot("weights", runs, path, names=names if names is not None else known, title=title)


def b(results, path=None, *, names=None, title: str = "") -> Figure:
    """The log scales ``b`` against rescaled time (``b = log w / log α``; for full weights those of the singular
    values, ``log σ / (2 log α)``): 1 at the start, 0 once learned, visible at every α, with the greedy limit's
    piecewise-linear ``b`` dashed over them (``path.b_at``)."""
    runs, path, known, family = _runs(results, path)
    return family.plot("b", runs, path, names=names if names is not None else known, title=title)


def convergence(comparison, *, title: str = "Convergence to the greedy limit") -> Figure:
    """The worst distance over the stage windows against ``log(1/α)`` (log–log) for every quantity, with its fitted
    power law ``d ≈ C log(1/α)^(−r)``."""
    family = family_of_result(comparison)
    return plot_convergence(comparison, labels=family.convergence_labels, title=title)


def save(figure: Figure, path: str | os.PathLike) -> Path:
    """Write ``figure`` to ``path`` as PNG (atomically, creating the folder)."""
    return save_figure(figure, path)

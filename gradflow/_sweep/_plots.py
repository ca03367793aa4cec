"""A sweep's summary figures: spreads over seeds, one colour per model setting (matplotlib, Agg).

From :func:`gradflow._sweep.summarise`: the distribution of each greedy stage time ``T_k`` and of
the number of stages ``K`` over the seeds, the fraction of tasks where each of Assumptions 4.2–4.4
fails, and the fitted convergence exponents ``r`` (``d ≈ C (log 1/α)^(−r)``) with their spread.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .._kit._plots import colour_map, new_figure, save_figure
from ._grid import ASSUMPTIONS, QUANTITIES
from ._summary import GroupSummary

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _colours(n: int) -> list:
    cmap = colour_map("tab10")
    return [cmap(i % 10) for i in range(n)]


def _offsets(n: int, width: float = 0.8) -> np.ndarray:
    """Centres of ``n`` side-by-side boxes or bars within one unit of the x axis."""
    return (np.arange(n) - (n - 1) / 2) * width / max(n, 1)


def _boxes(ax, positions, groups: Sequence[GroupSummary], data, labels) -> None:
    """Box plots of ``data[g][j]`` at ``positions[j]``, one colour per group ``g``."""
    width = 0.8 / max(len(groups), 1)
    for g, (group, colour) in enumerate(zip(groups, _colours(len(groups)))):
        at = [(x + _offsets(len(groups))[g], d) for x, d in zip(positions, data[g]) if len(d)]
        if not at:
            continue
        box = ax.boxplot(
            [d for _, d in at],
            positions=[x for x, _ in at],
            widths=0.9 * width,
            patch_artist=True,
            manage_ticks=False,
            medianprops=dict(color="black"),
        )
        for patch in box["boxes"]:
            patch.set(facecolor=colour, alpha=0.5)
        ax.plot([], [], color=colour, lw=6, alpha=0.5, label=f"{group.label} ({group.tasks} seeds)")
    ax.set_xticks(positions, labels)
    ax.legend(fontsize=7)


def _bars(ax, groups: Sequence[GroupSummary], heights, labels) -> None:
    """Side-by-side bars ``heights[g][j]`` at ``x = j``, one colour per group ``g``."""
    for g, (group, colour) in enumerate(zip(groups, _colours(len(groups)))):
        x = np.arange(len(labels)) + _offsets(len(groups))[g]
        ax.bar(x, heights[g], width=0.8 / len(groups), color=colour, label=f"{group.label} ({group.tasks} seeds)")
    ax.set_xticks(np.arange(len(labels)), labels)
    ax.legend(fontsize=7)


def plot_stage_times(groups: Sequence[GroupSummary]) -> Figure:
    """The greedy stage times ``T_k`` over the seeds, per stage ``k``."""
    fig = new_figure(figsize=(7, 4.2))
    ax = fig.add_subplot()
    stages = sorted({k for g in groups for k in g.stage_times})
    data = [[g.stage_times.get(k, np.array([])) for k in stages] for g in groups]
    _boxes(ax, np.arange(len(stages)), groups, data, [f"T_{k}" for k in stages])
    ax.set_ylabel("rescaled time τ")
    ax.set_title("Greedy stage times over seeds")
    return fig


def plot_num_stages(groups: Sequence[GroupSummary]) -> Figure:
    """How many tasks end with ``K`` stages, per ``K``."""
    fig = new_figure(figsize=(7, 4.2))
    ax = fig.add_subplot()
    counts = sorted({int(k) for g in groups for k in g.num_stages})
    _bars(ax, groups, [[np.sum(g.num_stages == k) for k in counts] for g in groups], [str(k) for k in counts])
    ax.set_xlabel("number of stages K")
    ax.set_ylabel("seeds")
    ax.set_title("Number of greedy stages over seeds")
    return fig


def plot_failures(groups: Sequence[GroupSummary]) -> Figure:
    """The fraction of tasks where each assumption fails at some stage."""
    fig = new_figure(figsize=(7, 4.2))
    ax = fig.add_subplot()
    failures = [[g.failures[a] for a in ASSUMPTIONS] for g in groups]
    _bars(ax, groups, failures, [f"Assumption {a}" for a in ASSUMPTIONS])
    ax.set_ylim(0, 1)
    ax.set_ylabel("fraction of seeds where it fails")
    ax.set_title("Assumption failures")
    return fig


def plot_rates(groups: Sequence[GroupSummary]) -> Figure:
    """The fitted exponents ``r`` per quantity over the seeds."""
    fig = new_figure(figsize=(7, 4.2))
    ax = fig.add_subplot()
    labels = {"beta": "sup |β − β^k|", "b": "sup |b − b-line|", "loss": "sup |L − L(θ^k)|", "time": "|T det. − T_k|"}
    data = [[g.rates[q] for q in QUANTITIES] for g in groups]
    _boxes(ax, np.arange(len(QUANTITIES)), groups, data, [labels[q] for q in QUANTITIES])
    ax.set_ylabel("exponent r in d ≈ C·log(1/α)^(−r)")
    ax.set_title("Convergence to the greedy limit over seeds")
    return fig


FIGURES = {
    "stage_times.png": plot_stage_times,
    "num_stages.png": plot_num_stages,
    "assumptions.png": plot_failures,
    "rates.png": plot_rates,
}
"""The summary figures by file name (in ``OUT/figures``)."""


def summary_figures(groups: Sequence[GroupSummary], folder: Path) -> list[Path]:
    """Write the figures that the data support (rates need flows at two α or more); returns their paths."""
    names = []
    if any(g.tasks for g in groups):
        names += ["stage_times.png", "num_stages.png", "assumptions.png"]
    if any(len(r) for g in groups for r in g.rates.values()):
        names.append("rates.png")
    return [save_figure(FIGURES[name](groups), folder / name) for name in names]

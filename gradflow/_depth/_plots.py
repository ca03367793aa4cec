"""Figures for depth-L diagonal networks, as for diagonal weights: the coordinates ``β_i`` or their clocks ``c_i``
against rescaled time, one colour per α (the kit's colours and staircase), the greedy limit dashed black."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .._kit._plots import by_alpha, draw_greedy, label_axes, new_figure, stairs

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TAU = "rescaled time τ = t α^{L−2} (t / log(1/α) at L = 2)"

LABELS = {
    "weights": "sup |β − β^k|",
    "b": "sup |c − clock line| (sleeping)",
    "loss": "sup |L − L(β^k)|",
    "time": "|T detected − T_k|",
}
"""Legend entries of ``plot_convergence`` for a ``DepthComparison``."""


def plot_coordinates(runs, names, *, path=None, title: str, quantity: str = "weights") -> Figure:
    """``β_i`` (``quantity="weights"``) or the clocks ``c_i = (α/|β_i|^{1/L})^{L−2}`` (``"b"``, log scale: a clock
    reaching 0 wakes its coordinate) against rescaled time, one colour per α, the greedy limit (if given) dashed."""
    fig = new_figure(figsize=(7, 4.2))
    ax = fig.add_subplot()
    field = "beta" if quantity == "weights" else "clock"
    for run, colour in by_alpha(ax, runs):
        ax.plot(run.ts, np.asarray(getattr(run, field)), color=colour, lw=1.2)
    if path is not None:
        horizon = max(float(run.ts[-1]) for run in runs)
        if quantity == "weights":
            x, k = stairs(path, horizon)
            draw_greedy(ax, x, np.asarray(path.beta)[k], steps=True)
        else:
            x = np.linspace(0.0, horizon, 400)
            draw_greedy(ax, x, np.where(path.b_at(x) > 0, path.b_at(x), np.nan), steps=False)
    end = np.asarray(getattr(runs[-1], field))[-1]
    for i, name in enumerate(names):
        if np.isfinite(end[i]) and (quantity == "weights" or end[i] > 0):
            ax.annotate(name, (runs[-1].ts[-1], end[i]), xytext=(4, 0), textcoords="offset points", fontsize=7)
    if quantity != "weights":
        ax.set_yscale("log")
    ylabel = "β_i = w_1,i ⋯ w_L,i" if quantity == "weights" else "clock c_i = (α/|β_i|^{1/L})^{L−2}"
    label_axes(ax, ylabel=ylabel, title=title, xlabel=TAU)
    return fig

"""Figures for deep linear networks: the singular values of ``W`` or their log scales ``b`` against rescaled time,
one colour per α (the kit's colours), the greedy limit (if given) dashed black."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .._kit._plots import log_alpha_of, new_figure, run_colours
from .._kit._report import format_alpha

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TAU = "rescaled time τ = t α^{L−2} (t / log(1/α) at L = 2)"

LABELS = {
    "weights": "sup ‖W − W^k‖",
    "b": "sup |b − b^k| (learned)",
    "loss": "sup |L − L(W^k)|",
    "time": "|T detected − T_k|",
}
"""Legend entries of ``plot_convergence`` for a deep linear comparison."""


def plot_singular_values(runs, *, path=None, title: str, quantity: str = "weights") -> Figure:
    """``W``'s singular values (``quantity="weights"``) or their log scales ``b = log σ/(L log α)`` (``"b"``) against
    rescaled time, one colour per α; the greedy limit's (if given) dashed."""
    fig = new_figure(figsize=(7, 4.2))
    ax = fig.add_subplot()
    field = "singular_values" if quantity == "weights" else "b"
    for run, colour in zip(runs, run_colours(runs)):
        ax.plot(run.ts, np.asarray(getattr(run, field)), color=colour, lw=1.2)
        ax.plot([], [], color=colour, lw=1.4, label=f"α = {format_alpha(log_alpha_of(run))}")
    if path is not None:
        horizon = max(float(run.ts[-1]) for run in runs)
        x = np.linspace(0.0, horizon, 400)
        y = path.singular_values_at(x) if quantity == "weights" else path.b_at(x)
        ax.plot(x, y, color="black", ls="--", lw=1.0)
        ax.plot([], [], color="black", ls="--", label="greedy limit")
    ax.set_xlabel(TAU)
    ax.set_ylabel("singular values of W = W_L ⋯ W_1" if quantity == "weights" else "b = log σ / (L log α)")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="best")
    return fig

"""Figures for models with diagonal weights in the style of the paper's Figures 6–8: the loss and the coordinates
``β_i`` (or their log scales ``b_i``) against rescaled time, one colour per α, the greedy limit dashed black, only
the non-negligible coordinates labelled."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np

from .._kit._plots import by_alpha, draw_greedy, label_axes, new_figure, stairs

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def coordinate_groups(names) -> dict[str, np.ndarray]:
    """Split coordinates by part: ``KQ`` and ``VO`` for attention models, otherwise one group."""
    names = list(names)
    groups = {}
    for part in ("KQ", "VO"):
        idx = np.array([i for i, s in enumerate(names) if re.search(rf"(^|\.){part}\[", s)], dtype=int)
        if idx.size:
            groups[part] = idx
    covered = sum(g.size for g in groups.values())
    return groups if covered == len(names) else {"all": np.arange(len(names))}


def significant(path, runs_beta, *, rel: float = 0.05) -> np.ndarray:
    """Coordinates whose ``|β_i|`` reaches ``rel`` × the largest ``|β|`` (greedy path, if any, or any run), as a
    boolean mask."""
    runs_beta = list(runs_beta)
    peak = np.max(np.abs(np.asarray(path.beta)), axis=0) if path is not None else np.zeros(np.shape(runs_beta[0])[-1])
    for beta in runs_beta:
        peak = np.maximum(peak, np.nanmax(np.abs(np.asarray(beta)), axis=tuple(range(np.ndim(beta) - 1))))
    top = peak.max()
    return peak >= rel * top if top > 0 else np.zeros(peak.shape, dtype=bool)


def plot_coordinates(flows, names, idx, *, path=None, title: str, label_mask=None, quantity: str = "beta") -> Figure:
    """``β_i`` (or the log-scale weights ``b_i``) against rescaled time for the coordinates ``idx`` (Figures 7–8).

    One colour per α, the greedy limit (if given) dashed black; coordinates in ``label_mask`` are
    labelled at their final value, the others drawn thin.
    """
    fig = new_figure(figsize=(7, 4.2))
    ax = fig.add_subplot()
    idx = np.asarray(idx, dtype=int)
    label_mask = np.ones(len(names), dtype=bool) if label_mask is None else np.asarray(label_mask)
    for flow, colour in by_alpha(ax, flows):
        values = np.asarray(getattr(flow, quantity))[:, idx]
        for j, i in enumerate(idx):
            ax.plot(
                flow.ts,
                values[:, j],
                color=colour,
                lw=1.3 if label_mask[i] else 0.5,
                alpha=1.0 if label_mask[i] else 0.5,
            )
    horizon = max(float(f.ts[-1]) for f in flows)
    if path is None:
        x, end = np.asarray(flows[-1].ts), np.asarray(getattr(flows[-1], quantity))[-1, idx]
    elif quantity == "beta":
        x, k = stairs(path, horizon)
        greedy = np.asarray(path.beta)[k][:, idx]
        draw_greedy(ax, x, greedy, steps=True)
        end = greedy[-1]
    else:
        times = np.asarray(path.times)
        x = np.union1d(np.linspace(0.0, horizon, 400), times[times <= horizon])
        greedy = path.b_at(x)[:, idx]
        draw_greedy(ax, x, greedy, steps=False)
        end = greedy[-1]
    for j, i in enumerate(idx):
        if label_mask[i]:
            ax.annotate(names[i], (x[-1], end[j]), xytext=(4, 0), textcoords="offset points", fontsize=7, va="center")
    label_axes(ax, ylabel="β_i = u_i v_i" if quantity == "beta" else "b_i = log w_i / log α", title=title)
    return fig


LABELS = {
    "weights": "sup |β − β^k|",
    "b": "sup |b − b-line|",
    "loss": "sup |L − L(θ^k)|",
    "time": "|T detected − T_k|",
}
"""Legend entries of ``plot_convergence`` for a ``Comparison``."""

"""Figures for factorised weights in the style of the paper's Figure 2 d–f.

Runs are coloured by α (darker = smaller α, closer to the limit), the greedy low-rank limit is dashed black,
gradient-descent runs are dotted in the colour of their α.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .._kit._plots import TAU, by_alpha, log_alpha_of, new_figure, run_colours, stairs
from ._compare import stable_rank
from ._path import predicted_log_scales
from ._results import log_scales

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _order(names, factors) -> list[int]:
    """Indices of the weight matrices to draw: ``factors`` (names or indices) or all of them."""
    if factors is None:
        return list(range(len(names)))
    out = []
    for f in factors:
        if isinstance(f, str):
            if f not in names:
                raise ValueError(f"unknown weight matrix {f!r}; the model has {list(names)}.")
            out.append(list(names).index(f))
        else:
            out.append(int(f))
    return out


def _horizon(runs) -> float:
    return max(float(np.max(r.ts)) for r in runs)


def _legend(ax, flows, gd) -> None:
    by_alpha(ax, flows)
    if gd:
        ax.plot([], [], color="grey", ls=":", lw=1.6, label="float64 GD")
    ax.plot([], [], color="black", ls="--", lw=1.2, label="greedy low-rank limit")
    ax.legend(fontsize=7, loc="best")


def _gd_colours(flows, gd) -> list:
    """The colour of each GD run: that of the flow at the same α (grey if none)."""
    colours = dict(zip([round(log_alpha_of(f), 9) for f in flows], run_colours(flows)))
    return [colours.get(round(log_alpha_of(g), 9), "grey") for g in gd]


def _draw_singular_values(ax, flows, path, j: int, gd) -> None:
    for flow, colour in zip(flows, run_colours(flows)):
        ax.plot(flow.ts, np.asarray(flow.singular_values[j]), color=colour, lw=1.3)
    for run, colour in zip(gd, _gd_colours(flows, gd)):
        ax.plot(np.asarray(run.ts), np.asarray(run.singular_values[j]), color=colour, ls=":", lw=1.6)
    if path is not None:
        x, k = stairs(path, _horizon(flows))
        greedy = np.linalg.svd(np.asarray(path.W[j]), compute_uv=False)[k]
        ax.step(x, greedy, where="post", color="black", ls="--", lw=1.0)


def _draw_loss(ax, flows, path, gd) -> None:
    for flow, colour in zip(flows, run_colours(flows)):
        ax.plot(flow.ts, flow.loss, color=colour, lw=1.4)
    for run, colour in zip(gd, _gd_colours(flows, gd)):
        ax.plot(np.asarray(run.ts), np.asarray(run.loss), color=colour, ls=":", lw=1.6)
    if path is not None:
        x, k = stairs(path, _horizon(flows))
        ax.step(x, np.asarray(path.loss)[k], where="post", color="black", ls="--", lw=1.2)


def plot_spectra(flows, path=None, *, names, factors=None, gd=(), title: str = "", loss: bool = True) -> Figure:
    """Figure 2 d–f: every singular value of each ``W_j`` (one panel per weight matrix in ``factors``) and, if
    ``loss``, the loss against rescaled time, one colour per α; the greedy saddles' singular values and loss dashed
    black, gradient-descent runs (``gd``) dotted."""
    idx = _order(names, factors)
    fig = new_figure(figsize=(4.2 * (len(idx) + loss), 3.8))
    axes = fig.subplots(1, len(idx) + loss, squeeze=False)[0]
    for ax, j in zip(axes, idx):
        _draw_singular_values(ax, flows, path, j, gd)
        ax.set_title(f"singular values of W_{names[j]}")
        ax.set_xlabel(TAU)
    if loss:
        _draw_loss(axes[-1], flows, path, gd)
        axes[-1].set_title("training loss")
        axes[-1].set_xlabel(TAU)
    _legend(axes[-1], flows, gd)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_log_scales(flows, path=None, *, names, factors=None, gd=()) -> Figure:
    """The log scales ``b = log σ_i(W_j) / (2 log α)`` of every singular value against rescaled time (1 at the
    initial scale α², 0 once learned), one panel per weight matrix; the limit's piecewise-linear exponents dashed.

    Unlike the singular values themselves, the log scales of the flows at α = 1e-32 or log α = −1000 stay
    visible: this is where the exact flow meets the greedy limit.
    """
    idx = _order(names, factors)
    fig = new_figure(figsize=(5.2 * len(idx), 3.8))
    axes = fig.subplots(1, len(idx), squeeze=False)[0]
    horizon = _horizon(flows)
    for ax, j in zip(axes, idx):
        for flow, colour in zip(flows, run_colours(flows)):
            ax.plot(flow.ts, log_scales(flow.log_singular_values[j], log_alpha_of(flow)), color=colour, lw=1.2)
        for run, colour in zip(gd, _gd_colours(flows, gd)):
            width = np.asarray(flows[0].log_singular_values[j]).shape[-1]
            b = log_scales(np.asarray(run.log_singular_values[j])[:, :width], log_alpha_of(run))
            ax.plot(np.asarray(run.ts), b, color=colour, ls=":", lw=1.6)
        if path is not None:
            times = np.asarray(path.times)
            x = np.union1d(np.linspace(0.0, horizon, 400), times[times <= horizon])
            width = np.asarray(flows[0].log_singular_values[j]).shape[-1]
            ax.plot(x, predicted_log_scales(path, x, j, width), color="black", ls="--", lw=1.0)
        ax.axhline(0.0, color="grey", lw=0.5)
        ax.set_title(f"log scales of the singular values of W_{names[j]}")
        ax.set_xlabel(TAU)
        ax.set_ylabel("b = log σ / (2 log α)")
    _legend(axes[-1], flows, gd)
    fig.tight_layout()
    return fig


def plot_ranks(flows, path, *, names, factors=None, gd=()) -> Figure:
    """The rank of each weight matrix against rescaled time, one column per matrix: the stable rank
    ``‖W_j‖_F² / ‖W_j‖_2²`` (top) and the number of O(1) singular values (bottom), those above half the smallest
    learned singular value of the greedy saddles ``W̄_j^k`` (``σ_r``, ``r = r_j^k``); the greedy saddles' dashed (their ranks ``r_j^k``
    below; their stable rank from the first jump on, ``W̄ = 0`` having none)."""
    idx = _order(names, factors)
    fig = new_figure(figsize=(4.6 * len(idx), 6.4))
    axes = fig.subplots(2, len(idx), squeeze=False)
    x, k = stairs(path, _horizon(flows))
    for col, j in enumerate(idx):
        top, bottom = axes[0, col], axes[1, col]
        saddles = np.linalg.svd(np.asarray(path.W[j]), compute_uv=False)
        ranks = np.asarray(path.ranks)[:, j]
        learned = [saddles[k, r - 1] for k, r in enumerate(ranks) if r > 0]  # the smallest of each saddle's rank
        level = 0.5 * min(learned) if learned else np.inf
        colours = run_colours(flows)
        for runs, style, cols in ((flows, "-", colours), (gd, ":", _gd_colours(flows, gd))):
            for run, colour in zip(runs, cols):
                log_sv = np.asarray(run.log_singular_values[j], dtype=np.float64)
                ts = np.asarray(run.ts)
                top.plot(ts, _stable_rank_of(log_sv), color=colour, ls=style, lw=1.3 if style == "-" else 1.6)
                bottom.plot(
                    ts, np.sum(log_sv >= np.log(level), axis=-1), color=colour, ls=style, lw=1.3, ds="steps-post"
                )
        with np.errstate(invalid="ignore"):
            greedy_stable = np.where(saddles[:, 0] > 0, stable_rank(np.asarray(path.W[j])), np.nan)
        top.step(x, greedy_stable[k], where="post", color="black", ls="--", lw=1.0)
        bottom.step(x, np.asarray(path.ranks)[k, j], where="post", color="black", ls="--", lw=1.0)
        top.set_title(f"stable rank of W_{names[j]}")
        bottom.set_title(f"singular values of W_{names[j]} above {level:.3g}")
        bottom.set_xlabel(TAU)
        top.set_ylim(bottom=0.0)
    _legend(axes[0, -1], flows, gd)
    fig.tight_layout()
    return fig


def _stable_rank_of(log_sv) -> np.ndarray:
    """The stable rank from the log singular values (exact when W underflows float64)."""
    top = np.max(log_sv, axis=-1, keepdims=True)
    return np.sum(np.exp(2.0 * (log_sv - top)), axis=-1)


LABELS = {
    "weights": "sup ‖W_j − W̄_j^k‖₂",
    "b": "sup |b − b-line| (log scales)",
    "loss": "sup |L − L(W̄^k)|",
    "time": "|rank jump detected − T_k|",
}
"""Legend entries of ``plot_convergence`` for a ``RankComparison``."""

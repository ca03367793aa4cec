"""What every family's figures share (matplotlib, Agg; no global pyplot state): writing a figure, a new figure,
colours by α, the greedy staircase, and the convergence figure of a comparison.

matplotlib is imported when the first figure is made, not with gradflow. Every ``plot_*`` function returns a
``matplotlib.figure.Figure``; :func:`save_figure` writes it. Runs are coloured by α (darker = smaller α, closer to
the limit), the greedy limit is dashed black.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ._comparison import AbstractComparison, fit_rate
from ._report import format_alpha

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TAU = "rescaled time τ = t / log(1/α)"


def save_figure(fig: Figure, path: str | os.PathLike) -> Path:
    """Write ``fig`` as PNG (atomically)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp" + path.suffix)
    fig.savefig(tmp, dpi=120, bbox_inches="tight")
    os.replace(tmp, path)
    return path


def new_figure(**options) -> Figure:
    """A ``matplotlib.figure.Figure(**options)``, not attached to pyplot."""
    from matplotlib.figure import Figure

    return Figure(**options)


def colour_map(name: str):
    """matplotlib's colour map ``name``."""
    from matplotlib import colormaps

    return colormaps[name]


def log_alpha_of(result) -> float:
    """The ``log α`` of a run holding a single α."""
    return float(np.asarray(result.log_alpha, dtype=np.float64).reshape(-1)[0])


def alpha_colours(log_alphas) -> list:
    """One colour per run, darker for smaller α."""
    cmap = colour_map("viridis")
    order = np.argsort(np.argsort(np.asarray(log_alphas)))
    n = max(len(log_alphas) - 1, 1)
    return [cmap(0.9 * o / n) for o in order]


def run_colours(runs) -> list:
    """:func:`alpha_colours` of ``runs``, each holding a single α."""
    return alpha_colours([log_alpha_of(r) for r in runs])


def stairs(path, horizon: float) -> tuple[np.ndarray, np.ndarray]:
    """Step-function abscissae and plateau indices of the greedy path up to ``horizon``."""
    times = np.asarray(path.times, dtype=np.float64)
    x = np.append(times[times <= horizon], horizon)
    return x, np.append(np.arange(x.size - 1), x.size - 2)


def by_alpha(ax, runs) -> list[tuple[Any, Any]]:
    """``(run, colour)`` for every run, coloured by α (:func:`run_colours`), each with its legend entry ``α = …`` on
    ``ax``."""
    pairs = list(zip(runs, run_colours(runs)))
    for run, colour in pairs:
        ax.plot([], [], color=colour, lw=1.4, label=f"α = {format_alpha(log_alpha_of(run))}")
    return pairs


def draw_greedy(ax, x, y, *, steps: bool) -> None:
    """The greedy limit's ``y`` against ``x`` on ``ax``, dashed black (a staircase, constant after each ``x``, where
    ``steps``), with its legend entry."""
    if steps:
        ax.step(x, y, where="post", color="black", ls="--", lw=1.0)
    else:
        ax.plot(x, y, color="black", ls="--", lw=1.0)
    ax.plot([], [], color="black", ls="--", label="greedy limit")


def label_axes(ax, *, ylabel: str, title: str, xlabel: str = TAU) -> None:
    """The axes' labels, title and legend."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8, loc="best")


def plot_per_depth(runs, draw, *, ylabel: str, title: str) -> Figure:
    """One panel per run of a demo over depths (``run.depth``), side by side, each drawn by ``draw(ax, run)``, titled
    ``L = …`` over its rescaled time (``τ = t / log(1/α)`` at L = 2, ``τ = t α^{L−2}`` above); the first panel has
    ``ylabel`` and the legend."""
    fig = new_figure(figsize=(4.2 * len(runs), 4.0))
    for j, run in enumerate(runs):
        ax = fig.add_subplot(1, len(runs), j + 1)
        draw(ax, run)
        ax.set_title(f"L = {run.depth}")
        ax.set_xlabel("τ = t / log(1/α)" if run.depth == 2 else f"τ = t α^{run.depth - 2}")
        if j == 0:
            ax.set_ylabel(ylabel)
            ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    return fig


def plot_stage_times_by_depth(rows, log_alphas, *, greedy_label, closed_label: str, title: str) -> Figure:
    """Stage times against the depth L, the stages of one depth side by side: the greedy limit's ``T_k`` (dots),
    a closed form's (crosses) and those detected on every flow (dots, one colour per α,
    darker for smaller α). ``rows``: per depth ``(L, T, closed, detected)``, ``T`` the limit's ``T_0 …
    T_K``, ``closed`` its ``T_1 … T_K`` in closed form (NaN: none), ``detected`` theirs on each flow (one row per
    ``log_alphas``); ``greedy_label(L)`` names the limit's points."""
    fig = new_figure(figsize=(6, 4.2))
    ax = fig.add_subplot()
    colours = alpha_colours(log_alphas)
    labelled = set()

    def label(text):
        if text in labelled:
            return None
        labelled.add(text)
        return text

    for depth, T, closed, detected in rows:
        K = np.asarray(T).size - 1
        for k in range(1, K + 1):
            x = depth + 0.08 * (k - (K + 1) / 2)
            ax.plot(x, T[k], "o", color="black", ms=6, label=label(greedy_label(depth)))
            if np.isfinite(closed[k - 1]):
                ax.plot(x, closed[k - 1], "x", color="tab:red", ms=9, label=label(closed_label))
            for a, colour in enumerate(colours):
                text = "detected on each flow (darker: smaller α)"
                ax.plot(x + 0.02, detected[a, k - 1], ".", color=colour, ms=4, label=label(text))
    ax.set_xticks([row[0] for row in rows])
    ax.set_xlabel("depth L")
    ax.set_ylabel("stage time (τ = t α^{L−2}; t / log(1/α) at L = 2)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def plot_loss(flows, path=None, *, title: str = "Loss") -> Figure:
    """Loss against rescaled time for every run, the greedy staircase ``L(θ^k)`` dashed (Figure 6): any family's runs, each holding one α."""
    fig = new_figure(figsize=(7, 4.2))
    ax = fig.add_subplot()
    for flow, colour in zip(flows, run_colours(flows)):
        ax.plot(flow.ts, flow.loss, color=colour, lw=1.4, label=f"α = {format_alpha(log_alpha_of(flow))}")
    if path is not None:
        x, k = stairs(path, max(float(f.ts[-1]) for f in flows))
        ax.step(x, np.asarray(path.loss)[k], where="post", color="black", ls="--", lw=1.4, label="greedy limit")
    ax.set_xlabel(TAU)
    ax.set_ylabel("training loss")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def plot_convergence(
    comparison: AbstractComparison, *, labels: dict[str, str], title: str = "Convergence to the greedy limit"
) -> Figure:
    """Worst-window distance against ``log(1/α)`` (log–log), with the fitted power law per quantity.

    ``labels`` maps the quantities of ``comparison.worst`` to their legend entries (each family's ``LABELS``).
    """
    fig = new_figure(figsize=(7, 4.2))
    ax = fig.add_subplot()
    x = -comparison.log_alpha
    for q, label in labels.items():
        d = comparison.worst(q)
        ok = np.isfinite(d) & (d > 0)
        if not np.any(ok):
            continue
        used = comparison.fitted() & ok  # the line is drawn over the scales it is fitted to
        r, c = fit_rate(comparison.log_alpha[used], d[used])
        line = ax.loglog(x[ok], d[ok], "o-", label=f"{label} (r = {r:.2f})" if np.isfinite(r) else label)
        if np.isfinite(r):
            ax.loglog(x[used], np.exp(c) * x[used] ** (-r), color=line[0].get_color(), ls=":", lw=1)
    ax.set_xlabel("log(1/α)")
    ax.set_ylabel("worst distance over stage windows")
    ax.set_title(f"{title}: d ≈ C·log(1/α)^(−r)")
    ax.legend(fontsize=8)
    return fig

"""Figures in the style of the paper's Figures 6–10 (matplotlib, Agg; no global pyplot state).

Every ``plot_*`` function returns a ``matplotlib.figure.Figure``; :func:`save_figure` writes it.
Runs are coloured by α (darker = smaller α, closer to the limit), the greedy limit is dashed black, and only the
non-negligible coordinates are labelled.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure

from ._compare import Comparison
from ._comparison import fit_rate
from ._experiments import Perturbation
from ._report import format_alpha


def save_figure(fig: Figure, path: str | os.PathLike) -> Path:
    """Write ``fig`` as PNG (atomically)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp" + path.suffix)
    fig.savefig(tmp, dpi=120, bbox_inches="tight")
    os.replace(tmp, path)
    return path


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
    """Coordinates whose ``|β_i|`` reaches ``rel`` × the largest ``|β|`` (greedy path or any run), as a boolean mask."""
    peak = np.max(np.abs(np.asarray(path.beta)), axis=0)
    for beta in runs_beta:
        peak = np.maximum(peak, np.nanmax(np.abs(np.asarray(beta)), axis=tuple(range(np.ndim(beta) - 1))))
    top = peak.max()
    return peak >= rel * top if top > 0 else np.zeros(peak.shape, dtype=bool)


def _la(result) -> float:
    return float(np.asarray(result.log_alpha, dtype=np.float64).reshape(-1)[0])


def _alpha_colours(log_alphas) -> list:
    cmap = colormaps["viridis"]
    order = np.argsort(np.argsort(np.asarray(log_alphas)))
    n = max(len(log_alphas) - 1, 1)
    return [cmap(0.9 * o / n) for o in order]


def _stairs(path, horizon: float) -> tuple[np.ndarray, np.ndarray]:
    """Step-function abscissae and plateau indices of the greedy path up to ``horizon``."""
    times = np.asarray(path.times, dtype=np.float64)
    x = np.append(times[times <= horizon], horizon)
    return x, np.append(np.arange(x.size - 1), x.size - 2)


def plot_loss(flows, path=None, *, title: str = "Loss") -> Figure:
    """Loss against rescaled time for every run, the greedy staircase ``L(θ^k)`` dashed (Figure 6)."""
    fig = Figure(figsize=(7, 4.2))
    ax = fig.add_subplot()
    for flow, colour in zip(flows, _alpha_colours([_la(f) for f in flows])):
        ax.plot(flow.ts, flow.loss, color=colour, lw=1.4, label=f"α = {format_alpha(_la(flow))}")
    if path is not None:
        x, k = _stairs(path, max(float(f.ts[-1]) for f in flows))
        ax.step(x, np.asarray(path.loss)[k], where="post", color="black", ls="--", lw=1.4, label="greedy limit")
    ax.set_xlabel("rescaled time τ = t / log(1/α)")
    ax.set_ylabel("training loss")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def plot_coordinates(flows, names, idx, *, path=None, title: str, label_mask=None, quantity: str = "beta") -> Figure:
    """``β_i`` (or the log-scale weights ``b_i``) against rescaled time for the coordinates ``idx`` (Figures 7–8).

    One colour per α, the greedy limit (if given) dashed black; coordinates in ``label_mask`` are
    labelled at their final value, the others drawn thin.
    """
    fig = Figure(figsize=(7, 4.2))
    ax = fig.add_subplot()
    idx = np.asarray(idx, dtype=int)
    label_mask = np.ones(len(names), dtype=bool) if label_mask is None else np.asarray(label_mask)
    for flow, colour in zip(flows, _alpha_colours([_la(f) for f in flows])):
        values = np.asarray(getattr(flow, quantity))[:, idx]
        for j, i in enumerate(idx):
            ax.plot(
                flow.ts,
                values[:, j],
                color=colour,
                lw=1.3 if label_mask[i] else 0.5,
                alpha=1.0 if label_mask[i] else 0.5,
            )
        ax.plot([], [], color=colour, lw=1.4, label=f"α = {format_alpha(_la(flow))}")
    horizon = max(float(f.ts[-1]) for f in flows)
    if path is None:
        x, end = np.asarray(flows[-1].ts), np.asarray(getattr(flows[-1], quantity))[-1, idx]
    elif quantity == "beta":
        x, k = _stairs(path, horizon)
        greedy = np.asarray(path.beta)[k][:, idx]
        ax.step(x, greedy, where="post", color="black", ls="--", lw=1.0)
        end = greedy[-1]
    else:
        times = np.asarray(path.times)
        x = np.union1d(np.linspace(0.0, horizon, 400), times[times <= horizon])
        greedy = path.b_at(x)[:, idx]
        ax.plot(x, greedy, color="black", ls="--", lw=1.0)
        end = greedy[-1]
    if path is not None:
        ax.plot([], [], color="black", ls="--", label="greedy limit")
    for j, i in enumerate(idx):
        if label_mask[i]:
            ax.annotate(names[i], (x[-1], end[j]), xytext=(4, 0), textcoords="offset points", fontsize=7, va="center")
    ax.set_xlabel("rescaled time τ = t / log(1/α)")
    ax.set_ylabel("β_i = u_i v_i" if quantity == "beta" else "b_i = log w_i / log α")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="best")
    return fig


def plot_perturbation(pert: Perturbation, flow, names, groups: dict[str, np.ndarray], *, title: str) -> Figure:
    """Perturbed (solid) against unperturbed (dashed) trajectories, one colour per coordinate (Figures 9–10)."""
    fig = Figure(figsize=(7, 3.6 * len(groups)))
    shown = np.any(pert.perturbed, axis=0)
    cmap = colormaps["tab10"]
    for g, (part, idx) in enumerate(groups.items()):
        ax = fig.add_subplot(len(groups), 1, g + 1)
        idx = np.asarray(idx)[shown[np.asarray(idx)]]
        for c, i in enumerate(idx):
            colour = cmap(c % 10)
            ax.plot(flow.ts, np.asarray(flow.beta)[:, i], color=colour, ls="--", lw=1.0)
            for j in range(pert.ts.shape[0]):
                ax.plot(pert.ts[j], pert.beta[j, :, i], color=colour, lw=1.4, label=names[i] if j == 0 else None)
        for t in pert.start_times:
            ax.axvline(t, color="grey", lw=0.5, alpha=0.6)
        ax.set_ylabel(f"β ({part})" if part != "all" else "β")
        ax.set_title(title if g == 0 else None)
        if idx.size:
            ax.legend(fontsize=7, ncol=min(4, idx.size), loc="best")
    ax.set_xlabel(f"rescaled time τ (α = {format_alpha(pert.log_alpha)}; perturbed: solid, unperturbed: dashed)")
    return fig


_LABELS = {
    "beta": "sup |β − β^k|",
    "b": "sup |b − b-line|",
    "loss": "sup |L − L(θ^k)|",
    "time": "|T detected − T_k|",
}


def plot_convergence(
    comparison: Comparison, *, labels: dict[str, str] | None = None, title: str = "Convergence to the greedy limit"
) -> Figure:
    """Worst-window distance against ``log(1/α)`` (log–log), with the fitted power law per quantity.

    ``labels`` maps the quantities of ``comparison.worst`` to their legend entries (default: those of a
    diagonal ``Comparison``; a ``RankComparison`` has ``W``, ``b``, ``loss``, ``time``).
    """
    fig = Figure(figsize=(7, 4.2))
    ax = fig.add_subplot()
    x = -comparison.log_alpha
    for q, label in (_LABELS if labels is None else labels).items():
        d = comparison.worst(q)
        ok = np.isfinite(d) & (d > 0)
        if not np.any(ok):
            continue
        r, c = fit_rate(comparison.log_alpha, d)
        line = ax.loglog(x[ok], d[ok], "o-", label=f"{label} (r = {r:.2f})" if np.isfinite(r) else label)
        if np.isfinite(r):
            ax.loglog(x[ok], np.exp(c) * x[ok] ** (-r), color=line[0].get_color(), ls=":", lw=1)
    ax.set_xlabel("log(1/α)")
    ax.set_ylabel("worst distance over stage windows")
    ax.set_title(f"{title}: d ≈ C·log(1/α)^(−r)")
    ax.legend(fontsize=8)
    return fig

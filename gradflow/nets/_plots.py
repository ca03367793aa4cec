"""Figures in the style of the paper's Figures 1, 3, 4, 5 and 11–16, and the ranks of an InRank run
(matplotlib, Agg backend).

Layers and heads are numbered from 1 in the figures (index 0 in the arrays).
"""

from __future__ import annotations

import math
import pathlib
from collections.abc import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from ._runs import SpectraHistory, read_metrics  # noqa: E402

_PAIRS = (("kq", r"$\Delta(W_K W_Q^\top)$", r"$W_K W_Q^\top$"), ("vo", r"$\Delta(W_V W_O^\top)$", r"$W_V W_O^\top$"))


def _normalised(s: np.ndarray) -> np.ndarray:
    top = s.max(-1, keepdims=True)
    return s / np.where(top > 0, top, 1.0)


def _default_heads(n_layers: int) -> list[tuple[int, int]]:
    layers = sorted({0, n_layers // 2, n_layers - 1})
    return [(l, 0) for l in layers]


def _save(fig, path) -> pathlib.Path:
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_normalised_spectra(
    history: SpectraHistory, path, *, heads: Sequence[tuple[int, int]] | None = None, n_stages: int = 4
) -> pathlib.Path:
    """Figures 1, 5, 11: normalised spectrum of ``W_K W_Qᵀ`` (``W_V W_Oᵀ``) at initialisation against the
    normalised spectra of its perturbation at ``n_stages`` measured steps, for the (layer, head) ``heads``."""
    n_layers = history.delta.kq.shape[1]
    heads = list(heads) if heads is not None else _default_heads(n_layers)
    picks = np.unique(np.linspace(0, len(history.steps) - 1, n_stages).round().astype(int))
    colours = plt.cm.viridis(np.linspace(0.1, 0.9, len(picks)))
    fig, axes = plt.subplots(2, len(heads), figsize=(3.6 * len(heads), 6.0), squeeze=False)
    for row, (name, delta_label, init_label) in enumerate(_PAIRS):
        for col, (l, h) in enumerate(heads):
            ax = axes[row, col]
            init = _normalised(getattr(history.init, name)[l, h])
            ax.plot(np.arange(1, init.size + 1), init, "k--", label=f"{init_label} at init")
            for c, i in zip(colours, picks):
                s = _normalised(getattr(history.delta, name)[i, l, h])
                ax.plot(np.arange(1, s.size + 1), s, color=c, label=f"{delta_label}, step {history.steps[i]}")
            ax.set_yscale("log")
            ax.set_ylim(bottom=max(1e-6, ax.get_ylim()[0]))
            ax.set_title(f"layer {l + 1}, head {h + 1}")
            ax.set_xlabel("index")
            ax.set_ylabel("singular value / largest")
    axes[0, -1].legend(fontsize=7)
    axes[1, -1].legend(fontsize=7)
    return _save(fig, path)


def plot_singular_value_evolution(
    histories: Mapping[float, SpectraHistory], path, *, layer: int = 1, head: int = 0, k: int = 8
) -> pathlib.Path:
    """Figure 3: the ``k`` largest singular values of the perturbations of one head through training,
    one column per initialisation scale (``layer``, ``head`` are 0-based)."""
    scales = sorted(histories, reverse=True)
    fig, axes = plt.subplots(2, len(scales), figsize=(3.6 * len(scales), 6.0), squeeze=False)
    for col, scale in enumerate(scales):
        hist = histories[scale]
        l = min(layer, hist.delta.kq.shape[1] - 1)
        for row, (name, delta_label, _) in enumerate(_PAIRS):
            ax = axes[row, col]
            s = getattr(hist.delta, name)[:, l, head, :k]
            for j in range(s.shape[1]):
                ax.plot(hist.steps, s[:, j], color=plt.cm.plasma(j / max(k - 1, 1)), label=f"σ{j + 1}")
            ax.set_xscale("log")
            ax.set_title(f"{delta_label}, init scale {scale:g}\nlayer {l + 1}, head {head + 1}", fontsize=9)
            ax.set_xlabel("step")
            ax.set_ylabel("singular value")
    axes[0, -1].legend(fontsize=7, ncol=2)
    return _save(fig, path)


def plot_stable_rank_by_layer(histories: Mapping[float, SpectraHistory], path) -> pathlib.Path:
    """Figure 4: stable rank of the perturbations at the last measurement, per layer, mean ± std over heads,
    one bar per initialisation scale."""
    scales = sorted(histories, reverse=True)
    n_layers = histories[scales[0]].delta.kq.shape[1]
    width = 0.8 / len(scales)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, (name, delta_label, _) in zip(axes, _PAIRS):
        for i, scale in enumerate(scales):
            sr = getattr(histories[scale].delta, f"{name}_stable_rank")[-1]
            ax.bar(
                np.arange(n_layers) + i * width,
                sr.mean(-1),
                width,
                yerr=sr.std(-1),
                capsize=3,
                label=f"init scale {scale:g}",
            )
        ax.set_xticks(np.arange(n_layers) + 0.4 - width / 2, [str(l + 1) for l in range(n_layers)])
        ax.set_xlabel("layer")
        ax.set_ylabel("stable rank")
        ax.set_title(f"stable rank of {delta_label} after training")
    axes[0].legend(fontsize=8)
    return _save(fig, path)


def plot_stable_rank_through_training(history: SpectraHistory, path, *, title: str = "") -> pathlib.Path:
    """Figures 12, 14, 16: stable rank of ``Δ(W_K W_Qᵀ)`` (blue) and ``Δ(W_V W_Oᵀ)`` (red) through training,
    mean ± std over the heads of each layer."""
    n_layers = history.delta.kq.shape[1]
    cols = min(n_layers, 4)
    rows = -(-n_layers // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.9 * rows), squeeze=False)
    for l in range(n_layers):
        ax = axes.flat[l]
        for (name, delta_label, _), colour in zip(_PAIRS, ("tab:blue", "tab:red")):
            sr = getattr(history.delta, f"{name}_stable_rank")[:, l]
            mean, std = sr.mean(-1), sr.std(-1)
            ax.plot(history.steps, mean, color=colour, label=delta_label)
            ax.fill_between(history.steps, mean - std, mean + std, color=colour, alpha=0.25)
        ax.set_xscale("log")
        ax.set_title(f"layer {l + 1}")
        ax.set_xlabel("step")
        ax.set_ylabel("stable rank")
    for ax in list(axes.flat)[n_layers:]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    return _save(fig, path)


def plot_losses(metrics: Mapping[float, list], path) -> pathlib.Path:
    """Training loss (and evaluation loss, markers) against step, one curve per initialisation scale."""
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for scale in sorted(metrics, reverse=True):
        train = [(m["step"], m["loss"]) for m in metrics[scale] if "loss" in m]
        evals = [(m["step"], m["eval_loss"]) for m in metrics[scale] if "eval_loss" in m]
        (line,) = ax.plot(*zip(*train), label=f"init scale {scale:g}") if train else (None,)
        if evals:
            ax.plot(*zip(*evals), "o", color=line.get_color() if line else None)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (train: line, eval: dots)")
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_inrank_ranks(
    ranks: Sequence[dict] | str | pathlib.Path, path, *, until: int | None = None, title: str = ""
) -> pathlib.Path:
    """Rank of every layer's MLP matrices through an InRank run: one panel per matrix (``fc_in``, ``fc_out``),
    one line per layer and their mean; a dotted line marks InRank-Efficient's switch to fixed rank.

    ``ranks``: the records of the run's ``ranks.jsonl`` (``InRankResult.ranks``) or the path of that file;
    ``until``: the run's last step, to which the last ranks are drawn on.
    """
    records = read_metrics(ranks) if isinstance(ranks, (str, pathlib.Path)) else list(ranks)
    if not records:
        raise ValueError("no rank records to plot (the run made no rank check)")
    names = [k for k in records[0] if k not in ("step", "phase")]
    steps = [r["step"] for r in records]
    switches = [r["step"] for r in records if r["phase"] == "fixed-rank"]
    if until is not None and until > steps[-1]:
        records, steps = records + [records[-1]], steps + [until]
    n_layers = len(records[0][names[0]]["rank"])
    colours = plt.cm.viridis(np.linspace(0.0, 0.9, n_layers))
    fig, axes = plt.subplots(1, len(names), figsize=(5.2 * len(names), 3.8), squeeze=False)
    for ax, name in zip(axes[0], names):
        r = np.array([rec[name]["rank"] for rec in records])  # (records, layers)
        for l in range(n_layers):
            ax.plot(steps, r[:, l], drawstyle="steps-post", color=colours[l], label=f"layer {l + 1}")
        ax.plot(steps, r.mean(1), "k--", drawstyle="steps-post", linewidth=2, label="mean over layers")
        for s in switches:
            ax.axvline(s, color="grey", linestyle=":", label="switch to fixed rank")
        ax.set_ylim(bottom=0)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.set_ylabel("rank r (buffer excluded)")
    axes[0, -1].legend(fontsize=7, ncol=math.ceil((n_layers + 2) / 14), loc="upper left", bbox_to_anchor=(1.02, 1))
    if title:
        fig.suptitle(title)
    return _save(fig, path)

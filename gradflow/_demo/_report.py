"""The demos' Markdown reports and the figures of the perturb-and-continue checks.

Everything printed is computed from the results passed in; nothing is hard-coded.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from .._diagonal._experiments import Perturbation
from .._diagonal._report import comparison_summary, greedy_summary
from .._factorized._report import rank_comparison_summary, rank_greedy_summary
from .._kit._plots import colour_map, new_figure
from .._kit._report import figures_and_runtime, format_alpha, markdown_table, worst_exponents

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def perturbation_rows(perturbations: dict[str, Perturbation], names) -> tuple[list[str], list[list[Any]]]:
    header = ["experiment", "τ_s", "noise std", "perturbed coordinates", "max |Δβ| at τ_s", "max |Δβ| at the end"]
    rows = []
    for kind, pert in perturbations.items():
        for j, t in enumerate(pert.start_times):
            coords = [names[i] for i in np.flatnonzero(pert.perturbed[j])]
            shown = ", ".join(coords[:6]) + (f" (+{len(coords) - 6})" if len(coords) > 6 else "")
            rows.append([kind, float(t), pert.std, shown or "none", pert.initial_deviation[j], pert.final_deviation[j]])
    return header, rows


def demo_report(*, config, task, path, comparison, perturbations, drawn, perturbed, timings, figures, key: str) -> str:
    """The demo's Markdown report."""
    names = task.model.names
    K = np.asarray(path.times).size - 1
    alphas = ", ".join(format_alpha(la) for la in comparison.log_alpha)
    horizon = float(comparison.window_end[-1])
    options = ", ".join(f"{k}={v}" for k, v in dict(task.config).items())
    text = f"# gradflow demo: {task.name}\n\n"
    text += (
        f"Model `{task.name}` ({options}); p = {task.model.p} coordinates, n = {task.model.n} samples. "
        f"Flows at α ∈ {{{alphas}}} up to rescaled time τ = {horizon:.4g}, tolerances rtol = {config.rtol:g}, "
        f"atol = {config.atol:g}; greedy limit with {K} stages. Configuration hash `{key}`.\n\n"
    )
    text += "## Greedy limit (Algorithm 1) and the assumption checks\n\n" + greedy_summary(path, names)
    if not config.check_assumptions:
        text += (
            "\nThe Hessian (4.3) and perturbed phase-(B) (4.4) checks were not run (`check_assumptions=False`); "
            "their flags read ✓ by convention.\n"
        )
    text += (
        f"\n## Comparison with the flows\n\nWindows are [T_k + δ, T_{{k+1}} − δ] with δ = {comparison.delta:.4g} "
        f"(the last window ends at τ = {horizon:.4g}). A stage time is detected on a flow at the first τ where "
        f"its loss has covered {comparison.threshold:g} of the drop between consecutive greedy plateaus "
        "L(θ^{k−1}) → L(θ^k). Rates: least-squares fit of log d = c − r log log(1/α), i.e. "
        "d ≈ C·log(1/α)^(−r); the theory suggests r ≈ 1 for b and the stage times.\n\n"
    )
    span = -np.asarray(comparison.log_alpha, dtype=np.float64)
    text += (
        f"The fits span log(1/α) from {span.min():.4g} to {span.max():.4g} "
        f"({math.log10(span.max() / span.min()):.2g} decades). " + worst_exponents(comparison) + "\n\n"
    )
    text += comparison_summary(comparison)
    if perturbations:
        a = format_alpha(perturbed)
        text += (
            f"\n## Perturb-and-continue checks (paper appendix A) at α = {a}\n\nAt each start time τ_s every "
            f"weight u_i, v_i of magnitude above {config.negligible:g} gets N(0, std²) noise and the flow "
            "continues; the table gives the largest deviation max_i |β_i − β_i(unperturbed)| right after the "
            "perturbation and at the end of the continued run. Random times (Figure 9, Assumption 4.3) and "
            "stage starts, where some weight first exceeds the threshold (Figure 10, Assumption 4.4).\n\n"
        )
        text += markdown_table(*perturbation_rows(perturbations, names))
    text += (
        "\n## Figures\n\nThe per-α figures draw the flows at α ∈ {"
        + ", ".join(format_alpha(la) for la in drawn)
        + "}; the convergence figure and the tables above use every α.\n\n"
    )
    return text + figures_and_runtime(figures, timings, config)


def rounding_floor(flows, gd, path, names) -> str:
    """GD's sleeping singular values against the flow's at the last time, per GD α that has a flow: float64 holds
    ``W = U Vᵀ`` to about ``ε σ_1`` (ε = 2.2e-16), so below that GD's ``σ_{r+1}`` (``r``: the greedy path's last
    rank of ``W_j``) and ``σ_min`` are rounding noise, where the flow's, kept as logs, are exact."""
    by_alpha = {float(f.log_alpha): f for f in flows}
    eps = math.log10(np.finfo(np.float64).eps)
    rows = []
    for run in gd:
        flow = by_alpha.get(float(run.log_alpha))
        if flow is None:
            continue
        for j, name in enumerate(names):
            r = int(np.asarray(path.ranks)[-1, j])
            lf, lg = (np.asarray(x.log_singular_values[j])[-1] / math.log(10) for x in (flow, run))
            if r < lf.size:  # at full rank nothing sleeps
                cells = [f"{lf[r]:.1f} / {lg[r]:.1f}", f"{lf[-1]:.1f} / {lg[-1]:.1f}", f"{eps + lg[0]:.1f}"]
                rows.append([format_alpha(float(run.log_alpha)), f"W_{name}", r, *cells])
    header = ["α", "W", "r", "log₁₀ σ_{r+1}: flow / GD", "log₁₀ σ_min: flow / GD", "log₁₀ ε σ_1 (GD)"]
    return markdown_table(header, rows) if rows else ""


def rank_demo_report(*, config, task, path, flows, gd, comparison, timings, figures, key: str) -> str:
    """The full-weights demo's Markdown report."""
    names = task.model.names
    K = np.asarray(path.times).size - 1
    alphas = ", ".join(format_alpha(la) for la in comparison.log_alpha)
    horizon = float(comparison.window_end[-1])
    options = ", ".join(f"{k}={v}" for k, v in dict(task.config).items())
    shapes = ", ".join(
        f"W_{n} ∈ R^{m}×{c} (width {w})" for n, (m, c), w in zip(names, task.model.shapes, task.model.widths)
    )
    text = f"# gradflow demo, full weights: {task.name}\n\n"
    text += (
        f"Model `{task.name}` ({options}); {shapes}; n = {task.model.n} samples. Exact flows at α ∈ {{{alphas}}} up "
        f"to rescaled time τ = {horizon:.4g} (tolerances rtol = {config.rtol:g}, atol = {config.atol:g}); the greedy "
        f"low-rank limit with {K} rank jumps. Configuration hash `{key}`.\n\n"
    )
    failed = [(format_alpha(float(f.log_alpha)), str(f.message)) for f in flows if str(f.result) != "successful"]
    if failed:
        text += "**Flows that did not finish:** " + "; ".join(f"α = {a}: {m}" for a, m in failed) + "\n\n"
    if comparison.gd is not None:
        text += (
            "Float64 gradient descent (learning rate "
            f"{config.gd_lr:g}) at α ∈ {{{', '.join(format_alpha(la) for la in comparison.gd.log_alpha)}}} is drawn "
            "dotted over the flows: it trains α U⁰ itself, so it exists only above float64's range, and it departs "
            "from the exact flow by O(lr) per unit time. Its sleeping singular values also cannot go below float64's "
            "rounding of its awake ones, about ε σ_1: at the last time,\n\n"
            + rounding_floor(flows, gd, path, names)
            + "\n"
        )
    text += (
        "## What is exact and what is conjectured\n\n"
        "The flows are the exact gradient flow of the factors (docs: *Full weights: the exact flow*), to the "
        "solver's tolerance, at every α including those far below float64. "
    )
    if task.name == "matrix_factorization":
        text += "The greedy low-rank limit is exact here: T_r = 1/σ_r(M), the saddles are the truncated SVDs.\n\n"
    else:
        text += (
            "The greedy low-rank limit is exact for matrix factorisation; for this model its stage times beyond "
            "the first (T_1 = 1/max_j σ_1(G_j(0)) holds for every model) rest on the log-scale bookkeeping of the "
            "sleeping directions, a conjecture that this comparison tests: it holds where the distances shrink as "
            "α → 0.\n\n"
        )
    text += "## Greedy low-rank limit and its diagnostics\n\n" + rank_greedy_summary(path, names)
    if not config.check_assumptions:
        text += "\nThe Hessian and perturbed phase-(B) checks were not run (`check_assumptions=False`).\n"
    text += (
        f"\n## Comparison with the flows\n\nWindows are [T_k + δ, T_{{k+1}} − δ] with δ = {comparison.delta:.4g} "
        f"(the last window ends at τ = {horizon:.4g}). The rank jump into stage k, which adds rank r to W_j, is "
        f"detected on a run at the first τ where σ_r(W_j) reaches {comparison.threshold:g} × σ_r(W̄_j^k). "
        "Log scales b = log σ / (2 log α) are compared with the limit's: 0 for learned directions, the sleeping "
        "exponents (piecewise linear in τ, a shrinking one turning at 1) for the others. Rates: least-squares fit "
        "of log d = c − r log log(1/α), i.e. d ≈ C·log(1/α)^(−r).\n\n"
    )
    text += worst_exponents(comparison) + "\n\n" + rank_comparison_summary(comparison)
    return text + "\n## Figures\n\n" + figures_and_runtime(figures, timings, config)


def plot_perturbation(pert: Perturbation, flow, names, groups: dict[str, np.ndarray], *, title: str) -> Figure:
    """Perturbed (solid) against unperturbed (dashed) trajectories, one colour per coordinate (Figures 9–10)."""
    fig = new_figure(figsize=(7, 3.6 * len(groups)))
    shown = np.any(pert.perturbed, axis=0)
    cmap = colour_map("tab10")
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

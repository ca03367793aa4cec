"""Text reports for factorised weights: the greedy low-rank stage table, the comparison tables, the full-weights
demo's Markdown report.

Everything printed is computed from the results passed in; nothing is hard-coded.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._rank_compare import RankComparison
from ._report import (
    distance_tables,
    figures_and_runtime,
    format_alpha,
    json_summary,
    markdown_table,
    path_summary,
    worst_exponents,
)

_CHECKS = ("escape", "minimum", "ε-limit")


def _flags(ok, ran) -> str:
    """✓/✗ per check of the path's ``assumptions_ok`` columns: a unique escape, a strict local minimum at the
    ranks, the ε → 0 limit of phase (B); "not run" where the path holds no number for the check."""
    return ", ".join(
        f"{name} {('✓' if flag else '✗') if done else 'not run'}" for name, flag, done in zip(_CHECKS, ok, ran)
    )


def _ranks(path, k: int, names) -> str:
    return ", ".join(f"{name}: {int(r)}" for name, r in zip(names, np.asarray(path.ranks)[k]))


def rank_greedy_rows(path, names) -> tuple[list[str], list[list[Any]]]:
    """One row per saddle ``k``: ``T_k``, the weight matrix that gained a rank at ``T_k``, the ranks, ``L(W̄^k)``
    and the diagnostics (those of the escape into stage ``k``; the Hessian and stationarity at ``W̄^k``)."""
    K = np.asarray(path.times).size - 1
    header = [
        "k",
        "T_k",
        "rank +1 in",
        "ranks",
        "L(W̄^k)",
        "Δ gap to runner-up",
        "(σ₁ − σ₂)/σ₁ of G",
        "Hessian min eig",
        "stationarity",
        "ε discrepancy",
        "perturbation spread",
        "assumptions",
    ]
    rows: list[list[Any]] = []
    for k in range(K + 1):
        row: list[Any] = [k, float(path.times[k])]
        row += [names[int(path.factor[k - 1])] if k else "–", _ranks(path, k, names), float(path.loss[k])]
        row += [float(path.delta_gap[k - 1]), float(path.singular_gap[k - 1])] if k else [None, None]
        row += [float(path.hessian_min_eig[k]), float(path.stationarity[k])]
        row += [float(path.epsilon_discrepancy[k - 1]), float(path.perturbation_spread[k - 1])] if k else [None, None]
        ran = (
            True,
            k == 0 or not np.isnan(path.hessian_min_eig[k]),
            k == 0 or not np.isnan(path.perturbation_spread[k - 1]),
        )
        row.append(_flags(path.assumptions_ok[k], ran))
        rows.append(row)
    return header, rows


def rank_greedy_summary(path, names) -> str:
    """The greedy low-rank path as a Markdown table, with its end reason and warnings."""
    return path_summary(path, *rank_greedy_rows(path, names))


def rank_jump_rows(comparison: RankComparison) -> tuple[list[str], list[list[Any]]]:
    """Greedy ``T_k`` against the rank jumps detected on every run."""
    header = ["k", "rank +1 in", "greedy T_k"] + [f"α = {format_alpha(la)}" for la in comparison.log_alpha]
    rows = [
        [k, comparison.names[int(comparison.factor[k - 1])], float(comparison.stage_times[k])]
        + list(comparison.detected_times[:, k - 1])
        for k in range(1, comparison.stage_times.size)
    ]
    return header, rows


_LABELS = {
    "W": "sup over the window of max_j ‖W_j(τ) − W̄_j^k‖₂",
    "b": "sup over the window of max_{j,i} |b_{j,i}(τ) − b̄_{j,i}(τ)|, b = log σ / (2 log α)",
    "loss": "sup over the window of |L(τ) − L(W̄^k)|",
    "time": "|detected rank jump − T_k|",
}


def rank_comparison_summary(comparison: RankComparison) -> str:
    """Rank-jump times and the distance tables as Markdown (used by the CLI and the report)."""
    text = "### Rank jumps: greedy T_k and detected on each run\n\n" + markdown_table(*rank_jump_rows(comparison))
    text += distance_tables(comparison, _LABELS)
    if comparison.gd is not None:
        text += "\n### gd: rank jumps detected on the gradient-descent runs\n\n" + markdown_table(
            *rank_jump_rows(comparison.gd)
        )
        text += distance_tables(comparison.gd, _LABELS)
    return text


def rank_comparison_json(comparison: RankComparison, path) -> dict[str, Any]:
    """Everything in the comparison, as JSON-ready data: records, rates, greedy stages."""
    return json_summary(
        comparison,
        path,
        rank_greedy_rows(path, comparison.names),
        detection="first τ where σ_r(W_j) reaches `threshold` · σ_r(W̄_j^k), W_j the matrix that gains rank r at T_k",
    )


def rank_demo_report(*, config, task, path, flows, comparison: RankComparison, timings, figures, key: str) -> str:
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
            "from the exact flow by O(lr) per unit time.\n\n"
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
        "exponents (linear in τ) for the others. Rates: least-squares fit of log d = c − r log log(1/α), i.e. "
        "d ≈ C·log(1/α)^(−r).\n\n"
    )
    text += worst_exponents(comparison) + "\n\n" + rank_comparison_summary(comparison)
    return text + "\n## Figures\n\n" + figures_and_runtime(figures, timings, config)

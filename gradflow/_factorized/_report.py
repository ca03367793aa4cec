"""Text reports for factorised weights: the greedy low-rank stage table and the comparison tables."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._kit._report import distance_tables, flags, format_alpha, json_summary, markdown_table, path_summary
from ._compare import RankComparison

_CHECKS = ("escape", "minimum", "ε-limit")


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
        row += [names[int(path.activated[k - 1])] if k else "–", _ranks(path, k, names), float(path.loss[k])]
        row += [float(path.delta_gap[k - 1]), float(path.singular_gap[k - 1])] if k else [None, None]
        row += [float(path.hessian_min_eig[k]), float(path.stationarity[k])]
        row += [float(path.epsilon_discrepancy[k - 1]), float(path.perturbation_spread[k - 1])] if k else [None, None]
        ran = (
            True,
            k == 0 or not np.isnan(path.hessian_min_eig[k]),
            k == 0 or not np.isnan(path.perturbation_spread[k - 1]),
        )
        row.append(flags(_CHECKS, path.assumptions_ok[k], ran))
        rows.append(row)
    return header, rows


def rank_greedy_summary(path, names) -> str:
    """The greedy low-rank path as a Markdown table, with its end reason and warnings."""
    return path_summary(path, *rank_greedy_rows(path, names))


def rank_jump_rows(comparison: RankComparison) -> tuple[list[str], list[list[Any]]]:
    """Greedy ``T_k`` against the rank jumps detected on every run."""
    header = ["k", "rank +1 in", "greedy T_k"] + [f"α = {format_alpha(la)}" for la in comparison.log_alpha]
    rows = [
        [k, comparison.names[int(comparison.activated[k - 1])], float(comparison.stage_times[k])]
        + list(comparison.detected_times[:, k - 1])
        for k in range(1, comparison.stage_times.size)
    ]
    return header, rows


_LABELS = {
    "weights": "sup over the window of max_j ‖W_j(τ) − W̄_j^k‖₂",
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

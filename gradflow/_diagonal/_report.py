"""Text reports for models with diagonal weights: the greedy stage table and the comparison tables."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._kit._report import (
    distance_tables,
    flags,
    json_summary,
    markdown_table,
    path_summary,
    stage_time_rows,
)
from ._compare import Comparison

_CHECKS = ("4.2", "4.3", "4.4")


def greedy_rows(path, names) -> tuple[list[str], list[list[Any]]]:
    """One row per plateau ``k``: ``T_k``, the coordinate activated at ``T_k``, ``L(θ^k)``, and the checks.

    The Δ gap, runner-up, perturbation spread and ε discrepancy are those of the transition into
    stage ``k``; the Hessian is at ``θ^k``; the flags are those the path records for row ``k``.
    """
    K = np.asarray(path.times).size - 1
    header = [
        "k",
        "T_k",
        "coordinate i_k",
        "v sign",
        "L(θ^k)",
        "|S_k|",
        "Δ gap to runner-up",
        "runner-up",
        "Hessian min eig",
        "perturbation spread",
        "ε discrepancy",
        "assumptions",
    ]
    support = np.asarray(path.support)
    rows: list[list[Any]] = []
    for k in range(K + 1):
        row: list[Any] = [k, float(path.times[k])]
        if k == 0:
            row += ["–", "–", float(path.loss[0]), int(support[0].sum()), None, "–"]
        else:
            runner = int(path.runner_up[k - 1])
            row += [
                names[int(path.activated[k - 1])],
                "= sign u" if path.sign[k - 1] else "= −sign u",
                float(path.loss[k]),
                int(support[k].sum()),
                float(path.delta_gap[k - 1]),
                names[runner] if runner >= 0 else "–",
            ]
        row += [
            float(path.hessian_min_eig[k]),
            float(path.perturbation_spread[k - 1]) if k else None,
            float(path.epsilon_discrepancy[k - 1]) if k else None,
            flags(
                _CHECKS,
                path.assumptions_ok[k],
                ran=(
                    True,
                    not np.isnan(path.hessian_min_eig[k]),
                    k == 0 or not np.isnan(path.perturbation_spread[k - 1]),
                ),
            ),
        ]
        rows.append(row)
    return header, rows


def greedy_summary(path, names) -> str:
    """The greedy path as a Markdown table, with its end reason and warnings."""
    return path_summary(path, *greedy_rows(path, names))


def comparison_json(comparison: Comparison, path, names) -> dict[str, Any]:
    """Everything in the comparison, as JSON-ready data: records, rates, greedy stages."""
    detection = "first τ where the loss has covered `threshold` of the drop L(θ^{k-1}) → L(θ^k)"
    return json_summary(comparison, path, greedy_rows(path, names), detection=detection)


_LABELS = {
    "weights": "sup over the window of max_i |β_i(τ) − β^k_i|",
    "b": "sup over the window of max_i |b_i(τ) − (b^k_i − (τ − T_k) g_i(θ^k))|",
    "loss": "sup over the window of |L(τ) − L(θ^k)|",
    "time": "|detected stage time − T_k|",
}


def comparison_summary(comparison: Comparison) -> str:
    """Stage times and the distance tables as Markdown (used by the CLI and the report)."""
    text = "### Stage times: greedy T_k and detected on each flow\n\n" + markdown_table(*stage_time_rows(comparison))
    for comp in (comparison, comparison.gd):
        if comp is not None:
            text += distance_tables(comp, _LABELS)
    return text

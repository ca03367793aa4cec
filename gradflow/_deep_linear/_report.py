"""Text reports for deep linear networks: the greedy stage table and the comparison tables."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._kit._report import distance_tables, flags, json_summary, markdown_table, path_summary, stage_time_rows

_CHECKS = ("4.2", "4.3", "4.4")

_LABELS = {
    "weights": "sup over the window of max |W(τ) − W^k| over the entries",
    "b": "sup over the window of max_r |b_r(τ) − b^k_r|, b = log σ / (L log α)",
    "loss": "sup over the window of |L(τ) − L(W^k)|",
    "time": "|detected stage time − T_k|",
}


def greedy_rows(path) -> tuple[list[str], list[list[Any]]]:
    """One row per plateau ``k``: ``T_k``, ``L(W^k)``, the top singular values of
    ``G_k = −∇L(W^k)``, the gap to the runner-up, the ε discrepancy and perturbation spread of the phase (B) into
    ``W^k``, the stationarity, the Hessian on the rank-``k`` stratum and the checks of ``assumptions_ok[k]``
    (Assumptions 4.2–4.4; 4.3 "not run" without ``check_assumptions``)."""
    header = ["k", "T_k", "L(W^k)", "σ_1(G_k)", "σ_2(G_k)", "gap to runner-up"]
    header += ["ε discrepancy", "perturbation spread", "stationarity", "Hessian min eig", "assumptions"]
    rows: list[list[Any]] = []
    for k in range(np.asarray(path.times).size):
        sv = np.asarray(path.gradient_singular_values[k])
        row: list[Any] = [k, float(path.times[k]), float(path.loss[k])]
        row += [float(sv[0]), float(sv[1]) if sv.size > 1 else None]
        row += [float(path.delta_gap[k - 1]) if k else None, float(path.epsilon_discrepancy[k - 1]) if k else None]
        row += [float(path.perturbation_spread[k - 1]) if k else None, float(path.stationarity[k])]
        eig = float(path.hessian_min_eig[k])
        row += [eig, flags(_CHECKS, path.assumptions_ok[k], ran=(True, not np.isnan(eig), True))]
        rows.append(row)
    return header, rows


def greedy_summary(path, names=None) -> str:
    """The greedy path as a Markdown table, with its end reason and warnings."""
    return path_summary(path, *greedy_rows(path))


def comparison_report(comparison) -> tuple[str, dict]:
    """A comparison with its greedy path as Markdown (path, stage times, distance tables) and as JSON-ready data."""
    path = comparison.path
    text = "## Greedy low-rank limit and its checks\n\n" + greedy_summary(path)
    text += "\n## Comparison with the flows\n\n### Stage times: greedy T_k and detected on each flow\n\n"
    text += markdown_table(*stage_time_rows(comparison)) + distance_tables(comparison, _LABELS)
    detection = "first τ where the loss has covered `threshold` of the drop L(W^{k-1}) → L(W^k)"
    return text, json_summary(comparison, path, greedy_rows(path), detection=detection)

"""Text reports for depth-L diagonal networks: the greedy stage table and the comparison tables (as for diagonal
weights, with the clocks in place of the log scales)."""

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

_CHECKS = ("4.2", "4.3")
DISTANCE_LABELS = {
    "weights": "sup over the window of max_i |β_i(τ) − β^k_i|",
    "b": "sup over the window of the sleeping clocks' max_i |c_i(τ) − (c^k_i − (τ − T_k)(L−2) s_i g_i(θ^k))|",
    "loss": "sup over the window of |L(τ) − L(θ^k)|",
    "time": "|detected stage time − T_k|",
}


def greedy_rows(path, names) -> tuple[list[str], list[list[Any]]]:
    """One row per plateau ``k``: ``T_k``, the coordinate activated at ``T_k`` and its sign, ``L(β^k)``, the support's
    size, the transition's Δ gap, runner-up, ε discrepancy and stationarity, the Hessian at ``β^k`` and the checks
    (Assumptions 4.2 and 4.3; the depth family runs no perturbations, 4.4)."""
    header = ["k", "T_k", "coordinate i_k", "sign", "L(β^k)", "|S_k|", "Δ gap to runner-up", "runner-up"]
    header += ["Hessian min eig", "ε discrepancy", "stationarity", "assumptions"]
    support = np.asarray(path.support)
    rows: list[list[Any]] = []
    for k in range(np.asarray(path.times).size):
        row: list[Any] = [k, float(path.times[k])]
        if k == 0:
            row += ["–", "–", float(path.loss[0]), int(support[0].sum()), None, "–"]
        else:
            runner = int(path.runner_up[k - 1])
            row += [names[int(path.activated[k - 1])], f"{float(path.sign[k - 1]):+.0f}", float(path.loss[k])]
            row += [int(support[k].sum()), float(path.delta_gap[k - 1]), names[runner] if runner >= 0 else "–"]
        row += [
            float(path.hessian_min_eig[k]),
            float(path.epsilon_discrepancy[k - 1]) if k else None,
            float(path.stationarity[k]),
            flags(_CHECKS, path.assumptions_ok[k][:2], ran=(True, True)),
        ]
        rows.append(row)
    return header, rows


def greedy_summary(path, names) -> str:
    """The greedy path as a Markdown table, with its end reason and warnings."""
    return path_summary(path, *greedy_rows(path, names))


def comparison_report(comparison) -> tuple[str, dict]:
    """A comparison with its greedy path as Markdown (path, stage times, distance tables with the power rates) and
    as JSON-ready data."""
    path = comparison.path
    names = comparison.names or [str(i) for i in range(np.shape(path.beta)[-1])]
    text = "## Greedy limit (depth-L Algorithm 1) and the assumption checks\n\n" + greedy_summary(path, names)
    text += "\n## Comparison with the flows\n\n### Stage times: greedy T_k and detected on each flow\n\n"
    text += markdown_table(*stage_time_rows(comparison)) + distance_tables(comparison, DISTANCE_LABELS)
    powers = {q: getattr(comparison, f"{q}_power") for q in ("weights", "b", "loss", "time")}
    windows = len(powers["weights"])
    text += "\n### Power rates r of d ≈ C α^r per window (plateaus last α^{−(L−2)}; time: stages k = 1 … K)\n\n"
    rows = [[q] + list(v) + [None] * (windows - len(v)) for q, v in powers.items()]
    text += markdown_table(["quantity"] + [f"k = {k}" for k in range(windows)], rows)
    detection = "first τ where the loss has covered `threshold` of the drop L(β^{k-1}) → L(β^k)"
    data = json_summary(comparison, path, greedy_rows(path, names), detection=detection)
    data["power_rates"] = {q: [float(r) for r in v] for q, v in powers.items()}
    return text, data

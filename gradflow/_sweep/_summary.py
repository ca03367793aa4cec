"""A sweep's summary over seeds: per model setting, the spread of the stage counts, assumption failures and
convergence rates."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._kit._comparison import fit_rate
from ._grid import ASSUMPTIONS, QUANTITIES


@dataclasses.dataclass(frozen=True)
class GroupSummary:
    """One model setting, its seeds pooled (the statistics behind the summary figures).

    Attributes:
        label: the model and the options that vary across the sweep.
        tasks: how many tasks (seeds) have a greedy path.
        stage_times: ``T_k`` over the tasks, per stage ``k ≥ 1``.
        num_stages: ``K`` per task.
        failures: per assumption (``"4.2"``, ``"4.3"``, ``"4.4"``), the fraction of tasks where it fails at some stage.
        rates: per quantity (``beta``, ``b``, ``loss``, ``time``), the fitted exponent ``r`` of
            ``d ≈ C (log 1/α)^(−r)`` per task (the worst distance over its stages at each α; needs two α).
    """

    label: str
    tasks: int
    stage_times: dict[int, np.ndarray]
    num_stages: np.ndarray
    failures: dict[str, float]
    rates: dict[str, np.ndarray]


def summarise(rows: Sequence[dict[str, Any]]) -> list[GroupSummary]:
    """Pool the rows of each model setting over its seeds (see :class:`GroupSummary`)."""
    params = _param_columns(rows)
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["model"], *(str(row.get(k)) for k in params)), []).append(row)
    out = []
    for key, group in groups.items():
        same_model = [other for other in groups if other[0] == key[0]]
        varying = [(k, v) for j, (k, v) in enumerate(zip(params, key[1:])) if len({o[j + 1] for o in same_model}) > 1]
        out.append(_summarise_group(" ".join([key[0], *(f"{k}={v}" for k, v in varying)]), group))
    return out


def _param_columns(rows) -> list[str]:
    """The option columns (every key between ``model`` and ``seed``), of all models."""
    names: dict[str, None] = {}
    for row in rows:
        keys = list(row)
        names.update(dict.fromkeys(keys[keys.index("model") + 1 : keys.index("seed")]))
    return list(names)


def _summarise_group(label: str, rows: list[dict]) -> GroupSummary:
    by_task: dict[str, list[dict]] = {}
    for row in rows:
        if "stage" in row:
            by_task.setdefault(row["task"], []).append(row)
    first = {t: [r for r in rs if r["point"] == rs[0]["point"]] for t, rs in by_task.items()}
    stage_times: dict[int, list[float]] = {}
    for rs in first.values():
        for r in rs:
            if r["stage"] >= 1:
                stage_times.setdefault(r["stage"], []).append(r["T_greedy"])
    failures = {
        a: float(np.mean([not all(r[f"ok_{a.replace('.', '_')}"] for r in rs) for rs in first.values()]))
        if first
        else math.nan
        for a in ASSUMPTIONS
    }
    rates = {q: np.array([_task_rate(rs, q) for rs in by_task.values()]) for q in QUANTITIES}
    return GroupSummary(
        label=label,
        tasks=len(first),
        stage_times={k: np.array(v) for k, v in sorted(stage_times.items())},
        num_stages=np.array([rs[0]["num_stages"] for rs in first.values()], dtype=int),
        failures=failures,
        rates={q: r[np.isfinite(r)] for q, r in rates.items()},
    )


def _task_rate(rows: list[dict], quantity: str) -> float:
    """The fitted exponent of one task's worst distance over its stages, across its α's (NaN without flows)."""
    column = "time_error" if quantity == "time" else f"{quantity}_distance"
    worst: dict[float, float] = {}
    for r in rows:
        value = r.get(column)
        if r.get("log_alpha") is None or value is None or (quantity == "time" and r["stage"] == 0):
            continue
        if math.isfinite(value):
            worst[r["log_alpha"]] = max(worst.get(r["log_alpha"], -math.inf), value)
    if len(worst) < 2:
        return math.nan
    return fit_rate(list(worst), list(worst.values()))[0]

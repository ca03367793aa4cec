"""A sweep's grid (docs' Scaling out page): its tasks (a built-in model at one setting and seed) and points (a task at
one α), their split between processes, and the rows of the table, one per (point, greedy stage)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._io import config_hash
from .._kit._task import Task
from .._registry import builtin, family_named
from ._config import SweepConfig

ASSUMPTIONS = ("4.2", "4.3", "4.4")


@dataclasses.dataclass(frozen=True)
class SweepTask:
    """A built-in model at one setting and seed: its data, teacher and initialisation ``(u0, v0)``."""

    model: str
    setting: tuple[tuple[str, Any], ...]
    seed: int

    @property
    def key(self) -> dict[str, Any]:
        return dict(model=self.model, options=dict(self.setting), seed=self.seed)

    @property
    def hash(self) -> str:
        return config_hash(self.key)

    def build(self) -> Task:
        return builtin(self.model).build(**dict(self.setting), seed=self.seed)


@dataclasses.dataclass(frozen=True)
class SweepPoint:
    """A task at one scale (``log_alpha`` is None for greedy-only sweeps); ``hash`` keys its rows file.

    The hash covers everything that changes the point's rows (the task, α and the run's settings),
    so a re-run with the same settings skips the point and a changed setting recomputes it.
    """

    task: SweepTask
    log_alpha: float | None
    hash: str
    alpha: float | None = None  # α as given, where it was (else e^{log α})


def greedy_key(config: SweepConfig, task: SweepTask) -> dict[str, Any]:
    """What the greedy path of ``task`` depends on."""
    return dict(task.key, max_stages=config.max_stages, check_assumptions=config.check_assumptions)


def grid(config: SweepConfig) -> list[SweepPoint]:
    """Every point of the sweep, in grid order (models, their settings, seeds, α)."""
    settings = dict(run=config.run)
    if config.run != "flow":
        settings.update(max_stages=config.max_stages, check_assumptions=config.check_assumptions)
    if config.run != "greedy":
        settings.update(
            num_times=config.num_times,
            tau_max=config.tau_max,
            atol=config.atol,
            rtol=config.rtol,
            max_steps=config.max_steps,
        )
    if config.run == "compare":
        settings.update(threshold=config.threshold, delta=config.delta)
    given = dict(zip(config.log_alphas, config.alphas))
    alphas = (None,) if config.run == "greedy" else config.log_alphas
    points = []
    for model in config.models:
        for setting in model.settings():
            for seed in config.seeds:
                task = SweepTask(model.name, setting, seed)
                for la in alphas:
                    key = dict(task.key, log_alpha=la, **settings)
                    points.append(SweepPoint(task, la, config_hash(key), given.get(la)))
    return points


def share(points: Sequence[SweepPoint], process_id: int, num_processes: int) -> list[SweepPoint]:
    """The points of process ``process_id``: its round-robin share of the tasks sorted by hash (grid order kept).

    The split depends only on the grid, never on what is already done, so every process agrees on it
    without talking to the others.
    """
    tasks = sorted({p.task.hash for p in points})
    mine = set(tasks[process_id::num_processes])
    return [p for p in points if p.task.hash in mine]


# --------------------------------------------------------------------------------------------------
# Rows.


def _cell(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def point_params(point: SweepPoint) -> dict[str, Any]:
    """The parameter columns of a point's rows."""
    la = point.log_alpha
    params = dict(point=point.hash, task=point.task.hash, model=point.task.model)
    params.update((k, _cell(v)) for k, v in point.task.setting)
    alpha = point.alpha if point.alpha is not None else None if la is None else math.exp(la)
    params.update(seed=point.task.seed, log_alpha=la, alpha=alpha)
    return params


def greedy_rows(path, names: Sequence[str], family) -> list[dict[str, Any]]:
    """One record per stage ``k = 0..K`` of a greedy path of ``family``: ``coordinate`` is what stage ``k``
    activated (a coordinate's name, or the weight matrix whose rank grew)."""
    K = int(np.size(path.times)) - 1
    ok = np.asarray(path.assumptions_ok, dtype=bool)
    rows = []
    for k in range(K + 1):
        rows.append(
            dict(
                stage=k,
                num_stages=K,
                result=str(path.result),
                T_greedy=float(path.times[k]),
                loss_greedy=float(path.loss[k]),
                coordinate=family.activated(path, names, k) if k else "",
                **{f"ok_{a.replace('.', '_')}": bool(ok[k, j]) for j, a in enumerate(ASSUMPTIONS)},
                hessian_min_eig=float(path.hessian_min_eig[k]),
            )
        )
    return rows


def flow_columns(family) -> tuple[str, ...]:
    """The comparison's columns in a point's rows: the detected stage time, its error and the distance of each
    quantity of ``family``'s comparison (``beta_distance``, ``b_distance``, ``loss_distance`` of a diagonal model)."""
    names = {"weights": family.weights_column}
    return (
        "T_detected",
        "time_error",
        *(f"{names.get(q, q)}_distance" for q, _ in family.worst_columns if q != "time"),
    )


def _column(record: dict[str, Any], column: str) -> float:
    """``record[column]``, or for a quantity recorded per weight matrix (``W_distance[W_KQ]``) the worst of them."""
    if column in record:
        return float(record[column])
    per_matrix = [float(v) for k, v in record.items() if k.startswith(column + "[")]
    return max(per_matrix) if per_matrix else math.nan


def point_rows(point: SweepPoint, *, path=None, names=(), flow=None, comparison=None, error: str = ""):
    """The rows of one point: per greedy stage (``path``), with the flow's comparison columns if given.

    ``flow`` is the point's [`FlowResult`][gradflow.FlowResult]; ``comparison`` its
    [`Comparison`][gradflow.Comparison] with ``path`` (one α). Without a path (``run = "flow"``) there is
    one row. ``error`` says why a part could not be computed (its columns are then NaN).
    """
    base = point_params(point)
    extra = {}
    if flow is not None:
        extra = dict(final_loss=float(np.asarray(flow.loss)[-1]), flow_steps=int(flow.stats["num_steps"]))
    elif point.log_alpha is not None:
        extra = dict(final_loss=math.nan, flow_steps=-1)
    if path is None:
        return [dict(base, **extra, error=error)]
    family = family_named(builtin(point.task.model).family)
    stages = greedy_rows(path, names, family)
    if point.log_alpha is not None:
        records = comparison.to_records() if comparison is not None else [{}] * len(stages)
        for stage, rec in zip(stages, records):
            stage.update({c: _column(rec, c) for c in flow_columns(family)})
    return [dict(base, **stage, **extra, error=error) for stage in stages]

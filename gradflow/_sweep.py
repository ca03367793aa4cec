"""Sweeps: many independent theory runs over a grid, batched, sharded over devices and split over processes.

A [`SweepConfig`][gradflow.SweepConfig] names a grid: built-in models × their settings (sizes, teacher) ×
seeds (a *task*: a model with its data, teacher and initialisation) × scales α (a *point*: a task at
one α). :func:`sweep` computes every point and writes one tidy table, one row per (point, greedy
stage k), with the point's parameters as columns:

* ``greedy`` (Algorithm 1, [`greedy_limit`][gradflow.greedy_limit], once per task): ``T_greedy`` = ``T_k``,
  ``loss_greedy`` = ``L(θ^k)``, the coordinate activated at ``T_k``, the flags of Assumptions 4.2,
  4.3, 4.4 for stage k (``GreedyPath.assumptions_ok``), the Hessian's smallest eigenvalue, the
  number of stages ``K`` and why the path ended;
* ``compare`` adds the flow at the point's α, compared with the path as in
  [`compare_limits`][gradflow.compare_limits] (docs' Math page, "Comparing with the limit"): the detected stage
  time ``T_detected``, ``time_error`` = ``|T_detected − T_k|``, and the sup distances of β, b and the
  loss from the greedy values over the window of stage k;
* ``flow`` runs the flow alone up to ``tau_max``: one row per point with its final loss.

How the work is spread: the points are split between processes by task (tasks sorted by their hash,
dealt round-robin), so each greedy path is computed once; greedy paths run one by one (a Python
loop). On a GPU or TPU (``batching = "vmap"``) the flows of one process that share a shape (same model
structure and array shapes; the data, ``u0, v0``, α and recorded times differ) are solved together,
``vmap``-ed over the batch and spread over the local devices with ``jax.shard_map`` on a 1-D ``Mesh``
(the batch padded to a multiple of the device count); on the CPU (``batching = "separate"``) each flow
is solved alone, as [`simulate_flow`][gradflow.simulate_flow] solves a single run, as many at once as
there are cores. Each finished point's rows are written at once (``_sweep_io``), so an interrupted sweep
resumes where it stopped; process 0 merges the table.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import time
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import numpy as np
from jax.sharding import Mesh, PartitionSpec
from tqdm.auto import tqdm

from . import _flow, models
from ._assumptions import AssumptionWarning
from ._compare import compare_limits
from ._comparison import default_times, fit_rate
from ._config import cores_for, float64
from ._flow import FlowResult, simulate_flow
from ._greedy import greedy_limit
from ._io import ResultStore, config_hash
from ._sweep_config import SweepConfig
from ._sweep_io import read_point, wait_for_points, write_point, write_table

ASSUMPTIONS = ("4.2", "4.3", "4.4")
QUANTITIES = ("beta", "b", "loss", "time")


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

    def build(self) -> models.Task:
        return models.builtin(self.model).build(**dict(self.setting), seed=self.seed)


@dataclasses.dataclass(frozen=True)
class SweepPoint:
    """A task at one scale (``log_alpha`` is None for greedy-only sweeps); ``hash`` keys its rows file.

    The hash covers everything that changes the point's rows (the task, α and the run's settings),
    so a re-run with the same settings skips the point and a changed setting recomputes it.
    """

    task: SweepTask
    log_alpha: float | None
    hash: str


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
    alphas = (None,) if config.run == "greedy" else config.log_alphas
    points = []
    for model in config.models:
        for setting in model.settings():
            for seed in config.seeds:
                task = SweepTask(model.name, setting, seed)
                for la in alphas:
                    key = dict(task.key, log_alpha=la, **settings)
                    points.append(SweepPoint(task, la, config_hash(key)))
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
    params.update(seed=point.task.seed, log_alpha=la, alpha=None if la is None else math.exp(la))
    return params


def greedy_rows(path, names: Sequence[str]) -> list[dict[str, Any]]:
    """One record per stage ``k = 0..K`` of a [`GreedyPath`][gradflow.GreedyPath]."""
    K = int(path.coordinate.shape[0])
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
                coordinate=names[int(path.coordinate[k - 1])] if k else "",
                **{f"ok_{a.replace('.', '_')}": bool(ok[k, j]) for j, a in enumerate(ASSUMPTIONS)},
                hessian_min_eig=float(path.hessian_min_eig[k]),
            )
        )
    return rows


_FLOW_COLUMNS = ("T_detected", "time_error", "beta_distance", "b_distance", "loss_distance")


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
    stages = greedy_rows(path, names)
    if point.log_alpha is not None:
        records = comparison.to_records() if comparison is not None else [{}] * len(stages)
        for stage, rec in zip(stages, records):
            stage.update({c: float(rec.get(c, math.nan)) for c in _FLOW_COLUMNS})
    return [dict(base, **stage, **extra, error=error) for stage in stages]


# --------------------------------------------------------------------------------------------------
# The flows of one shape, batched: the one place that uses the flow solver's internals.


@eqx.filter_jit
def _solve_sharded(models, y0, log_wwbar, log_alpha, ts, rtol, atol, *, solver, max_steps, mesh):
    arrays, static = eqx.partition(models, eqx.is_array)

    def one(arr, y, lw, la, t):
        return _flow._solve(
            eqx.combine(arr, static), y, lw, la, t, rtol, atol, solver=solver, max_steps=max_steps, batched=False
        )

    spec = PartitionSpec("batch")
    local = jax.shard_map(jax.vmap(one), mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False)
    return local(arrays, y0, log_wwbar, log_alpha, ts)


@float64
def solve_flows(
    tasks, log_alphas, tss, *, rtol: float, atol: float, max_steps: int | None, mesh: Mesh, width: int, length: int
):
    """The exact flows of ``tasks[j]`` from ``α_j (u0, v0)`` at the rescaled times ``tss[j]``, solved together.

    The same equations and solver as a batch of [`simulate_flow`][gradflow.simulate_flow] with ``batching="vmap"`` (docs' Math page, "The exact
    flow"), ``vmap``-ed over the runs, the model's arrays (data) included, and split over the devices
    of ``mesh`` by ``shard_map`` along its ``batch`` axis. Every model must have the same structure
    and array shapes. The batch is padded by repeating its last run to ``width`` (a multiple of the
    device count) and every ``ts`` to ``length`` times by repeating its last time: the solver steps
    onto each saved time, so a repeated one adds no step and leaves the others bit for bit. Returns
    a [`FlowResult`][gradflow.FlowResult] per run; a run that the solver could not finish has its ``result`` and
    ``message`` set (as with ``simulate_flow(..., throw=False)``).
    """
    B = len(tasks)
    p = tasks[0].model.p
    pad = lambda x: np.concatenate([x, np.repeat(x[-1:], width - B, axis=0)])  # noqa: E731
    arrays = [eqx.filter(t.model, eqx.is_array) for t in tasks]
    models = eqx.combine(
        jax.tree_util.tree_map(lambda *xs: pad(np.stack(xs)), *arrays),
        eqx.filter(tasks[0].model, eqx.is_array, inverse=True),
    )
    log_a = np.asarray(log_alphas, dtype=np.float64)
    states = [_flow.initial_state(t.u0, t.v0, la) for t, la in zip(tasks, log_a)]
    y0, log_wwbar, swap, sign = (np.stack(x) for x in zip(*states))
    ts = np.stack([np.concatenate([t, np.full(length - len(t), t[-1])]) for t in tss])
    out = _solve_sharded(
        models,
        pad(y0),
        pad(log_wwbar),
        pad(log_a),
        pad(ts),
        rtol,
        atol,
        solver=_flow._default_solver(min(p, 16), atol + rtol),
        max_steps=max_steps,
        mesh=mesh,
    )
    runs = []
    for j in range(B):
        k = len(tss[j])
        one = jax.tree_util.tree_map(lambda x: np.asarray(x)[j], out)
        one = jax.tree_util.tree_map(lambda x: x[:k] if np.ndim(x) else x, one[:3]) + one[3:]
        runs.append(_flow.flow_result(one, tss[j], log_a[j], swap[j], sign[j], max_steps))
    return runs


def _shape(model) -> tuple:
    """What must agree between models solved in one batch: the pytree, the array shapes, the rest by value."""
    leaves, treedef = jax.tree_util.tree_flatten(model)
    return treedef, tuple((np.shape(x), np.asarray(x).dtype.str) if eqx.is_array(x) else x for x in leaves)


def _batches(size: int, devices: int, per_device: int) -> tuple[int, int]:
    """``(calls, width)``: as few calls as ``per_device`` allows, of one width (a multiple of ``devices``)."""
    calls = math.ceil(size / (devices * per_device))
    return calls, devices * math.ceil(math.ceil(size / calls) / devices)


# --------------------------------------------------------------------------------------------------
# The sweep.


@dataclasses.dataclass(frozen=True)
class SweepResult:
    """What [`sweep`][gradflow.sweep] did.

    Attributes:
        config: the sweep.
        rows: the merged table's rows in grid order (on process 0), else this process's rows.
        table: the merged table's path (None on other processes, or while points are missing).
        figures: the summary figures (process 0, once every point is done).
        computed, reused: this process's points computed now and found finished.
        missing: points of the grid without rows (another process's share, not yet done).
        failed: points whose rows carry an ``error``.
        seconds: wall-clock time.
    """

    config: SweepConfig
    rows: tuple[dict[str, Any], ...]
    table: Path | None
    figures: tuple[Path, ...]
    computed: int
    reused: int
    missing: int
    failed: int
    seconds: float


def sweep(
    config: SweepConfig | str | os.PathLike,
    *,
    out: str | os.PathLike = "sweep_output",
    force: bool = False,
    progress: bool = True,
    process_id: int | None = None,
    num_processes: int | None = None,
    table_format: str = "auto",
    merge_only: bool = False,
    figures: bool = True,
) -> SweepResult:
    """Run every point of ``config`` (a [`SweepConfig`][gradflow.SweepConfig] or a TOML file) into the folder ``out``.

    Finished points (a rows file with the same hash in ``out/points``) are skipped unless ``force``.
    With several processes (``jax.distributed.initialize`` called before, or ``process_id`` and
    ``num_processes`` given), each computes its share (the tasks sorted by hash, dealt round-robin)
    into the same ``out`` (a shared file system across hosts); under ``jax.distributed`` every
    process then waits until all shares are written, and process 0 merges the table and draws the
    figures. ``merge_only`` computes nothing and merges what
    is there (``gradflow sweep --merge``). ``table_format`` is ``"auto"`` (Parquet if pyarrow is
    installed), ``"csv"`` or ``"parquet"``.
    """
    start = time.perf_counter()
    if not isinstance(config, SweepConfig):
        config = SweepConfig.from_toml(config)
    out = Path(out)
    pid = jax.process_index() if process_id is None else int(process_id)
    count = jax.process_count() if num_processes is None else int(num_processes)
    if not 0 <= pid < count:
        raise ValueError(f"process_id must lie in [0, num_processes = {count}); got {pid}.")
    points = grid(config)
    mine = [] if merge_only else share(points, pid, count)
    computed = _run(config, mine, out, force=force, progress=progress)
    if jax.process_count() > 1 and not merge_only:  # jax.distributed: all processes end together
        wait_for_points(out, [p.hash for p in points])
    shown = points if pid == 0 or merge_only else mine
    found = [(p, read_point(out, p.hash)) for p in shown]
    rows = tuple(r for _, rs in found if rs is not None for r in rs)
    missing = sum(rs is None for p, rs in found)
    table, figs = None, ()
    if (pid == 0 or merge_only) and not missing:
        table = write_table(out, list(rows), table_format)
        if figures:
            from ._sweep_plots import summary_figures

            figs = tuple(summary_figures(summarise(rows), out / "figures"))
    failed = len({r["point"] for r in rows if r.get("error")})
    seconds = time.perf_counter() - start
    return SweepResult(config, rows, table, figs, computed, len(mine) - computed, missing, failed, seconds)


def _run(config: SweepConfig, points: list[SweepPoint], out: Path, *, force: bool, progress: bool) -> int:
    """Compute this process's unfinished points; returns how many it computed."""
    todo = [p for p in points if force or read_point(out, p.hash) is None]
    if not todo:
        return 0
    tasks = list(dict.fromkeys(p.task for p in todo))
    greedy = config.run != "flow"
    total = (len(tasks) if greedy else 0) + (len(todo) if config.run != "greedy" else 0)
    bar = tqdm(total=total, desc="gradflow sweep", unit="run", disable=not progress)
    paths: dict[SweepTask, Any] = {}
    if greedy:
        store = ResultStore(out / "greedy", force=force)
        bar.set_postfix_str("greedy limits", refresh=False)
        for task in tasks:
            paths[task] = _greedy(config, task, store)
            bar.update()
            if config.run == "greedy":
                _write_greedy(out, [p for p in todo if p.task == task], paths[task])
    if config.run != "greedy":
        bar.set_postfix_str("flows", refresh=False)
        _flows(config, todo, paths, out, bar)
    bar.close()
    return len(todo)


def _greedy(config: SweepConfig, task: SweepTask, store: ResultStore):
    """The task's greedy path (reused from ``store``), or the error that stopped it, as text."""

    def compute():
        built = task.build()
        with warnings.catch_warnings():  # the failures are recorded in the path and in the rows
            warnings.simplefilter("ignore", AssumptionWarning)
            return greedy_limit(
                built.model,
                u0=built.u0,
                v0=built.v0,
                max_stages=config.max_stages,
                check_assumptions=config.check_assumptions,
                seed=task.seed,
                throw=False,
            )

    try:
        return store.get("greedy", greedy_key(config, task), compute)
    except (ValueError, RuntimeError) as err:
        return f"greedy_limit failed: {err}"


def _write_greedy(out: Path, points: list[SweepPoint], path) -> None:
    for point in points:
        if isinstance(path, str):
            write_point(out, point.hash, point_rows(point, error=path))
        else:
            write_point(out, point.hash, point_rows(point, path=path, names=_names(point.task)))


def _names(task: SweepTask) -> tuple[str, ...]:
    return _setting_model(task.model, task.setting).names


@functools.lru_cache(maxsize=64)
def _setting_model(name: str, setting: tuple) -> Any:
    """A model of this setting (seed 0), for its shape and coordinate names (the same for every seed)."""
    return models.builtin(name).build(**dict(setting), seed=0).model


def _times(config: SweepConfig, path) -> np.ndarray:
    """The recorded times of a flow: as [`compare_limits`][gradflow.compare_limits] picks them, or an even grid."""
    if path is None:
        return np.linspace(0.0, config.tau_max, config.num_times)
    return default_times(path.times, num=config.num_times, horizon=config.tau_max, delta=config.delta)


def solve_flow(task: models.Task, log_alpha: float, ts, *, rtol: float, atol: float, max_steps: int | None):
    """One point's flow, alone: [`simulate_flow`][gradflow.simulate_flow]'s single run (a failure is recorded in the
    result, not raised)."""
    kw = dict(rtol=rtol, atol=atol, max_steps=max_steps, throw=False)
    return simulate_flow(task.model, u0=task.u0, v0=task.v0, ts=ts, log_alpha=log_alpha, **kw)


def _flows(config: SweepConfig, todo: list[SweepPoint], paths: dict, out: Path, bar) -> None:
    """The flows of ``todo``, each point's rows written as its flow (or its batch) ends."""
    runs = []
    for point in todo:
        path = paths.get(point.task)
        if isinstance(path, str):
            write_point(out, point.hash, point_rows(point, error=path))
            bar.update()
            continue
        runs.append((point, path, _times(config, path)))
    if _flow.vmap_batches(config.batching):
        _flows_batched(config, runs, out, bar)
    else:
        _flows_separately(config, runs, out, bar)


def _flows_separately(config: SweepConfig, runs: list, out: Path, bar) -> None:
    """Each flow alone, as many at once as there are cores (a run's solve is a serial chain of small XLA calls
    that keeps about one core busy); each point's rows written as its flow ends."""
    built = {task: task.build() for task in dict.fromkeys(p.task for p, _, _ in runs)}
    options = dict(rtol=config.rtol, atol=config.atol, max_steps=config.max_steps)
    workers = cores_for(len(runs))
    # as in the batched solve, a near-degenerate start is reported by the greedy path's 4.2 column, not warned
    # about per flow (the filter is set here, before the threads start, and restored after they end)
    with warnings.catch_warnings(), ThreadPoolExecutor(max_workers=workers) as pool:
        warnings.simplefilter("ignore", AssumptionWarning)
        solving = {
            pool.submit(solve_flow, built[p.task], p.log_alpha, ts, **options): (p, path) for p, path, ts in runs
        }
        for done in as_completed(solving):
            point, path = solving[done]
            write_point(out, point.hash, _compared(config, point, built[point.task], path, done.result()))
            bar.update()


def _flows_batched(config: SweepConfig, runs: list, out: Path, bar) -> None:
    """The flows solved in ``vmap``-ed batches of one shape, sharded over the local devices; each point's rows
    written as its batch ends."""
    groups: dict[tuple, list] = {}
    for run in runs:
        groups.setdefault(_shape(_setting_model(run[0].task.model, run[0].task.setting)), []).append(run)
    devices = jax.local_devices()
    mesh = Mesh(np.array(devices), ("batch",))
    for group in groups.values():
        m = max(len(ts) for _, _, ts in group)
        calls, width = _batches(len(group), len(devices), config.batch_size)
        size = math.ceil(len(group) / calls)
        for c in range(calls):
            chunk = group[c * size : (c + 1) * size]
            built = {task: task.build() for task in dict.fromkeys(p.task for p, _, _ in chunk)}
            flows = solve_flows(
                [built[p.task] for p, _, _ in chunk],
                [p.log_alpha for p, _, _ in chunk],
                [ts for _, _, ts in chunk],
                rtol=config.rtol,
                atol=config.atol,
                max_steps=config.max_steps,
                mesh=mesh,
                width=width,
                length=m,
            )
            for (point, path, _), flow in zip(chunk, flows):
                write_point(out, point.hash, _compared(config, point, built[point.task], path, flow))
                bar.update()


def _compared(config: SweepConfig, point: SweepPoint, task: models.Task, path, flow: FlowResult) -> list[dict]:
    """A point's rows from its greedy path (or None) and its flow, compared as [`compare_limits`][gradflow.compare_limits] does."""
    names = task.model.names
    if flow.result != "successful":
        return point_rows(point, path=path, names=names, error=str(flow.message))
    if path is None:
        return point_rows(point, flow=flow)
    comparison = compare_limits(
        task.model,
        log_alphas=[point.log_alpha],
        u0=task.u0,
        v0=task.v0,
        path=path,
        ts=flow.ts,
        flows=flow,
        threshold=config.threshold,
        delta=config.delta,
    )
    return point_rows(point, path=path, names=names, flow=flow, comparison=comparison)


# --------------------------------------------------------------------------------------------------
# Summary over seeds.


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

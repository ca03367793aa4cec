"""Sweeps: many independent theory runs over a grid, batched, sharded over devices and split over processes.

A [`SweepConfig`][gradflow.SweepConfig] names a grid: built-in models of any family × their settings (sizes, teacher) ×
seeds (a *task*: a model with its data, teacher and initialisation) × scales α (a *point*: a task at
one α). :func:`sweep` computes every point and writes one tidy table, one row per (point, greedy
stage k), with the point's parameters as columns:

* ``greedy`` (Algorithm 1, [`greedy_limit`][gradflow.greedy_limit], once per task): ``T_greedy`` = ``T_k``,
  ``loss_greedy`` = ``L(θ^k)``, what ``T_k`` activated (a coordinate; for full weights the weight matrix whose
  rank grew), the flags of Assumptions 4.2,
  4.3, 4.4 for stage k (``GreedyPath.assumptions_ok``), the Hessian's smallest eigenvalue, the
  number of stages ``K`` and why the path ended;
* ``compare`` adds the flow at the point's α, compared with the path as in
  [`compare_limits`][gradflow.compare_limits] (docs' Math page, "Comparing with the limit"): the detected stage
  time ``T_detected``, ``time_error`` = ``|T_detected − T_k|``, and the sup distances of β (``W`` for full
  weights), b and the loss from the greedy values over the window of stage k;
* ``flow`` runs the flow alone up to ``tau_max``: one row per point with its final loss.

How the work is spread: the points are split between processes by task (tasks sorted by their hash,
dealt round-robin), so each greedy path is computed once; greedy paths run one by one (a Python
loop). On a GPU or TPU (``batching = "vmap"``) the flows of one process that share a shape (same model
structure and array shapes; the data, ``u0, v0``, α and recorded times differ) are solved together (for the
families that batch models, ``ModelFamily.shards_models``; the others' one by one),
``vmap``-ed over the batch and spread over the local devices with ``jax.shard_map`` on a 1-D ``Mesh``
(the batch padded to a multiple of the device count); on the CPU (``batching = "separate"``) each flow
is solved alone, as [`simulate_flow`][gradflow.simulate_flow] solves a single run, as many at once as
there are cores. Each finished point's rows are written at once (``_io``), so an interrupted sweep
resumes where it stopped; process 0 merges the table.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import time
import warnings
from concurrent.futures import as_completed
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import numpy as np
from jax.sharding import Mesh
from tqdm.auto import tqdm

from .._api import compare_limits, greedy_limit, simulate_flow
from .._config import PerCore
from .._io import ResultStore, claim_folder, config_hash
from .._kit._assumptions import AssumptionWarning
from .._kit._comparison import default_times
from .._kit._task import Task
from .._registry import builtin, family_named
from .._results import RESULTS
from .._solver import vmap_batches
from ._config import SweepConfig
from ._grid import SweepPoint, SweepTask, greedy_key, grid, point_rows, share
from ._io import TABLES, read_point, wait_for_points, write_point, write_table
from ._plots import FIGURES, summary_figures
from ._summary import summarise


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
    overwrite: bool = False,
) -> SweepResult:
    """Run every point of ``config`` (a [`SweepConfig`][gradflow.SweepConfig] or a TOML file) into the folder ``out``.

    Finished points (a rows file with the same hash in ``out/points``) are skipped unless ``force``.
    With several processes (``jax.distributed.initialize`` called before, or ``process_id`` and
    ``num_processes`` given), each computes its share (the tasks sorted by hash, dealt round-robin)
    into the same ``out`` (a shared file system across hosts); under ``jax.distributed`` every
    process then waits until all shares are written, and process 0 merges the table and draws the
    figures. ``merge_only`` computes nothing and merges what
    is there (``gradflow sweep --merge``); with points missing it writes no table (``missing`` counts them).
    ``table_format`` is ``"auto"`` (Parquet if pyarrow is installed), ``"csv"`` or ``"parquet"``.

    ``out`` is recorded as this sweep's (its grid, in ``out/gradflow.json``): re-running the same sweep resumes it,
    and another sweep (or command) into the same folder raises ``ValueError`` before computing anything, unless
    ``overwrite``, which deletes the earlier table and figures (the finished points the two share are reused).
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
    record = dict(command="sweep", grid=config_hash([p.hash for p in points]), points=len(points))
    if claim_folder(out, record, overwrite=overwrite, how="pass --overwrite (overwrite=True)"):
        for stale in [out / name for name in TABLES] + [out / "figures" / name for name in FIGURES]:
            stale.unlink(missing_ok=True)
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
    return builtin(name).build(**dict(setting), seed=0).model


def _times(config: SweepConfig, path, task: SweepTask) -> np.ndarray:
    """The recorded times of a task's flows: as [`compare_limits`][gradflow.compare_limits] picks them for the sweep's
    scales (refined around every stage time down to the smallest α's jumps, whose width in τ is the task's family's
    ``time_unit``: ``α^{L−2}`` at depth L), or an even grid. One grid for every α of a task, so that its flows share
    their shapes: one compilation, and one batch on accelerators (refining per α made every point compile its own
    solve: the test sweep took 81 s instead of 18 s)."""
    if path is None:
        return np.linspace(0.0, config.tau_max, config.num_times)
    model = _setting_model(task.model, task.setting)
    unit = family_named(builtin(task.model).family).time_unit(model, float(np.min(config.log_alphas)))
    return default_times(
        path.times,
        num=config.num_times,
        horizon=config.tau_max,
        delta=config.delta,
        log_alphas=config.log_alphas,
        time_unit=unit,
    )


def solve_flow(task: Task, log_alpha: float, ts, *, rtol: float, atol: float, max_steps: int | None):
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
        runs.append((point, path, _times(config, path, point.task)))
    if vmap_batches(config.batching):  # the families that batch the flows of many models; the others run alone
        shards = [family_named(builtin(point.task.model).family).shards_models for point, _, _ in runs]
        _flows_batched(config, [run for run, sharded in zip(runs, shards) if sharded], out, bar)
        alone = [run for run, sharded in zip(runs, shards) if not sharded]
        if alone:
            _flows_separately(config, alone, out, bar)
    else:
        _flows_separately(config, runs, out, bar)


def _flows_separately(config: SweepConfig, runs: list, out: Path, bar) -> None:
    """Each flow alone, as many at once as there are cores (a run's solve is a serial chain of small XLA calls
    that keeps about one core busy); each point's rows written as its flow ends."""
    built = {task: task.build() for task in dict.fromkeys(p.task for p, _, _ in runs)}
    options = dict(rtol=config.rtol, atol=config.atol, max_steps=config.max_steps)
    # as in the batched solve, a near-degenerate start is reported by the greedy path's 4.2 column, not warned
    # about per flow (the filter is set here, before the threads start, and restored after they end)
    with warnings.catch_warnings(), PerCore(len(runs)) as pool:
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
            family = family_named(builtin(chunk[0][0].task.model).family)
            flows = family.solve_sharded(
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
            stopped = False
            for (point, path, _), flow in zip(chunk, flows):
                if flow.result == RESULTS.interrupted:  # Ctrl-C: not a point's result; a rerun solves it
                    stopped = True
                    continue
                write_point(out, point.hash, _compared(config, point, built[point.task], path, flow))
                bar.update()
            if stopped:
                raise KeyboardInterrupt


def _compared(config: SweepConfig, point: SweepPoint, task: Task, path, flow) -> list[dict]:
    """A point's rows from its greedy path (or None) and its flow, compared as [`compare_limits`][gradflow.compare_limits] does."""
    names = task.model.names
    if flow.result != "successful":
        return point_rows(point, path=path, names=names, error=str(flow.message))
    if path is None:
        return point_rows(point, flow=flow)
    comparison = compare_limits(
        task.model,
        log_alpha=[point.log_alpha],
        u0=task.u0,
        v0=task.v0,
        path=path,
        ts=flow.ts,
        flows=flow,
        threshold=config.threshold,
        delta=config.delta,
    )
    return point_rows(point, path=path, names=names, flow=flow, comparison=comparison)

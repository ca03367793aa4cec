"""The depth demo (``gradflow demo --depth``) and the depth family's ``gradflow compare`` pipeline: a built-in depth
task at several depths ``L``, each with its greedy limit, its exact flows at several α and float64 gradient descent
(docs/depth.md, *The demo*).

:func:`run_depth_demo` runs a :class:`DepthDemoConfig` into an output folder::

    out/results/*.npz          per L: the greedy path, one exact flow per α, one GD run per GD α
    out/comparison.csv/.json   the comparisons per L (a ``depth`` column), the stage times and the depth separation
    out/figures/*.png          learning curves per L, stage times against L, depth separation, convergence
    out/report.md              the tables, the closed forms, what each figure shows
    out/log.txt                which steps were computed and which reused

**Depth separation** (Gissin et al. 2020) on the exact flow: the overlap of the stages on plateau ``k`` is the
distance of the flow's loss at its midpoint from ``L(β^k)``, relative to ``L(β^{k−1}) − L(β^{k+1})``; the stages
separate at α when every overlap is at most ``separation`` (1 %) (docs/depth.md, *The demo*).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from .._api import compare_limits, greedy_limit, run_gd, simulate_flow
from .._config import PerCore
from .._demo._pipelines import Demo, Pipeline
from .._demo._steps import DemoSteps, flow_name
from .._kit._checks import check_depth_demo, check_scales
from .._kit._comparison import default_delta, default_times
from .._kit._plots import (
    log_alpha_of,
    new_figure,
    plot_convergence,
    plot_per_depth,
    plot_stage_times_by_depth,
    run_colours,
    save_figure,
    stairs,
)
from .._kit._report import distance_tables, figures_and_runtime, fmt, format_alpha, markdown_table, worst_exponents
from .._kit._task import Task
from .._kit._trajectory import time_unit
from ._family import TASKS
from ._greedy import DepthGreedyPath
from ._model import DEPTHS
from ._plots import LABELS, TAU
from ._report import DISTANCE_LABELS as DISTANCES
from ._report import comparison_report
from ._tasks import DEFAULT_DEPTH, SaxeStaircase

DEMO_ALPHAS = (1e-1, 1e-2, 1e-4, 1e-8, 1e-16)


@dataclasses.dataclass(frozen=True)
class DepthDemoConfig:
    """What the depth demo computes.

    Attributes:
        model: a built-in task of the depth family (``saxe_modes``, ``depth_linear``).
        model_options: keyword arguments of its builder, as ``(name, value)`` pairs, but ``depth``.
        depths: the depths ``L`` (2 … 6), one greedy limit, flows and GD each.
        log_alphas: the scales ``log α`` of the exact flows (default 1e-1 … 1e-16 and ``log α = −1000``): the grid
            on which the depth separation is measured.
        gd_log_alphas, gd_lr: the scales and learning rate of float64 gradient descent, at every depth (GD trains
            ``α u0`` itself: a plateau costs it ``~α^{−(L−2)} / lr`` steps).
        separation: the largest overlap of consecutive stages at which they count as separated (1 %).
        num_times, max_stages, check_assumptions, rtol, atol, delta, threshold: recorded times per flow, the greedy
            stage cap and checks, the flows' tolerances, the comparison's window margin and detection fraction.
    """

    model: str = "saxe_modes"
    model_options: tuple[tuple[str, Any], ...] = ()
    depths: tuple[int, ...] = (2, 3, 4)
    log_alphas: tuple[float, ...] = tuple(math.log(a) for a in DEMO_ALPHAS) + (-1000.0,)
    gd_log_alphas: tuple[float, ...] = (math.log(1e-2),)
    gd_lr: float = 1e-2
    separation: float = 0.01
    num_times: int = 200
    max_stages: int | None = None
    check_assumptions: bool = True
    rtol: float = 0.0
    atol: float = 1e-8
    delta: float | None = None
    threshold: float = 0.5

    def __post_init__(self):
        check_depth_demo(self.model, self.model_options, self.depths, tasks=TASKS, allowed=DEPTHS, family="depth")
        check_scales(None, self.log_alphas, names=("alpha", "log_alphas"))
        if self.gd_log_alphas:
            check_scales(None, self.gd_log_alphas, names=("alpha", "gd_log_alphas"))
            if min(self.gd_log_alphas) < math.log(np.finfo(np.float64).tiny):
                raise ValueError("gd_log_alphas must be above float64's range (log α > −708): GD trains α u0 itself.")
        if not (math.isfinite(self.gd_lr) and self.gd_lr > 0):
            raise ValueError(f"gd_lr must be a positive number; got {self.gd_lr!r}.")
        if 2 in self.depths and self.model != "saxe_modes":
            raise ValueError(
                "at L = 2 the depth demo draws Saxe's closed form (saxe_modes); for another task at L = 2 use the "
                "diagonal family (diagonal_linear), whose Algorithm 1 is the limit there."
            )
        if not 0 < self.separation < 1:
            raise ValueError(f"separation must lie in (0, 1); got {self.separation!r}.")

    def task(self, depth: int) -> Task:
        """Build the task at depth ``depth``."""
        return TASKS[self.model].build(**dict(self.model_options), depth=depth)


QUICK_DEPTH = DepthDemoConfig(
    depths=(2, 3),
    log_alphas=tuple(math.log(a) for a in (1e-1, 1e-2, 1e-3, 1e-6)),
    num_times=120,
    check_assumptions=False,
)
"""A reduced configuration of the same code path (``gradflow demo --depth --quick``, the tests): L = 2 and 3, four α
down to 1e-6 (``α^{L−2}`` stays above the flow's slow-manifold switch, so that each depth compiles one solve), one GD
run per depth, without the greedy path's checks."""


@dataclasses.dataclass(frozen=True)
class DepthRun:
    """One depth of the demo: its task, greedy path, recorded times, flows, GD runs and their comparison."""

    depth: int
    task: Task
    path: DepthGreedyPath | SaxeStaircase
    ts: np.ndarray
    flows: list
    gd: list
    comparison: Any
    overlap: np.ndarray  # (A, K) the overlap of consecutive stages on each plateau, per α


@dataclasses.dataclass(frozen=True)
class DepthDemoResult:
    """What :func:`run_depth_demo` produced: one :class:`DepthRun` per depth, the written files and the step log;
    ``comparison`` is the deepest one's (what ``gradflow compare`` prints)."""

    config: DepthDemoConfig
    runs: list[DepthRun]
    files: list[Path]
    log: list[tuple[str, str, Path]]
    seconds: float

    @property
    def comparison(self):
        return self.runs[-1].comparison


def plateau_overlap(path, ts, loss) -> np.ndarray:
    """The overlap of consecutive stages on each plateau ``k = 0 … K−1`` of ``path``: ``|L(τ_k) − L(β^k)| /
    (L(β^{k−1}) − L(β^{k+1}))`` at the plateau's midpoint ``τ_k = (T_k + T_{k+1}) / 2`` (``k − 1`` clipped to 0),
    ``loss`` recorded at ``ts`` (which hold the midpoints)."""
    times, levels = np.asarray(path.times), np.asarray(path.loss)
    K = times.size - 1
    out = np.full(K, np.nan)
    for k in range(K):
        mid = 0.5 * (times[k] + times[k + 1])
        drop = levels[max(k - 1, 0)] - levels[k + 1]
        if drop > 0:
            out[k] = abs(float(np.interp(mid, ts, loss)) - levels[k]) / drop
    return out


def threshold_alpha(log_alphas, overlap, separation: float) -> float:
    """The largest ``log α`` of the grid from which on (every smaller α too) every plateau's overlap is at most
    ``separation``; NaN if none."""
    order = np.argsort(log_alphas)
    ok = np.all(np.nan_to_num(overlap, nan=np.inf) <= separation, axis=-1)[order]
    if not ok[0]:
        return math.nan
    last = np.flatnonzero(~ok)
    return float(np.asarray(log_alphas)[order][last[0] - 1 if last.size else -1])


def run_depth_demo(
    config: DepthDemoConfig = DepthDemoConfig(),
    *,
    out: str | Path = "demo_output/depth",
    force: bool = False,
    progress: bool = True,
) -> DepthDemoResult:
    """Run ``config`` into the folder ``out`` (see the module docstring), reusing finished parts."""
    out = Path(out)
    per_depth = 1 + len(config.log_alphas) + len(config.gd_log_alphas)
    step = DemoSteps(out, per_depth * len(config.depths), "gradflow demo --depth", force=force, progress=progress)
    tol = dict(rtol=config.rtol, atol=config.atol)
    runs = []
    for depth in config.depths:
        task = config.task(depth)
        model, u0 = task.model, task.u0
        base = dict(model=config.model, options=config.model_options, depth=depth)
        options = dict(max_stages=config.max_stages, check_assumptions=config.check_assumptions)
        if depth == 2:  # Saxe's closed form (greedy_limit leaves L = 2 to the diagonal family)
            path = SaxeStaircase.of(task.teacher_beta)
        else:
            path = step(
                f"greedy_L={depth}",
                dict(base, **options),
                lambda: greedy_limit(model, u0=u0, throw=False, **options),
            )
        delta = default_delta(path.times) if config.delta is None else config.delta
        unit = float(time_unit(depth, min(config.log_alphas)))  # the jumps' width in τ at the smallest α
        ts = default_times(path.times, num=config.num_times, delta=delta, log_alphas=config.log_alphas, time_unit=unit)
        ts = np.union1d(ts, 0.5 * (path.times[:-1] + path.times[1:]))  # the plateaus' midpoints

        def flow(la, model=model, u0=u0, ts=ts, base=base, depth=depth):
            return step(
                f"L={depth}_{flow_name(la)}",
                dict(base, ts=ts, log_alpha=la, **tol),
                lambda: simulate_flow(model, u0=u0, ts=ts, log_alpha=la, throw=False, **tol),
            )

        def gd_run(la, model=model, u0=u0, ts=ts, base=base, depth=depth):
            key = dict(base, log_alpha=la, lr=config.gd_lr, horizon=float(ts[-1]))
            options = dict(lr=config.gd_lr)
            return step(
                f"L={depth}_gd_alpha={format_alpha(la)}",
                key,
                lambda: run_gd(model, log_alphas=[la], u0=u0, v0=None, horizon=float(ts[-1]), options=options)[0],
            )

        # one run per core, GD first (its steps grow like α^{−(L−2)}), then the flows, the smallest α first
        jobs = [(flow, la) for la in config.log_alphas] + [(gd_run, la) for la in config.gd_log_alphas]
        order = sorted(range(len(jobs)), key=lambda i: (jobs[i][0] is flow, jobs[i][1]))
        with PerCore(len(jobs)) as pool:
            futures = {i: pool.submit(*jobs[i]) for i in order}
            done = [futures[i].result() for i in range(len(jobs))]
        flows, gd = done[: len(config.log_alphas)], done[len(config.log_alphas) :]
        comparison = _compare(config, task, path, flows, config.log_alphas, delta=delta, ts=ts)
        if gd:
            gd_cmp = _compare(config, task, path, gd, config.gd_log_alphas, delta=delta, ts=ts)
            comparison = dataclasses.replace(comparison, gd=dataclasses.replace(gd_cmp, method="gd"))
        overlap = np.stack([plateau_overlap(path, f.ts, f.loss) for f in flows])
        runs.append(DepthRun(depth, task, path, ts, flows, gd, comparison, overlap))
    files, seconds = step.finish(lambda: _write_outputs(config, step, runs))
    return DepthDemoResult(config, runs, files, list(step.store.log), seconds)


def _compare(config, task, path, runs, log_alphas, *, delta: float, ts):
    """``compare_limits`` of ``runs`` with ``path``; a run that failed (its ``result`` and ``message`` say why) leaves
    its distances NaN and is named in the report, rather than stopping the demo."""
    return compare_limits(
        task.model,
        log_alpha=np.array(log_alphas),
        u0=task.u0,
        path=path,
        delta=delta,
        ts=ts,
        threshold=config.threshold,
        flows=runs,
        throw=False,
    )


def closed_form_times(config: DepthDemoConfig, depth: int, path) -> np.ndarray:
    """Saxe's stage times in the limit for ``saxe_modes`` (balanced start ``u0 = 1``): ``1/((L−2) s_k)`` for
    ``L ≥ 3``, ``1/s_k`` at ``L = 2`` (in ``τ = t/log(1/α)``), in the order the path activates the modes; NaN for
    other tasks."""
    K = np.asarray(path.times).size - 1
    if config.model != "saxe_modes":
        return np.full(K, np.nan)
    s = np.asarray(config.task(depth).teacher_beta)[np.asarray(path.activated, dtype=int)]
    return 1.0 / ((depth - 2) * s) if depth > 2 else 1.0 / s


def stage_rows(config: DepthDemoConfig, runs: list[DepthRun]) -> tuple[list[str], list[list[Any]]]:
    """Per depth and stage: the greedy ``T_k``, the closed form and the stage time detected on each flow."""
    header = ["L", "k", "greedy T_k", "closed form"] + [f"α = {format_alpha(la)}" for la in config.log_alphas]
    rows = []
    for run in runs:
        closed = closed_form_times(config, run.depth, run.path)
        for k in range(1, np.asarray(run.path.times).size):
            detected = list(run.comparison.detected_times[:, k - 1])
            rows.append([run.depth, k, float(run.path.times[k]), float(closed[k - 1])] + detected)
    return header, rows


def separation_rows(config: DepthDemoConfig, runs: list[DepthRun]) -> tuple[list[str], list[list[Any]]]:
    """Per α (rows) and depth (columns): the largest overlap of consecutive stages over the plateaus; the last row,
    each depth's threshold α."""
    header = ["α"] + [f"L = {run.depth}" for run in runs]
    rows = [
        [format_alpha(la)] + [float(np.nanmax(run.overlap[a])) if run.overlap.shape[1] else None for run in runs]
        for a, la in enumerate(config.log_alphas)
    ]
    thresholds = [threshold_alpha(config.log_alphas, run.overlap, config.separation) for run in runs]
    rows.append([f"separated (≤ {config.separation:g}) from α ="] + [_alpha_or_none(t) for t in thresholds])
    return header, rows


def _alpha_or_none(log_alpha: float) -> str:
    return "none of the grid" if math.isnan(log_alpha) else format_alpha(log_alpha)


def _records(runs: list[DepthRun]) -> list[dict]:
    records = []
    for run in runs:
        for comparison in (run.comparison, run.comparison.gd):
            if comparison is not None:
                records += [dict(depth=run.depth, **r) for r in comparison.to_records()]
    return records


def _write_outputs(config: DepthDemoConfig, step: DemoSteps, runs: list[DepthRun]) -> list[Path]:
    figs = step.out / "figures"
    figures = [figs / "curves.png", figs / "stage_times.png", figs / "separation.png"]
    figures += [figs / f"convergence_L={run.depth}.png" for run in runs]

    def json():
        return dict(
            stage_times=dict(zip(("header", "rows"), stage_rows(config, runs))),
            separation=dict(zip(("header", "rows"), separation_rows(config, runs))),
            per_depth={run.depth: comparison_report(run.comparison)[1] for run in runs if run.depth > 2},
        )

    def draw():
        save_figure(plot_curves(runs), figures[0])
        save_figure(plot_stage_times(config, runs), figures[1])
        save_figure(plot_separation(config, runs), figures[2])
        for run, file in zip(runs, figures[3:]):
            title = f"L = {run.depth}: convergence to the greedy limit"
            save_figure(plot_convergence(run.comparison, labels=LABELS, title=title), file)

    def report(relative, key):
        return depth_report(config, runs, step.timings, relative, key)

    return step.write(config, lambda: _records(runs), figures, json=json, draw=draw, report=report)


def plot_curves(runs: list[DepthRun]):
    """The loss against rescaled time at every depth (one panel each), one colour per α, GD dotted, the greedy
    staircase dashed."""

    def draw(ax, run):
        for flow, colour in zip(run.flows, run_colours(run.flows)):
            ax.plot(flow.ts, flow.loss, color=colour, lw=1.3, label=f"α = {format_alpha(log_alpha_of(flow))}")
        for gd in run.gd:
            ts, loss = np.asarray(gd.ts), np.asarray(gd.loss)
            inside = ts <= run.ts[-1]
            ax.plot(
                ts[inside],
                loss[inside],
                color="tab:red",
                ls=":",
                lw=1.3,
                label=f"GD, α = {format_alpha(log_alpha_of(gd))}",
            )
        x, k = stairs(run.path, float(run.ts[-1]))
        ax.step(x, np.asarray(run.path.loss)[k], where="post", color="black", ls="--", lw=1.2, label="greedy limit")

    title = "Learning curves in each depth's rescaled time, the greedy limit dashed"
    return plot_per_depth(runs, draw, ylabel="training loss", title=title)


def plot_stage_times(config: DepthDemoConfig, runs: list[DepthRun]):
    """Stage times against L: the greedy limit's (filled), the closed form's (crosses) and those detected on every
    flow (small dots, one colour per α)."""
    rows = [
        (run.depth, run.path.times, closed_form_times(config, run.depth, run.path), run.comparison.detected_times)
        for run in runs
    ]
    return plot_stage_times_by_depth(
        rows,
        config.log_alphas,
        greedy_label=lambda depth: "greedy T_k",
        closed_label="closed form",
        title="Stage times against depth: Saxe's 1/((L−2) s_k) and 1/s_k at L = 2",
    )


def plot_separation(config: DepthDemoConfig, runs: list[DepthRun]):
    """The largest overlap of consecutive stages against log(1/α), one line per depth, the threshold dotted."""
    fig = new_figure(figsize=(6, 4.2))
    ax = fig.add_subplot()
    x = -np.asarray(config.log_alphas)
    for run in runs:
        worst = np.nanmax(run.overlap, axis=1) if run.overlap.shape[1] else np.full(x.size, np.nan)
        ax.loglog(x, np.maximum(worst, 1e-16), "o-", label=f"L = {run.depth}")
    ax.axhline(config.separation, color="black", ls=":", lw=1, label=f"separated below {config.separation:g}")
    ax.set_xlabel("log(1/α)")
    ax.set_ylabel("largest overlap of consecutive stages")
    ax.set_title("Depth separation on the exact flow (Gissin et al. 2020)")
    ax.legend(fontsize=8)
    return fig


def depth_report(config: DepthDemoConfig, runs: list[DepthRun], timings, figures, key: str) -> str:
    """The demo's report: stage times against L beside the closed forms, the depth separation, GD against the
    flow, and each depth's comparison."""
    text = f"# Depth demo: {config.model} at L = {', '.join(str(r.depth) for r in runs)}\n\n"
    text += f"Configuration hash `{key}`; {TAU}.\n\n"
    text += "## Stage times against L\n\nThe greedy limit's T_k, the closed form (Saxe et al.: 1/((L−2) s_k) for "
    text += "L ≥ 3, 1/s_k at L = 2, for `saxe_modes`) and the stage time detected on each exact flow:\n\n"
    text += markdown_table(*stage_rows(config, runs))
    text += "\n## Depth separation (Gissin et al. 2020), on the exact flow\n\n"
    text += (
        "On each plateau of the greedy limit the flow's loss at the plateau's midpoint, less the plateau's, relative "
        "to the loss the stages next to it drop: the overlap of consecutive stages (0: separated). Largest over the "
        f"plateaus, per α; stages count as separated at {config.separation:g}.\n\n"
    )
    text += markdown_table(*separation_rows(config, runs))
    failed = [
        f"- L = {run.depth}: {flow.message}" for run in runs for flow in run.flows if str(flow.result) != "successful"
    ]
    if failed:
        text += "\nRuns that failed (their distances and overlaps are NaN):\n\n" + "\n".join(failed) + "\n"
    text += "\n## Gradient descent against the exact flow\n\n"
    rows = []
    for run in runs:
        gd = run.comparison.gd
        for a, la in enumerate(config.gd_log_alphas):
            flow_a = int(np.argmin(np.abs(np.asarray(config.log_alphas) - la)))
            same = np.isclose(config.log_alphas[flow_a], la)
            rows.append(
                [
                    run.depth,
                    format_alpha(la),
                    config.gd_lr,
                    int(run.gd[a].steps[-1]),
                    fmt(float(np.nanmax(gd.weights_distance[a]))),
                ]
                + [fmt(float(np.nanmax(run.comparison.weights_distance[flow_a]))) if same else "–"]
            )
    header = ["L", "α", "lr", "GD steps", "GD: worst sup |β − β^k|", "flow: worst sup |β − β^k|"]
    text += markdown_table(header, rows) if rows else "No GD runs.\n"
    for run in runs:
        if run.depth == 2:
            body = "The greedy limit is Saxe's closed form (stage k at τ = 1/s_k); distances as for every depth:\n"
            body += distance_tables(run.comparison, DISTANCES)
        else:
            body, _ = comparison_report(run.comparison)
        text += f"\n# L = {run.depth}\n\n{worst_exponents(run.comparison)}\n\n{body}"
    return text + "\n" + figures_and_runtime(figures, timings, config)


def _configure(model, model_options, log_alphas, tau_max, num_times, max_stages, perturb, rtol, atol):
    if perturb:
        raise ValueError("--perturb applies to the models with diagonal weights")
    if tau_max is not None:
        raise ValueError("--tau-max: the depth pipeline records each depth up to 1.25 T_K of its greedy limit")
    options = dict(model_options)
    depth = options.pop("depth", DEFAULT_DEPTH)
    return DepthDemoConfig(
        model=model,
        model_options=tuple(options.items()),
        depths=(depth,),
        log_alphas=log_alphas,
        num_times=num_times,
        max_stages=max_stages,
        gd_log_alphas=(),
        rtol=rtol,
        atol=atol,
    )


DEMO = Demo(
    flag="--depth",
    help="depth-L diagonal networks (Saxe's modes at L = 2, 3, 4): learning curves with the greedy limits, stage "
    "times against L beside the closed forms, the depth separation on the exact flow, into OUT/depth",
    folder="depth",
    configs=MappingProxyType({"default": DepthDemoConfig(), "quick": QUICK_DEPTH}),
    run=run_depth_demo,
)
PIPELINE = Pipeline(_configure, run_depth_demo, DEMO)
"""What ``gradflow compare`` runs for a depth task (``DEPTH.pipeline``): the demo at the task's one depth."""

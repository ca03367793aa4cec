"""The deep linear demo (``gradflow demo --deep-linear``) and the deep linear family's ``gradflow compare`` pipeline: a
built-in deep linear task at several depths ``L``, each with its greedy limit and its exact flows at several α inside
the flow's supported range (docs/deep-linear.md, *The demo*).

:func:`run_deep_linear_demo` runs a :class:`DeepLinearDemoConfig` into an output folder::

    out/results/*.npz          per L: the greedy path (L ≥ 3), one exact flow per α
    out/comparison.csv/.json   the comparisons per L ≥ 3 (a ``depth`` column) and the stage times
    out/figures/*.png          W's singular values against τ per L, stage times against L, convergence per L ≥ 3
    out/report.md              the tables, Saxe's closed form, what each figure shows
    out/log.txt                which steps were computed and which reused

At ``L = 2`` the greedy low-rank limit is the factorised family's (``W = W_2 W_1`` is a
[`FactorizedModel`][gradflow.FactorizedModel]); for the aligned task it is Saxe's staircase in closed form
(:class:`SaxeStaircase`), which the demo draws and whose stage times it compares with the flows'.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from .._api import compare_limits, greedy_limit, simulate_flow
from .._config import PerCore
from .._demo._pipelines import Demo, Pipeline
from .._demo._steps import DemoSteps, flow_name
from .._kit._checks import check_depth_demo, check_scales
from .._kit._comparison import default_delta, default_times, detect
from .._kit._plots import (
    log_alpha_of,
    plot_convergence,
    plot_per_depth,
    plot_stage_times_by_depth,
    run_colours,
    save_figure,
)
from .._kit._report import figures_and_runtime, format_alpha, markdown_table, worst_exponents
from .._kit._task import Task
from .._kit._trajectory import time_unit
from ._checks import check_resolved
from ._family import TASKS
from ._model import DEPTHS
from ._plots import LABELS, TAU
from ._report import comparison_report
from ._tasks import DEFAULT_DEPTH, saxe_times

ALIGNED_TASK = "deep_matrix_factorization"
"""The task whose start is aligned with its teacher (``aligned=True``, its default): Saxe's closed form holds."""


@dataclasses.dataclass(frozen=True)
class DeepLinearDemoConfig:
    """What the deep linear demo computes.

    Attributes:
        model: a built-in task of the deep linear family (``deep_matrix_factorization``, ``deep_linear_regression``).
        model_options: keyword arguments of its builder, as ``(name, value)`` pairs, but ``depth``.
        depths: the depths ``L`` (2 … 6), one greedy limit (``L ≥ 3``) and flows each; ``L = 2`` only for the aligned
            ``deep_matrix_factorization``, whose limit there is Saxe's closed form; at least one ``L ≥ 3``.
        log_alphas: the scales ``log α`` of the exact flows, inside the flow's supported range at every depth
            (``gradflow._deep_linear._checks.lowest_log_alpha``; default ``α = 1e-1, 1e-2, 1e-3``).
        num_times, max_stages, rtol, atol, delta, threshold: recorded times per flow (before the refinement around
            the stage times), the greedy stage cap, the flows' tolerances, the comparison's window margin and
            detection fraction.
    """

    model: str = ALIGNED_TASK
    model_options: tuple[tuple[str, Any], ...] = ()
    depths: tuple[int, ...] = (2, 3, 4)
    log_alphas: tuple[float, ...] = tuple(math.log(a) for a in (1e-1, 1e-2, 1e-3))
    num_times: int = 200
    max_stages: int | None = None
    rtol: float = 0.0
    atol: float = 1e-8
    delta: float | None = None
    threshold: float = 0.5

    def __post_init__(self):
        check_depth_demo(self.model, self.model_options, self.depths, tasks=TASKS, allowed=DEPTHS, family="deep linear")
        if max(self.depths) < 3:
            raise ValueError(
                "depths must hold one L ≥ 3: the greedy limit of a deep linear network, which the demo compares the "
                "flows with, needs L ≥ 3 (at L = 2 the network is a FactorizedModel: matrix_factorization)."
            )
        if 2 in self.depths and not self.aligned:
            raise ValueError(
                f"at L = 2 the deep linear demo draws Saxe's closed form, which needs the aligned {ALIGNED_TASK}; for "
                "another task at L = 2 use the factorized family (matrix_factorization, matrix_sensing), whose greedy "
                "low-rank limit is the limit there."
            )
        check_scales(None, self.log_alphas, names=("alpha", "log_alphas"))
        for depth in self.depths:  # the flow's range (τ_end = 1 here; the flow checks its own horizon again)
            check_resolved(depth, self.log_alphas, None, rtol=self.rtol, atol=self.atol, names=("alpha", "log_alphas"))
        if isinstance(self.num_times, bool) or not isinstance(self.num_times, int) or self.num_times < 2:
            raise ValueError(f"num_times must be an integer >= 2; got {self.num_times!r}.")

    @property
    def aligned(self) -> bool:
        """Whether the task's start is aligned with its teacher (Saxe's closed form holds)."""
        return self.model == ALIGNED_TASK and bool(dict(self.model_options).get("aligned", True))

    def task(self, depth: int) -> Task:
        """Build the task at depth ``depth``."""
        return TASKS[self.model].build(**dict(self.model_options), depth=depth)


QUICK_DEEP_LINEAR = DeepLinearDemoConfig(
    model_options=(("m", 3), ("n", 3)),
    depths=(2, 3),
    log_alphas=(math.log(1e-1), math.log(1e-2)),
    num_times=60,
)
"""A reduced configuration of the same code path (``gradflow demo --deep-linear --quick``, the tests): a 3×3 teacher,
L = 2 and 3, α = 1e-1 and 1e-2."""


@dataclasses.dataclass(frozen=True)
class SaxeStaircase:
    """The greedy low-rank limit of the aligned ``deep_matrix_factorization`` at ``L = 2`` in closed form: stage ``k``
    holds ``W^k``, the teacher's ``k`` largest singular modes, from ``τ = t/log(1/α) = 1/s_k`` (Saxe et al. 2014; the
    factorised family's greedy limit of ``W = W_2 W_1``)."""

    times: np.ndarray
    W: np.ndarray
    loss: np.ndarray
    rank: int

    @classmethod
    def of(cls, M, rank: int) -> SaxeStaircase:
        """The staircase of the teacher ``M`` for a network whose ``W`` has rank at most ``rank``."""
        U, s, Vt = np.linalg.svd(np.asarray(M, dtype=np.float64))
        s = s[: min(rank, int(np.sum(s > s[0] * 1e-12)))]
        W = np.stack([(U[:, :k] * s[:k]) @ Vt[:k] for k in range(s.size + 1)])
        loss = np.array([0.5 * float(np.sum(s[k:] ** 2)) for k in range(s.size + 1)])
        return cls(np.concatenate([[0.0], saxe_times(s, 2)]), W, loss, rank)

    def stage_at(self, tau) -> np.ndarray:
        return np.searchsorted(self.times, np.asarray(tau), side="right") - 1

    def singular_values_at(self, tau) -> np.ndarray:
        """The ``rank`` largest singular values of ``W^k`` on the stage holding τ."""
        sv = np.linalg.svd(self.W, compute_uv=False)
        sv = np.pad(sv, ((0, 0), (0, max(self.rank - sv.shape[1], 0))))[:, : self.rank]
        return sv[self.stage_at(tau)]


@dataclasses.dataclass(frozen=True)
class DeepLinearRun:
    """One depth of the demo: its task, greedy path (Saxe's staircase at ``L = 2``), recorded times, flows, their
    comparison with the path (None at ``L = 2``) and the stage times detected on each flow, ``(A, K)``."""

    depth: int
    task: Task
    path: Any
    ts: np.ndarray
    flows: list
    comparison: Any
    detected: np.ndarray


@dataclasses.dataclass(frozen=True)
class DeepLinearDemoResult:
    """What :func:`run_deep_linear_demo` produced: one :class:`DeepLinearRun` per depth, the written files and the step
    log; ``comparison`` is the deepest one's (what ``gradflow compare`` prints)."""

    config: DeepLinearDemoConfig
    runs: list[DeepLinearRun]
    files: list[Path]
    log: list[tuple[str, str, Path]]
    seconds: float

    @property
    def comparison(self):
        return self.runs[-1].comparison


def run_deep_linear_demo(
    config: DeepLinearDemoConfig = DeepLinearDemoConfig(),
    *,
    out: str | Path = "demo_output/deep_linear",
    force: bool = False,
    progress: bool = True,
    command: str = "gradflow demo --deep-linear",
) -> DeepLinearDemoResult:
    """Run ``config`` into the folder ``out`` (see the module docstring), reusing finished parts; ``command`` names
    the run on the progress bar and in the report's title."""
    out = Path(out)
    depths = sorted(config.depths)
    total = sum((d > 2) + len(config.log_alphas) for d in depths)
    step = DemoSteps(out, total, command, force=force, progress=progress)
    tol = dict(rtol=config.rtol, atol=config.atol)
    runs = []
    for depth in depths:
        task = config.task(depth)
        model, u0 = task.model, task.u0
        base = dict(model=config.model, options=config.model_options, depth=depth)
        if depth == 2:
            path = SaxeStaircase.of(task.teacher_beta, model.rank)
        else:
            path = step(
                f"greedy_L={depth}",
                dict(base, max_stages=config.max_stages),
                lambda: greedy_limit(model, u0=u0, max_stages=config.max_stages, throw=False),
            )
        delta = default_delta(path.times) if config.delta is None else config.delta
        unit = float(time_unit(depth, min(config.log_alphas)))  # the jumps' width in τ at the smallest α
        ts = default_times(path.times, num=config.num_times, delta=delta, log_alphas=config.log_alphas, time_unit=unit)

        def flow(la, model=model, u0=u0, ts=ts, base=base, depth=depth):
            return step(
                f"L={depth}_{flow_name(la)}",
                dict(base, ts=ts, log_alpha=la, **tol),
                lambda: simulate_flow(model, u0=u0, ts=ts, log_alpha=la, throw=False, **tol),
            )

        with PerCore(len(config.log_alphas)) as pool:  # one flow per core, the smallest α (the slowest) first
            futures = {la: pool.submit(flow, la) for la in sorted(config.log_alphas)}
            flows = [futures[la].result() for la in config.log_alphas]
        levels = path.loss[:-1] - config.threshold * (path.loss[:-1] - path.loss[1:])
        if depth == 2:
            comparison = None
            detected = np.stack([detect(f.ts, np.asarray(f.loss), levels) for f in flows])
        else:
            comparison = compare_limits(
                model,
                log_alpha=np.array(config.log_alphas),
                u0=u0,
                path=path,
                delta=delta,
                ts=ts,
                threshold=config.threshold,
                flows=flows,
                throw=False,
            )
            detected = np.asarray(comparison.detected_times)
        runs.append(DeepLinearRun(depth, task, path, ts, flows, comparison, detected))
    files, seconds = step.finish(lambda: _write_outputs(config, step, runs))
    return DeepLinearDemoResult(config, runs, files, list(step.store.log), seconds)


def closed_form_times(config: DeepLinearDemoConfig, run: DeepLinearRun) -> np.ndarray:
    """Saxe's stage times in the limit for the aligned task (every mode from ``a⁰ = 1``): ``1/((L−2) s_k)`` for
    ``L ≥ 3``, ``1/s_k`` at ``L = 2``, the largest ``s`` first; NaN for the other tasks and past the teacher's rank."""
    K = np.asarray(run.path.times).size - 1
    out = np.full(K, np.nan)
    if config.aligned:
        closed = saxe_times(run.task.config["singular_values"], run.depth)[:K]
        out[: closed.size] = closed
    return out


def stage_rows(config: DeepLinearDemoConfig, runs: list[DeepLinearRun]) -> tuple[list[str], list[list[Any]]]:
    """Per depth and stage: the greedy ``T_k``, Saxe's closed form and the stage time detected on each flow."""
    header = ["L", "k", "greedy T_k", "Saxe's closed form"]
    header += [f"α = {format_alpha(la)}" for la in config.log_alphas]
    rows = []
    for run in runs:
        closed = closed_form_times(config, run)
        for k in range(1, np.asarray(run.path.times).size):
            row = [run.depth, k, float(run.path.times[k]), float(closed[k - 1])]
            rows.append(row + list(run.detected[:, k - 1]))
    return header, rows


def _records(runs: list[DeepLinearRun]) -> list[dict]:
    return [
        dict(depth=run.depth, **r) for run in runs if run.comparison is not None for r in run.comparison.to_records()
    ]


def _write_outputs(config: DeepLinearDemoConfig, step: DemoSteps, runs: list[DeepLinearRun]) -> list[Path]:
    figs = step.out / "figures"
    compared = [run for run in runs if run.comparison is not None]
    figures = [figs / "singular_values.png", figs / "stage_times.png"]
    figures += [figs / f"convergence_L={run.depth}.png" for run in compared]

    def json():
        return dict(
            stage_times=dict(zip(("header", "rows"), stage_rows(config, runs))),
            per_depth={run.depth: comparison_report(run.comparison)[1] for run in compared},
        )

    def draw():
        save_figure(plot_curves(runs), figures[0])
        save_figure(plot_stage_times(config, runs), figures[1])
        for run, file in zip(compared, figures[2:]):
            title = f"L = {run.depth}: convergence to the greedy limit"
            save_figure(plot_convergence(run.comparison, labels=LABELS, title=title), file)

    def report(relative, key):
        return deep_linear_report(config, runs, step, relative, key)

    return step.write(config, lambda: _records(runs), figures, json=json, draw=draw, report=report)


def plot_curves(runs: list[DeepLinearRun]):
    """``W``'s singular values against rescaled time at every depth (one panel each), one colour per α, the greedy
    limit's dashed black."""

    def draw(ax, run):
        for flow, colour in zip(run.flows, run_colours(run.flows)):
            ax.plot(flow.ts, np.asarray(flow.singular_values), color=colour, lw=1.3)
            ax.plot([], [], color=colour, lw=1.3, label=f"α = {format_alpha(log_alpha_of(flow))}")
        x = np.linspace(0.0, float(run.ts[-1]), 600)
        ax.plot(x, run.path.singular_values_at(x), color="black", ls="--", lw=1.0)
        ax.plot([], [], color="black", ls="--", lw=1.0, label="greedy limit" if run.depth > 2 else "Saxe's limit")

    title = "Learning curves in each depth's rescaled time, the limit dashed"
    return plot_per_depth(runs, draw, ylabel="singular values of W = W_L ⋯ W_1", title=title)


def plot_stage_times(config: DeepLinearDemoConfig, runs: list[DeepLinearRun]):
    """Stage times against L: the greedy limit's (dots), Saxe's closed form (crosses) and those detected on every
    flow (small dots, one colour per α)."""
    rows = [(run.depth, run.path.times, closed_form_times(config, run), run.detected) for run in runs]
    return plot_stage_times_by_depth(
        rows,
        config.log_alphas,
        greedy_label=lambda depth: "greedy T_k" if depth > 2 else "Saxe's limit at L = 2",
        closed_label="Saxe's closed form",
        title="Stage times against depth: Saxe's 1/((L−2) s_k), 1/s_k at L = 2",
    )


def deep_linear_report(config: DeepLinearDemoConfig, runs: list[DeepLinearRun], step, figures, key: str) -> str:
    """The demo's report: stage times against L beside Saxe's closed form, and each depth's comparison."""
    text = f"# {step.command}: {config.model} at L = {', '.join(str(r.depth) for r in runs)}\n\n"
    text += f"Task options: {', '.join(f'{k}={v}' for k, v in runs[0].task.config.items() if k != 'depth')}. "
    text += f"Configuration hash `{key}`; {TAU}.\n\n"
    text += "## Stage times against L\n\nThe greedy limit's T_k, Saxe's closed form (1/((L−2) s_k) for L ≥ 3, 1/s_k "
    text += "at L = 2, for the aligned start) and the stage time detected on each exact flow (the first τ where the "
    text += f"loss has covered {config.threshold:g} of the drop L(W^(k−1)) → L(W^k)):\n\n"
    text += markdown_table(*stage_rows(config, runs))
    if config.aligned:
        text += (
            "\nFrom this aligned start the modes decouple, and the greedy T_k equal Saxe's closed form beside them.\n"
        )
    else:
        text += (
            "\nThe start is not aligned with the teacher: the greedy T_k come from the α-free flow of the sleeping "
            "layers through every stage (docs/deep-linear.md, *The greedy limit*), which the flows test here.\n"
        )
    failed = [
        f"- L = {run.depth}: {flow.message}" for run in runs for flow in run.flows if str(flow.result) != "successful"
    ]
    if failed:
        text += "\nRuns that failed (their distances are NaN):\n\n" + "\n".join(failed) + "\n"
    for run in runs:
        if run.comparison is None:
            text += (
                f"\n# L = {run.depth}\n\nThe limit is Saxe's staircase (stage k at τ = t/log(1/α) = 1/s_k), the "
                "factorised family's greedy low-rank limit of W = W_2 W_1; the flows are compared with it by their "
                "stage times above.\n"
            )
        else:
            body, _ = comparison_report(run.comparison)
            text += f"\n# L = {run.depth}\n\n{worst_exponents(run.comparison)}\n\n{body}"
    return text + "\n" + figures_and_runtime(figures, step.timings, config)


def _configure(model, model_options, log_alphas, tau_max, num_times, max_stages, perturb, rtol, atol):
    if perturb:
        raise ValueError("--perturb applies to the models with diagonal weights")
    if tau_max is not None:
        raise ValueError("--tau-max: the deep linear pipeline records each depth up to 1.25 T_K of its greedy limit")
    options = dict(model_options)
    depth = options.pop("depth", DEFAULT_DEPTH)
    if depth == 2:
        raise ValueError(
            "gradflow compare of a deep linear task needs --depth 3 or more (its greedy limit); at L = 2 the network "
            "is W = U Vᵀ: --model matrix_factorization"
        )
    return DeepLinearDemoConfig(
        model=model,
        model_options=tuple(options.items()),
        depths=(depth,),
        log_alphas=log_alphas,
        num_times=num_times,
        max_stages=max_stages,
        rtol=rtol,
        atol=atol,
    )


DEMO = Demo(
    flag="--deep-linear",
    help="deep linear networks W = W_L ⋯ W_1 (aligned deep matrix factorisation at L = 2, 3, 4): W's singular values "
    "against τ with the greedy limits, stage times against L beside Saxe's closed form, into OUT/deep_linear",
    folder="deep_linear",
    configs=MappingProxyType({"default": DeepLinearDemoConfig(), "quick": QUICK_DEEP_LINEAR}),
    run=run_deep_linear_demo,
)
PIPELINE = Pipeline(_configure, functools.partial(run_deep_linear_demo, command="gradflow compare"), DEMO)
"""What ``gradflow compare`` runs for a deep linear task (``DEEP_LINEAR.pipeline``): the demo at the task's one
depth."""

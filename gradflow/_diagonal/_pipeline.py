"""The diagonal family's pipeline (``gradflow demo``, and ``gradflow compare`` of its models): flows at several α, the
greedy limit, their comparison, figures and a report.

:func:`run_demo` runs a :class:`DemoConfig` into an output folder::

    out/results/*.npz        greedy path, one flow per α, perturbation runs (written as produced)
    out/comparison.csv/.json the comparison table (and, in the JSON, the fitted rates and stages)
    out/figures/*.png        Figures 6–10 in the paper's style, log-scale weights, convergence
    out/report.md            stage times, assumption checks, convergence numbers
    out/log.txt              which steps were computed and which reused

Every result is keyed by a hash of the configuration that produced it: a re-run reuses what is
already there (``force=True`` recomputes everything).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from .._api import simulate_flow
from .._config import map_per_core
from .._demo._pipelines import Demo, Pipeline
from .._demo._report import run_facts, windows_text
from .._demo._steps import DemoSteps, PipelineResult, compare_runs, flow_name
from .._kit._checks import PAPER_ALPHAS, check_scales
from .._kit._comparison import default_times
from .._kit._plots import plot_convergence, plot_loss, save_figure
from .._kit._report import figures_and_runtime, format_alpha, markdown_table, worst_exponents
from .._kit._task import Task, task_named
from ._compare import Comparison
from ._experiments import (
    Perturbation,
    perturb_and_continue,
    perturbation_rows,
    plateau_starts,
    plot_perturbation,
    stage_starts,
)
from ._family import TASKS
from ._plots import LABELS, coordinate_groups, plot_coordinates, significant
from ._report import comparison_json, comparison_summary, greedy_summary

PAPER_LOG_ALPHAS = tuple(math.log(a) for a in PAPER_ALPHAS)
SMALL_LOG_ALPHAS = tuple(math.log(a) for a in (1e-64, 1e-128, 1e-300)) + (-1e3, -1e4)
"""Scales beyond the paper's, down to ``log α = −10⁴`` (far below float64's range, given as ``log α``): with them
the convergence rates are fitted over three decades of ``log(1/α)``."""


@dataclasses.dataclass(frozen=True)
class DemoConfig:
    """What the demo computes.

    Attributes:
        model: a built-in task, a key of ``gradflow.models.TASKS`` of the diagonal family (``diagonal_linear``,
            ``diagonal_attention``, ``diagonal_transformer``).
        model_options: keyword arguments of the task builder, as ``(name, value)`` pairs.
        log_alphas: the initialisation scales ``log α`` of the flows: the convergence figure and the report
            span all of them. Default: the paper's six, 0.1 … 1e-32, and ``SMALL_LOG_ALPHAS``, 1e-64 … ``log α = −10⁴``.
        figure_log_alphas: the scales drawn in the per-α figures (loss, β, b, perturbations): those of
            ``log_alphas`` that are among these (None: all). Default: the paper's six, which keep the figures
            readable; Figures 9–10 perturb the smallest of them.
        tau_max: the last rescaled time (None: ``1.25 T_K`` of the greedy path).
        num_times: recorded times per drawn flow (window edges, stage times and times around them are added); the
            flows that are not drawn (see ``figure_log_alphas``) record a quarter as many, since they only enter
            the comparison.
        max_stages: cap on the greedy stages (None: until the path ends). The default, 5, is the range of
            the paper's Figures 6–8 (τ ≤ 1.25 T_5 ≈ 3.75 on the toy). The toy's path goes on to two more
            stages, at T_6 ≈ 89.6 and T_7 ≈ 120.9 (``gradflow greedy`` computes the whole path): on a linear
            τ axis they would squeeze the first five into a few percent of the width, and flows to
            τ ≈ 150 cost several times more.
        check_assumptions: run the greedy path's Hessian and perturbed-phase-(B) checks (4.3, 4.4).
        perturb: run the perturb-and-continue checks (Figures 9–10) on the smallest α's flow.
        num_perturb: perturbation start times per figure.
        plateau_std, stage_std: the noise of Figures 9 and 10 (paper appendix A: 0.05 and 0.01).
        negligible: weights of magnitude at most this are not perturbed (paper: 1e-5).
        perturb_span: how long each perturbed run continues (None: 10% of the horizon).
        seed: the seed of the perturbation experiments.
        rtol, atol: the flow's tolerances (``simulate_flow``'s: the local error in ``log w`` stays below
            ``atol + rtol |log w|``).
        delta, threshold: the comparison's window margin and stage-detection fraction.
    """

    model: str = "diagonal_attention"
    model_options: tuple[tuple[str, Any], ...] = ()
    log_alphas: tuple[float, ...] = PAPER_LOG_ALPHAS + SMALL_LOG_ALPHAS
    figure_log_alphas: tuple[float, ...] | None = PAPER_LOG_ALPHAS
    tau_max: float | None = None
    num_times: int = 400
    max_stages: int | None = 5
    check_assumptions: bool = True
    perturb: bool = True
    num_perturb: int = 5
    plateau_std: float = 0.05
    stage_std: float = 0.01
    negligible: float = 1e-5
    perturb_span: float | None = None
    seed: int = 0
    rtol: float = 0.0
    atol: float = 1e-8
    delta: float | None = None
    threshold: float = 0.5

    def __post_init__(self):
        task_named(TASKS, self.model)
        check_scales(None, self.log_alphas, names=("alpha", "log_alphas"))
        if self.figure_log_alphas is not None and not self.drawn():
            raise ValueError(
                "figure_log_alphas shares no scale with log_alphas, so the figures would be empty; "
                "pass figure_log_alphas=None to draw every flow."
            )
        if self.tau_max is not None and not self.tau_max > 0:
            raise ValueError(f"tau_max must be positive; got {self.tau_max!r}.")

    def drawn(self) -> list[int]:
        """The indices into ``log_alphas`` of the flows drawn in the per-α figures."""
        if self.figure_log_alphas is None:
            return list(range(len(self.log_alphas)))
        shown = np.asarray(self.figure_log_alphas, dtype=np.float64)
        return [a for a, la in enumerate(self.log_alphas) if np.any(np.isclose(la, shown, rtol=1e-12, atol=0.0))]

    def task(self) -> Task:
        """Build the task."""
        return task_named(TASKS, self.model).build(**dict(self.model_options))


QUICK = DemoConfig(
    model_options=(("n", 64), ("tokens", 4), ("dim", 4), ("teacher_nonzero", (2, 2)), ("seed", 0)),
    log_alphas=(math.log(1e-2), math.log(1e-8), math.log(1e-16), -1e4),
    num_times=200,
    max_stages=3,
    check_assumptions=False,
    num_perturb=2,
)
"""A reduced configuration of the same code path, for tests: a tiny attention head (p = 8), three of the paper's α
and ``log α = −10⁴`` (in the convergence figure and the report, not in the per-α figures),
the first three greedy stages, without the greedy path's (costly) Hessian and phase-(B) checks."""


@dataclasses.dataclass(frozen=True)
class DemoResult(PipelineResult):
    """What :func:`run_demo` produced (``gradflow._demo._steps.PipelineResult``), with the perturbation runs."""

    config: DemoConfig
    comparison: Comparison
    perturbations: dict[str, Perturbation]


def run_demo(
    config: DemoConfig = DemoConfig(),
    *,
    out: str | Path = "demo_output",
    force: bool = False,
    progress: bool = True,
    command: str = "gradflow demo",
) -> DemoResult:
    """Run ``config`` into the folder ``out`` (see the module docstring), reusing finished parts; ``command`` names
    the run on the progress bar and in the report's title."""
    out = Path(out)
    steps = 1 + len(config.log_alphas) + 2 * config.perturb + 1
    step = DemoSteps(out, steps, command, force=force, progress=progress)
    task = config.task()
    model, u0, v0 = task.model, task.u0, task.v0
    base = dict(model=config.model, options=config.model_options)
    path, delta = step.greedy(config, task, base)
    times = np.asarray(path.times, dtype=np.float64)
    drawn = config.drawn()
    grids = {
        fine: default_times(times, num=num, horizon=config.tau_max, delta=delta, log_alphas=config.log_alphas)
        for fine, num in ((True, config.num_times), (False, max(config.num_times // 4, 2)))
    }
    ts = grids[True]
    tol = dict(rtol=config.rtol, atol=config.atol)
    flow_key = dict(base, ts=ts, **tol)

    def flow(a: int):
        la, grid = config.log_alphas[a], grids[a in drawn]  # a flow not drawn only enters the comparison: coarser
        return step(
            flow_name(la),
            dict(flow_key, ts=grid, log_alpha=la),
            lambda: simulate_flow(model, u0=u0, v0=v0, ts=grid, log_alpha=la, **tol),
        )

    flows = map_per_core(flow, range(len(config.log_alphas)))  # one flow per core
    comparison = compare_runs(config, task, path, flows, config.log_alphas, delta=delta, ts=ts)
    perturbations = {}
    if config.perturb:
        perturbations = _perturbations(config, model, flows, ts, flow_key, step)
    files, seconds = step.finish(lambda: _write_outputs(config, step, task, path, flows, comparison, perturbations))
    log = list(step.store.log)
    return DemoResult(config, task, path, flows, comparison, files, log, seconds, perturbations=perturbations)


def _perturbations(config, model, flows, ts, flow_key, step) -> dict[str, Perturbation]:
    """Figures 9–10: perturb the flow of the smallest drawn α at random times and at stage starts, and continue."""
    a = _smallest_drawn(config)
    flow = flows[a]
    span = 0.1 * float(ts[-1]) if config.perturb_span is None else config.perturb_span
    key = dict(flow_key, log_alpha=config.log_alphas[a], span=span, negligible=config.negligible, seed=config.seed)
    plateau = plateau_starts(flow, num=config.num_perturb, span=span, seed=config.seed)
    stages = _spaced(stage_starts(flow, threshold=config.negligible), np.asarray(flow.ts), span, config.num_perturb)

    def experiment(kind, starts, std):
        return step(
            f"perturb_{kind}",
            dict(key, kind=kind, std=std, starts=starts),
            lambda: perturb_and_continue(
                model,
                flow,
                starts=starts,
                std=std,
                span=span,
                kind=kind,
                threshold=config.negligible,
                seed=config.seed,
                flow_options=dict(rtol=config.rtol, atol=config.atol),
            ),
        )

    # No start times (no weight crosses the threshold): nothing to perturb at. The two experiments run one per
    # core, as the flows do: each is a serial chain of small solves.
    kinds = (("plateau", plateau, config.plateau_std), ("stage", stages, config.stage_std))
    runs = [(kind, starts, std) for kind, starts, std in kinds if starts.size]
    return dict(zip([kind for kind, _, _ in runs], map_per_core(lambda run: experiment(*run), runs)))


def _smallest_drawn(config) -> int:
    drawn = config.drawn()
    return drawn[int(np.argmin([config.log_alphas[a] for a in drawn]))]


def _spaced(indices, ts, span: float, num: int) -> np.ndarray:
    """The first ``num`` indices at least ``span / 2`` apart in time (one per stage start)."""
    kept: list[int] = []
    for i in indices:
        if not kept or ts[i] - ts[kept[-1]] >= span / 2:
            kept.append(int(i))
    return np.array(kept[:num], dtype=int)


def _write_outputs(config, step, task, path, flows, comparison, perturbations) -> list[Path]:
    names = task.model.names
    groups = coordinate_groups(names)
    figs = step.out / "figures"
    figures = [figs / "loss.png", figs / "log_weights.png", figs / "convergence.png"]
    figures += [figs / f"beta_{part}.png" for part in groups]
    figures += [figs / f"perturb_{kind}.png" for kind in perturbations]
    a = _smallest_drawn(config)

    def draw():
        drawn = [flows[i] for i in config.drawn()]
        mask = significant(path, [f.beta for f in drawn])
        save_figure(plot_loss(drawn, path, title=f"Loss of {task.name} (Figure 6)"), figs / "loss.png")
        for part, idx in groups.items():
            title = {
                "KQ": "Entries of diag(w_K) diag(w_Q) (Figure 7)",
                "VO": "Entries of diag(w_V) diag(w_O) (Figure 8)",
            }.get(part, "Entries of β = u ⊙ v")
            save_figure(
                plot_coordinates(drawn, names, idx, path=path, title=title, label_mask=mask), figs / f"beta_{part}.png"
            )
        title = "Log-scale weights b = log w / log α"
        save_figure(
            plot_coordinates(drawn, names, np.flatnonzero(mask), path=path, title=title, label_mask=mask, quantity="b"),
            figs / "log_weights.png",
        )
        save_figure(plot_convergence(comparison, labels=LABELS), figs / "convergence.png")
        titles = {
            "plateau": "Perturbation at random times (Assumption 4.3, Figure 9)",
            "stage": "Perturbation at stage starts (Assumption 4.4, Figure 10)",
        }
        for kind, pert in perturbations.items():
            save_figure(
                plot_perturbation(pert, flows[a], names, groups, title=titles[kind]), figs / f"perturb_{kind}.png"
            )

    def report(figures, key):
        return demo_report(
            command=step.command,
            config=config,
            task=task,
            path=path,
            comparison=comparison,
            perturbations=perturbations,
            drawn=[config.log_alphas[i] for i in config.drawn()],
            perturbed=config.log_alphas[a],
            timings=step.timings,
            figures=figures,
            key=key,
        )

    json = lambda: comparison_json(comparison, path, names)  # noqa: E731
    return step.write(config, comparison.to_records, figures, json=json, draw=draw, report=report)


def demo_report(
    *, command: str, config, task, path, comparison, perturbations, drawn, perturbed, timings, figures, key: str
) -> str:
    """The demo's Markdown report."""
    names = task.model.names
    K = np.asarray(path.times).size - 1
    options, alphas, horizon = run_facts(task, comparison)
    text = f"# {command}: {task.name}\n\n"
    text += (
        f"Model `{task.name}` ({options}); p = {task.model.p} coordinates, n = {task.model.n} samples. "
        f"Flows at α ∈ {{{alphas}}} up to rescaled time τ = {horizon:.4g}, tolerances rtol = {config.rtol:g}, "
        f"atol = {config.atol:g}; greedy limit with {K} stages. Configuration hash `{key}`.\n\n"
    )
    text += "## Greedy limit (Algorithm 1) and the assumption checks\n\n" + greedy_summary(path, names)
    if not config.check_assumptions:
        text += (
            "\nThe Hessian (4.3) and perturbed phase-(B) (4.4) checks were not run (`check_assumptions=False`); "
            "their flags read ✓ by convention.\n"
        )
    text += (
        "\n## Comparison with the flows\n\n"
        + windows_text(comparison)
        + "A stage time is detected on a flow at the first τ where "
        f"its loss has covered {comparison.threshold:g} of the drop between consecutive greedy plateaus "
        "L(θ^{k−1}) → L(θ^k). Rates: least-squares fit of log d = c − r log log(1/α), i.e. "
        "d ≈ C·log(1/α)^(−r); the theory suggests r ≈ 1 for b and the stage times.\n\n"
    )
    span = -np.asarray(comparison.log_alpha, dtype=np.float64)
    text += (
        f"The fits span log(1/α) from {span.min():.4g} to {span.max():.4g} "
        f"({math.log10(span.max() / span.min()):.2g} decades). " + worst_exponents(comparison) + "\n\n"
    )
    text += comparison_summary(comparison)
    if perturbations:
        a = format_alpha(perturbed)
        text += (
            f"\n## Perturb-and-continue checks (paper appendix A) at α = {a}\n\nAt each start time τ_s every "
            f"weight u_i, v_i of magnitude above {config.negligible:g} gets N(0, std²) noise and the flow "
            "continues; the table gives the largest deviation max_i |β_i − β_i(unperturbed)| right after the "
            "perturbation and at the end of the continued run. Random times (Figure 9, Assumption 4.3) and "
            "stage starts, where some weight first exceeds the threshold (Figure 10, Assumption 4.4).\n\n"
        )
        text += markdown_table(*perturbation_rows(perturbations, names))
    text += (
        "\n## Figures\n\nThe per-α figures draw the flows at α ∈ {"
        + ", ".join(format_alpha(la) for la in drawn)
        + "}; the convergence figure and the tables above use every α.\n\n"
    )
    return text + figures_and_runtime(figures, timings, config)


def _configure(model, model_options, log_alphas, tau_max, num_times, max_stages, perturb, rtol, atol) -> DemoConfig:
    return DemoConfig(
        model=model,
        model_options=model_options,
        log_alphas=log_alphas,
        figure_log_alphas=None,
        tau_max=tau_max,
        num_times=num_times,
        max_stages=max_stages,
        perturb=perturb,
        rtol=rtol,
        atol=atol,
    )


DEMO = Demo(
    flag=None,
    help="the paper's toy task: flows at α = 0.1 ... 1e-32 and on to log α = -1e4, greedy limit, Figures 6–10, "
    "comparison table and report",
    folder="",
    configs=MappingProxyType({"default": DemoConfig(), "quick": QUICK}),
    run=run_demo,
)
PIPELINE = Pipeline(_configure, functools.partial(run_demo, command="gradflow compare"), DEMO)
"""What ``gradflow compare`` runs for a model with diagonal weights (``DIAGONAL.pipeline``)."""

"""The factorised family's pipeline (``gradflow demo --full-weights``, and ``gradflow compare`` of its models): the
paper's Figure 2 d–f computed exactly, with the greedy low-rank limit.

:func:`run_rank_demo` runs a :class:`RankDemoConfig` (default: the attention head with full weights,
``attention_full``) into an output folder::

    out/results/*.npz        greedy low-rank path, one exact flow per α, one float64 GD run per GD α
    out/comparison.csv/.json the comparison table (and, in the JSON, the fitted rates and the greedy stages)
    out/figures/*.png        spectra (Figure 2 d–f), log scales, ranks, convergence
    out/report.md            rank-jump times, distances, assumption diagnostics, what is exact and what conjectured
    out/log.txt              which steps were computed and which reused

Every result is keyed by a hash of the configuration that produced it: a re-run reuses what is already there
(``force=True`` recomputes everything).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from .._api import run_gd, simulate_flow
from .._config import PerCore
from .._demo._pipelines import Demo, Pipeline
from .._demo._report import run_facts, windows_text
from .._demo._steps import DemoSteps, PipelineResult, compare_runs, flow_name
from .._kit._checks import check_scales
from .._kit._comparison import default_times
from .._kit._plots import plot_convergence, save_figure
from .._kit._report import figures_and_runtime, format_alpha, markdown_table, worst_exponents
from .._kit._task import Task, task_named
from ._compare import RankComparison
from ._family import TASKS, figure2_order
from ._options import FactorizedSolver
from ._plots import LABELS, plot_log_scales, plot_ranks, plot_spectra
from ._report import rank_comparison_json, rank_comparison_summary, rank_greedy_summary

FIGURE2_ALPHAS = (1e-2, 1e-4, 1e-8, 1e-16, 1e-32)
FIGURE2_TASK = (("n", 50), ("tokens", 4), ("dim", 3), ("teacher_kq", (1.0, 0.5)), ("teacher_vo", (1.0, 0.5)))
"""The head of the demo: 50 samples of 4 tokens in dimension 3, a teacher whose ``W_K W_Qᵀ`` and ``W_V W_Oᵀ`` both
have rank 2 (singular values 1 and 0.5), so that the student's four rank jumps, two per product, are visible; small
enough that the exact flows down to ``log α = −1000`` take minutes on two cores."""


@dataclasses.dataclass(frozen=True)
class RankDemoConfig:
    """What the full-weights demo computes.

    Attributes:
        model: a built-in task with full weights, a key of ``gradflow.models.TASKS`` of the factorized family (``attention_full``,
            ``matrix_factorization``, ``matrix_sensing``).
        model_options: keyword arguments of the task builder, as ``(name, value)`` pairs (default
            ``FIGURE2_TASK``).
        log_alphas: the initialisation scales ``log α`` of the exact flows (default: 1e-2 … 1e-32 and
            ``log α = −1000``, far below float64).
        gd_log_alphas: the scales of the float64 gradient-descent runs drawn over the flows (the larger ones:
            GD trains ``α U⁰`` itself, so it cannot go below float64's range, and its step count grows like
            ``log(1/α) / lr``).
        gd_lr: their learning rate.
        tau_max: the last rescaled time (None: ``1.25 T_K`` of the greedy path).
        num_times: recorded times per flow (window edges and stage times are added).
        max_stages: cap on the greedy stages (None: until the path ends).
        check_assumptions: run the greedy path's Hessian and perturbed-phase-(B) checks.
        rtol, atol: the flow's tolerances.
        method: the flow's integrator (``FactorizedSolver(method=...)``; default ``"auto"``).
        delta, threshold: the comparison's window margin and rank-jump detection fraction.
    """

    model: str = "attention_full"
    model_options: tuple[tuple[str, Any], ...] = FIGURE2_TASK
    log_alphas: tuple[float, ...] = tuple(math.log(a) for a in FIGURE2_ALPHAS) + (-1000.0,)
    gd_log_alphas: tuple[float, ...] = (math.log(1e-2), math.log(1e-4))
    gd_lr: float = 0.05
    tau_max: float | None = None
    num_times: int = 200
    max_stages: int | None = None
    check_assumptions: bool = True
    rtol: float = 0.0
    atol: float = 1e-8
    method: str = "auto"
    delta: float | None = None
    threshold: float = 0.5

    def __post_init__(self):
        task_named(TASKS, self.model)
        FactorizedSolver(method=self.method)  # a ValueError that names the methods
        check_scales(None, self.log_alphas, names=("alpha", "log_alphas"))
        if self.gd_log_alphas:
            check_scales(None, self.gd_log_alphas, names=("alpha", "gd_log_alphas"))
            if min(self.gd_log_alphas) < math.log(np.finfo(np.float64).tiny):
                raise ValueError("gd_log_alphas must be above float64's range (log α > −708): GD trains α U⁰ itself.")
        if not (math.isfinite(self.gd_lr) and self.gd_lr > 0):
            raise ValueError(f"gd_lr must be a positive number; got {self.gd_lr!r}.")
        if self.tau_max is not None and not self.tau_max > 0:
            raise ValueError(f"tau_max must be positive; got {self.tau_max!r}.")

    def task(self) -> Task:
        """Build the task."""
        return task_named(TASKS, self.model).build(**dict(self.model_options))


QUICK_FULL = RankDemoConfig(
    model_options=(("n", 24), ("tokens", 3), ("dim", 3), ("teacher_kq", (1.0,)), ("teacher_vo", (1.0, 0.5))),
    log_alphas=(math.log(1e-2), math.log(1e-8), -200.0),
    gd_log_alphas=(math.log(1e-2),),
    num_times=120,
    check_assumptions=False,
)
"""A reduced configuration of the same code path, for tests: a 3-dimensional head, three α (one beyond
float64), one GD run, without the greedy path's Hessian and phase-(B) checks."""


PAPER_TEACHER = (1.0, 0.6, 0.3)
PAPER_FULL = RankDemoConfig(
    model_options=(
        ("n", 1000),
        ("tokens", 10),
        ("dim", 50),
        ("teacher_kq", PAPER_TEACHER),
        ("teacher_vo", PAPER_TEACHER),
    ),
    gd_log_alphas=tuple(math.log(a) for a in (1e-2, 1e-4, 1e-8, 1e-16, 1e-32)),
    check_assumptions=False,
    method="leap",
)
"""The paper's size (``gradflow demo --full-weights --paper-size``): 1,000 samples of 10 tokens in dimension 50, a
teacher of rank 3 in both products (singular values 1, 0.6, 0.3), the flows at 1e-2 … 1e-32 and ``log α = −1000``.
GD also runs at 1e-8, 1e-16 and 1e-32, where its sleeping singular values meet float64's rounding of the awake
ones (≈ 1e-16 relative) while the flow's go on down, and at 1e-32 its last rank jumps come early. Without the greedy path's Hessian and perturbed-start checks, which
at d = 50 multiply its phase-(B) work (docs/benchmarks.md, "Greedy low-rank limit against one flow"). The flows by the
leaps, not ``"auto"``'s split integrator: on this head at these α they take the split's steps and time, and compile
faster (the demo cold: 6 min 29 s, 7 min 17 s with the split; docs/benchmarks.md, "Full weights: how the cost grows
with log(1/α)")."""


@dataclasses.dataclass(frozen=True)
class RankDemoResult(PipelineResult):
    """What :func:`run_rank_demo` produced (``gradflow._demo._steps.PipelineResult``), with the gradient-descent
    runs."""

    config: RankDemoConfig
    comparison: RankComparison
    gd: list


def run_rank_demo(
    config: RankDemoConfig = RankDemoConfig(),
    *,
    out: str | Path = "demo_output/full_weights",
    force: bool = False,
    progress: bool = True,
    command: str = "gradflow demo --full-weights",
) -> RankDemoResult:
    """Run ``config`` into the folder ``out`` (see the module docstring), reusing finished parts; ``command`` names
    the run on the progress bar and in the report's title."""
    out = Path(out)
    steps = 1 + len(config.log_alphas) + len(config.gd_log_alphas) + 1
    step = DemoSteps(out, steps, command, force=force, progress=progress)
    task = config.task()
    model, u0, v0 = task.model, task.u0, task.v0
    base = dict(model=config.model, options=config.model_options)
    path, delta = step.greedy(config, task, base)
    ts = default_times(
        path.times, num=config.num_times, horizon=config.tau_max, delta=delta, log_alphas=config.log_alphas
    )
    tol = dict(rtol=config.rtol, atol=config.atol)
    flow_key = dict(base, ts=ts, **tol, method=config.method)

    def gd_run(la):
        key = dict(base, log_alpha=la, lr=config.gd_lr, horizon=float(ts[-1]))
        options = dict(lr=config.gd_lr)
        return step(
            f"gd_alpha={format_alpha(la)}",
            key,
            lambda: run_gd(model, log_alphas=[la], u0=u0, v0=v0, horizon=float(ts[-1]), options=options)[0],
        )

    solver = FactorizedSolver(method=config.method)

    def flow(la):
        return step(
            flow_name(la),
            dict(flow_key, log_alpha=la),
            lambda: simulate_flow(
                model, u0=u0, v0=v0, ts=ts, log_alpha=la, throw=False, progress=progress, solver=solver, **tol
            ),
        )

    # The GD runs and the flows are independent: one per core (gradflow._config.PerCore), the dearest first (the
    # smallest α of each: a flow's cost and GD's step count, horizon · log(1/α) / lr, grow as α falls), so that
    # the last ones to start are short.
    runs = [(flow, la) for la in config.log_alphas] + [(gd_run, la) for la in config.gd_log_alphas]
    order = sorted(range(len(runs)), key=lambda i: runs[i][1])
    with PerCore(len(runs)) as pool:
        futures = {i: pool.submit(*runs[i]) for i in order}
        done = [futures[i].result() for i in range(len(runs))]
    flows, gd = done[: len(config.log_alphas)], done[len(config.log_alphas) :]

    comparison = compare_runs(config, task, path, flows, config.log_alphas, delta=delta, ts=ts)
    if gd:
        gd_cmp = compare_runs(config, task, path, gd, config.gd_log_alphas, delta=delta, ts=ts)
        comparison = dataclasses.replace(comparison, gd=dataclasses.replace(gd_cmp, method="gd"))
    files, seconds = step.finish(lambda: _write_outputs(config, step, task, path, flows, gd, comparison))
    return RankDemoResult(config, task, path, flows, comparison, files, list(step.store.log), seconds, gd=gd)


def _write_outputs(config, step, task, path, flows, gd, comparison) -> list[Path]:
    names = task.model.names
    figs = step.out / "figures"
    figures = [figs / "spectra.png", figs / "log_scales.png", figs / "ranks.png", figs / "convergence.png"]

    def draw():
        order = figure2_order(names)
        title = f"{task.name}: singular values and loss (Figure 2 d–f), exact flows and float64 GD"
        save_figure(plot_spectra(flows, path, names=names, factors=order, gd=gd, title=title), figs / "spectra.png")
        save_figure(plot_log_scales(flows, path, names=names, factors=order, gd=gd), figs / "log_scales.png")
        save_figure(plot_ranks(flows, path, names=names, factors=order, gd=gd), figs / "ranks.png")
        save_figure(
            plot_convergence(comparison, labels=LABELS, title="Convergence to the greedy low-rank limit"),
            figs / "convergence.png",
        )

    def report(figures, key):
        return rank_demo_report(
            command=step.command,
            config=config,
            task=task,
            path=path,
            flows=flows,
            gd=gd,
            comparison=comparison,
            timings=step.timings,
            figures=figures,
            key=key,
        )

    json = lambda: rank_comparison_json(comparison, path)  # noqa: E731
    return step.write(config, comparison.to_records, figures, json=json, draw=draw, report=report)


def rounding_floor(flows, gd, path, names) -> str:
    """GD's sleeping singular values against the flow's at the last time, per GD α that has a flow: float64 holds
    ``W = U Vᵀ`` to about ``ε σ_1`` (ε = 2.2e-16), so below that GD's ``σ_{r+1}`` (``r``: the greedy path's last
    rank of ``W_j``) and ``σ_min`` are rounding noise, where the flow's, kept as logs, are exact."""
    by_alpha = {float(f.log_alpha): f for f in flows}
    eps = math.log10(np.finfo(np.float64).eps)
    rows = []
    for run in gd:
        flow = by_alpha.get(float(run.log_alpha))
        if flow is None:
            continue
        for j, name in enumerate(names):
            r = int(np.asarray(path.ranks)[-1, j])
            lf, lg = (np.asarray(x.log_singular_values[j])[-1] / math.log(10) for x in (flow, run))
            if r < lf.size:  # at full rank nothing sleeps
                cells = [f"{lf[r]:.1f} / {lg[r]:.1f}", f"{lf[-1]:.1f} / {lg[-1]:.1f}", f"{eps + lg[0]:.1f}"]
                rows.append([format_alpha(float(run.log_alpha)), f"W_{name}", r, *cells])
    header = ["α", "W", "r", "log₁₀ σ_{r+1}: flow / GD", "log₁₀ σ_min: flow / GD", "log₁₀ ε σ_1 (GD)"]
    return markdown_table(header, rows) if rows else ""


def rank_demo_report(*, command: str, config, task, path, flows, gd, comparison, timings, figures, key: str) -> str:
    """The full-weights demo's Markdown report."""
    names = task.model.names
    K = np.asarray(path.times).size - 1
    options, alphas, horizon = run_facts(task, comparison)
    shapes = ", ".join(
        f"W_{n} ∈ R^{m}×{c} (width {w})" for n, (m, c), w in zip(names, task.model.shapes, task.model.widths)
    )
    text = f"# {command}: {task.name}\n\n"
    text += (
        f"Model `{task.name}` ({options}); {shapes}; n = {task.model.n} samples. Exact flows at α ∈ {{{alphas}}} up "
        f"to rescaled time τ = {horizon:.4g} (tolerances rtol = {config.rtol:g}, atol = {config.atol:g}); the greedy "
        f"low-rank limit with {K} rank jumps. Configuration hash `{key}`.\n\n"
    )
    failed = [(format_alpha(float(f.log_alpha)), str(f.message)) for f in flows if str(f.result) != "successful"]
    if failed:
        text += "**Flows that did not finish:** " + "; ".join(f"α = {a}: {m}" for a, m in failed) + "\n\n"
    if comparison.gd is not None:
        text += (
            "Float64 gradient descent (learning rate "
            f"{config.gd_lr:g}) at α ∈ {{{', '.join(format_alpha(la) for la in comparison.gd.log_alpha)}}} is drawn "
            "dotted over the flows: it trains α U⁰ itself, so it exists only above float64's range, and it departs "
            "from the exact flow by O(lr) per unit time. Its sleeping singular values also cannot go below float64's "
            "rounding of its awake ones, about ε σ_1: at the last time,\n\n"
            + rounding_floor(flows, gd, path, names)
            + "\n"
        )
    text += (
        "## What is exact and what is conjectured\n\n"
        "The flows are the exact gradient flow of the factors (docs: *Full weights: the exact flow*), to the "
        "solver's tolerance, at every α including those far below float64. "
    )
    if task.name == "matrix_factorization":
        text += "The greedy low-rank limit is exact here: T_r = 1/σ_r(M), the saddles are the truncated SVDs.\n\n"
    else:
        text += (
            "The greedy low-rank limit is exact for matrix factorisation; for this model its stage times beyond "
            "the first (T_1 = 1/max_j σ_1(G_j(0)) holds for every model) rest on the log-scale bookkeeping of the "
            "sleeping directions, a conjecture that this comparison tests: it holds where the distances shrink as "
            "α → 0.\n\n"
        )
    text += "## Greedy low-rank limit and its diagnostics\n\n" + rank_greedy_summary(path, names)
    if not config.check_assumptions:
        text += "\nThe Hessian and perturbed phase-(B) checks were not run (`check_assumptions=False`).\n"
    text += (
        "\n## Comparison with the flows\n\n"
        + windows_text(comparison)
        + "The rank jump into stage k, which adds rank r to W_j, is "
        f"detected on a run at the first τ where σ_r(W_j) reaches {comparison.threshold:g} × σ_r(W̄_j^k). "
        "Log scales b = log σ / (2 log α) are compared with the limit's: 0 for learned directions, the sleeping "
        "exponents (piecewise linear in τ, a shrinking one turning at 1) for the others. Rates: least-squares fit "
        "of log d = c − r log log(1/α), i.e. d ≈ C·log(1/α)^(−r).\n\n"
    )
    text += worst_exponents(comparison) + "\n\n" + rank_comparison_summary(comparison)
    return text + "\n## Figures\n\n" + figures_and_runtime(figures, timings, config)


def _configure(model, model_options, log_alphas, tau_max, num_times, max_stages, perturb, rtol, atol):
    if perturb:
        raise ValueError("--perturb applies to the models with diagonal weights")
    return RankDemoConfig(
        model=model,
        model_options=model_options,
        log_alphas=log_alphas,
        tau_max=tau_max,
        num_times=num_times,
        max_stages=max_stages,
        gd_log_alphas=(),
        rtol=rtol,
        atol=atol,
    )


DEMO = Demo(
    flag="--full-weights",
    help="the second part: the attention head with full weights (Figure 2 d–f) exactly, down to log α = −1000, with "
    "its greedy low-rank limit and float64 GD, into OUT/full_weights (with --paper-size: the paper's size, 1,000 "
    "samples, 10 tokens, d = 50, a rank-3 teacher, into OUT/full_weights_paper; about 9 minutes cold on two idle cores)",
    folder="full_weights",
    configs=MappingProxyType({"default": RankDemoConfig(), "quick": QUICK_FULL, "paper_size": PAPER_FULL}),
    run=run_rank_demo,
    paper_folder="full_weights_paper",
)
PIPELINE = Pipeline(_configure, functools.partial(run_rank_demo, command="gradflow compare"), DEMO)
"""What ``gradflow compare`` runs for a model with full, factorised weights (``FACTORIZED.pipeline``)."""

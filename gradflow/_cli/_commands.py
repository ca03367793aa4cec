"""The theory engine's commands: ``demo``, ``flow``, ``greedy`` and ``compare`` for every built-in task, whatever its
model family (the family, from ``gradflow._registry``, says how to describe, draw and table its runs, and names the
pipeline of ``compare``)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from .._api import compare_limits, greedy_limit, simulate_flow
from .._demo import pipeline_of
from .._demo._pipelines import Demo
from .._io import claim_folder, save_result
from .._kit._comparison import default_times
from .._kit._report import format_alpha, markdown_table
from .._outputs import report, save
from .._registry import FAMILIES, family_named, family_of
from .._results import Interrupted
from ._options import CLIError, build_task, is_own, log_alphas, model_options


def _claim(args, out: Path, **settings) -> bool:
    """Record ``out`` as this command's, with the settings that make its output; refuse another run's folder.
    Returns whether it held another run's (replaced, with ``--overwrite``)."""
    return claim_folder(out, dict(command=args.command, **settings), overwrite=args.overwrite, how="pass --overwrite")


def _times(args):
    """The recorded times ``--tau-max`` sets (None: the pipeline picks them from the greedy path)."""
    return None if args.tau_max is None else [0.0, args.tau_max]


def demos() -> dict[str, Demo]:
    """Every registered family's ``gradflow demo``, by family name (the family's pipeline declares it)."""
    found = {family.name: pipeline_of(family) for family in FAMILIES}
    return {name: pipeline.demo for name, pipeline in found.items() if pipeline is not None and pipeline.demo}


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def demo(args) -> int:
    """``gradflow demo``: the demo of the family whose flag is given (``--full-weights``, ``--depth``, ...), else the
    paper's toy task; into ``OUT/<its folder>`` (at ``--paper-size``, where the demo has one, its paper folder)."""
    every = demos()
    chosen = [(name, d) for name, d in every.items() if d.flag is not None and getattr(args, _dest(d.flag))]
    if len(chosen) > 1:
        raise CLIError(f"{' and '.join(d.flag for _, d in chosen)} are different demos: give one")
    name, chosen = chosen[0] if chosen else next((n, d) for n, d in every.items() if d.flag is None)
    if args.paper_size and "paper_size" not in chosen.configs:
        papers = [d for d in every.values() if "paper_size" in d.configs]
        what = " or ".join(f"the {d.flag.lstrip('-')} demo" for d in papers)
        raise CLIError(f"--paper-size applies to {what}: give {' or '.join(d.flag for d in papers)} too")
    size = "paper_size" if args.paper_size else "quick" if args.quick else "default"
    folder = chosen.paper_folder if args.paper_size else chosen.folder
    paper = dict(paper_size=True) if args.paper_size else {}  # an earlier record of the other folders still matches
    out = Path(args.out) / folder
    _claim(args, out, quick=args.quick, **paper)
    result = chosen.run(chosen.configs[size], out=str(out), force=args.force, progress=not args.no_progress)
    return _print_pipeline(result, family_named(name), str(out))


def compare(args) -> int:
    """``gradflow compare``: the family's pipeline for a built-in task, or for a user's (``module:function``) the
    comparison and its [`report`][gradflow.report]; then the tables."""
    task = build_task(args)  # the task's own checks, before anything is computed
    family = family_of(task.model)
    pipeline = None if is_own(args.model) else pipeline_of(family)
    if pipeline is None and not is_own(args.model):
        raise CLIError(f"gradflow compare has no pipeline for {family.name} models (--model {args.model}) yet")
    family.check_resolved(log_alphas(args), _times(args), rtol=args.rtol, atol=args.atol)
    settings = dict(
        model=args.model,
        model_options=model_options(args),
        log_alphas=log_alphas(args),
        tau_max=args.tau_max,
        num_times=args.num_times,
        max_stages=args.max_stages,
        perturb=args.perturb,
        rtol=args.rtol,
        atol=args.atol,
    )
    if is_own(args.model):
        if args.perturb:
            raise CLIError("--perturb applies to the built-in tasks with diagonal weights")
        _claim(args, Path(args.out), **settings)
        return _print_pipeline(_compare_own(args, task), family, args.out)
    config = pipeline.configure(**settings)
    _claim(args, Path(args.out), **settings)
    result = pipeline.run(config, out=args.out, force=args.force, progress=not args.no_progress)
    return _print_pipeline(result, family, args.out)


def _compare_own(args, task) -> SimpleNamespace:
    """A user's task compared with its greedy limit at every α, saved (``results/comparison.npz``) and reported
    into ``--out``: what the pipeline's ``result`` holds for the tables."""
    t0 = time.perf_counter()
    progress = not args.no_progress
    path = greedy_limit(task.model, u0=task.u0, v0=task.v0, max_stages=args.max_stages, progress=progress)
    ts = default_times(path.times, num=args.num_times, horizon=args.tau_max)
    comparison = compare_limits(
        task.model,
        log_alpha=log_alphas(args),
        u0=task.u0,
        v0=task.v0,
        path=path,
        ts=ts,
        flow_options=dict(rtol=args.rtol, atol=args.atol, progress=progress),
    )
    saved = save(comparison, Path(args.out) / "results" / "comparison.npz")
    report(comparison, args.out, title=args.model)
    return SimpleNamespace(
        comparison=comparison, log=[("comparison", "computed", saved)], seconds=time.perf_counter() - t0
    )


def _print_pipeline(result, family, out: str) -> int:
    """The tables of a pipeline's ``result`` that ``family`` makes: its stage times, the worst distances per α."""
    comp = result.comparison
    print(markdown_table(*family.stage_rows(comp)))
    print("worst distance over the stage windows, per α:")
    quantities = [q for q, _ in family.worst_columns]
    rows = [[format_alpha(la)] + [comp.worst(q)[a] for q in quantities] for a, la in enumerate(comp.log_alpha)]
    rows.append(["fitted r"] + [comp.summary()[q] for q in quantities])
    print(markdown_table(["α"] + [label for _, label in family.worst_columns], rows))
    reused = sum(what == "reused" for _, what, _ in result.log)
    print(f"\n{len(result.log) - reused} steps computed, {reused} reused, {result.seconds:.1f} s")
    print(f"report: {Path(out) / 'report.md'}")
    return 0


def flow(args) -> int:
    """``gradflow flow``: the exact flow of the built-in task at every α, saved, with its figures."""
    task = build_task(args)
    out = Path(args.out)
    las = log_alphas(args)
    family = family_of(task.model)
    speed = family.first_stage_speed(task.model)
    if args.tau_max is None and speed == 0:
        raise CLIError(
            "the gradient at θ = 0 vanishes: the flow from small initialisation does not move; give --tau-max"
        )
    tau_max = args.tau_max if args.tau_max is not None else 5.0 / speed
    ts = np.linspace(0.0, tau_max, args.num_times)
    family.check_resolved(las, ts, rtol=args.rtol, atol=args.atol)  # every α before the first flow
    _claim(
        args,
        out,
        model=args.model,
        model_options=model_options(args),
        log_alphas=las,
        tau_max=args.tau_max,
        num_times=args.num_times,
        rtol=args.rtol,
        atol=args.atol,
    )
    names = task.model.names
    print(f"{task.name}: {family.describe_model(task.model)}, τ ∈ [0, {tau_max:.4g}]")
    flows = []
    for la in las:
        t0 = time.perf_counter()
        name = f"flow_alpha={format_alpha(la)}"
        try:
            result = simulate_flow(
                task.model, u0=task.u0, v0=task.v0, ts=ts, log_alpha=la, rtol=args.rtol, atol=args.atol, progress=True
            )
        except Interrupted as stop:  # the flow up to where it got, marked "interrupted" in the file
            save_result(out / "results" / f"{name}.npz", stop.result)
            print(f"α = {format_alpha(la):>10}: {stop} → {out / 'results' / name}.npz", file=sys.stderr)
            raise
        save_result(out / "results" / f"{name}.npz", result)
        flows.append(result)
        print(
            f"α = {format_alpha(la):>10}: {family.describe_flow(result, names)}, "
            f"{int(result.stats['num_steps'])} solver steps, {time.perf_counter() - t0:.1f} s → "
            f"{out / 'results' / name}.npz"
        )
    family.flow_figures(flows, task.model, title=task.name, folder=out / "figures")
    print(f"figures: {out / 'figures'}")
    return 0


def greedy(args) -> int:
    """``gradflow greedy``: the greedy limit of the built-in task with its checks, saved as a table and a file."""
    task = build_task(args)
    out = Path(args.out)
    if _claim(args, out, model=args.model, model_options=model_options(args), max_stages=args.max_stages):
        (out / "greedy-stages.npz").unlink(missing_ok=True)  # another run's stages
    family = family_of(task.model)
    t0 = time.perf_counter()
    try:
        path = greedy_limit(
            task.model,
            u0=task.u0,
            v0=task.v0,
            max_stages=args.max_stages,
            progress=True,
            checkpoint=out / "greedy-stages.npz",  # a re-run resumes from the stages finished
            throw=False,
        )  # a phase (B) that fails ends the path; the summary says why
    except Interrupted as stop:  # the stages finished before Ctrl-C, marked "interrupted" in the file
        save_result(out / "greedy.npz", stop.result)
        print(f"{stop} → {out / 'greedy.npz'}", file=sys.stderr)
        raise
    seconds = time.perf_counter() - t0
    text = family.greedy_summary(path, task.model.names)
    save_result(out / "greedy.npz", path)
    (out / "greedy-stages.npz").unlink(missing_ok=True)  # kept for a re-run after Ctrl-C only
    (out / "greedy.md").write_text(f"# Greedy limit of {task.name} ({seconds:.1f} s)\n\n{text}")
    print(f"{task.name}: {family.describe_model(task.model)}; greedy limit in {seconds:.1f} s\n")
    print(text)
    print(f"results: {out / 'greedy.npz'}, {out / 'greedy.md'}")
    return 0

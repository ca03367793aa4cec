"""The ``gradflow`` command line: ``demo``, ``flow``, ``greedy``, ``compare``, ``sweep`` (and the networks' ``vit``, ``gpt``, ...).

Usage::

    gradflow demo --out demo_output                      # the paper's toy task, Figures 6–10, report
    gradflow flow --model diagonal_linear --p 8 --alpha 1e-2 1e-8 --out flow_output
    gradflow greedy --model diagonal_attention --dim 10 --out greedy_output
    gradflow compare --model diagonal_linear --log-alpha -10 -100 -1000 --out compare_output
    gradflow compare --model attention_full --alpha 1e-4 1e-16 --out compare_output   # full weights W = U Vᵀ
    gradflow demo --full-weights --out demo_output       # Figure 2 d–f exactly, into demo_output/full_weights
    gradflow sweep sweep.toml --out sweep_output            # a grid of tasks × seeds × α (see docs: Scaling out)

Bad input exits with status 2 and a one-line ``gradflow: error: ...`` message.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from . import _rank_cli, models
from ._checks import check_int, check_scales
from ._demo import PAPER_ALPHAS, QUICK, DemoConfig, run_demo
from ._flow import simulate_flow
from ._greedy import greedy_limit
from ._io import save_result
from ._model import evaluate_g
from ._plots import coordinate_groups, plot_coordinates, plot_loss, save_figure
from ._rank_demo import RankDemoConfig
from ._report import format_alpha, greedy_summary, markdown_table, stage_time_rows
from ._sweep_io import FORMATS

_OWN = ("demo", "flow", "greedy", "compare", "sweep")


class CLIError(Exception):
    """Bad command-line input (reported on one line, exit status 2)."""


def _number(convert, check, expected: str):
    """An argparse ``type`` that converts with ``convert`` and validates with ``check`` (which raises ValueError)."""

    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        try:
            check(value)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
        return value

    return parse


def _positive(x: float) -> None:
    if not (math.isfinite(x) and x > 0):
        raise ValueError(f"expected a positive number, got {x!r}")


def _non_negative(x: float) -> None:
    if not (math.isfinite(x) and x >= 0):
        raise ValueError(f"expected a non-negative number, got {x!r}")


_positive_int = _number(int, lambda x: check_int(x, "the value"), "a positive integer")
_alpha = _number(float, lambda x: check_scales(x, None, names=("alpha", "--log-alpha")), "a number in (0, 1)")
_log_alpha = _number(float, lambda x: check_scales(None, x, names=("--alpha", "log alpha")), "a negative number")
_positive_float = _number(float, _positive, "a positive number")
_non_negative_float = _number(float, _non_negative, "a non-negative number")


def _add_model_options(p: argparse.ArgumentParser, *, alphas: bool = True, tau_default: str = "") -> None:
    p.add_argument(
        "--model",
        choices=sorted(models.BUILTIN) + sorted(models.FACTORIZED),
        default="diagonal_attention",
        help="built-in task (default: diagonal_attention, the paper's toy task); matrix_factorization, "
        "matrix_sensing and attention_full have full weights W = U Vᵀ",
    )
    sizes = p.add_argument_group("model sizes (each model takes its own; defaults are the model's)")
    sizes.add_argument("--n", type=_positive_int, help="samples (matrix_factorization, matrix_sensing: columns of W)")
    sizes.add_argument("--m", type=_positive_int, help="rows of W (matrix_factorization, matrix_sensing)")
    sizes.add_argument("--measurements", type=_positive_int, help="measurements (matrix_sensing)")
    sizes.add_argument("--p", type=_positive_int, help="coordinates (diagonal_linear)")
    sizes.add_argument("--tokens", type=_positive_int, help="tokens per sample (attention, transformer)")
    sizes.add_argument("--dim", type=_positive_int, help="token dimension (attention, transformer)")
    sizes.add_argument("--layers", type=_positive_int, help="layers (diagonal_transformer)")
    sizes.add_argument("--heads", type=_positive_int, help="heads per layer (diagonal_transformer)")
    p.add_argument("--seed", type=int, default=0, help="data, teacher and initialisation seed (default 0)")
    if alphas:
        group = p.add_mutually_exclusive_group()
        group.add_argument(
            "--alpha",
            type=_alpha,
            nargs="+",
            metavar="A",
            help="initialisation scales in (0, 1) (default: the paper's 0.1 ... 1e-32)",
        )
        group.add_argument(
            "--log-alpha",
            type=_log_alpha,
            nargs="+",
            metavar="L",
            help="natural logs of the scales (e.g. -10000 for α far below float64's range)",
        )
        p.add_argument("--tau-max", type=_positive_float, help=f"last rescaled time (default: {tau_default})")
        p.add_argument("--num-times", type=_positive_int, default=500, help="recorded times (default 500)")
        p.add_argument(
            "--atol",
            type=_positive_float,
            default=1e-8,
            help="flow tolerance: local error of log w per step (default 1e-8)",
        )
        p.add_argument(
            "--rtol", type=_non_negative_float, default=0.0, help="flow tolerance relative to |log w| (default 0)"
        )


def _factorized(args) -> bool:
    return args.model in models.FACTORIZED


def _model_options(args) -> tuple[tuple[str, object], ...]:
    allowed = models.builtin(args.model, factorized=_factorized(args)).sizes
    registry = [*models.BUILTIN.values(), *models.FACTORIZED.values()]
    sizes = dict.fromkeys(k for entry in registry for k in entry.sizes)  # every size option, in order
    given = [k for k in sizes if getattr(args, k) is not None]
    bad = [k for k in given if k not in allowed]
    if bad:
        takes = " ".join(f"--{k}" for k in allowed)
        raise CLIError(f"--{bad[0]} does not apply to {args.model} (it takes {takes} --seed)")
    return tuple((k, getattr(args, k)) for k in given) + (("seed", args.seed),)


def _log_alphas(args) -> tuple[float, ...]:
    if args.log_alpha is not None:
        return tuple(args.log_alpha)
    return tuple(math.log(a) for a in (args.alpha or PAPER_ALPHAS))


def build_parser(*, networks: bool = True) -> argparse.ArgumentParser:
    """The argument parser; ``networks=False`` leaves out the networks' subcommands (and their imports)."""
    parser = argparse.ArgumentParser(
        prog="gradflow",
        description="Incremental learning with diagonal weights: the exact rescaled gradient flow, "
        "its greedy limit (Algorithm 1 of 'Transformers learn through gradual rank increase') "
        "and their comparison.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser(
        "demo",
        help="the paper's toy task: flows at α = 0.1 ... 1e-32 and on to log α = -1e4, greedy limit, "
        "Figures 6–10, comparison table and report",
    )
    p.add_argument("--out", default="demo_output", help="output folder (default demo_output)")
    p.add_argument("--force", action="store_true", help="recompute everything (default: reuse finished parts)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--quick", action="store_true", help=argparse.SUPPRESS)
    p.add_argument(
        "--full-weights",
        action="store_true",
        help="the second part: the attention head with full weights (Figure 2 d–f) exactly, down to log α = −1000, "
        "with its greedy low-rank limit and float64 GD, into OUT/full_weights",
    )
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("flow", help="the exact rescaled gradient flow at one or several α")
    _add_model_options(p, tau_default="5 / max_i |g_i(0)| or 5 / max_j σ_1(G_j(0)), five times the first stage time")
    p.add_argument("--out", default="flow_output", help="output folder (default flow_output)")
    p.set_defaults(func=_cmd_flow)

    p = sub.add_parser("greedy", help="the greedy limit (Algorithm 1) with its assumption checks")
    _add_model_options(p, alphas=False)
    p.add_argument("--max-stages", type=_positive_int, help="stop after this many stages")
    p.add_argument("--out", default="greedy_output", help="output folder (default greedy_output)")
    p.set_defaults(func=_cmd_greedy)

    p = sub.add_parser("compare", help="flows at several α against the greedy limit: tables, figures, report")
    _add_model_options(p, tau_default="1.25 × the last greedy stage time")
    p.add_argument("--max-stages", type=_positive_int, help="stop the greedy path after this many stages")
    p.add_argument("--perturb", action="store_true", help="also run the perturb-and-continue checks (Figures 9–10)")
    p.add_argument("--out", default="compare_output", help="output folder (default compare_output)")
    p.add_argument("--force", action="store_true", help="recompute everything (default: reuse finished parts)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_compare)

    _add_sweep(sub)
    if networks:
        from .nets._cli import add_subcommands

        add_subcommands(sub)
    return parser


def _print_outputs(result, out: str) -> None:
    reused = sum(what == "reused" for _, what, _ in result.log)
    print(f"\n{len(result.log) - reused} steps computed, {reused} reused, {result.seconds:.1f} s")
    print(f"report: {Path(out) / 'report.md'}")


def _run_pipeline(config, args) -> int:
    result = run_demo(config, out=args.out, force=args.force, progress=not args.no_progress)
    comp = result.comparison
    print(markdown_table(*stage_time_rows(comp)))
    print("worst distance over the stage windows, per α:")
    rows = [
        [format_alpha(la)] + [comp.worst(q)[a] for q in ("beta", "b", "loss", "time")]
        for a, la in enumerate(comp.log_alpha)
    ]
    rows.append(["fitted r"] + [comp.summary()[q] for q in ("beta", "b", "loss", "time")])
    print(markdown_table(["α", "β", "b", "loss", "stage time"], rows))
    _print_outputs(result, args.out)
    return 0


def _cmd_demo(args) -> int:
    if args.full_weights:
        return _rank_cli.demo(out=args.out, quick=args.quick, force=args.force, progress=not args.no_progress)
    return _run_pipeline(QUICK if args.quick else DemoConfig(), args)


def _rank_config(args, **options) -> RankDemoConfig:
    return RankDemoConfig(model=args.model, model_options=_model_options(args), log_alphas=_log_alphas(args), **options)


def _cmd_compare(args) -> int:
    if _factorized(args):
        if args.perturb:
            raise CLIError("--perturb applies to the models with diagonal weights")
        options = dict(tau_max=args.tau_max, num_times=args.num_times, max_stages=args.max_stages, gd_log_alphas=())
        config = _rank_config(args, rtol=args.rtol, atol=args.atol, **options)
        return _rank_cli.pipeline(config, out=args.out, force=args.force, progress=not args.no_progress)
    config = DemoConfig(
        model=args.model,
        model_options=_model_options(args),
        log_alphas=_log_alphas(args),
        figure_log_alphas=None,
        tau_max=args.tau_max,
        num_times=args.num_times,
        max_stages=args.max_stages,
        perturb=args.perturb,
        rtol=args.rtol,
        atol=args.atol,
    )
    return _run_pipeline(config, args)


def _cmd_flow(args) -> int:
    if _factorized(args):
        config = _rank_config(args, rtol=args.rtol, atol=args.atol, gd_log_alphas=())
        return _rank_cli.flow(config, tau_max=args.tau_max, num_times=args.num_times, out=args.out)
    config = DemoConfig(
        model=args.model, model_options=_model_options(args), log_alphas=_log_alphas(args), figure_log_alphas=None
    )
    task = config.task()
    g0 = float(np.max(np.abs(evaluate_g(task.model, np.zeros(task.model.p)))))
    if args.tau_max is None and g0 == 0:
        raise CLIError("g(0) = 0: the flow from small initialisation does not move; give --tau-max")
    tau_max = args.tau_max if args.tau_max is not None else 5.0 / g0
    ts = np.linspace(0.0, tau_max, args.num_times)
    out = Path(args.out)
    flows = []
    print(f"{task.name}: p = {task.model.p}, n = {task.model.n}, τ ∈ [0, {tau_max:.4g}]")
    for la in config.log_alphas:
        t0 = time.perf_counter()
        flow = simulate_flow(task.model, u0=task.u0, v0=task.v0, ts=ts, log_alpha=la, rtol=args.rtol, atol=args.atol)
        name = f"flow_alpha={format_alpha(la)}"
        save_result(out / "results" / f"{name}.npz", flow)
        flows.append(flow)
        print(
            f"α = {format_alpha(la):>10}: final loss {float(flow.loss[-1]):.6g}, "
            f"{int(flow.stats['num_steps'])} solver steps, {time.perf_counter() - t0:.1f} s → {out / 'results' / name}.npz"
        )
    save_figure(plot_loss(flows, title=f"Loss of {task.name}"), out / "figures" / "loss.png")
    for part, idx in coordinate_groups(task.model.names).items():
        save_figure(
            plot_coordinates(flows, task.model.names, idx, title=f"β ({part})"), out / "figures" / f"beta_{part}.png"
        )
    print(f"figures: {out / 'figures'}")
    return 0


def _cmd_greedy(args) -> int:
    if _factorized(args):
        config = RankDemoConfig(model=args.model, model_options=_model_options(args))
        return _rank_cli.greedy(config, max_stages=args.max_stages, out=args.out)
    config = DemoConfig(model=args.model, model_options=_model_options(args))
    task = config.task()
    t0 = time.perf_counter()
    path = greedy_limit(
        task.model, u0=task.u0, v0=task.v0, max_stages=args.max_stages, progress=True, throw=False
    )  # a phase (B) that fails ends the path; the summary says why
    seconds = time.perf_counter() - t0
    text = greedy_summary(path, task.model.names)
    out = Path(args.out)
    save_result(out / "greedy.npz", path)
    (out / "greedy.md").write_text(f"# Greedy limit of {task.name} ({seconds:.1f} s)\n\n{text}")
    print(f"{task.name}: p = {task.model.p}, n = {task.model.n}; greedy limit in {seconds:.1f} s\n")
    print(text)
    print(f"results: {out / 'greedy.npz'}, {out / 'greedy.md'}")
    return 0


def _add_sweep(sub) -> None:
    p = sub.add_parser(
        "sweep",
        help="a grid of built-in tasks × seeds × α from a TOML file: greedy limits, flows, one table, summary figures",
    )
    p.add_argument("config", nargs="?", help="the sweep's TOML file (see the docs' Scaling out page)")
    p.add_argument("--example", action="store_true", help="run the example sweep shipped with gradflow")
    p.add_argument("--out", default="sweep_output", help="output folder (default sweep_output)")
    p.add_argument("--force", action="store_true", help="recompute finished points (default: skip them)")
    p.add_argument("--merge", action="store_true", help="compute nothing: merge the finished points into the table")
    p.add_argument("--format", choices=FORMATS, default="auto", help="table format (default: parquet if pyarrow)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    group = p.add_argument_group(
        "several processes (one per GPU or host)",
        "--distributed or --coordinator starts JAX's distributed runtime (jax.distributed.initialize); values left "
        "out come from JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID or the cluster (SLURM, Open MPI). "
        "--num-processes and --process-id alone split the grid between independent runs (e.g. a job array); "
        "merge their output with --merge.",
    )
    group.add_argument("--distributed", action="store_true", help="initialise jax.distributed (e.g. under srun)")
    group.add_argument("--coordinator", metavar="HOST:PORT", help="address of process 0's coordinator")
    group.add_argument("--num-processes", type=_positive_int, metavar="N", help="how many processes")
    group.add_argument("--process-id", type=int, metavar="I", help="this process, 0 .. N-1")
    p.set_defaults(func=_cmd_sweep)


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise CLIError(f"{name}={value!r} is not an integer") from None


def _cmd_sweep(args) -> int:
    from ._sweep import summarise, sweep
    from ._sweep_config import SweepConfig
    from ._sweep_io import example_config

    if (args.config is None) == (not args.example):
        raise CLIError("give a sweep config (a TOML file) or --example, not both")
    pid, count = args.process_id, args.num_processes
    if args.distributed or args.coordinator:  # before anything starts JAX's backend (reading the config does)
        import jax

        pid = _env_int("JAX_PROCESS_ID") if pid is None else pid
        count = _env_int("JAX_NUM_PROCESSES") if count is None else count
        jax.distributed.initialize(coordinator_address=args.coordinator, num_processes=count, process_id=pid)
        pid, count = None, None  # from the runtime
    elif (pid is None) != (count is None):
        raise CLIError("give --process-id and --num-processes together (or --distributed)")
    config = SweepConfig.from_toml(example_config() if args.example else args.config)
    result = sweep(
        config,
        out=args.out,
        force=args.force,
        progress=not args.no_progress,
        process_id=pid,
        num_processes=count,
        table_format=args.format,
        merge_only=args.merge,
    )
    points = result.computed + result.reused
    if not args.merge:
        print(f"{points} points: {result.computed} computed, {result.reused} already done, {result.seconds:.1f} s")
    if result.failed:
        print(f"{result.failed} points could not be computed: see the table's error column")
    if result.missing:
        print(f"{result.missing} points of the grid are not finished yet; merge with --merge when they are")
        return 0
    if result.table is None:
        print("this process's share is written; process 0 merges the table")
        return 0
    groups = summarise(result.rows)
    header = ["setting", "seeds", "stages K", "fails 4.2", "fails 4.3", "fails 4.4", "rate r (b)", "rate r (time)"]
    rows = []
    for g in groups:
        K = f"{g.num_stages.min()}–{g.num_stages.max()}" if g.num_stages.size else "–"
        med = [float(np.median(g.rates[q])) if g.rates[q].size else float("nan") for q in ("b", "time")]
        rows.append([g.label, g.tasks, K, *(g.failures[a] for a in ("4.2", "4.3", "4.4")), *med])
    print(markdown_table(header, rows))
    print(f"table: {result.table}")
    if result.figures:
        print(f"figures: {Path(args.out) / 'figures'}")
    return 0


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"gradflow: {category.__name__}: {message}", file=sys.stderr if file is None else file)


def main(argv: list[str] | None = None) -> int:
    """Run the ``gradflow`` command line; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(networks=first not in _OWN)
    args = parser.parse_args(argv)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            status = args.func(args)
    except (CLIError, ValueError, OSError, RuntimeError) as err:
        message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        print(f"gradflow: error: {message}", file=sys.stderr)
        return 1 if isinstance(err, RuntimeError) else 2
    except KeyboardInterrupt:
        print("gradflow: interrupted (finished parts are kept; re-run to resume)", file=sys.stderr)
        return 130
    return int(status or 0)

"""``gradflow sweep``: a grid of built-in tasks × seeds × α from a TOML file (docs: Scaling out)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .._kit._report import markdown_table
from .._sweep import SweepConfig, summarise, sweep
from .._sweep._io import FORMATS, example_config
from ._options import CLIError, add_out, non_negative_int, positive_int


def add_sweep(sub) -> None:
    p = sub.add_parser(
        "sweep",
        help="a grid of built-in tasks × seeds × α from a TOML file: greedy limits, flows, one table, summary figures",
    )
    p.add_argument("config", nargs="?", help="the sweep's TOML file (see the docs' Scaling out page)")
    p.add_argument("--example", action="store_true", help="run the example sweep shipped with gradflow")
    add_out(p, "sweep_output", "points", "greedy", "figures")
    p.add_argument("--force", action="store_true", help="recompute finished points (default: skip them)")
    p.add_argument(
        "--merge",
        action="store_true",
        help="compute nothing: merge the finished points into the table (an error, and no table, while some are missing)",
    )
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
    group.add_argument("--num-processes", type=positive_int, metavar="N", help="how many processes")
    group.add_argument("--process-id", type=non_negative_int, metavar="I", help="this process, 0 .. N-1")
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
        overwrite=args.overwrite,
    )
    points = result.computed + result.reused
    if not args.merge:
        print(f"{points} points: {result.computed} computed, {result.reused} already done, {result.seconds:.1f} s")
    if result.failed:
        print(f"{result.failed} points could not be computed: see the table's error column")
    if result.missing and args.merge:
        missing = "1 point of the grid has" if result.missing == 1 else f"{result.missing} points of the grid have"
        raise RuntimeError(
            f"{missing} no rows in {Path(args.out) / 'points'} yet, so no table is written: finish them (the same "
            "gradflow sweep without --merge computes them), then merge again"
        )
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

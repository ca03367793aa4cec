"""The cost of `greedy_limit` against one `simulate_flow` at α = 1e-32 on the same model and horizon.

    python benchmarks/bench_greedy.py                 # the paper's toy task, the demo's 5 stages (~3 min)
    python benchmarks/bench_greedy.py --stages 0      # the whole path (7 stages)
    python benchmarks/bench_greedy.py --dense         # attention head n = 200, 10 tokens, d = 20, dense teacher
    python benchmarks/bench_greedy.py --json out.json # also write the numbers

For each task: `greedy_limit` from a cold start (wall and CPU time, the number of XLA compilations and
their seconds, the seconds of every stage, the stage times), then `simulate_flow` at α = 1e-32 over the
demo's grid (`default_times`: 400 times up to 1.25 T_K), cold (with its compilation) and warm. The machine
is shared, so CPU seconds are reported next to wall seconds. Run it against another checkout with
`PYTHONPATH=/path/to/checkout python benchmarks/bench_greedy.py` (the numbers of docs/benchmarks.md
compare two commits that way).
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import time

import jax
import numpy as np
from jax import monitoring

import gradflow
from gradflow import models
from gradflow._kit import _greedy
from gradflow._kit._comparison import default_times

_COMPILES = collections.Counter()


def _listen(event: str, seconds: float, **kwargs) -> None:
    if event.endswith("backend_compile_duration"):
        _COMPILES["count"] += 1
        _COMPILES["seconds"] += seconds


def _clock():
    return time.perf_counter(), time.process_time()


def bench_greedy(task, max_stages) -> dict:
    """Cold `greedy_limit` (the demo's options: checks on): wall, CPU, compilations, seconds per stage."""
    marks = []
    stage = _greedy._stage

    def timed_stage(*args, **kwargs):  # one record per stage: the time between them is the stage's cost
        out = stage(*args, **kwargs)
        marks.append(time.perf_counter())
        return out

    _greedy._stage = timed_stage
    _COMPILES.clear()
    wall, cpu = _clock()
    try:
        path = gradflow.greedy_limit(task.model, u0=task.u0, v0=task.v0, max_stages=max_stages, throw=False)
    finally:
        _greedy._stage = stage
    end_wall, end_cpu = _clock()
    return dict(
        wall=end_wall - wall,
        cpu=end_cpu - cpu,
        compilations=_COMPILES["count"],
        compile_s=_COMPILES["seconds"],
        stage_s=list(np.diff([wall] + marks)[1:]),
        first_s=marks[0] - wall,
        times=[float(t) for t in path.times],
        result=path.result,
        path=path,
    )


def bench_flow(task, path) -> dict:
    """`simulate_flow` at α = 1e-32 on the demo's grid for this path: cold (compiles) and warm."""
    ts = default_times(path.times, num=400)
    out = {}
    for kind in ("cold", "warm"):
        _COMPILES.clear()
        wall, cpu = _clock()
        flow = gradflow.simulate_flow(task.model, u0=task.u0, v0=task.v0, ts=ts, alpha=1e-32)
        end_wall, end_cpu = _clock()
        out[kind] = dict(wall=end_wall - wall, cpu=end_cpu - cpu, compilations=_COMPILES["count"])
    out["steps"] = int(flow.stats["num_steps"])
    out["horizon"] = float(ts[-1])
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stages", type=int, default=5, help="max_stages (0: the whole path)")
    parser.add_argument("--dense", action="store_true", help="n = 200, d = 20, dense teacher, the whole path")
    parser.add_argument("--no-flow", action="store_true", help="skip the simulate_flow reference")
    parser.add_argument("--json", default=None, help="write the numbers to this file")
    args = parser.parse_args(argv)
    monitoring.register_event_duration_secs_listener(_listen)
    if args.dense:
        task, max_stages = models.diagonal_attention(n=200, dim=20, teacher_nonzero=(None, None)), None
    else:
        task, max_stages = models.diagonal_attention(), (args.stages or None)
    g = bench_greedy(task, max_stages)
    path = g.pop("path")
    print(
        f"greedy_limit: {len(g['times']) - 1} stages ({g['result']}), {g['wall']:.1f} s wall, {g['cpu']:.1f} s CPU, "
        f"{g['compilations']} compilations ({g['compile_s']:.1f} s); until stage 0 is recorded {g['first_s']:.1f} s",
        flush=True,
    )
    print("seconds per stage: " + " ".join(f"{s:.2f}" for s in g["stage_s"]))
    print("stage times: " + " ".join(f"{t:.8f}" for t in g["times"][1:]), flush=True)
    result = dict(task=task.config, greedy=g, jax=jax.__version__)
    if not args.no_flow:
        f = bench_flow(task, path)
        print(
            f"simulate_flow α = 1e-32 to τ = {f['horizon']:.3g} ({f['steps']} steps): cold {f['cold']['wall']:.1f} s wall "
            f"/ {f['cold']['cpu']:.1f} s CPU, warm {f['warm']['wall']:.1f} s wall / {f['warm']['cpu']:.1f} s CPU; "
            f"greedy / cold flow: {g['wall'] / f['cold']['wall']:.2f} (wall), {g['cpu'] / f['cold']['cpu']:.2f} (CPU)"
        )
        result["flow"] = f
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1, default=lambda x: None if isinstance(x, float) and math.isnan(x) else x)


if __name__ == "__main__":
    main()

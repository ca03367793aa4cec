"""A batch of flows on the CPU: one ``vmap``-ed solve against each run alone (``simulate_flow``'s ``batching``).

    python benchmarks/bench_batching.py             # the dense head at four α, then the example sweep (~12 min)
    python benchmarks/bench_batching.py --quick     # the dense head at two α only, no sweep (~2 min)
    python benchmarks/bench_batching.py --record    # also write its section of docs/benchmarks.md

1. The dense attention head of "Solver cost" (n = 200, 10 tokens, dim 20, every teacher coordinate nonzero),
   τ ∈ [0, 1] at 31 times, at log α = −18.42, −73.68, −230.26, −690.78 (α = 1e-8, 1e-32, 1e-100, 1e-300):
   ``batching="vmap"`` (Kvaerno5 throughout, in lock-step, the Jacobian columns at every step),
   ``batching="separate"`` (each run alone, one thread per core; the CPU's default) and a plain loop of single
   runs, each after its compilation, in the same process: wall and CPU seconds, steps per run, and the
   largest difference in β between the batch and the single runs.
2. The shipped example sweep (``gradflow sweep --example``: 3 small task settings × 8 seeds × 3 α, 72 flows) with
   ``batching = "vmap"`` and ``"separate"``: the greedy paths are computed once and reused, so the times
   are the flows' and their comparisons'.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import pathlib
import shutil
import sys
import tempfile
import time

import jax
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing gradflow
    sys.path.insert(0, str(ROOT))

import gradflow  # noqa: E402
from benchmarks import _common  # noqa: E402
from gradflow import SweepConfig, models, simulate_flow  # noqa: E402
from gradflow._sweep._io import example_config  # noqa: E402

DOCS = ROOT / "docs" / "benchmarks.md"
SECTION = "Batches of runs on the CPU"
LOG_ALPHAS = (-18.42, -73.68, -230.26, -690.78)
NOTES = """\
Why the `vmap`-ed solve loses on a CPU: its runs go in lock-step, so every run takes as many steps as the
longest, and with Kvaerno5 only (under `vmap` both branches of the switch to Dopri8 would run); its Jacobian
columns (16 by default) are recomputed at every step, since `vmap` turns the lazy refresh into an
unconditional one; and XLA's batched small matrix products on the CPU are slower per run than one run's.
A GPU runs the lanes of a step at the cost of one, which is why `"vmap"` stays its default (not measured
yet: no GPU has been lent). The threads of `"separate"` gain over the loop only when the cores are free:
`--quick` at load ≈ 3.7 measured 0.59 of the loop's time (5.4 s against 9.2 s); at load ≈ 5 there was nothing
to gain. On the example sweep's tiny models (p ≤ 6) a `vmap`-ed step costs little more than a single one,
so the gap is smaller.
"""


def _timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def bench_head(log_alphas) -> list[list[str]]:
    """The dense head's batch three ways; rows of the table."""
    task = models.diagonal_attention(n=200, tokens=10, dim=20, teacher_nonzero=(None, None))
    ts = np.linspace(0.0, 1.0, 31)
    las = np.asarray(log_alphas)

    def flow(batching=None, log_alpha=las, times=ts):
        kw = {} if batching is None else dict(batching=batching)
        return simulate_flow(task.model, u0=task.u0, v0=task.v0, ts=times, log_alpha=log_alpha, **kw)

    for batching in ("vmap", "separate"):  # compile both, on a short horizon
        flow(batching, las[:2] * 0 - 5.0, ts * 0.01)
    loop, loop_s, loop_cpu = _timed(lambda: [flow(log_alpha=float(la)) for la in las])
    rows = []
    for name, batching in (("one `vmap`-ed solve", "vmap"), ("each run alone, one per core", "separate")):
        batch, wall, cpu = _timed(lambda b=batching: flow(b))
        diff = max(float(np.max(np.abs(batch.beta[j] - one.beta))) for j, one in enumerate(loop))
        steps = " / ".join(str(int(s)) for s in batch.stats["num_steps"])
        rows.append([name, steps, f"{wall:.1f}", f"{cpu:.1f}", f"{wall / loop_s:.2f}", f"{diff:.1e}"])
        print(rows[-1], flush=True)
    steps = " / ".join(str(int(one.stats["num_steps"])) for one in loop)
    rows.append(["single runs, one after the other", steps, f"{loop_s:.1f}", f"{loop_cpu:.1f}", "1.00", "0"])
    return rows


def bench_sweep() -> list[list[str]]:
    """The example sweep's flows, ``vmap`` against ``separate``, the greedy paths shared."""
    base = SweepConfig.from_toml(example_config())
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        greedy = dataclasses.replace(base, run="greedy")
        gradflow.sweep(greedy, out=tmp / "greedy", progress=False, figures=False)
        for batching in ("vmap", "separate"):
            out = tmp / batching
            shutil.copytree(tmp / "greedy" / "greedy", out / "greedy")
            config = dataclasses.replace(base, batching=batching)
            result, wall, cpu = _timed(lambda c=config, o=out: gradflow.sweep(c, out=o, progress=False, figures=False))
            rows.append([f'`batching = "{batching}"`', str(result.computed), f"{wall:.1f}", f"{cpu:.1f}"])
            print(rows[-1], flush=True)
    ratio = float(rows[0][2]) / float(rows[1][2])
    rows[1].append(f"{ratio:.1f}× faster")
    rows[0].append("")
    return rows


def _table(header, rows) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="two α of the dense head, no sweep")
    parser.add_argument("--record", action="store_true", help=f"write the section {SECTION!r} of {DOCS}")
    args = parser.parse_args(argv)
    las = LOG_ALPHAS[:2] if args.quick else LOG_ALPHAS
    head = bench_head(las)
    text = [
        f"## {SECTION}\n",
        f"`python benchmarks/bench_batching.py{' --quick' if args.quick else ''}` (see its docstring), "
        f"{datetime.date.today()}: {_common.cpu_name()}, {os.cpu_count()} cores shared with other jobs (load average "
        f"{os.getloadavg()[0]:.1f} at the end), no GPU; jax {jax.__version__}. Steps do not depend on the load; "
        "seconds do.\n",
        f"Dense attention head (n = 200, 10 tokens, dim 20, dense teacher), τ ∈ [0, 1] at 31 times, "
        f"log α = {', '.join(str(a) for a in las)}; ratio = wall seconds against the loop of single runs; "
        "Δβ = the largest difference from the single runs:\n",
        _table(["batch", "steps per run", "wall (s)", "CPU (s)", "ratio", "max Δβ"], head) + "\n",
    ]
    if not args.quick:
        sweep = bench_sweep()
        text += [
            f"The example sweep (`gradflow sweep --example`, {sweep[0][1]} flows and their comparisons; the greedy "
            "paths computed once beforehand and reused by both):\n",
            _table(["sweep", "points", "wall (s)", "CPU (s)", ""], sweep) + "\n",
        ]
    text.append(NOTES)
    out = "\n".join(text)
    print(out)
    if args.record:
        _common.record_section(DOCS, SECTION, out)
    return out


if __name__ == "__main__":
    main()

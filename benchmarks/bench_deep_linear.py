"""The cost of a deep linear network's exact flow against log(1/α): the direct integration, the split of the layers and
the small-α path side by side.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_deep_linear.py [--depths 3 4] [--record]

On Saxe's whitened task ``L(W) = ½‖W − diag(s)‖²``, ``s = (3, 2, 1)`` (docs/deep-linear.md), from the aligned balanced
start (every layer ``diag(1, 0.8, 1.2)``) and a Gaussian one (i.i.d. N(0, 1) layers, seed 0), τ ∈ [0, 1.5/(L−2)] at
31 times: the path ``simulate_flow`` takes (the direct integration; the split of the layers between its range and the
small-α path's, "split, held" where its plateaus are held, ``α^{L−2} < 1e-12``; the small-α path below ``α = 1e-2 (atol + rtol)``), its steps and seconds after compiling it, at
α = 1e-2, 1e-4, 1e-6, 1e-8, 1e-9 and log α = −30, −100, −1000, −1e4, and the ratio to the steps at α = 1e-4 (goal: ≤ 1.5 at log α = −1e4); the last
columns are the modes learned at the end (``b < 1/2``; from the Gaussian start the third is learned later) and the
largest ``|log σ − log s_r|`` over them.

``--record`` writes the section "Deep linear: cost of the exact flow against log(1/α)" of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing gradflow
    sys.path.insert(0, str(ROOT))

from benchmarks import _common  # noqa: E402
from gradflow import DeepLinearModel, simulate_flow  # noqa: E402
from gradflow._deep_linear._checks import lowest_log_alpha, small_log_alpha  # noqa: E402
from gradflow._deep_linear._held import HELD  # noqa: E402

SECTION = "Deep linear: cost of the exact flow against log(1/α)"
S = np.array([3.0, 2.0, 1.0])
A0 = np.array([1.0, 0.8, 1.2])
LOG_ALPHAS = (math.log(1e-2), math.log(1e-4), math.log(1e-6), math.log(1e-8), math.log(1e-9), -30.0, -100.0, -1e3, -1e4)
BASE = LOG_ALPHAS[1]


def starts(depth: int) -> dict:
    rng = np.random.default_rng(0)
    return {
        "aligned": tuple(np.diag(A0) for _ in range(depth)),
        "Gaussian": tuple(rng.standard_normal((3, 3)) for _ in range(depth)),
    }


def run(depth: int, start: str, W0, log_alpha: float) -> dict:
    n = len(S)
    model = DeepLinearModel(
        lambda x, W: W @ x, np.sqrt(n) * np.eye(n), np.sqrt(n) * np.diag(S), shape=(n, n), depth=depth
    )
    ts = np.linspace(0.0, 1.5 / (depth - 2), 31)
    kw = dict(u0=W0, ts=ts, log_alpha=log_alpha, throw=False)
    simulate_flow(model, **kw)  # compiles
    begin = time.perf_counter()
    res = simulate_flow(model, **kw)
    seconds = time.perf_counter() - begin
    return dict(
        depth=depth,
        start=start,
        log_alpha=log_alpha,
        path=path(depth, ts[-1], log_alpha),
        seconds=seconds,
        load=", ".join(f"{x:.1f}" for x in os.getloadavg()),
        steps=int(res.stats["num_steps"]),
        done=str(res.result) == "successful",
        learned=int(np.sum(res.b[-1] < 0.5)),
        error=float(np.max(np.abs(res.log_singular_values[-1] - np.log(S))[res.b[-1] < 0.5], initial=0.0)),
    )


def path(depth: int, tau_end: float, log_alpha: float) -> str:
    """The path ``simulate_flow`` takes at the default tolerances (gradflow/_deep_linear/_flow.py)."""
    if log_alpha <= small_log_alpha(0.0, 1e-8):
        return "small α"
    if log_alpha >= lowest_log_alpha(depth, tau_end, 0.0, 1e-8):
        return "direct"
    return "split, held" if (depth - 2) * log_alpha < math.log(HELD) else "split"


def render(rows: list[dict], argv) -> str:
    lines = _common.table_head(
        [
            "L",
            "start",
            "log α",
            "path",
            "steps",
            "s",
            "steps / at 1e-4",
            "learned at the end",
            "their max |log σ − log s|",
        ]
    )
    for r in rows:
        base = next(
            q["steps"] for q in rows if (q["depth"], q["start"], q["log_alpha"]) == (r["depth"], r["start"], BASE)
        )
        steps = f"{r['steps']:,}" + ("" if r["done"] else ", not finished")
        cells = [r["depth"], r["start"], f"{r['log_alpha']:.4g}", r["path"], steps, f"{r['seconds']:.1f} [{r['load']}]"]
        lines.append(_common._cells([*cells, f"{r['steps'] / base:.2f}", r["learned"], f"{r['error']:.1e}"]))
    intro = (
        f"`python benchmarks/bench_deep_linear.py{(' ' + ' '.join(argv)) if argv else ''}` (see its docstring). "
        f"Machine: {_common.cpu_name()}, 2 cores shared with other jobs (load averages in brackets), no GPU. "
        "Seconds after compilation; default tolerances (atol = 1e-8). The small-α path's steps are those of its scipy "
        "solves (the sleeping layers' flow in DOP853, the jumps in Radau), the split's its Radau's (and, where its "
        "plateaus are held, \"split, held\", their Kvaerno5's), the direct integration's Kvaerno5's."
    )
    return f"## {SECTION}\n\n" + intro + "\n\n" + "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", type=int, nargs="+", default=[3, 4])
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    for depth in args.depths:
        for start, W0 in starts(depth).items():
            for la in LOG_ALPHAS:
                rows.append(run(depth, start, W0, la))
                print(rows[-1], flush=True)  # a long run: each row as it is measured
    _common.show(render(rows, sys.argv[1:]), SECTION, args.record)


if __name__ == "__main__":
    main()

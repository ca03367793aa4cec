"""How the cost of the depth family's exact flow grows with log(1/α), and what gradient descent would cost.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_depth.py [--depths 3 4] [--record]

On Saxe's whitened modes ``L(β) = ½‖β − s‖²``, ``s = (3, 2, 1)`` (``p = 3``), balanced starts ``W0 = 1``, τ ∈ [0, 1.5/(L−2)] at
16 times: the steps (rejected) and seconds of ``simulate_flow`` at α = 1e-2, 1e-4, 1e-8, log α = −1000 and −1e4,
each after compiling it, and the ratio to the steps at α = 1e-4 (goal: ≤ 1.5 at log α = −1e4). Beside it the
gradient-descent steps the same τ-horizon takes at a stable learning rate (``lr = 0.1 / max s``): a plateau lasts
``α^{−(L−2)}`` in t, so ``τ_end / (lr α^{L−2})`` steps, which no computer takes below α ≈ 1e-8 at L = 3.
``--record`` writes the section "Depth: cost of the exact flow against log(1/α)" of docs/benchmarks.md.
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
from gradflow import DepthModel, simulate_flow  # noqa: E402

SECTION = "Depth: cost of the exact flow against log(1/α)"
S = np.array([3.0, 2.0, 1.0])
LOG_ALPHAS = (math.log(1e-2), math.log(1e-4), math.log(1e-8), -1e3, -1e4)


def run(depth: int, log_alpha: float) -> dict:
    model = DepthModel(lambda x, b: x @ b, np.sqrt(3) * np.eye(3), np.sqrt(3) * S, p=3, depth=depth)
    ts = np.linspace(0.0, 1.5 / (depth - 2), 16)
    kw = dict(u0=np.ones((depth, 3)), log_alpha=log_alpha, throw=False)
    simulate_flow(model, ts=ts, **kw)  # compiles
    start = time.perf_counter()
    res = simulate_flow(model, ts=ts, **kw)
    st = res.stats
    gd_steps = (
        ts[-1] / (0.1 / S.max()) * math.exp(min(-(depth - 2) * log_alpha, 700.0)) if log_alpha > -350 else math.inf
    )
    return dict(
        depth=depth,
        log_alpha=log_alpha,
        seconds=time.perf_counter() - start,
        load=", ".join(f"{x:.1f}" for x in os.getloadavg()),
        steps=int(st["num_steps"]),
        rejected=int(st["num_rejected_steps"]),
        switches=int(st["switches"]),
        gd=gd_steps,
        error=float(np.max(np.abs(res.beta[-1] - S))),
        done=str(res.result) == "successful",
    )


def render(rows: list[dict], argv) -> str:
    lines = _common.table_head(
        ["L", "log α", "steps (rejected)", "switches", "s", "steps / at 1e-4", "GD steps", "|β − s|"]
    )
    for r in rows:
        base = next(q["steps"] for q in rows if q["depth"] == r["depth"] and q["log_alpha"] == LOG_ALPHAS[1])
        steps = f"{r['steps']:,} ({r['rejected']})" + ("" if r["done"] else ", not finished")
        gd = f"{r['gd']:.1e}" if np.isfinite(r["gd"]) else "∞"
        cells = [r["depth"], f"{r['log_alpha']:.4g}", steps, r["switches"], f"{r['seconds']:.1f} [{r['load']}]"]
        lines.append(_common._cells([*cells, f"{r['steps'] / base:.2f}", gd, f"{r['error']:.1e}"]))
    intro = (
        f"`python benchmarks/bench_depth.py{(' ' + ' '.join(argv)) if argv else ''}` (see its docstring). "
        f"Machine: {_common.cpu_name()}, 2 cores shared with other jobs (load averages in brackets), no GPU. "
        "Seconds after compilation; default tolerances (atol = 1e-8)."
    )
    return intro + "\n\n" + "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", type=int, nargs="+", default=[3, 4])
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args(argv)
    rows = [run(depth, la) for depth in args.depths for la in LOG_ALPHAS]
    _common.show(render(rows, sys.argv[1:]), SECTION, args.record)


if __name__ == "__main__":
    main()

"""The cost of the depth family's exact flow against log(1/α) and L, and against gradient descent.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_depth.py [--depths 2 3 4 5 6] [--gd-depth 3] [--record]

On Saxe's whitened modes ``L(β) = ½‖β − s‖²``, ``s = (3, 2, 1)`` (``p = 3``, ``gradflow.models.saxe_modes``),
balanced starts ``W0 = 1``:

1. *Cost against log(1/α) and L*: τ ∈ [0, 1.5/(L−2)] (``[0, 1.5]`` at L = 2) at 16 times, the steps (rejected) and
   seconds of ``simulate_flow`` at log α = −5, α = 1e-4, 1e-8, log α = −100, −1000, −1e4 and L = 2 … 6, each after
   compiling it, and the ratio to the steps at α = 1e-4 (goal: ≤ 1.5 at log α = −1e4). Beside it the
   gradient-descent steps the same τ-horizon takes at a stable learning rate (``lr = 0.1 / max s``): a plateau lasts
   ``α^{−(L−2)}`` in t, so ``τ_end / (lr α^{L−2})`` steps.
2. *Exact flow against gradient descent* (L = ``--gd-depth``): both run to τ = 1.25 (every mode learned at L = 3) at
   α = 1e-2, 1e-3, 1e-4, GD (``simulate_gd``, lr = 1e-3, a record every 250 steps) for real, each after compiling it: steps,
   seconds and their ratio side by side, and the largest ``|β_GD − β_flow|`` over the recorded times (GD's O(lr)
   lag: at the stable lr = 0.1 / max s it is 0.8–1.9, as the jumps are O(1) wide in t). GD runs whose step count exceeds ``--gd-cap`` are extrapolated from the measured
   seconds per step.

``--record`` writes the sections "Depth: cost of the exact flow against log(1/α)" and "Depth: exact flow against
gradient descent" of docs/benchmarks.md.
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
from gradflow import models, simulate_flow, simulate_gd  # noqa: E402

SECTION = "Depth: cost of the exact flow against log(1/α)"
GD_SECTION = "Depth: exact flow against gradient descent"
S = np.array([3.0, 2.0, 1.0])
LOG_ALPHAS = (-5.0, math.log(1e-4), math.log(1e-8), -100.0, -1e3, -1e4)
GD_ALPHAS = (1e-2, 1e-3, 1e-4)
GD_TAU = 1.25
LR = 0.1 / S.max()  # a stable learning rate: the cost columns' GD steps
RACE_LR = 1e-3  # GD within about 2e-2 of the flow's β (its lag in t is O(lr), its jumps O(1) wide in t)


def run(depth: int, log_alpha: float) -> dict:
    model = models.saxe_modes(depth=depth, singular_values=tuple(S)).model
    ts = np.linspace(0.0, 1.5 / max(depth - 2, 1), 16)
    kw = dict(u0=np.ones((depth, 3)), log_alpha=log_alpha, throw=False)
    simulate_flow(model, ts=ts, **kw)  # compiles
    start = time.perf_counter()
    res = simulate_flow(model, ts=ts, **kw)
    st = res.stats
    unit = -log_alpha if depth == 2 else math.exp(min(-(depth - 2) * log_alpha, 700.0))  # t per unit τ
    gd_steps = ts[-1] / LR * unit if unit < 1e300 else math.inf
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
    return f"## {SECTION}\n\n" + intro + "\n\n" + "\n".join(lines)


def race(depth: int, alpha: float, cap: int) -> dict:
    """The exact flow and GD from ``α W0`` to τ = ``GD_TAU``, each timed after compiling it."""
    task = models.saxe_modes(depth=depth, singular_values=tuple(S))
    unit = 1 / math.log(1 / alpha) if depth == 2 else alpha ** (depth - 2)  # dτ/dt
    steps = int(math.ceil(GD_TAU / (RACE_LR * unit)))
    every = 250  # records 0.25 apart in t: they resolve the jumps, O(1) wide in t (a record per α^{L−2}/4 in τ)
    steps = every * math.ceil(steps / every)
    ts = np.arange(0, steps + 1, every) * RACE_LR * unit
    kw = dict(u0=task.u0, alpha=alpha, throw=False)
    simulate_flow(task.model, ts=ts, **kw)  # compiles
    start = time.perf_counter()
    flow = simulate_flow(task.model, ts=ts, **kw)
    flow_s = time.perf_counter() - start
    ran = min(steps, every * max(64, cap // every))  # ≥ 64 records: the compiled block of its warm-up
    simulate_gd(task.model, lr=RACE_LR, steps=64 * every, record_every=every, **kw)  # compiles
    start = time.perf_counter()
    gd = simulate_gd(task.model, lr=RACE_LR, steps=ran, record_every=every, **kw)
    gd_s = (time.perf_counter() - start) * steps / ran
    gap = float(np.max(np.abs(gd.beta - flow.beta[: gd.beta.shape[0]])))
    return dict(
        depth=depth,
        alpha=alpha,
        load=", ".join(f"{x:.1f}" for x in os.getloadavg()),
        flow_steps=int(flow.stats["num_steps"]),
        flow_s=flow_s,
        gd_steps=steps,
        gd_s=gd_s,
        extrapolated=ran < steps,
        gap=gap if ran == steps else math.nan,
    )


def render_race(rows: list[dict], argv) -> str:
    lines = _common.table_head(
        ["L", "α", "flow steps", "flow s", "GD steps", "GD s", "GD s / flow s", "max |β_GD − β_flow|"]
    )
    for r in rows:
        gd_s = f"{r['gd_s']:.2f}" + (" (extrapolated)" if r["extrapolated"] else "") + f" [{r['load']}]"
        gap = "–" if math.isnan(r["gap"]) else f"{r['gap']:.1e}"
        cells = [r["depth"], f"{r['alpha']:g}", f"{r['flow_steps']:,}", f"{r['flow_s']:.2f}", f"{r['gd_steps']:,}"]
        lines.append(_common._cells([*cells, gd_s, f"{r['gd_s'] / r['flow_s']:.3g}", gap]))
    intro = (
        f"`python benchmarks/bench_depth.py{(' ' + ' '.join(argv)) if argv else ''}` (see its docstring): both to "
        f"τ = {GD_TAU} on Saxe's modes s = (3, 2, 1), GD at lr = {RACE_LR:g}. Machine: {_common.cpu_name()}, 2 cores "
        "shared with other jobs (load averages in brackets), no GPU. Seconds after compilation."
    )
    return f"## {GD_SECTION}\n\n" + intro + "\n\n" + "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", type=int, nargs="+", default=[2, 3, 4, 5, 6])
    parser.add_argument("--gd-depth", type=int, default=3)
    parser.add_argument("--gd-cap", type=int, default=2_000_000, help="GD steps run at most (then extrapolated)")
    parser.add_argument("--skip-cost", action="store_true", help="only the race against GD")
    parser.add_argument("--skip-race", action="store_true", help="only the cost against log(1/α) and L")
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args(argv)
    if not args.skip_race:
        races = [race(args.gd_depth, alpha, args.gd_cap) for alpha in GD_ALPHAS]
        _common.show(render_race(races, sys.argv[1:]), GD_SECTION, args.record)
    if not args.skip_cost:
        rows = []
        for depth in args.depths:
            for la in LOG_ALPHAS:
                rows.append(run(depth, la))
                print(rows[-1], flush=True)  # a long run: each row as it is measured
        _common.show(render(rows, sys.argv[1:]), SECTION, args.record)


if __name__ == "__main__":
    main()

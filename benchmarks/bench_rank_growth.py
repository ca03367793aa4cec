"""How the cost of the exact full-weight flow grows with log(1/α): the steps of the plateau leaps (``FactorizedSolver(method="leap")``,
what ``"auto"`` takes below m + n = 64) from α = 1e-32 down to log α = −1e7, the bottom of the range the leaps accept; with ``--split``,
the split integrator (``method="split"``) beside them in the same process.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_rank_growth.py [--dims 6 20] [--log-alphas ...] [--split] [--record]

On ``models.attention_full(n=50, tokens=4, dim=d, teacher_kq=(1, 0.5), teacher_vo=(1, 0.5))``, τ ∈ [0, 2.5] at 31
times (the setting of ``bench_rank_flow.py --solvers``), one process: each flow after compiling it (a first call
over τ ∈ [0, 1e-6] on the same shapes), with its steps (explicit steps and leaps), leaps, pieces and evaluations of G,
its seconds and those steps over the steps at 1e-32. ``--record`` writes the section "Full weights: how the cost
grows with log(1/α)" of docs/benchmarks.md.
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
from gradflow import FactorizedSolver, models, simulate_flow  # noqa: E402

SECTION = "Full weights: how the cost grows with log(1/α)"
TS = np.linspace(0.0, 2.5, 31)
LOG_ALPHAS = (math.log(1e-32), -200.0, -500.0, -1e3, -2e3, -5e3, -1e4, -1e5, -1e6, -1e7)


def run(task, log_alpha: float, method: str = "leap") -> dict:
    kw = dict(u0=task.u0, v0=task.v0, log_alpha=log_alpha, solver=FactorizedSolver(method=method), throw=False)
    simulate_flow(task.model, ts=TS * 1e-6 / TS[-1], **kw)
    start = time.perf_counter()
    res = simulate_flow(task.model, ts=TS, **kw)
    st = res.stats
    return dict(
        log_alpha=log_alpha,
        seconds=time.perf_counter() - start,
        load=", ".join(f"{x:.1f}" for x in os.getloadavg()),
        steps=int(st["num_steps"]),
        rejected=int(st["num_rejected_steps"]),
        leaps=int(st["num_leaps"]),
        pieces=int(st["num_pieces"]),
        evaluations=int(st["num_evaluations"]),
        splits=int(st.get("num_split_steps", 0)),
        done=str(res.result) == "successful",
    )


def _scale(log_alpha: float) -> str:
    """``1e-32``, ``−5,000`` or ``−1e5``: how the table names a scale."""
    if log_alpha == LOG_ALPHAS[0]:
        return "1e-32"
    if -log_alpha < 1e4:
        return f"−{-log_alpha:,.0f}"
    mantissa, exponent = f"{-log_alpha:.0e}".split("e")
    return f"−{mantissa}e{int(exponent)}"


def _cost(r: dict, base: dict) -> list[str]:
    """The cells of one run: steps (rejected; split steps), leaps and pieces, G, seconds, steps over those at 1e-32."""
    steps = f"{r['steps']:,} ({r['rejected']}" + (f"; {r['splits']:,} split" if r["splits"] else "") + ")"
    steps += "" if r["done"] else ", not finished"
    ratio = f"{r['steps'] / base['steps']:.2f}"
    return [steps, f"{r['leaps']}, {r['pieces']}", f"{r['evaluations']:,}", f"{r['seconds']:.1f} [{r['load']}]", ratio]


def render(rows_by_d: dict, argv) -> str:
    split = any("split" in r for rows in rows_by_d.values() for r in rows)
    cost = ["steps (rejected)", "leaps, pieces", "G", "s", "steps / steps at 1e-32"]
    lines = _common.table_head(["d", "log α", *cost, *(f"split: {c}" for c in cost if split)])
    for d, rows in rows_by_d.items():
        for r in rows:
            cells = [d, _scale(r["log_alpha"]), *_cost(r, rows[0])]
            if split:
                cells += _cost(r["split"], rows[0]["split"])
            lines.append(_common._cells(cells))
    intro = (
        f"`python benchmarks/bench_rank_growth.py{(' ' + ' '.join(argv)) if argv else ''}` (see its docstring). "
        f"Machine: {_common.cpu_name()}, 2 cores shared with other jobs (load averages in brackets), no GPU; "
        f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}. Seconds after compilation."
    )
    reading = (
        "Reading: the steps grow from 1e-32 while the plateaus, Δτ · log(1/α) long in t, are shorter than the "
        "relaxation of the awake columns after each jump, which explicit steps follow at their stability limit; once "
        "the plateaus outlast it they do not grow any more: only the leaps' pieces (no G) do. See *Full weights: "
        "solvers* for what that relaxation costs and what was tried to shorten it."
    )
    if split:
        reading += (
            " The split integrator takes split steps in a few of those relaxations (its steps in parentheses); "
            "each costs the awake block's Jacobian, so G is the fair count beside the leaps'."
        )
    return "\n".join([_common.header(SECTION, argv), intro, "", *lines, "", reading, ""])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dims", type=int, nargs="*", default=[6, 20])
    parser.add_argument("--log-alphas", type=float, nargs="*", default=list(LOG_ALPHAS[1:]), help="besides 1e-32")
    parser.add_argument("--split", action="store_true", help='the split integrator (`"split"`) beside the leaps')
    parser.add_argument("--record", action="store_true", help="write the section into docs/benchmarks.md")
    args = parser.parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv
    rows_by_d = {}
    for d in args.dims:
        task = models.attention_full(n=50, tokens=4, dim=d, teacher_kq=(1, 0.5), teacher_vo=(1, 0.5))
        rows_by_d[d] = []
        for la in (LOG_ALPHAS[0], *args.log_alphas):
            r = run(task, la)
            print(f"d = {d}, log α = {la:g}: {r['steps']} steps, {r['seconds']:.1f} s", flush=True)
            if args.split:
                r["split"] = run(task, la, "split")
                print(f"  split: {r['split']['steps']} steps, {r['split']['seconds']:.1f} s", flush=True)
            rows_by_d[d].append(r)
    _common.show(render(rows_by_d, argv), SECTION, args.record)


if __name__ == "__main__":
    main()

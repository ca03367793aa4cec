"""The cost of a deep linear network's direct integration (moderate α) against the layers' size: Newton's equations
solved matrix-free, by GMRES on Jacobian-vector products, side by side with the dense Jacobian's LU (every size before
2026-12-02).

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_deep_linear_direct.py [--sizes 3 5 10 20 30 50 100] [--depths 3 4]
        [--alpha 1e-3] [--dense-up-to 10] [--record]

Deep matrix factorisation ``L(W) = ½‖W_L ⋯ W_1 − W*‖²`` of an ``n × n`` teacher of rank ``min(n, 5)`` (singular
values 5, 4, 3, 2, 1, Haar-random bases; hidden width ``n``) from i.i.d. N(0, 1) layer directions (seed 0), at ``α``
(default 1e-3), ``atol = 1e-8``, up to ``τ = 1.3`` (past every jump: the greedy limit's last is at 1.25 at 3 × 3,
L = 4, and earlier at larger ``n``), 31 outputs. For each ``n`` and ``L``: ``simulate_flow``'s seconds (first call,
compilation included) and steps matrix-free, and with the dense Jacobian's LU up to ``--dense-up-to``: its seconds,
the ratio, and the largest difference between the two in ``log σ``, of the learned modes (``log σ > −1``) and of all
(the sleeping ones are entries of order ``atol``).

``--record`` writes the section "Deep linear: the direct integration against the layers' size" of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing gradflow
    sys.path.insert(0, str(ROOT))

from benchmarks import _common  # noqa: E402
from gradflow import DeepLinearSolver, simulate_flow  # noqa: E402
from gradflow.models import deep_matrix_factorization  # noqa: E402

SECTION = "Deep linear: the direct integration against the layers' size"
TEACHER = (5.0, 4.0, 3.0, 2.0, 1.0)
TAU_END = 1.3


def task_of(n: int, depth: int):
    """Deep matrix factorisation of an ``n × n`` rank-``min(n, 5)`` teacher from a Gaussian start (hidden width ``n``)."""
    return deep_matrix_factorization(
        m=n, n=n, depth=depth, singular_values=TEACHER[: min(n, 5)], aligned=False, width=n
    )


def measure(task, ts, alpha: float, newton: str) -> dict:
    """``simulate_flow``'s seconds (first call), steps, ``log σ`` and result with ``DeepLinearSolver(newton=newton)``."""
    begin = time.perf_counter()
    flow = simulate_flow(
        task.model, u0=task.u0, ts=ts, alpha=alpha, solver=DeepLinearSolver(newton=newton), progress=False
    )
    seconds = time.perf_counter() - begin
    return dict(
        seconds=seconds,
        steps=int(flow.stats["num_steps"]),
        log_sv=np.asarray(flow.log_singular_values),
        result=str(flow.result),
    )


def gap_cells(free: dict, dense: dict) -> list[str]:
    """The dense solve's seconds and steps, the ratio of the seconds, and the largest ``|Δ log σ|`` of the learned
    modes (``log σ > −1``) and of all."""
    gap = np.abs(free["log_sv"] - dense["log_sv"])
    learned = np.isfinite(dense["log_sv"]) & (dense["log_sv"] > -1.0)
    return [
        f"{dense['seconds']:.1f}",
        f"{dense['steps']:,}",
        f"{dense['seconds'] / free['seconds']:.2f}",
        f"{np.max(gap[learned], initial=0.0):.1e}",
        f"{np.max(gap[np.isfinite(gap)]):.1e}",
    ]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[3, 5, 10, 20, 30, 50, 100])
    parser.add_argument("--depths", type=int, nargs="+", default=[3, 4])
    parser.add_argument("--alpha", type=float, default=1e-3)
    parser.add_argument("--dense-up-to", type=int, default=10)
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    for depth in args.depths:
        for n in args.sizes:
            task, ts = task_of(n, depth), np.linspace(0.0, TAU_END, 31)
            free = measure(task, ts, args.alpha, "matrix_free")
            entries = depth * n * n
            cells = [depth, n, f"{entries:,}", f"{free['seconds']:.1f}", f"{free['steps']:,}", free["result"]]
            dense = measure(task, ts, args.alpha, "dense") if n <= args.dense_up_to else None
            cells += gap_cells(free, dense) if dense else ["–"] * 5
            rows.append(cells)
            print(cells, flush=True)  # a long run: each row as it is measured
    header = [
        "L",
        "n",
        "entries",
        "matrix-free s",
        "steps",
        "result",
        "dense s",
        "dense steps",
        "dense / matrix-free",
        "max Δ log σ (learned)",
        "max Δ log σ (all)",
    ]
    details = (
        f"α = {args.alpha:g}, `atol = 1e-8`. Seconds of the first call (compilation included), "
        '`OPENBLAS_NUM_THREADS=1`. `DeepLinearSolver(newton="auto")` solves '
        "matrix-free above 256 entries; the script asks for one or the other at every size."
    )
    _common.cpu_table_section("bench_deep_linear_direct.py", SECTION, header, rows, details, args.record)


if __name__ == "__main__":
    main()

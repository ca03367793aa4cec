"""The cost of a deep linear network's split of the layers (the scales between the direct integration's range and the
small-α path's) against the layers' size: chunks by Kvaerno5 with Newton's equations solved matrix-free and
``G = G0 − W C`` (no ``(mn)²`` coefficients), side by side with SciPy's Radau with the dense Jacobian and ``K``
(every size before 2026-12-02).

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_deep_linear_split.py [--sizes 3 10 30 50] [--depth 4]
        [--alphas 1e-5 1e-7] [--dense-up-to 10] [--record]

Deep matrix factorisation ``L(W) = ½‖W_L ⋯ W_1 − W*‖²`` of an ``n × n`` teacher of rank ``min(n, 5)`` (singular
values 5, 4, 3, 2, 1, Haar-random bases; hidden width ``n``) from i.i.d. N(0, 1) layer directions (seed 0), at
``atol = 1e-8``, up to 1.3 times the greedy limit's last stage time, 16 outputs. At L = 4 the split runs for
``1e-10 < α < 3e-5``: α = 1e-5 in ``t`` (``α² ≥ 1e-12``), 1e-7 with its plateaus held. For each ``n`` and α:
``simulate_flow``'s seconds (first call, compilation included) and steps matrix-free, and with Radau up to
``--dense-up-to``: its seconds, steps, the ratio, and the largest difference between the two in ``log σ`` (all
modes; the sleeping ones are entries of order ``atol``).

``--record`` writes the section "Deep linear: the split against the layers' size" of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing gradflow
    sys.path.insert(0, str(ROOT))

from benchmarks import _common  # noqa: E402
from benchmarks.bench_deep_linear_direct import gap_cells, measure, task_of  # noqa: E402
from gradflow import greedy_limit  # noqa: E402

SECTION = "Deep linear: the split against the layers' size"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[3, 10, 30, 50])
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--alphas", type=float, nargs="+", default=[1e-5, 1e-7])
    parser.add_argument("--dense-up-to", type=int, default=10)
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    for n in args.sizes:
        task = task_of(n, args.depth)
        limit = greedy_limit(task.model, u0=task.u0, check_assumptions=False)
        ts = np.linspace(0.0, 1.3 * float(limit.times[-1]), 16)
        for alpha in args.alphas:
            free = measure(task, ts, alpha, "matrix_free")
            cells = [args.depth, n, f"{alpha:g}", f"{free['seconds']:.1f}", f"{free['steps']:,}", free["result"]]
            if n <= args.dense_up_to:
                seconds, steps, ratio, _, everything = gap_cells(free, measure(task, ts, alpha, "dense"))
                cells += [seconds, steps, ratio, everything]
            else:
                cells += ["–"] * 4
            rows.append(cells)
            print(cells, flush=True)  # a long run: each row as it is measured
    header = [
        "L",
        "n",
        "α",
        "matrix-free s",
        "steps",
        "result",
        "Radau (dense) s",
        "Radau steps",
        "dense / matrix-free",
        "max Δ log σ",
    ]
    details = (
        "`atol = 1e-8`. Seconds of the first call (compilation included), `OPENBLAS_NUM_THREADS=1`. "
        '`DeepLinearSolver(newton="auto")` is matrix-free above 256 layer entries; the script asks for one or the '
        "other at every size."
    )
    _common.cpu_table_section("bench_deep_linear_split.py", SECTION, header, rows, details, args.record)


if __name__ == "__main__":
    main()

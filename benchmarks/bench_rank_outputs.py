"""The full-weight flow's cost against the number of output times: dense output against a step onto every output.

    python benchmarks/bench_rank_outputs.py            # heads d = 6 and 20, α = 1e-8, 1e-32, log α = −1000
    python benchmarks/bench_rank_outputs.py --paper    # also the paper's size (1,000 samples, 10 tokens, d = 50)
    python benchmarks/bench_rank_outputs.py --record   # also write its section of docs/benchmarks.md

On each head, the greedy path's stage times give the output times the demos and ``compare_limits`` use
(``default_times``: an even grid of ``NUM`` times with every stage time, its window edges and times refined around
it down to ``0.01 / log(1/α)``), and ``simulate_flow`` runs on them twice in the same process, with
``FactorizedSolver(dense_output=True)`` (explicit steps and leaps pass the output times, Tsit5's dense
output inside a step) and ``dense_output=False`` (the default: every output time ends a step or a leap). Per run: the
steps (explicit steps and leaps), the evaluations of G, the seconds after compilation (a first call on the same
shapes compiles), their ratios, and the largest ``|Δ log σ|`` between the two runs over every output time relative
to ``max(1, |log σ|)`` (both at the solver's tolerance; its own error is of that order). Set
``OPENBLAS_NUM_THREADS=1`` before Python starts on a loaded machine.
"""

from __future__ import annotations

import argparse
import math
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing gradflow
    sys.path.insert(0, str(ROOT))

from benchmarks import _common  # noqa: E402
from gradflow import FactorizedSolver, greedy_limit, models, simulate_flow  # noqa: E402
from gradflow._kit._comparison import default_times  # noqa: E402

SECTION = "Full weights: cost against the number of output times"
NUM = 200  # the even grid of the full-weight demo (RankDemoConfig.num_times)
SCALES = (("1e-8", math.log(1e-8)), ("1e-32", math.log(1e-32)), ("e^-1000", -1000.0))
HEADS = {
    "d = 6 head (attention_full())": lambda: models.attention_full(),
    "d = 20 head (50 samples)": lambda: models.attention_full(
        n=50, tokens=4, dim=20, teacher_kq=(1, 0.5), teacher_vo=(1, 0.5)
    ),
}
PAPER = {
    "paper size (1,000 samples, 10 tokens, d = 50)": lambda: models.attention_full(
        n=1000, tokens=10, dim=50, teacher_kq=(1.0, 0.6, 0.3), teacher_vo=(1.0, 0.6, 0.3)
    )
}


def _flow(task, ts, log_alpha, dense):
    solver = FactorizedSolver(dense_output=dense)
    start = time.perf_counter()
    flow = simulate_flow(task.model, u0=task.u0, v0=task.v0, ts=ts, log_alpha=log_alpha, solver=solver, progress=False)
    return flow, time.perf_counter() - start


def _disagreement(a, b) -> float:
    return max(
        float(np.max(np.abs(x - y) / np.maximum(1.0, np.abs(y))))
        for x, y in zip(a.log_singular_values, b.log_singular_values)
    )


def run(name, make, scales) -> list[list]:
    task = make()
    path = greedy_limit(task.model, u0=task.u0, v0=task.v0, check_assumptions=False, throw=False)
    ts = default_times(path.times, num=NUM, log_alphas=[la for _, la in scales])
    for dense in (True, False):  # compile both programs (for these output times: their number is a shape)
        _flow(task, ts * 1e-6, scales[0][1], dense)
    rows = []
    for label, la in scales:
        (dense, t_dense), (stepped, t_stepped) = _flow(task, ts, la, True), _flow(task, ts, la, False)
        counts = [(int(r.stats["num_steps"]), int(r.stats["num_evaluations"])) for r in (dense, stepped)]
        rows.append(
            [
                name,
                label,
                ts.size,
                f"{counts[0][0]} / {counts[1][0]}",
                f"{counts[0][1]} / {counts[1][1]}",
                f"{t_dense:.1f} / {t_stepped:.1f}",
                f"{t_dense / t_stepped:.2f}",
                f"{_disagreement(dense, stepped):.1e}",
                f"{dense.result} / {stepped.result}",
            ]
        )
        print(_common._cells(rows[-1]), flush=True)
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--paper", action="store_true", help="also the paper's size, at α = 1e-8")
    parser.add_argument("--record", action="store_true", help="write the section of docs/benchmarks.md")
    args = parser.parse_args(argv)
    head = [
        "head",
        "α",
        "output times",
        "steps: dense / stepped",
        "evaluations of G: dense / stepped",
        "seconds: dense / stepped",
        "time ratio",
        "largest Δ log σ, relative",
        "result",
    ]
    rows = []
    for name, make in HEADS.items():
        rows += run(name, make, SCALES)
    if args.paper:
        for name, make in PAPER.items():
            rows += run(name, make, SCALES[:1])
    text = "\n".join(
        [
            f"## {SECTION}",
            "",
            f"`python benchmarks/bench_rank_outputs.py{' --paper' if args.paper else ''}` (see its docstring). Machine: "
            f"{_common.cpu_name()}, no GPU.",
            "",
            *_common.table_head(head),
            *(_common._cells(r) for r in rows),
            "",
        ]
    )
    _common.show(text, SECTION, args.record)


if __name__ == "__main__":
    main()

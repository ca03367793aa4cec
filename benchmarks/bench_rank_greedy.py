"""The cost of the greedy low-rank limit against one exact flow at α = 1e-32 on the same model, side by side.

    python benchmarks/bench_rank_greedy.py                    # all cases (about 10 minutes on 2 cores)
    python benchmarks/bench_rank_greedy.py --cases head6 mf50
    python benchmarks/bench_rank_greedy.py --json out.json    # also write the numbers

Cases: the attention head with full weights ``models.attention_full(n=50, tokens=4, dim=d, teacher_kq=(1, 0.5),
teacher_vo=(1, 0.5))`` at d = 6, 20, 50, and matrix factorisation ``models.matrix_factorization(m=d, n=d,
singular_values=(3, 2, 1))`` at d = 10, 30, 50. For each, in one process and from a cold start (compilation
included): ``greedy_limit`` (checks on: the ε → 0 runs and the perturbed runs of Assumption 4.4, and the
Assumption-4.3 eigenvalue), then ``simulate_flow(ts=np.linspace(0, 2.5, 31), alpha=1e-32)``.

Wall and CPU seconds (the machine may be shared; CPU seconds are less sensitive to that). Counts, which do not
depend on the machine's load: for greedy, the gradients of L in the factors and the
Hessian-vector products (about two gradients each) of every phase (B) and of the eigenvalue checks, and the steps
of the phase-(B) flows; for the flow, its steps and its evaluations of the vector field (six a Tsit5 step, each one
gradient in the weights). ``evals`` is gradients + 2 × Hessian-vector products.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import sys
import time
import warnings

import jax
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing gradflow
    sys.path.insert(0, str(ROOT))

import gradflow  # noqa: E402
from gradflow import models  # noqa: E402
from gradflow._factorized import _gauge  # noqa: E402
from gradflow._factorized import _greedy as factorized_greedy  # noqa: E402

CASES = {
    **{
        f"head{d}": lambda d=d: models.attention_full(
            n=50, tokens=4, dim=d, teacher_kq=(1.0, 0.5), teacher_vo=(1.0, 0.5)
        )
        for d in (6, 20, 50)
    },
    **{
        f"mf{d}": lambda d=d: models.matrix_factorization(m=d, n=d, singular_values=(3.0, 2.0, 1.0))
        for d in (10, 30, 50)
    },
}


class _Counts:
    """Wraps phase (B) and the Hessian-vector products of the eigenvalue check to add up their counts."""

    def __init__(self):
        self.flow_steps = self.gradients = self.newton_steps = self.hvps = self.check_hvps = 0
        self._phase_b, self._hvp = factorized_greedy.solve_phase_b, _gauge.off_gauge_hessian_product

    def __enter__(self):
        def phase_b(*args):
            ends, status, counts, records = self._phase_b(*args)
            steps, gradients, newton, hvps = np.asarray(counts).sum(axis=0)
            self.flow_steps += int(steps)
            self.gradients += int(gradients)
            self.newton_steps += int(newton)
            self.hvps += int(hvps)
            return ends, status, counts, records

        def hessian_product(*args):
            self.check_hvps += 1
            return self._hvp(*args)

        factorized_greedy.solve_phase_b, _gauge.off_gauge_hessian_product = phase_b, hessian_product
        return self

    def __exit__(self, *exc):
        factorized_greedy.solve_phase_b, _gauge.off_gauge_hessian_product = self._phase_b, self._hvp


def run(name: str) -> dict:
    task = CASES[name]()
    with _Counts() as counts, warnings.catch_warnings():
        warnings.simplefilter("ignore", gradflow.AssumptionWarning)
        start, cpu = time.perf_counter(), time.process_time()
        path = gradflow.greedy_limit(task.model, u0=task.u0, v0=task.v0, throw=False)
        greedy_s, greedy_cpu = time.perf_counter() - start, time.process_time() - cpu
    start, cpu = time.perf_counter(), time.process_time()
    flow = gradflow.simulate_flow(task.model, u0=task.u0, v0=task.v0, ts=np.linspace(0, 2.5, 31), alpha=1e-32)
    flow_s, flow_cpu = time.perf_counter() - start, time.process_time() - cpu
    hvps = counts.hvps + counts.check_hvps
    flow_steps = int(flow.stats["num_steps"])
    return dict(
        case=name,
        greedy_s=greedy_s,
        greedy_cpu=greedy_cpu,
        result=path.result,
        message=path.message,
        stages=path.num_stages,
        ranks=path.ranks[-1].tolist(),
        times=path.times.tolist(),
        phase_b_flow_steps=counts.flow_steps,
        newton_steps=counts.newton_steps,
        gradients=counts.gradients,
        hvps=hvps,
        check_hvps=counts.check_hvps,
        greedy_evals=counts.gradients + 2 * hvps,
        flow_s=flow_s,
        flow_cpu=flow_cpu,
        flow_steps=flow_steps,
        flow_evals=6 * flow_steps,
        flow_result=str(flow.result),
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--json", default=None, help="write the numbers to this file")
    args = parser.parse_args(argv)
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, jax {jax.__version__}"
    print(f"# {machine}; load average at start {os.getloadavg()[0]:.1f}", flush=True)
    header = (
        "| case | greedy s (CPU s) | stages | (B) flow steps | Newton steps | gradients | HVPs | flow s (CPU s) | "
        "flow steps | greedy / flow: s (CPU s) | greedy / flow: evals |"
    )
    print(header + "\n|" + "---|" * (header.count("|") - 1))
    rows = []
    for name in args.cases:
        r = run(name)
        rows.append(r)
        print(
            f"| {name} | {r['greedy_s']:.1f} ({r['greedy_cpu']:.1f}) | {r['stages']} ({r['result']}) | "
            f"{r['phase_b_flow_steps']} | {r['newton_steps']} | {r['gradients']} | {r['hvps']} | "
            f"{r['flow_s']:.1f} ({r['flow_cpu']:.1f}) | {r['flow_steps']} | {r['greedy_s'] / r['flow_s']:.2f} "
            f"({r['greedy_cpu'] / r['flow_cpu']:.2f}) | {r['greedy_evals'] / r['flow_evals']:.2f} |",
            flush=True,
        )
    for r in rows:
        if r["result"] != "successful":
            print(f"# {r['case']}: {r['message']}")
    print(f"# load average at end {os.getloadavg()[0]:.1f}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(dict(machine=machine, rows=rows), indent=1))


if __name__ == "__main__":
    main()

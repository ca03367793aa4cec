"""Independent flows one per core with OpenBLAS limited while they run (gradflow's ``PerCore``) against OpenBLAS's own
threads, side by side in one process.

    python benchmarks/bench_blas_threads.py                    # the d = 20 and d = 50 heads (about a minute on 2 cores)
    python benchmarks/bench_blas_threads.py --dims 50 --record

JAX's CPU decompositions (QR, SVD, the eigenvalues: every step of a factorised flow takes several) call SciPy's LAPACK,
which is OpenBLAS; by default OpenBLAS starts a thread per core for each call. ``simulate_flow`` with several α runs
one flow per core (``gradflow._config.PerCore``), so on 2 cores two workers' OpenBLAS calls each want both cores.
Since 2026-11-30 a pool of several workers limits OpenBLAS to ``cores // workers`` threads while it runs
(threadpoolctl) and restores its setting after. Each head (``models.attention_full(n=50, tokens=4, dim=d,
teacher_kq=(1, 0.5), teacher_vo=(1, 0.5))``, τ ∈ [0, 2.5] at 31 times) runs two flows (α = 1e-32 and 1e-16, one per
core) after a call that compiles them, the three settings in turn, twice:

- *gradflow*: as shipped (OpenBLAS limited while the pool runs);
- *OpenBLAS's threads*: the pool's limit switched off (as before 2026-11-30);
- *one thread throughout*: ``threadpool_limits(1)`` around the whole call, as ``OPENBLAS_NUM_THREADS=1`` does.

The process must start without ``OPENBLAS_NUM_THREADS`` set (the script refuses otherwise: every row would be the
last). ``--record`` replaces the section *Independent runs on all cores: OpenBLAS's threads* of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing gradflow
    sys.path.insert(0, str(ROOT))

from threadpoolctl import threadpool_info, threadpool_limits  # noqa: E402

import gradflow  # noqa: E402
from benchmarks import _common  # noqa: E402
from gradflow import _config, models  # noqa: E402

SECTION = "Independent runs on all cores: OpenBLAS's threads"
TS = np.linspace(0.0, 2.5, 31)
LOG_ALPHAS = [float(np.log(1e-32)), float(np.log(1e-16))]


@contextlib.contextmanager
def _setting(name: str):
    if name == "gradflow":
        yield
    elif name == "OpenBLAS's threads":
        original = _config._blas_threads_per_worker
        _config._blas_threads_per_worker = lambda workers: contextlib.nullcontext()
        try:
            yield
        finally:
            _config._blas_threads_per_worker = original
    else:
        with threadpool_limits(limits=1, user_api="blas"):
            yield


def run(d: int, repeats: int) -> list[list]:
    task = models.attention_full(n=50, tokens=4, dim=d, teacher_kq=(1.0, 0.5), teacher_vo=(1.0, 0.5))

    def flows():
        start = time.perf_counter()
        out = gradflow.simulate_flow(task.model, u0=task.u0, v0=task.v0, ts=TS, log_alpha=LOG_ALPHAS, progress=False)
        return time.perf_counter() - start, out.stats["num_steps"]

    flows()  # compiles
    settings = ("gradflow", "OpenBLAS's threads", "one thread throughout")
    seconds = {name: [] for name in settings}
    steps = {}
    for _ in range(repeats):
        for name in settings:
            with _setting(name):
                wall, steps[name] = flows()
            seconds[name].append(wall)
            print(f"d = {d}: {name}: {wall:.2f} s, steps {list(steps[name])}", flush=True)
    best = {name: min(s) for name, s in seconds.items()}
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return [
        [
            d,
            ", ".join(f"{s:,}" for s in steps["gradflow"]),
            *(f"{best[name]:.2f}" for name in settings),
            f"{best[settings[1]] / best[settings[0]]:.2f}",
            load,
        ]
    ]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dims", nargs="+", type=int, default=[20, 50])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--record", action="store_true", help=f"replace the section '{SECTION}' of docs/benchmarks.md")
    args = parser.parse_args(argv)
    if os.environ.get("OPENBLAS_NUM_THREADS"):
        parser.error("start without OPENBLAS_NUM_THREADS set: it would fix OpenBLAS's threads for every row")
    threads = sorted({info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"})
    rows = [row for d in args.dims for row in run(d, args.repeats)]
    header = [
        "d",
        "steps (1e-32, 1e-16)",
        "gradflow s",
        "OpenBLAS's threads s",
        "one thread throughout s",
        "OpenBLAS's threads / gradflow",
        "load averages",
    ]
    details = (
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; OpenBLAS's own setting {threads} threads. Wall seconds "
        f"of `simulate_flow` with two α, one flow per core, after compilation, the best of {args.repeats}; load "
        "averages (1, 5, 15 min) at the end."
    )
    _common.cpu_table_section("bench_blas_threads.py", SECTION, header, rows, details, args.record)


if __name__ == "__main__":
    main()

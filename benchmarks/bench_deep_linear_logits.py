"""The cost of a deep linear network's split of the layers for the cross-entropy of logits ``W x_j`` against the
layers' size: ``G`` from the inputs (:class:`~gradflow._deep_linear._split_fields.TimesInputs`, ``N n + m²`` numbers),
side by side with the logits' Jacobian ``M`` (``N m · mn`` numbers, every size before 2026-12-02, refused above
2 GiB).

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_deep_linear_logits.py [--sizes 10 30] [--samples 200]
        [--depth 4] [--alpha 1e-5] [--jacobian-up-to 10] [--record]

``N`` Gaussian inputs in ``R^n`` labelled among ``n`` classes by a rank-``min(n, 5)`` linear teacher plus standard
Gaussian noise (not separable), logits ``W x`` (``W`` of ``n × n``, hidden width ``n``), from i.i.d. ``N(0, 1/n)``
layer directions (seed 0), at ``atol = 1e-8``, through the greedy limit's first two jumps (to 1.15 times its second
stage time), 16 outputs, matrix-free Newton. For each ``n``: ``simulate_flow``'s seconds (first call, compilation
included) and steps with the inputs, and with ``M`` up to ``--jacobian-up-to``: its bytes, seconds, steps, the ratio,
and the largest difference between the two in ``log σ``.

``--record`` writes the section "Deep linear: the split of the cross-entropy against the layers' size" of
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from types import SimpleNamespace

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing gradflow
    sys.path.insert(0, str(ROOT))

from benchmarks import _common  # noqa: E402
from benchmarks.bench_deep_linear_direct import measure  # noqa: E402
from gradflow import DeepLinearModel, greedy_limit  # noqa: E402
from gradflow._deep_linear import _split_fields  # noqa: E402

SECTION = "Deep linear: the split of the cross-entropy against the layers' size"
TEACHER = (5.0, 4.0, 3.0, 2.0, 1.0)


def logits_task(n: int, samples: int, depth: int) -> SimpleNamespace:
    """The labelled inputs and logits ``W x`` of the module docstring (``.model``), and the layers' directions
    (``.u0``)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((samples, n))
    U, V = (np.linalg.qr(rng.standard_normal((n, n)))[0] for _ in range(2))
    r = min(n, 5)
    teacher = 0.6 * U[:, :r] @ np.diag(TEACHER[:r]) @ V[:, :r].T
    y = np.argmax(X @ teacher.T + rng.standard_normal((samples, n)), axis=1)
    model = DeepLinearModel(lambda x, W: W @ x, X, y, shape=(n, n), depth=depth, loss="cross_entropy")
    return SimpleNamespace(model=model, u0=tuple(rng.standard_normal((n, n)) / np.sqrt(n) for _ in range(depth)))


def measure_logits(task, ts, alpha: float, *, inputs: bool) -> dict:
    """:func:`~benchmarks.bench_deep_linear_direct.measure`, matrix-free, ``G`` from the inputs or from ``M``."""
    detect = _split_fields.times_inputs
    if not inputs:  # the form before 2026-12-02: the logits' Jacobian
        _split_fields.times_inputs = lambda model: None
    try:
        return measure(task, ts, alpha, "matrix_free")
    finally:
        _split_fields.times_inputs = detect


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 30])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=1e-5)
    parser.add_argument("--jacobian-up-to", type=int, default=10)
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    for n in args.sizes:
        task = logits_task(n, args.samples, args.depth)
        limit = greedy_limit(task.model, u0=task.u0, max_stages=2, check_assumptions=False)
        ts = np.linspace(0.0, 1.15 * float(limit.times[2]), 16)
        held = measure_logits(task, ts, args.alpha, inputs=True)
        cells = [args.depth, n, args.samples, f"{args.alpha:g}", f"{held['seconds']:.1f}", f"{held['steps']:,}"]
        cells.append(held["result"])
        if n <= args.jacobian_up_to:
            dense = measure_logits(task, ts, args.alpha, inputs=False)
            gap = np.abs(dense["log_sv"] - held["log_sv"]).max()
            cells += [
                f"{8 * args.samples * n**3 / 2**20:.1f} MiB",
                f"{dense['seconds']:.1f}",
                f"{dense['steps']:,}",
                f"{dense['seconds'] / held['seconds']:.2f}",
                f"{gap:.1e}",
            ]
        else:
            cells += [f"{8 * args.samples * n**3 / 2**20:.1f} MiB"] + ["–"] * 4
        rows.append(cells)
        print(cells, flush=True)  # a long run: each row as it is measured
    header = ["L", "n", "N", "α", "inputs s", "steps", "result", "M would hold", "M s", "M steps", "M / inputs"]
    header.append("max Δ log σ")
    details = (
        "`atol = 1e-8`, matrix-free Newton. Seconds of the first call (compilation included), "
        "`OPENBLAS_NUM_THREADS=1`. The inputs take `N n + n²` numbers. max Δ log σ: over all modes (the sleeping "
        "ones are entries of order `atol`)."
    )
    _common.cpu_table_section("bench_deep_linear_logits.py", SECTION, header, rows, details, args.record)


if __name__ == "__main__":
    main()

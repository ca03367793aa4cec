"""The cost of a deep linear network's small-α path and greedy limit against the layers' size: jumps solved in hidden
frames of the rank they hold, side by side with jumps solved on the whole layers (gradflow before 2026-12-01).

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_deep_linear_size.py [--sizes 10 20 30 50 100] [--depths 3 4]
        [--whole-up-to 20] [--record]

Deep matrix factorisation ``L(W) = ½‖W_L ⋯ W_1 − W*‖²`` of an ``n × n`` teacher of rank 5 (singular values 5, 4, 3,
2, 1, Haar-random bases; hidden width ``n``), from i.i.d. N(0, 1) layer directions (seed 0): Arora et al.'s setting
(2019, 100 × 100, rank 5). For each ``n`` and ``L``: ``greedy_limit`` (its checks on) and ``simulate_flow`` at
``log α = −30`` (the small-α path; its cost does not depend on α) up to 1.3 times the greedy limit's fifth stage
time, 31 outputs; seconds (first call, compilation included: every stage's width compiles its own programs), steps,
and with the jumps on the whole layers (phase (B) and the carry's Radau with the dense Jacobian of all
``Σ_l d_l d_{l−1}`` entries, reproduced here) up to ``--whole-up-to``: its seconds, the ratio, and the largest
difference between the two in the stage times (relative) and in the flow's ``log σ`` of the learned modes.

``--record`` writes the section "Deep linear: cost against the layers' size" of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time
from contextlib import contextmanager

import equinox as eqx
import jax
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing gradflow
    sys.path.insert(0, str(ROOT))

from benchmarks import _common  # noqa: E402
from gradflow import greedy_limit, simulate_flow  # noqa: E402
from gradflow._deep_linear import _greedy, _jump, _small  # noqa: E402
from gradflow._deep_linear._model import _pack, _unpack, flat_jacobian, flat_velocities  # noqa: E402
from gradflow.models import deep_matrix_factorization  # noqa: E402

SECTION = "Deep linear: cost against the layers' size"
TEACHER = (5.0, 4.0, 3.0, 2.0, 1.0)


@contextmanager
def whole_layers():
    """Jumps on the whole layers, as before 2026-12-01: frames that span every hidden space (phase (B) then runs on all
    entries), the rest carried by Radau on the whole layers' linearised flow with its dense Jacobian, and the greedy
    limit's Hessian and perturbed starts on the whole layers."""
    frames, carry, narrow = _jump.hidden_frames, _jump.carry, _greedy.narrow_shapes
    users = (_small, _greedy)  # which import carry by name

    def full_frames(A, rank, escaping):
        narrow = frames(A, rank, escaping)
        return tuple(
            np.linalg.qr(H, mode="complete")[0] if 0 < l < len(narrow) - 1 else H for l, H in enumerate(narrow)
        )

    def dense_carry(model, jump, rest, tol):
        from scipy.integrate import solve_ivp

        shapes = tuple(w.shape for w in rest)
        steps = np.diff(np.unique(np.concatenate([sol.ts for sol in jump.record])))

        def layers(t):
            return _pack(jump.layers_at(t))

        def velocity(t, y):
            return np.asarray(_linearised(model, layers(t), y, shapes))

        y0 = _pack(rest)
        sol = solve_ivp(
            velocity,
            (0.0, jump.t_end),
            y0,
            method="Radau",
            jac=lambda t, _: np.asarray(flat_jacobian(model, layers(t), shapes)),
            rtol=tol.ode_rtol,
            atol=tol.ode_atol * max(1.0, float(np.abs(y0).max())),
            first_step=float(steps[0]),
            max_step=float(steps.max()),
        )
        if not sol.success:
            return None, None, sol.message
        return _Dense(len(sol.t) - 1), _unpack(sol.y[:, -1], shapes), ""

    _jump.hidden_frames = full_frames
    for module in users:
        module.carry = dense_carry
    _greedy.narrow_shapes = lambda shapes, width: tuple(shapes)  # the Hessian check and perturbed starts
    try:
        yield
    finally:
        _jump.hidden_frames, _greedy.narrow_shapes = frames, narrow
        for module in users:
            module.carry = carry


@eqx.filter_jit
def _linearised(model, y, s, shapes):
    return jax.jvp(lambda z: flat_velocities(model, z, shapes), (y,), (s,))[1]


class _Dense:
    """The whole-layer carry's stand-in for :class:`~gradflow._deep_linear._jump.Carry` (steps only: the outputs of
    the benchmark lie outside the jumps)."""

    def __init__(self, steps):
        self.steps = steps


def measure(n: int, depth: int) -> dict:
    task = deep_matrix_factorization(m=n, n=n, depth=depth, singular_values=TEACHER, aligned=False, width=n)
    begin = time.perf_counter()
    path = greedy_limit(task.model, u0=task.u0)
    greedy_s = time.perf_counter() - begin
    ts = np.linspace(0.0, 1.3 * path.times[min(5, len(path.times) - 1)], 31)
    begin = time.perf_counter()
    flow = simulate_flow(task.model, u0=task.u0, ts=ts, log_alpha=-30.0)
    flow_s = time.perf_counter() - begin
    return dict(
        greedy_s=greedy_s,
        flow_s=flow_s,
        steps=int(flow.stats["num_steps"]),
        times=np.asarray(path.times),
        log_sv=np.asarray(flow.log_singular_values)[:, : len(TEACHER)],
        hessian=float(np.min(path.hessian_min_eig[1:])),
        result=f"{path.result}, {flow.result}",
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 20, 30, 50, 100])
    parser.add_argument("--depths", type=int, nargs="+", default=[3, 4])
    parser.add_argument("--whole-up-to", type=int, default=20)
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    for depth in args.depths:
        for n in args.sizes:
            ours = measure(n, depth)
            cells = [depth, n, f"{ours['greedy_s']:.1f}", f"{ours['flow_s']:.1f}", f"{ours['steps']:,}", ours["result"]]
            if n <= args.whole_up_to:
                with whole_layers():
                    whole = measure(n, depth)
                learned = np.isfinite(ours["log_sv"]) & (ours["log_sv"] > -1.0)
                cells += [
                    f"{whole['greedy_s']:.1f}",
                    f"{whole['flow_s']:.1f}",
                    f"{whole['greedy_s'] / ours['greedy_s']:.1f}",
                    f"{whole['flow_s'] / ours['flow_s']:.1f}",
                    f"{np.max(np.abs(whole['times'][1:] / ours['times'][1:] - 1)):.1e}",
                    f"{np.max(np.abs(whole['log_sv'] - ours['log_sv'])[learned], initial=0.0):.1e}",
                ]
            else:
                cells += ["–"] * 6
            rows.append(cells)
            print(cells, flush=True)  # a long run: each row as it is measured
    header = [
        "L",
        "n",
        "greedy s",
        "flow s",
        "flow steps",
        "result",
        "whole: greedy s",
        "whole: flow s",
        "greedy ratio",
        "flow ratio",
        "max Δ stage times",
        "max Δ log σ (learned)",
    ]
    details = (
        'Seconds of the first call (compilation included), `OPENBLAS_NUM_THREADS=1`. "whole": the jumps on the whole '
        "layers (the code before 2026-12-01, reproduced in the script); ratios whole / frames."
    )
    _common.cpu_table_section("bench_deep_linear_size.py", SECTION, header, rows, details, args.record)


if __name__ == "__main__":
    main()

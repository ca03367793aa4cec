"""The full-weight flow in a stiff phase, from a saved state: the leaps against the split integrator, and the split
step's block alone under SciPy's Radau IIA (order 5), BDF and RK45.

    python benchmarks/bench_rank_stiff.py                       # the d = 50 head at log α = −1e4, from τ = 1.177
    python benchmarks/bench_rank_stiff.py --tau 0.3 --span 5    # a quick run of the same steps
    python benchmarks/bench_rank_stiff.py --record              # also write its section of docs/benchmarks.md

The head is the d = 50 head of *Full weights: solvers* (``attention_full(n=50, tokens=4, dim=50, teacher_kq=(1, 0.5),
teacher_vo=(1, 0.5))``, τ ∈ [0, 2.5] at 31 times, dense output). The leaps advance it to ``--tau`` (after τ ≈ 1.15
Tsit5 sits at its stability limit, dt ≈ 0.017; reaching 1.177 takes ≈ 40,000 steps, 400 s on 2 cores) and the state
is saved to ``--state`` (reused if it is there, for the same head, scale and τ). From that state, each after its
compilation:

- the leaps (``"leap"``) and the split integrator (``"split"``) over ``--span`` units of t (at most ``--cap`` steps):
  steps, split steps, evaluations of G, the t reached and the seconds;
- the split step's block alone (the leading columns of every factor, its active ones moving, the rest of the block
  and the sleeping columns held, G from the block plus the held part: ``_block.Block``, as the split step uses it) by SciPy's
  Radau IIA, BDF and RK45 at ``atol`` (``rtol = 1e-13``) with the exact Jacobian from JAX over the same span: steps,
  evaluations, Jacobians, the step sizes, the block's largest rate, and each end state's distance to Radau's.

Set ``OPENBLAS_NUM_THREADS=1`` before Python starts on a loaded machine.
"""

from __future__ import annotations

import argparse
import math
import pathlib
import pickle
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing gradflow
    sys.path.insert(0, str(ROOT))

import diffrax as dfx  # noqa: E402
import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from scipy.integrate import solve_ivp  # noqa: E402

from benchmarks import _common  # noqa: E402
from gradflow import models  # noqa: E402
from gradflow._factorized import _block, _flow  # noqa: E402
from gradflow._factorized._explicit import LeapState, LeapTolerances  # noqa: E402
from gradflow._factorized._qr import initial_state  # noqa: E402

SECTION = "Full weights: a stiff phase from a saved state"
LOG_ALPHA = -1e4
TS = np.linspace(0.0, 2.5, 31)
ATOL = 1e-8


def _head():
    return models.attention_full(n=50, tokens=4, dim=50, teacher_kq=(1, 0.5), teacher_vo=(1, 0.5))


def _advance(model, state, solver, budget):
    la, ts = jnp.asarray(LOG_ALPHA), jnp.asarray(TS)
    return _flow._advance(
        model, state, jnp.asarray(budget), la, ts, 0.0, ATOL, solver=solver, batched=False, dense=True
    )


def _going(state) -> bool:
    return bool(state.result == dfx.RESULTS.successful)


def reach(task, tau: float, path: pathlib.Path):
    """The leaps' state at the first step past ``tau`` (from ``path`` if it holds it)."""
    key = dict(log_alpha=LOG_ALPHA, tau=tau, ts=TS.tolist(), atol=ATOL, fields=sorted(LeapState.__dataclass_fields__))
    if path.exists():
        saved = pickle.loads(path.read_bytes())
        if saved["key"] == key:
            return jax.tree_util.tree_map(jnp.asarray, saved["state"])
    y0 = jax.tree_util.tree_map(jnp.asarray, initial_state(task.u0, task.v0))
    la, ts = jnp.asarray(LOG_ALPHA), jnp.asarray(TS)
    state = _flow._start(task.model, y0, la, ts, 0.0, ATOL, solver="leap", batched=False)
    clock = time.perf_counter()
    while float(state.t) < tau * -LOG_ALPHA and _going(state):
        state = _advance(task.model, state, "leap", 1000)
        print(
            f"  reaching τ = {tau}: τ = {float(state.t) / -LOG_ALPHA:.4f} after {int(state.steps)} steps, "
            f"{time.perf_counter() - clock:.0f} s",
            flush=True,
        )
    path.write_bytes(pickle.dumps(dict(key=key, state=jax.tree_util.tree_map(np.asarray, state))))
    return state


def race(model, state, solver: str, span: float, cap: int) -> list:
    """One integrator from ``state`` over ``span`` units of t (at most ``cap`` steps)."""
    if solver == "split":  # room for the block's Jacobian, and split steps allowed at once
        n = _block.jac_size(state.y)
        state = eqx.tree_at(
            lambda s: (s.jac, s.jac_age, s.newton_matrix, s.newton_h, s.stiff),
            state,
            (jnp.zeros((n, n)), jnp.asarray(-1), jnp.zeros((n, n)), jnp.asarray(jnp.nan), jnp.asarray(3)),
        )
    jax.block_until_ready(_advance(model, state, solver, 1))  # compiles
    start, s, clock = float(state.t), state, time.perf_counter()
    while float(s.t) < start + span and _going(s) and int(s.steps - state.steps) < cap:
        s = _advance(model, s, solver, min(50, cap - int(s.steps - state.steps)))
    seconds = time.perf_counter() - clock
    moved = float(s.t) - start
    d = lambda f: int(getattr(s, f) - getattr(state, f))  # noqa: E731
    return [
        solver,
        d("steps") + d("leaps"),
        d("rejected"),
        d("splits"),
        d("evaluations"),
        f"{moved:.1f}",
        f"{seconds:.1f}",
        f"{moved / seconds:.2f}",
        "successful" if _going(s) else "stopped by the solver",
    ]


def block_alone(model, state, span: float) -> tuple[list, float]:
    """The split step's block alone from ``state`` under SciPy's stiff and explicit methods; its largest rate."""
    tol = LeapTolerances(rtol=0.0, atol=ATOL)
    block = _block.Block.of(state.y, model, jnp.asarray(LOG_ALPHA), tol, _block.widths(state.y))
    x0 = block.x0

    @jax.jit
    def field(x):
        return block.field(x)

    jacobian = jax.jit(jax.jacfwd(field))
    fun = lambda t, x: np.asarray(field(jnp.asarray(x)))  # noqa: E731
    jac = lambda t, x: np.asarray(jacobian(jnp.asarray(x)))  # noqa: E731
    x0 = np.asarray(x0)
    rate = float(np.max(np.abs(np.linalg.eigvals(jac(0.0, x0)).real)))
    rows, reference = [], None
    for method in ("Radau", "BDF", "RK45"):
        clock = time.perf_counter()
        sol = solve_ivp(
            fun, (0.0, span), x0, method=method, jac=None if method == "RK45" else jac, rtol=1e-13, atol=ATOL
        )
        seconds, h = time.perf_counter() - clock, np.diff(sol.t)
        reference = sol.y[:, -1] if reference is None else reference
        rows.append(
            [
                method,
                h.size,
                sol.nfev,
                sol.njev,
                f"{np.median(h):.3g}",
                f"{h.max():.3g}",
                f"{np.max(np.abs(sol.y[:, -1] - reference)):.1e}",
                f"{seconds:.1f}",
                sol.status,
            ]
        )
        print(_common._cells(rows[-1]), flush=True)
    return rows, rate


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tau", type=float, default=1.177, help="where the saved state is taken (τ)")
    parser.add_argument("--span", type=float, default=90.0, help="units of t each method runs from it")
    parser.add_argument("--cap", type=int, default=10_000, help="at most this many steps per integrator")
    parser.add_argument(
        "--state",
        type=pathlib.Path,
        default=pathlib.Path(tempfile.gettempdir()) / "gradflow_bench_rank_stiff.pkl",
        help="where the state reached is kept (reused for the same τ)",
    )
    parser.add_argument("--record", action="store_true", help="write the section of docs/benchmarks.md")
    args = parser.parse_args(argv)
    if not (args.tau > 0 and args.span > 0 and args.cap > 0 and math.isfinite(args.tau + args.span)):
        parser.error("--tau, --span and --cap must be positive")
    with jax.enable_x64(True):
        task = _head()
        state = reach(task, args.tau, args.state)
        races = [race(task.model, state, solver, args.span, args.cap) for solver in ("leap", "split")]
        for r in races:
            print(_common._cells(r), flush=True)
        block, rate = block_alone(task.model, state, args.span)
    where = f"τ = {float(state.t) / -LOG_ALPHA:.4f} (t = {float(state.t):.0f})"
    text = "\n".join(
        [
            f"## {SECTION}",
            "",
            f"`python benchmarks/bench_rank_stiff.py --tau {args.tau} --span {args.span}` (see its docstring): the d = 50 "
            f"head at log α = −1e4 from {where}. Machine: {_common.cpu_name()}, no GPU.",
            "",
            *_common.table_head(
                ["integrator", "steps", "rejected", "split steps", "G", "t advanced", "s", "t per s", "result"]
            ),
            *(_common._cells(r) for r in races),
            "",
            f"The split step's block alone (largest |Re λ| of its Jacobian: {rate:.3g}):",
            "",
            *_common.table_head(
                [
                    "method",
                    "steps",
                    "evaluations",
                    "Jacobians",
                    "median h",
                    "largest h",
                    "end: max |Δx| to Radau",
                    "s",
                    "status",
                ]
            ),
            *(_common._cells(r) for r in block),
            "",
        ]
    )
    _common.show(text, SECTION, args.record)


if __name__ == "__main__":
    main()

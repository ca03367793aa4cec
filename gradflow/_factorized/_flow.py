"""The exact gradient flow of a factorised model from small initialisation (docs/math.md, *Full weights: the exact
flow*): the continuous-QR state of every factor (``_qr``) integrated by diffrax, the gauge fixed after every step."""

from __future__ import annotations

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from .._solver import solve_onto, solve_separately, solve_status, vmap_batches
from ._model import FactorizedModel, check_factors
from ._qr import Args, Gauge, factor_weights, initial_state, vector_field
from ._results import FactorizedFlowResult
from ._singular import log_singular_values

_SOLVERS = ("auto", "tsit5", "kvaerno5")
_STIFF_LOG = 2000.0  # "auto" takes the implicit solver when log(1/α) exceeds this (a plateau lasts ∝ log(1/α));
# below, Tsit5 is far cheaper: on the full-weight toy (state of 300 numbers) at α = 1e-32 it took 806 steps in ~20 s,
# Kvaerno5 with its dense Jacobian more than ten minutes; on the demo's d = 3 head at log α = −1000, 2.0 s against
# 42 s, and still 18 s against 62 s at −1e4 (docs/benchmarks.md, Full weights). Tsit5's steps grow ∝ log(1/α).
_ROOT_TOL = 0.1  # the implicit stages' tolerance, a fraction of the step's
_ADVICE = "Try a looser atol, or a larger max_steps."


def _inner_solver(name: str, atol: float) -> dfx.AbstractSolver:
    if name == "tsit5":
        return dfx.Tsit5()
    root_finder = dfx.VeryChord(rtol=_ROOT_TOL * atol, atol=_ROOT_TOL * atol, norm=optx.rms_norm)
    return dfx.Kvaerno5(root_finder=root_finder)


@eqx.filter_jit
def _solve(model, y0, log_alpha, ts, rtol, atol, *, solver, max_steps, batched):
    def one(la):
        L = -la
        y = tuple(eqx.tree_at(lambda f: f.rho, f, f.rho + la) for f in y0)  # Z(0) = α Z̄(0)
        args = Args(model=model, log_alpha=la)
        gauge = Gauge(_inner_solver(solver, atol + rtol))
        pid = dfx.PIDController(rtol=rtol, atol=atol)
        ys, result, stats = solve_onto(vector_field, gauge, y, args, ts * L, pid, max_steps)
        Ws = tuple(jax.vmap(lambda f, m=m: factor_weights(f, m))(f) for f, (m, _) in zip(ys, model.shapes))
        loss = jax.vmap(model.loss_of_weights)(Ws)
        return ys, Ws, loss, result, stats

    return jax.vmap(one)(log_alpha) if batched else one(log_alpha)


def flow(
    model: FactorizedModel, *, ts, u0, v0, start, log_a, batched, rtol, atol, max_steps, batching, solver="auto"
) -> FactorizedFlowResult:
    """``simulate_flow`` for a factorised model once the checks every family shares are done: the exact flow from
    ``U_j(0) = α u0[j]``, ``V_j(0) = α v0[j]`` (docs/math.md, *Full weights: the exact flow*). ``solver``:
    ``"tsit5"``, ``"kvaerno5"`` (L-stable, for small α, where the flow is stiff) or ``"auto"`` (Kvaerno5 when
    ``log(1/α) > 2000``; for a batch, when some run's is). The tolerances bound the local error of ``ρ``
    (absolute) and of ``Q, R̃`` per step."""
    if start is not None:
        raise ValueError("start applies to diagonal models only; a FactorizedModel starts from u0, v0.")
    if u0 is None or v0 is None:
        raise ValueError("give the initial factors u0 and v0 (U_j(0) = α u0[j], V_j(0) = α v0[j]).")
    us, vs = check_factors(u0, v0, model)
    if solver not in _SOLVERS:
        raise ValueError(f"solver must be one of {_SOLVERS}; got {solver!r}.")
    if solver == "auto":
        solver = "kvaerno5" if float(np.max(-log_a)) > _STIFF_LOG else "tsit5"
    y0 = jax.tree_util.tree_map(jnp.asarray, initial_state(us, vs))

    def solve(log_a, batched):
        return _solve(
            model, y0, log_a, jnp.asarray(ts), rtol, atol, solver=solver, max_steps=max_steps, batched=batched
        )

    if batched and not vmap_batches(batching):
        out = solve_separately(lambda j: solve(log_a[j], False), len(log_a))
    else:
        out = solve(jnp.asarray(log_a), batched)
    ys, Ws, loss, solver_result, stats = jax.tree_util.tree_map(np.asarray, out)
    log_sv = tuple(log_singular_values(f, m) for f, (m, _) in zip(ys, model.shapes))
    result, message = solve_status(
        solver_result, np.isfinite(loss), ts, log_a, max_steps, what="simulate_flow (factorised model)", advice=_ADVICE
    )
    return FactorizedFlowResult(
        ts=ts,
        W=Ws,
        log_singular_values=log_sv,
        loss=loss,
        log_alpha=np.array(log_a),
        stats=dict(
            num_steps=stats[0],
            num_accepted_steps=stats[1],
            num_rejected_steps=stats[2],
            max_steps=max_steps,
            solver=solver,
        ),
        result=result,
        message=message,
    )

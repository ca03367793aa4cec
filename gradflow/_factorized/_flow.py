"""The exact gradient flow of a factorised model from small initialisation (docs/math.md, *Full weights: the exact
flow*): the continuous-QR state of every factor (``_qr``) integrated by the plateau leaps (``_leap``) or by diffrax,
the gauge fixed after every step; either way in bounded segments (``gradflow._solver.run_segments``)."""

from __future__ import annotations

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from .._data import loss_at_each
from .._kit._checks import AHEAD
from .._kit._family import FlowRequest
from .._solver import (
    Solve,
    solve_in_segments,
    solve_runs,
    solve_status,
    vmap_batches,
)
from ._block import jac_size, widths
from ._explicit import LeapTolerances
from ._leap import advance as leap_advance
from ._leap import start as leap_start
from ._model import FactorizedModel, check_factors
from ._phase_b import evaluate, where_not_finite
from ._qr import Args, Gauge, factor_weights, initial_state, vector_field
from ._results import FactorizedFlowResult
from ._singular import log_singular_values
from ._split import advance as split_advance

METHODS = ("auto", "leap", "split", "tsit5", "kvaerno5")  # "auto": auto_method (docs/benchmarks.md, Full weights)
SPLIT_FROM = 64  # "auto" takes the split integrator where a factor has m + n ≥ this, else the leaps
_LEAPS = ("split", "leap")  # the leaps' integrator, with split steps or without
_ROOT_TOL = 0.1  # the implicit stages' tolerance, a fraction of the step's
_ADVICE = "Try a looser atol, or a larger max_steps."


def _inner_solver(name: str, atol: float) -> dfx.AbstractSolver:
    if name == "tsit5":
        return dfx.Tsit5()
    root_finder = dfx.VeryChord(rtol=_ROOT_TOL * atol, atol=_ROOT_TOL * atol, norm=optx.rms_norm)
    return dfx.Kvaerno5(root_finder=root_finder)


def _solve_of(model, log_alpha, ts, rtol, atol, solver) -> Solve:
    """The solve of one run in ``t = τ log(1/α)``, onto ``ts · log(1/α)`` (stepping onto every output time)."""
    L = -log_alpha
    gauge = Gauge(_inner_solver(solver, atol + rtol))
    pid = dfx.PIDController(rtol=rtol, atol=atol)
    return Solve(vector_field, gauge, Args(model=model, log_alpha=log_alpha), ts * L, pid)


@eqx.filter_jit
def _start(model, y0, log_alpha, ts, rtol, atol, *, solver, batched):
    def one(la):
        y = tuple(eqx.tree_at(lambda f: f.rho, f, f.rho + la) for f in y0)  # Z(0) = α Z̄(0)
        if solver in _LEAPS:
            return leap_start(y, Args(model=model, log_alpha=la), ts * -la, jac_size(y) if solver == "split" else 0)
        return _solve_of(model, la, ts, rtol, atol, solver).start(y)

    return jax.vmap(one)(log_alpha) if batched else one(log_alpha)


@eqx.filter_jit
def _advance(model, seg, budget, log_alpha, ts, rtol, atol, *, solver, batched, dense=False):
    def one(seg, budget, la):
        if solver in _LEAPS:
            tol = LeapTolerances(rtol=float(rtol), atol=float(atol))
            args = Args(model=model, log_alpha=la)
            if solver == "split":
                return split_advance(seg, budget, args, ts * -la, tol, widths(seg.y), dense=dense)
            return leap_advance(seg, budget, args, ts * -la, tol, dense=dense)
        return _solve_of(model, la, ts, rtol, atol, solver).advance(seg, budget)

    return jax.vmap(one)(seg, budget, log_alpha) if batched else one(seg, budget, log_alpha)


@eqx.filter_jit
def _outputs(model, ys, *, batched):
    """The factors' products ``W_j`` and the loss at the recorded states ``ys``."""

    def one(ys):
        Ws = tuple(jax.vmap(lambda f, m=m: factor_weights(f, m))(f) for f, (m, _) in zip(ys, model.shapes))
        return Ws, loss_at_each(model.loss_of_weights, Ws, model.X)

    return jax.vmap(one)(ys) if batched else one(ys)


def _run(model, y0, log_alpha, ts, rtol, atol, *, solver, batched, max_steps, progress, dense=False):
    """The flow of one run or a ``vmap``-ed batch, solved in segments (``gradflow._solver.run_segments``; a
    ``gradflow._solver.Segment`` or, for the leaps, a ``LeapState``): the outputs ``(states, W, loss, diffrax's
    result, stats)`` and whether Ctrl-C stopped each run."""
    static = dict(solver=solver, batched=batched)
    t_end = ts[-1] * -log_alpha
    seg, result, stopped = solve_in_segments(
        lambda seg, budget: _advance(model, seg, budget, log_alpha, ts, rtol, atol, **static, dense=dense),
        _start(model, y0, log_alpha, ts, rtol, atol, **static),
        t_end,
        max_steps=max_steps,
        progress=progress,
    )
    Ws, loss = _outputs(model, seg.ys, batched=batched)
    return (seg.ys, Ws, loss, result, seg.stats, seg.y), stopped


def auto_method(model: FactorizedModel, *, vmapped: bool = False) -> str:
    """What ``"auto"`` takes: the split integrator where a factor has ``m + n ≥ SPLIT_FROM`` and the runs are not
    one vectorised solve (``vmapped``: under ``vmap`` every branch of a step runs, the split step at every step),
    else the leaps. The relaxations after the jumps can be stiff and long there: the d = 50 head with 50 samples at
    log α = −1000 in 61 s (the leaps: not done after 40,000 steps) and at −1e4 in 132 s (the leaps: about two
    hours); at the paper's size the two take about the same steps and time once compiled, the split compiling
    longer. On the d = 6 and d = 20 heads the split takes fewer steps and about the leaps' seconds at small α, more
    at moderate α, and its program compiles in 20 s against 8 s at d = 6 (docs/benchmarks.md, *Full weights: how
    the cost grows with log(1/α)*)."""
    return "split" if max(m + n for m, n in model.shapes) >= SPLIT_FROM and not vmapped else "leap"


def flow(model: FactorizedModel, request: FlowRequest, solver) -> FactorizedFlowResult:
    """``simulate_flow`` for a factorised model once the checks every family shares are done: the exact flow from
    ``U_j(0) = α u0[j]``, ``V_j(0) = α v0[j]`` (docs/math.md, *Full weights: the exact flow*). ``solver``:
    ``"leap"`` (explicit steps where the flow moves, leaps along the plateaus, whose cost does not grow with
    ``log(1/α)``; docs/math.md, *Plateau leaps*), ``"split"`` (the leaps, with split steps where the explicit steps
    sit at their stability limit: implicit on the awake columns, Magnus on the sleeping ones; docs/math.md, *The
    split integrator*), ``"tsit5"`` (explicit steps throughout, their number
    ∝ ``log(1/α)``), ``"kvaerno5"`` (L-stable, with a dense Jacobian of the state) or ``"auto"`` (``auto_method``); a
    leap counts as a step for ``max_steps``. The tolerances bound the local error of ``ρ`` (absolute) and of
    ``Q, R̃`` per step; a progress bar if ``progress``. ``solver``: a ``FactorizedSolver`` (its ``method``)."""
    if request.start is not None:
        raise ValueError("start applies to diagonal models only; a FactorizedModel starts from u0, v0.")
    if request.u0 is None or request.v0 is None:
        raise ValueError("give the initial factors u0 and v0 (U_j(0) = α u0[j], V_j(0) = α v0[j]).")
    us, vs = check_factors(request.u0, request.v0, model)
    ts, log_a, rtol, atol, max_steps = request.ts, request.log_a, request.rtol, request.atol, request.max_steps
    dense = solver.dense_output
    separately = not vmap_batches(request.batching)
    vmapped = request.batched and not separately
    solver = auto_method(model, vmapped=vmapped) if solver.method == "auto" else solver.method
    y0 = jax.tree_util.tree_map(jnp.asarray, initial_state(us, vs))
    la, times = jnp.asarray(log_a), jnp.asarray(ts)
    options = dict(solver=solver, max_steps=max_steps, dense=dense)

    def run(j, progress):
        one = dict(batched=request.batched and j is None, progress=progress)
        return _run(model, y0, la if j is None else la[j], times, rtol, atol, **one, **options)

    out, stopped = solve_runs(
        run, la, ts[-1], batched=request.batched, separately=separately, progress=request.progress
    )
    ys, Ws, loss, solver_result, stats, final = jax.tree_util.tree_map(np.asarray, out)
    leaps = solver in _LEAPS
    log_sv = tuple(log_singular_values(f, m) for f, (m, _) in zip(ys, model.shapes))
    result, message = solve_status(
        solver_result,
        np.isfinite(loss),
        ts,
        log_a,
        max_steps,
        stopped,
        what="simulate_flow (factorised model)",
        advice=_ADVICE,
        ahead=lambda k: _not_finite_ahead(model, jax.tree_util.tree_map(lambda x: x[k], final)),
    )
    return FactorizedFlowResult(
        ts=ts,
        W=Ws,
        log_singular_values=log_sv,
        loss=loss,
        log_alpha=np.array(log_a),
        stats=dict(
            num_steps=stats[..., 0],
            num_accepted_steps=stats[..., 1],
            num_rejected_steps=stats[..., 2],
            **(dict(num_leaps=stats[..., 3], num_pieces=stats[..., 4], num_evaluations=stats[..., 5]) if leaps else {}),
            **(dict(num_split_steps=stats[..., 6]) if solver == "split" else {}),
            max_steps=max_steps,
            solver=solver,
        ),
        result=result,
        message=message,
    )


def _not_finite_ahead(model: FactorizedModel, final) -> str:
    """Where the model's loss or ``G`` is not finite at the weights of the state ``final`` where a run stopped, or just
    ahead of them along ``G`` (the steps ``AHEAD``: the solver shrinks its step onto such a point and stops there;
    ``G`` points where the awake columns move), in words; ``""`` if nowhere."""
    Ws = tuple(np.asarray(factor_weights(f, m)) for f, (m, _) in zip(final, model.shapes))
    here = where_not_finite(model, Ws)
    if here or not all(np.all(np.isfinite(w)) for w in Ws):
        return here
    G, _ = evaluate(model, tuple(jnp.asarray(w) for w in Ws))
    for step in AHEAD:
        with np.errstate(over="ignore", invalid="ignore"):
            found = where_not_finite(model, tuple(w + step * np.asarray(g) for w, g in zip(Ws, G)))
        if found:
            return f"{found}, just ahead of where it stopped"
    return ""

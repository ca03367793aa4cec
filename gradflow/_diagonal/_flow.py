"""The exact gradient flow of a model with diagonal weights from small initialisation, in log coordinates (paper
appendix C.3–C.4; docs/math.md, *Rescaled time and log coordinates*).

Gradient flow ``du/dt = v ⊙ g``, ``dv/dt = u ⊙ g`` from ``θ(0) = α (u0, v0)`` keeps ``u_i² − v_i²``
(paper Lemma 4.1). After flipping/swapping signs so that ``u0_i > |v0_i|`` (appendix C.3), ``w = u + v``
and ``w̄ = u − v`` stay positive with ``w ⊙ w̄ = α² (u0² − v0²)``, and ``y = log w`` solves

    dy/dt = g(β),   β = u ⊙ v = (w + w̄)(w − w̄)/4,   w̄ = exp(2 log α + log(u0² − v0²) − y)

(paper eq. 13 in unscaled time ``t = τ log(1/α)``). ``y`` lies in ``[2 log α, O(1)]`` and the state
needs ``log α`` only, never ``α``: scales far below the float64 range are solved exactly. The state
``(log w, log w̄)`` of any recorded time is a ``FlowState``, from which the flow continues exactly. The step size
is predicted as well as controlled: from the growth of the error, and from the linear climb of the sleeping
coordinates' ``log(u_i² + v_i²)`` towards their jumps (``wake_horizon``).
"""

from __future__ import annotations

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec

from .._config import float64
from .._data import loss_at_each
from .._kit._checks import AHEAD, degenerate_error
from .._kit._family import FlowRequest
from .._solver import (
    PredictiveController,
    Solve,
    solve_in_segments,
    solve_runs,
    solve_status,
    vmap_batches,
)
from ._checks import check_init
from ._field import Args, exp_weights, vector_field, wake_horizon
from ._frame import apply_frame, frame_of
from ._model import DiagonalModel, evaluate_g, where_not_finite
from ._results import FlowResult, FlowState
from ._solvers import SwitchingSolver, implicit_solver, switching_solver

_FACTORMAX = 3.0  # step growth per step: larger steps overshoot into jumps, wasting Jacobians
_FACTORMAX_PREDICTED = 10.0  # the same under the predictive control, whose wake horizon keeps steps out of the jumps


def _solve_of(model, log_wwbar, log_alpha, ts, rtol, atol, solver) -> Solve:
    """The solve of one run: ``dy/dt = g(β)`` in ``t = τ log(1/α)`` onto ``ts · log(1/α)``."""
    L = -log_alpha
    args = Args(model=model, log_wwbar=log_wwbar, out_ts=ts * L)
    dense = isinstance(solver, SwitchingSolver)
    if dense:
        pid = PredictiveController(
            dfx.PIDController(rtol=rtol, atol=atol, factormax=_FACTORMAX_PREDICTED), wake_horizon
        )
    else:
        pid = dfx.PIDController(rtol=rtol, atol=atol, factormax=_FACTORMAX)
    return Solve(vector_field, solver, args, ts * L, pid, dense=dense)


@eqx.filter_jit
def _start(model, y0, log_wwbar, log_alpha, ts, rtol, atol, *, solver, batched):
    def one(y0, log_wwbar, la):
        return _solve_of(model, log_wwbar, la, ts, rtol, atol, solver).start(y0)

    return jax.vmap(one)(y0, log_wwbar, log_alpha) if batched else one(y0, log_wwbar, log_alpha)


@eqx.filter_jit
def _advance(model, seg, budget, log_wwbar, log_alpha, ts, rtol, atol, *, solver, batched):
    def one(seg, budget, log_wwbar, la):
        return _solve_of(model, log_wwbar, la, ts, rtol, atol, solver).advance(seg, budget)

    return jax.vmap(one)(seg, budget, log_wwbar, log_alpha) if batched else one(seg, budget, log_wwbar, log_alpha)


@eqx.filter_jit
def _outputs(model, ys, log_wwbar, *, batched):
    """``log w̄`` and the loss at the recorded ``ys = log w``."""

    def one(ys, log_wwbar):
        w, wbar = exp_weights(ys, Args(model=model, log_wwbar=log_wwbar))
        u, v = 0.5 * (w + wbar), 0.5 * (w - wbar)
        return log_wwbar - ys, loss_at_each(model.loss_of_beta, u * v, model.X)

    return jax.vmap(one)(ys, log_wwbar) if batched else one(ys, log_wwbar)


def _run(model, y0, log_wwbar, log_alpha, ts, rtol, atol, *, solver, batched, max_steps, progress):
    """The flow of one run or a ``vmap``-ed batch, solved in segments (``gradflow._solver.run_segments``): the
    outputs ``(log w, log w̄, loss, diffrax's result, stats)`` and whether Ctrl-C stopped each run."""
    static = dict(solver=solver, batched=batched)
    t_end = ts[-1] * -log_alpha
    seg, result, stopped = solve_in_segments(
        lambda seg, budget: _advance(model, seg, budget, log_wwbar, log_alpha, ts, rtol, atol, **static),
        _start(model, y0, log_wwbar, log_alpha, ts, rtol, atol, **static),
        t_end,
        max_steps=max_steps,
        progress=progress,
    )
    log_wbar, loss = _outputs(model, seg.ys, log_wwbar, batched=batched)
    return (seg.ys, log_wbar, loss, result, seg.stats, seg.y), stopped


def check_state(start, p: int):
    """Validate a start state; return ``(log w, log w̄, swap, sign)`` as arrays of ``log w``'s shape."""
    if not isinstance(start, FlowState):
        raise TypeError(f"start must be a gradflow.FlowState (e.g. flow.state_at(k)); got {type(start).__name__}.")
    log_w = np.asarray(start.log_w, dtype=np.float64)
    if log_w.ndim not in (1, 2) or log_w.shape[-1] != p or log_w.size == 0:
        raise ValueError(f"start.log_w must have shape (p,) or (B, p) with p = {p}; got {log_w.shape}.")
    log_wbar = np.asarray(start.log_wbar, dtype=np.float64)
    if log_wbar.shape != log_w.shape:
        raise ValueError(f"start.log_wbar must have the shape of start.log_w, {log_w.shape}; got {log_wbar.shape}.")
    for name, x in (("log_w", log_w), ("log_wbar", log_wbar)):
        if np.any(np.isnan(x) | (x == np.inf)):
            raise ValueError(f"start.{name} contains NaN or +inf.")
        if np.any(x == -np.inf):
            raise degenerate_error(
                f"start.{name} is -inf (|u_i| = |v_i|)",
                np.unique(np.nonzero(x == -np.inf)[-1]),
                "The log-coordinate flow cannot represent it; start from a state with |u_i| ≠ |v_i|.",
            )
    swap, sign = np.asarray(start.swap), np.asarray(start.sign, dtype=np.float64)
    for name, x in (("swap", swap), ("sign", sign)):
        if x.shape not in (log_w.shape, (p,)):
            raise ValueError(f"start.{name} must have shape {log_w.shape} or ({p},); got {x.shape}.")
    if swap.dtype != bool:
        raise ValueError(f"start.swap must be a boolean array; got dtype {swap.dtype}.")
    if not np.all(np.abs(sign) == 1):
        raise ValueError("start.sign must hold only +1.0 and -1.0.")
    return log_w, log_wbar, np.broadcast_to(swap, log_w.shape), np.broadcast_to(sign, log_w.shape)


def flow(model: DiagonalModel, request: FlowRequest, solver) -> FlowResult:
    """The flow of ``simulate_flow`` once the checks every family shares are done: from ``α (u0, v0)`` or from
    ``start``, single or batched, ``vmap``-ed or run by run (see ``simulate_flow``), with a progress bar if
    ``request.progress``; ``solver``: a ``DiagonalSolver`` (its ``jacobian_rank``)."""
    u0, v0, start, log_a, batched = request.u0, request.v0, request.start, request.log_a, request.batched
    ts, rtol, atol, max_steps = request.ts, request.rtol, request.atol, request.max_steps
    if start is None:
        if u0 is None or v0 is None:
            raise ValueError(
                "give the initialisation directions u0 and v0 (θ(0) = α (u0, v0)), or start (a FlowState)."
            )
        u0, v0 = check_init(u0, v0, model.p, model.names)
        y0, log_wwbar, swap, sign = initial_state(u0, v0, log_a)
    else:
        if u0 is not None or v0 is not None:
            raise ValueError("give either u0 and v0 (the flow from α (u0, v0)) or start (a FlowState), not both.")
        y0, log_wbar, swap, sign = check_state(start, model.p)
        log_wwbar = y0 + log_wbar
        if y0.ndim == 2 and batched and y0.shape[0] != log_a.shape[0]:
            raise ValueError(
                f"got a batch of {y0.shape[0]} start states and {log_a.shape[0]} scales; give one scale "
                "per state, or a single scale."
            )
        batched = batched or y0.ndim == 2
    if batched:
        n = max(np.shape(log_a)[:1] + np.shape(y0)[:-1])
        y0, log_wwbar, swap, sign = (np.broadcast_to(x, (n, model.p)) for x in (y0, log_wwbar, swap, sign))
        log_a = np.broadcast_to(log_a, (n,))
    vmapped = vmap_batches(request.batching) and batched
    rank = default_rank(model.p, vmapped) if solver.jacobian_rank is None else solver.jacobian_rank
    if not 1 <= rank <= model.p:
        raise ValueError(f"jacobian_rank must lie in [1, p={model.p}]; got {solver.jacobian_rank!r}.")
    solver = implicit_solver(rank, atol + rtol) if vmapped else switching_solver(rank, rtol, atol)
    y0, log_wwbar, la, times = (jnp.asarray(x) for x in (y0, log_wwbar, log_a, ts))
    options = dict(solver=solver, max_steps=max_steps)

    def run(j, progress):
        pick = (lambda x: x) if j is None else (lambda x: x[j])
        one = dict(batched=batched and j is None, progress=progress)
        return _run(model, pick(y0), pick(log_wwbar), pick(la), times, rtol, atol, **one, **options)

    out, stopped = solve_runs(run, la, ts[-1], batched=batched, separately=not vmapped, progress=request.progress)
    return flow_result(out, ts, log_a, swap, sign, max_steps, stopped, model=model, log_wwbar=np.asarray(log_wwbar))


def default_rank(p: int, batched: bool) -> int:
    """The default ``jacobian_rank``: ``min(p, 64)``, or ``min(p, 16)`` for a batch of runs (under ``vmap``
    the lazy Jacobian refresh becomes a refresh at every step, whose cost grows with the rank)."""
    return min(p, 16 if batched else 64)


def initial_state(u0, v0, log_a) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(log w, log(w w̄), swap, sign)`` of ``θ(0) = α (u0, v0)`` for checked ``u0, v0``, at each ``log α`` of ``log_a``.

    In the frame where ``u0_i > |v0_i|``: ``log w = log α + log(u0 + v0)`` and
    ``log(w w̄) = 2 log α + log(u0² − v0²)`` (docs/math.md, *Rescaled time and log coordinates*).
    """
    swap, sign = frame_of(u0, v0)
    un, vn = apply_frame(u0, v0, swap, sign)
    log_a = np.asarray(log_a, dtype=np.float64)
    y0 = log_a[..., None] + np.log(un + vn)
    log_wwbar = 2.0 * log_a[..., None] + (np.log(un - np.abs(vn)) + np.log(un + np.abs(vn)))
    return y0, log_wwbar, swap, sign


def flow_result(out, ts, log_a, swap, sign, max_steps, stopped, *, model=None, log_wwbar=None) -> FlowResult:
    """The :class:`FlowResult` of the solver's output ``out`` (one run or a batch, with the state where each run
    stopped last, if given), with ``result``/``message``; ``stopped``: whether Ctrl-C stopped each run. With the
    ``model``, a run that stopped where the model is not finite ahead of it (:func:`_not_finite_ahead`) says so."""
    log_w, log_wbar, loss, solver_result, stats, *final = jax.tree_util.tree_map(np.asarray, out)
    finished = np.all(np.isfinite(log_w), axis=-1)
    ahead = None
    if final and model is not None:
        ahead = lambda k: _not_finite_ahead(model, final[0][k], log_wwbar[k])  # noqa: E731
    result, message = solve_status(
        solver_result, finished, ts, log_a, max_steps, stopped, what="simulate_flow", advice=_ADVICE, ahead=ahead
    )
    return FlowResult(
        ts=ts,
        log_w=log_w,
        log_wbar=log_wbar,
        swap=np.array(swap),
        sign=np.array(sign),
        loss=loss,
        log_alpha=np.array(log_a),
        stats=dict(
            num_steps=stats[..., 0],
            num_accepted_steps=stats[..., 1],
            num_rejected_steps=stats[..., 2],
            max_steps=max_steps,
        ),
        result=result,
        message=message,
    )


def _not_finite_ahead(model: DiagonalModel, y, log_wwbar) -> str:
    """Where the model's loss or ``g`` is not finite at the state ``y = log w`` where a run stopped, or just ahead of
    it along ``dy/dt = g`` (the steps ``AHEAD``: the solver shrinks its step onto such a point and
    stops there); ``""`` if nowhere."""
    y, log_wwbar = np.asarray(y, dtype=np.float64), np.asarray(log_wwbar, dtype=np.float64)
    beta = lambda y: 0.25 * (np.exp(y) + np.exp(log_wwbar - y)) * (np.exp(y) - np.exp(log_wwbar - y))  # noqa: E731
    here = where_not_finite(model, beta(y)[None])
    if here or not np.all(np.isfinite(y)):
        return here
    steps = AHEAD
    with np.errstate(over="ignore", invalid="ignore"):
        ahead = beta(y + steps[:, None] * evaluate_g(model, beta(y)))
    found = where_not_finite(model, ahead)
    return found and f"{found}, just ahead of where it stopped"


# --------------------------------------------------------------------------------------------------
# The flows of many models of one shape, batched and sharded over devices (the sweep's batches).


def _sharded(one, mesh: Mesh):
    """``one`` of each run, the model's arrays included, ``vmap``-ed and split over ``mesh``'s ``batch`` axis."""
    spec = PartitionSpec("batch")
    return jax.shard_map(jax.vmap(one), mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False)


@eqx.filter_jit
def _start_sharded(models, y0, log_wwbar, log_alpha, ts, rtol, atol, *, solver, mesh):
    arrays, static = eqx.partition(models, eqx.is_array)

    def one(arr, y, lw, la, t):
        return _solve_of(eqx.combine(arr, static), lw, la, t, rtol, atol, solver).start(y)

    return _sharded(one, mesh)(arrays, y0, log_wwbar, log_alpha, ts)


@eqx.filter_jit
def _advance_sharded(models, seg, budget, log_wwbar, log_alpha, ts, rtol, atol, *, solver, mesh):
    arrays, static = eqx.partition(models, eqx.is_array)

    def one(arr, seg, b, lw, la, t):
        return _solve_of(eqx.combine(arr, static), lw, la, t, rtol, atol, solver).advance(seg, b)

    return _sharded(one, mesh)(arrays, seg, budget, log_wwbar, log_alpha, ts)


@eqx.filter_jit
def _outputs_sharded(models, ys, log_wwbar, *, mesh):
    arrays, static = eqx.partition(models, eqx.is_array)
    return _sharded(lambda arr, y, lw: _outputs(eqx.combine(arr, static), y, lw, batched=False), mesh)(
        arrays, ys, log_wwbar
    )


@float64
def solve_sharded(
    tasks, log_alphas, tss, *, rtol: float, atol: float, max_steps: int | None, mesh: Mesh, width: int, length: int
):
    """The exact flows of ``tasks[j]`` from ``α_j (u0, v0)`` at the rescaled times ``tss[j]``, solved together.

    The same equations and solver as a batch of [`simulate_flow`][gradflow.simulate_flow] with ``batching="vmap"`` (docs' Math page, "The exact
    flow"), ``vmap``-ed over the runs, the model's arrays (data) included, and split over the devices
    of ``mesh`` by ``shard_map`` along its ``batch`` axis. Every model must have the same structure
    and array shapes. The batch is padded by repeating its last run to ``width`` (a multiple of the
    device count) and every ``ts`` to ``length`` times by repeating its last time: the solver steps
    onto each saved time, so a repeated one adds no step and leaves the others bit for bit. Returns
    a [`FlowResult`][gradflow.FlowResult] per run; a run that the solver could not finish has its ``result`` and
    ``message`` set (as with ``simulate_flow(..., throw=False)``).
    """
    B = len(tasks)
    p = tasks[0].model.p
    pad = lambda x: np.concatenate([x, np.repeat(x[-1:], width - B, axis=0)])  # noqa: E731
    arrays = [eqx.filter(t.model, eqx.is_array) for t in tasks]
    models = eqx.combine(
        jax.tree_util.tree_map(lambda *xs: pad(np.stack(xs)), *arrays),
        eqx.filter(tasks[0].model, eqx.is_array, inverse=True),
    )
    log_a = np.asarray(log_alphas, dtype=np.float64)
    states = [initial_state(t.u0, t.v0, la) for t, la in zip(tasks, log_a)]
    y0, log_wwbar, swap, sign = (np.stack(x) for x in zip(*states))
    ts = np.stack([np.concatenate([t, np.full(length - len(t), t[-1])]) for t in tss])
    models = jax.tree_util.tree_map(lambda x: jnp.asarray(x) if eqx.is_array(x) else x, models)
    y0, log_wwbar, la, ts = (jnp.asarray(pad(x)) for x in (y0, log_wwbar, log_a, ts))
    options = dict(solver=implicit_solver(min(p, 16), atol + rtol), mesh=mesh)
    t_end = ts[:, -1] * -la
    seg, result, stopped = solve_in_segments(
        lambda seg, budget: _advance_sharded(models, seg, budget, log_wwbar, la, ts, rtol, atol, **options),
        _start_sharded(models, y0, log_wwbar, la, ts, rtol, atol, **options),
        t_end,
        max_steps=max_steps,
    )
    log_wbar, loss = _outputs_sharded(models, seg.ys, log_wwbar, mesh=mesh)
    out = (seg.ys, log_wbar, loss, result, seg.stats)
    runs = []
    for j in range(B):
        k = len(tss[j])
        one = jax.tree_util.tree_map(lambda x: np.asarray(x)[j], out)
        one = jax.tree_util.tree_map(lambda x: x[:k] if np.ndim(x) else x, one[:3]) + one[3:]
        runs.append(flow_result(one, tss[j], log_a[j], swap[j], sign[j], max_steps, stopped[j]))
    return runs


_ADVICE = "Try a larger jacobian_rank, a looser atol, or a larger max_steps."

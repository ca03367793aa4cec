"""The exact gradient flow of a depth-L diagonal network from ``w_l(0) = α W0[l]``, at any α (docs/depth.md, *The
exact flow*).

Per coordinate the conservation laws ``w_l² − w_k² = const`` reduce the L layers to the signed smallest one, ``r``:
``w_l² = r² + α² C_l`` with ``C_l = W0[l]² − W0[m]² ≥ 0`` (``m`` the smallest layer), ``β = σ_o r Π_{l≠m}
(r² + α² C_l)^{1/2}`` and ``dr/dt = σ_o g Π_{l≠m} (r² + α² C_l)^{1/2}`` (``σ_o`` the constant sign of the other
layers). With ``a = |r|``, ``s = sign β``, ``ε = α^{L−2}`` and ``τ = ε t``, each coordinate is held in the variable
in which it moves slowly:

- ``CLOCK``: ``c = (α/a)^{L−2}``, ``dc/dτ = −(L−2) s g Π (1 + C_l c^{2/(L−2)})^{1/2}`` — linear on plateaus (exactly,
  for balanced starts and frozen ``g``); the coordinate wakes when ``c = ε a_wake^{−(L−2)}``;
- ``NEAR`` (unbalanced starts, ``|r| ≤ 4 α max_l C_l^{1/2}``): ``ρ = r/α``, ``dρ/dτ = σ_o g Π (ρ² + C_l)^{1/2}``; it
  crosses 0 when the sign of β changes;
- ``AWAKE``: ``y = log a``, ``dy/dt = s g a^{L−2} Π (1 + C_l α²/a²)^{1/2}``.

Plateaus are solved in ``τ`` (the awake coordinates, stiff at rate ``1/ε``, by an L-stable method: their lag behind
their stationary point, O(ε), is kept at ``max(ε, 1e-20)``, below float64's resolution), jumps in ``t`` (they are
``O(ε)`` wide in τ, below its resolution for tiny α), and ``L = 2`` in ``t`` throughout; all by Kvaerno5, switching
by events located by a root finder.
The state needs ``log α`` only: ``log α = −1e4`` is exact and costs what ``α = 1e-4`` costs.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from .._results import RESULTS
from .._solver import run_segments
from .._solver._segments import Progress
from ._field import (
    AWAKE,
    CLOCK,
    EPS_MANIFOLD,
    JUMP,
    JUMP_T_MAX,
    LEAVE,
    NEAR,
    NEAR_RANGE,
    PLATEAU,
    SETTLED,
    WAKE_BETA,
    Args,
    _advance,
    _initial_pid_state,
    _margins,
)
from ._model import DepthModel, _batched_loss, check_init
from ._results import DepthFlowResult


def wake_scale(depth: int, atol: float) -> float:
    """``log a_wake``: a sleeping coordinate below ``2 a_wake`` has ``|β_i| ≤ WAKE_BETA · atol``, below what the error
    control sees, so a plateau step may run past its wake (and the event's root finder place it)."""
    return float(np.log(0.5 * (WAKE_BETA * atol) ** (1.0 / depth)))


@dataclasses.dataclass
class Reduced:
    """A start reduced by the conservation laws: per coordinate the smallest layer ``m``, the constants ``C`` of the
    others, the signs ``σ_o`` of the others and the signed ``ρ0 = W0[m]``."""

    m: np.ndarray
    C: np.ndarray
    sigma_o: np.ndarray
    rho0: np.ndarray
    others: np.ndarray  # (L−1, p) the layer index of each row of C
    signs: np.ndarray  # (L, p) the constant signs of the layers (the smallest one's is its start sign)


def reduce_start(W0: np.ndarray) -> Reduced:
    """Reduce ``W0`` (shape ``(L, p)``) through ``w_l² − w_m² = α² (W0[l]² − W0[m]²)``."""
    L, p = W0.shape
    m = np.argmin(np.abs(W0), axis=0)
    cols = np.arange(p)
    others = np.stack([np.array([l for l in range(L) if l != m[i]]) for i in range(p)], axis=1)
    W_others = W0[others, cols[None, :]]
    C = np.maximum(W_others**2 - W0[m, cols] ** 2, 0.0)
    signs = np.where(W0 < 0, -1.0, 1.0)
    sigma_o = np.prod(np.where(W_others < 0, -1.0, 1.0), axis=0)
    return Reduced(m=m, C=C, sigma_o=sigma_o, rho0=W0[m, cols], others=others, signs=signs)


def initial_state(red: Reduced, log_alpha: float, depth: int, log_wake: float):
    """``(z, kind, σ_r)`` at ``τ = 0``."""
    rho0 = red.rho0
    C_max = red.C.max(axis=0) if red.C.shape[0] else np.zeros_like(rho0)
    sigma_r = np.where(rho0 < 0, -1.0, 1.0)
    with np.errstate(divide="ignore"):
        log_a = log_alpha + np.log(np.abs(rho0))
    near = (C_max > 0) & (np.abs(rho0) <= NEAR_RANGE * np.sqrt(C_max))
    awake = (log_a >= log_wake) | ((depth == 2) & ~near)
    kind = np.where(awake, AWAKE, np.where(near, NEAR, CLOCK))
    with np.errstate(divide="ignore", over="ignore"):
        clock = np.abs(rho0) ** -(depth - 2)
    z = np.where(kind == AWAKE, log_a, np.where(kind == NEAR, rho0, clock))
    if np.any((kind == CLOCK) & ~np.isfinite(z)):
        bad = np.flatnonzero((kind == CLOCK) & ~np.isfinite(z))
        raise ValueError(
            f"coordinates {bad.tolist()} start with two or more layers at 0 (a saddle of the flow that it never "
            "leaves); give them nonzero directions."
        )
    return z, kind, sigma_r


@dataclasses.dataclass
class Run:
    """One run of the flow between calls of the segment loop (Python-side, switched between the compiled solves)."""

    z: np.ndarray
    kind: np.ndarray
    sigma_r: np.ndarray
    mode: int
    tau0: float  # τ at s = 0 of the current mode
    s: float  # s reached
    tnext: object
    pid_state: object
    fresh: bool
    out_z: np.ndarray
    out_kind: np.ndarray
    out_sigma_r: np.ndarray
    filled: np.ndarray
    stats: np.ndarray
    switches: int = 0
    failed: str = ""

    @property
    def tau(self) -> float:
        return self.tau0 + self._k_tau * self.s

    _k_tau: float = 1.0


def solve_one(model: DepthModel, W0, log_alpha: float, ts, rtol: float, atol: float, max_steps, progress=None):
    """The flow of one run: ``(run, interrupted)`` with the state at every output time."""
    L = model.depth
    red = reduce_start(W0)
    log_wake = wake_scale(L, atol)
    z, kind, sigma_r = initial_state(red, log_alpha, L, log_wake)
    m = len(ts)
    run = Run(
        z=z,
        kind=kind,
        sigma_r=sigma_r,
        mode=PLATEAU,
        tau0=0.0,
        s=0.0,
        tnext=None,
        pid_state=None,
        fresh=True,
        out_z=np.full((m, model.p), np.inf),
        out_kind=np.zeros((m, model.p), int),
        out_sigma_r=np.ones((m, model.p)),
        filled=np.zeros(m, bool),
        stats=np.zeros(3, int),
    )
    log_eps = (L - 2) * log_alpha
    eps = float(np.exp(log_eps))
    # a clock is read no lower than the vector field reads it (``_field._split``: a ≤ 2 a_wake); the dense output of
    # the step that runs past a wake may dip below, even below 0, within the tolerance, just before the event
    clock_floor = max(float(np.exp((L - 2) * (log_alpha - np.log(2.0) - log_wake))), 1e-150) if L > 2 else 0.0
    consts = dict(C=jnp.asarray(red.C), sigma_o=jnp.asarray(red.sigma_o), log_alpha=jnp.asarray(log_alpha))
    settled = jnp.asarray(SETTLED * atol)

    def args_of(run):
        return Args(
            model=model,
            kind=jnp.asarray(run.kind),
            sigma_r=jnp.asarray(run.sigma_r),
            mode=jnp.asarray(run.mode),
            settled=settled,
            log_wake=jnp.asarray(log_wake),
            manifold=bool(log_eps < np.log(EPS_MANIFOLD)),
            **consts,
        )

    def k_tau(mode):
        """``dτ/ds``: ``s`` is τ on a plateau and t in a jump (L ≥ 3); t throughout at L = 2, where ``τ = t/log(1/α)``
        (in τ the awake rates ``log(1/α) g`` would put the implicit stages' tolerance below the rounding of ``g``:
        from log α ≈ −18 a balanced start took no step)."""
        if L == 2:
            return 1.0 / -log_alpha
        return 1.0 if mode == PLATEAU else eps

    run._k_tau = k_tau(PLATEAU)

    def enter(run, mode):
        run.tau0 = run.tau
        run.s = 0.0
        run.mode = mode
        run._k_tau = k_tau(mode)
        run.fresh = True
        if mode == JUMP:
            _, settle = _margins(args_of(run), jnp.asarray(run.z))
            if float(settle) <= 0:  # nothing moves fast: a plateau
                enter(run, PLATEAU)

    if L > 2 and np.any(kind == AWAKE):
        enter(run, JUMP)
    tau_end = float(ts[-1])
    if ts[0] == 0.0 and run.tau == 0.0:
        run.out_z[0], run.out_kind[0], run.out_sigma_r[0], run.filled[0] = z, kind, sigma_r, True

    def s_end(run):
        s1 = (tau_end - run.tau0) / run._k_tau if run._k_tau > 0 else np.inf
        return s1 if run.mode == PLATEAU else min(s1, JUMP_T_MAX)

    def advance(run, budget):
        budget = int(np.asarray(budget))
        if budget <= 0:
            return run
        args = args_of(run)
        s1 = s_end(run)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            s_out = (ts - run.tau0) / run._k_tau if run._k_tau > 0 else np.full(m, s1)
        s_out = np.clip(np.nan_to_num(s_out, nan=s1, posinf=s1), run.s, s1)
        if run.pid_state is None:
            run.tnext, run.pid_state = _initial_pid_state(args, jnp.asarray(run.z), rtol, atol)
        out = _advance(
            args,
            jnp.asarray(run.z),
            jnp.asarray(run.s),
            jnp.asarray(s1),
            jnp.asarray(run.tnext),
            run.pid_state,
            jnp.asarray(run.fresh),
            jnp.asarray(budget),
            jnp.asarray(s_out),
            rtol,
            atol,
        )
        ys, s_final, z_final, proposed, pid_state, counts, event, spent, done, code = jax.tree_util.tree_map(
            lambda x: np.asarray(x) if isinstance(x, jax.Array) and x.ndim else x, out
        )
        ys = np.where(run.kind == CLOCK, np.maximum(np.asarray(ys), clock_floor), np.asarray(ys))
        s_start, s_final = run.s, float(s_final)
        tau_start = run.tau
        run.s = s_final
        tau_reached = run.tau
        run.stats = run.stats + np.asarray(counts)
        new = (~run.filled) & (ts >= tau_start) & (ts <= tau_reached) & (s_out >= s_start) & (s_out <= s_final)
        new &= np.all(np.isfinite(ys), axis=-1)
        run.out_z[new], run.out_kind[new], run.out_sigma_r[new] = ys[new], run.kind, run.sigma_r
        run.filled |= new
        run.z = np.array(z_final)
        run.tnext, run.pid_state, run.fresh = proposed, pid_state, False
        if bool(event):
            apply_switch(run, red, L, log_alpha, log_wake, margins_of, enter)
        elif bool(done):
            if run.mode == JUMP and not run.filled[-1]:
                if eps > 0 and s_final < JUMP_T_MAX:
                    pass
                else:
                    run.failed = (
                        f"a jump did not settle within t = {JUMP_T_MAX:.0e} (the awake coordinates have no "
                        "stationary point to go to)"
                    )
        elif not bool(spent):
            run.failed = "the solver could not go on (its step size fell below the float64 resolution)"
        return run

    def margins_of(run):
        return _margins(args_of(run), jnp.asarray(run.z))

    def status(run):
        going = (not run.filled[-1]) and not run.failed
        return np.asarray(run.stats[0]), np.asarray(run.tau), np.asarray(going)

    run, interrupted = run_segments(advance, run, status, max_steps=max_steps, progress=progress)
    return run, interrupted


def apply_switch(run, red, L, log_alpha, log_wake, margins_of, enter):
    """Apply the switch whose margin reached 0 at the event (a wake, a leave, a crossing into or out of the NEAR
    range, or a jump that settled): a change of variable, exact at any point, and of time variable."""
    run.switches += 1
    kinds, settle = (np.asarray(x) for x in margins_of(run))
    i = int(np.argmin(kinds))
    if run.mode == JUMP and float(settle) <= float(kinds[i]):
        enter(run, PLATEAU)
        return
    C_max = red.C[:, i].max() if red.C.shape[0] else 0.0
    near_range = NEAR_RANGE * np.sqrt(C_max)
    k, zi = run.kind[i], run.z[i]
    if k == CLOCK:
        if C_max > 0 and zi >= (0.5 * near_range) ** -(L - 2) * (1 - 1e-9):  # shrinking into the NEAR range
            run.kind[i], run.z[i] = NEAR, run.sigma_r[i] * 0.5 * near_range
        else:  # waking
            run.kind[i], run.z[i] = AWAKE, log_wake
    elif k == NEAR:
        run.sigma_r[i] = 1.0 if zi >= 0 else -1.0
        if L == 2:
            run.kind[i], run.z[i] = AWAKE, log_alpha + np.log(near_range)
        elif log_wake - log_alpha - np.log(abs(zi)) <= near_range - abs(zi):
            run.kind[i], run.z[i] = AWAKE, log_wake
        else:
            run.kind[i], run.z[i] = CLOCK, near_range ** -(L - 2)
    elif L == 2:
        run.kind[i], run.z[i] = NEAR, run.sigma_r[i] * 0.5 * near_range
    else:  # leaving
        log_leave = log_wake + np.log(LEAVE)
        if C_max > 0 and log_leave - log_alpha <= np.log(0.5 * near_range):
            run.kind[i], run.z[i] = NEAR, run.sigma_r[i] * np.exp(log_leave - log_alpha)
        else:
            run.kind[i], run.z[i] = CLOCK, float(np.exp((L - 2) * (log_alpha - log_leave)))
    if run.kind[i] == AWAKE and run.mode == PLATEAU:
        enter(run, JUMP)
    else:
        enter(run, run.mode)


def layers_of(red: Reduced, depth: int, log_alpha: float, z, kind, sigma_r):
    """``(log |w_l|, sign w_l)``, each ``(m, L, p)``, of the states ``z`` (``(m, p)``) of one run."""
    la = log_alpha
    near = kind == NEAR
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        log_c = np.log(np.where(kind == CLOCK, z, 1.0))
        log_a = np.where(kind == AWAKE, z, np.where(near, la + np.log(np.abs(np.where(near, z, 1.0))), 0.0))
        if depth > 2:
            log_a = np.where(kind == CLOCK, la - log_c / (depth - 2), log_a)
        rho2 = np.where(near, z, 0.0) ** 2
        others = np.where(
            near[..., None, :],
            la + 0.5 * np.log(rho2[..., None, :] + red.C),
            log_a[..., None, :] + 0.5 * np.log1p(red.C * np.exp(2.0 * (la - log_a[..., None, :]))),
        )
    m = z.shape[0]
    log_w = np.empty((m, depth, z.shape[-1]))
    cols = np.arange(z.shape[-1])
    log_w[:, red.m, cols] = log_a
    for row in range(depth - 1):
        log_w[:, red.others[row], cols] = others[:, row]
    sign = np.broadcast_to(red.signs, log_w.shape).copy()
    first = np.where(near, np.where(z < 0, -1.0, 1.0), sigma_r)
    sign[:, red.m, cols] = first
    log_w = np.where(np.isfinite(z)[:, None, :] | (kind[:, None, :] != CLOCK), log_w, np.inf)
    log_w = np.where(np.all(np.isfinite(z), axis=-1)[:, None, None], log_w, np.inf)
    return log_w, sign


def flow(model: DepthModel, request) -> DepthFlowResult:
    """The flow of ``simulate_flow`` for a depth-L diagonal network from ``w_l(0) = α u0[l]``, run by run."""
    if request.start is not None:
        raise ValueError(
            "a DepthModel's flow starts from u0 (the layers' directions, shape (L, p)); start is not taken."
        )
    if request.v0 is not None:
        raise ValueError("a DepthModel takes its layers' directions as u0, shape (L, p); v0 is not taken.")
    if request.u0 is None:
        raise ValueError("give the layers' initial directions u0, shape (L, p) (w_l(0) = α u0[l]).")
    W0 = check_init(model, request.u0)
    red = reduce_start(W0)
    ts, log_a = request.ts, np.atleast_1d(request.log_a)
    bar = Progress(ts[-1], len(log_a), desc="simulate_flow", enabled=request.progress)
    outs, stopped_any = [], False
    try:
        for j, la in enumerate(log_a):
            if stopped_any:
                outs.append(None)
                continue
            run, stopped = solve_one(
                model, W0, float(la), ts, request.rtol, request.atol, request.max_steps, bar.run(j, 1.0)
            )
            stopped_any |= stopped
            outs.append((run, stopped))
    finally:
        bar.close()
    fields = [_result_fields(model, red, float(la), ts, out, request.max_steps) for la, out in zip(log_a, outs)]
    stacked = {k: np.stack([f[k] for f in fields]) for k in ("log_w", "sign", "loss", "result", "message")}
    stats = {k: np.array([f["stats"][k] for f in fields]) for k in fields[0]["stats"]}
    if not request.batched:
        stacked = {k: v[0] for k, v in stacked.items()}
        stats = {k: v[0] for k, v in stats.items()}
    stats["max_steps"] = request.max_steps
    return DepthFlowResult(
        ts=ts,
        log_w=stacked["log_w"],
        sign=stacked["sign"],
        loss=stacked["loss"],
        log_alpha=np.asarray(request.log_a),
        stats=stats,
        result=stacked["result"],
        message=stacked["message"],
    )


def _result_fields(model, red, la, ts, out, max_steps):
    m, L, p = len(ts), model.depth, model.p
    if out is None:  # not started: Ctrl-C stopped an earlier run
        return dict(
            log_w=np.full((m, L, p), np.inf),
            sign=np.ones((m, L, p)),
            loss=np.full(m, np.nan),
            result=RESULTS.interrupted.value,
            message=f"simulate_flow was interrupted (Ctrl-C) before the run at log α = {la:.6g} started.",
            stats=dict(num_steps=0, num_accepted_steps=0, num_rejected_steps=0, switches=0),
        )
    run, stopped = out
    z = np.where(run.filled[:, None], run.out_z, np.inf)
    log_w, sign = layers_of(red, L, la, z, run.out_kind, run.out_sigma_r)
    beta = np.prod(sign, axis=1) * np.exp(np.sum(log_w, axis=1))
    loss = np.full(m, np.nan)
    if run.filled.any():
        loss[run.filled] = np.asarray(_batched_loss(model, jnp.asarray(beta[run.filled])))
    reached = ts[np.flatnonzero(run.filled)[-1]] if run.filled.any() else 0.0
    where = f"log α = {la:.6g}: the flow stopped after τ = {reached:.6g} (ts[-1] = {ts[-1]:.6g})"
    if run.filled[-1]:
        result, message = RESULTS.successful, ""
    elif stopped:
        result, message = (
            RESULTS.interrupted,
            f"simulate_flow was interrupted (Ctrl-C) at {where}; the times before are kept.",
        )
    elif run.failed:
        result, message = RESULTS.solver_failed, f"simulate_flow failed at {where}: {run.failed}."
    else:
        result = RESULTS.max_steps_reached
        message = f"simulate_flow hit max_steps={max_steps} at {where}. Raise max_steps, loosen atol, or shorten ts."
    stats = dict(
        num_steps=int(run.stats[0]),
        num_accepted_steps=int(run.stats[1]),
        num_rejected_steps=int(run.stats[2]),
        switches=int(run.switches),
    )
    return dict(log_w=log_w, sign=sign, loss=loss, result=result.value, message=message, stats=stats)

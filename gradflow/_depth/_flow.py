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
``O(ε)`` wide in τ, below its resolution for tiny α); both by Kvaerno5, switching by events located by a root finder.
The state needs ``log α`` only: ``log α = −1e4`` is exact and costs what ``α = 1e-4`` costs.
"""

from __future__ import annotations

import dataclasses

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from diffrax._term import WrapTerm

from .._solver import UnderflowGuard, run_segments
from .._solver._controllers import StepBudget
from .._solver._segments import Progress
from ._model import DepthModel

CLOCK, NEAR, AWAKE = 0, 1, 2
PLATEAU, JUMP = 0, 1
WAKE_BETA = 1e-2  # a coordinate is integrated in log a from a = a_wake, (2 a_wake)^L = WAKE_BETA · atol, on ...
LEAVE = 0.25  # ... until it falls below LEAVE · a_wake
NEAR_RANGE = 4.0  # ρ = r/α is the variable of an unbalanced coordinate while |ρ| ≤ NEAR_RANGE max_l C_l^{1/2}
EPS_MANIFOLD = 1e-8  # below this ε the plateaus hold the awake coordinates on their slow manifold (see vector_field)
BAUMGARTE = 10.0  # the rate (per unit τ) at which a drift off the slow manifold is pulled back
SETTLED = 1.0  # a jump ends once every awake coordinate has |g_i| ≤ SETTLED · atol
JUMP_T_MAX = 1e12  # the longest jump, in t


class Args(eqx.Module):
    """What the vector field needs besides the state: the model, each coordinate's kind and signs, the conserved
    constants, the scale and the mode (plateau in τ, jump in t)."""

    model: DepthModel
    kind: jax.Array  # (p,) CLOCK, NEAR or AWAKE
    sigma_r: jax.Array  # (p,) the sign of the smallest layer r (CLOCK and AWAKE; NEAR reads it off ρ)
    sigma_o: jax.Array  # (p,) the product of the other layers' signs
    C: jax.Array  # (L−1, p) W0[l]² − W0[m]² of the other layers
    log_alpha: jax.Array
    mode: jax.Array  # PLATEAU or JUMP
    settled: jax.Array  # SETTLED · atol
    log_wake: jax.Array  # log a_wake
    manifold: bool = eqx.field(static=True, default=False)  # ε < EPS_MANIFOLD


def _split(z, args: Args):
    """``log a`` of every coordinate, the kind-safe ``ρ`` and whether each is NEAR."""
    L = args.model.depth
    la = args.log_alpha
    near = args.kind == NEAR
    floor = (L - 2) * (la - jnp.log(2.0) - args.log_wake)  # log c ≥ floor: a ≤ 2 a_wake, |β| ≤ WAKE_BETA atol
    # the floor, kept above 1e-150 so that 1/c² (in the Jacobian of the manifold's field) stays finite
    log_c = jnp.log(jnp.maximum(z, jnp.maximum(jnp.exp(floor), 1e-150)))
    rho = jnp.where(near, z, 1.0)
    log_a = jnp.where(args.kind == AWAKE, z, jnp.where(near, la + jnp.log(jnp.abs(rho)), la - log_c / (L - 2)))
    return log_a, log_c, rho, near


def beta_of(z, args: Args):
    """``β`` of the state ``z``."""
    L, la = args.model.depth, args.log_alpha
    log_a, _, rho, near = _split(z, args)
    ratio2 = jnp.exp(2.0 * (la - jnp.where(near, la, log_a)))  # (α/a)², unused for NEAR
    far = (
        args.sigma_r
        * args.sigma_o
        * jnp.exp(L * jnp.where(near, 0.0, log_a) + 0.5 * jnp.sum(jnp.log1p(args.C * ratio2), axis=0))
    )
    close = args.sigma_o * rho * jnp.prod(jnp.sqrt(rho**2 + args.C), axis=0) * jnp.exp(L * la)
    return jnp.where(near, close, far)


def _rates(z, args: Args):
    """``(dz/dτ of CLOCK and NEAR, dy/dt of AWAKE, g)`` at ``z``."""
    L, la = args.model.depth, args.log_alpha
    log_a, _, rho, near = _split(z, args)
    g = args.model.g(beta_of(z, args))
    s = args.sigma_r * args.sigma_o
    ratio2 = jnp.exp(2.0 * (la - jnp.where(near, la, log_a)))
    spread = jnp.exp(0.5 * jnp.sum(jnp.log1p(args.C * ratio2), axis=0))  # Π (1 + C_l α²/a²)^{1/2}
    clock = -(L - 2) * s * g * spread
    near_rate = args.sigma_o * g * jnp.prod(jnp.sqrt(rho**2 + args.C), axis=0)
    awake = s * g * jnp.exp((L - 2) * jnp.where(near, 0.0, log_a)) * spread
    return jnp.where(near, near_rate, clock), awake, g


def vector_field(s, z, args: Args):
    """``dz/ds``: ``s = τ − τ_0`` on a plateau, ``s = t − t_0`` in a jump.

    On a plateau the awake coordinates move as ``dy/dτ = (dy/dt)/ε``, stiff at rate ``1/ε``, and sit within O(ε) of
    their slow manifold ``{g_i = 0 on the awake set}``. For ``ε < EPS_MANIFOLD`` (where float64's rounding of
    ``g``, amplified by ``1/ε``, would swamp the error control of any stiff solver) they are held on it: ``dy_A/dτ =
    −(∂G_A/∂y_A)^{−1} (∂G_A/∂z_Z dz_Z/dτ + κ G_A)`` with ``G = dy/dt`` (the implicit function's derivative, with a
    Baumgarte term ``κ`` pulling back any drift), which drops a lag of relative size O(ε) < 1e-8.
    """
    L = args.model.depth
    log_eps = (L - 2) * args.log_alpha
    slow, fast, _ = _rates(z, args)
    awake = args.kind == AWAKE
    plateau = args.mode == PLATEAU
    k_tau = jnp.where(plateau, 1.0, jnp.exp(log_eps))
    if not args.manifold:
        fast_scale = jnp.where(plateau, jnp.exp(-log_eps), 1.0)
        return jnp.where(awake, fast_scale * fast, k_tau * slow)
    sleeping = jnp.where(awake, 0.0, k_tau * slow)
    M = jax.jacfwd(lambda x: _rates(x, args)[1])(z)
    both = awake[:, None] & awake[None, :]
    M_AA = jnp.where(both, M, jnp.eye(z.shape[0]))
    rhs = jnp.where(awake, -(M @ sleeping) - BAUMGARTE * fast, 0.0)
    held = jnp.linalg.solve(M_AA, rhs)
    return jnp.where(awake, jnp.where(plateau, held, fast), sleeping)


def margins(z, args: Args, C_max, near_range):
    """Every switching margin, positive until its switch (``(p,)`` per kind, and the jump's settling)."""
    L, la = args.model.depth, args.log_alpha
    log_eps = (L - 2) * la
    log_a, log_c, rho, near = _split(z, args)
    c_wake = jnp.exp(log_eps - (L - 2) * args.log_wake)
    c_near = jnp.where(C_max > 0, (0.5 * near_range) ** -(L - 2), jnp.inf)
    clock = jnp.minimum(z - c_wake, c_near - z)
    close = jnp.minimum(near_range - jnp.abs(rho), (args.log_wake - la) - jnp.log(jnp.abs(rho)))
    awake = z - (args.log_wake + jnp.log(LEAVE))
    kinds = jnp.where(args.kind == AWAKE, awake, jnp.where(near, close, clock))
    _, _, g = _rates(z, args)
    moving = jnp.max(jnp.where(args.kind == AWAKE, jnp.abs(g), -jnp.inf))
    return kinds, moving - args.settled


def _cond(t, y, args, **kwargs):
    """The smallest margin: a coordinate changes its variable, or a jump has settled (every awake coordinate has
    ``|g_i| ≤ SETTLED · atol``: on its slow manifold), where it reaches 0."""
    C_max, near_range = kwargs_static(args)
    kinds, settle = margins(y, args, C_max, near_range)
    return jnp.minimum(jnp.min(kinds), jnp.where(args.mode == JUMP, settle, jnp.inf))


def kwargs_static(args: Args):
    C_max = jnp.max(args.C, axis=0) if args.C.shape[0] else jnp.zeros(args.model.p)
    return C_max, NEAR_RANGE * jnp.sqrt(C_max)


def _solver(rtol, atol):
    root = optx.Newton(rtol=1e-10, atol=1e-10, cauchy_termination=False)
    return dfx.Kvaerno5(root_finder=root)


@eqx.filter_jit
def _advance(args: Args, z, s0, s1, tnext, pid_state, fresh, budget, s_out, rtol, atol):
    """At most ``budget`` steps of ``dz/ds`` from ``(s0, z)`` towards ``s1``, stopping at the first switch."""
    solver = _solver(rtol, atol)
    pid = _controller(rtol, atol, s_out[-1:])
    term = dfx.ODETerm(vector_field)
    wrapped = WrapTerm(term, jnp.asarray(1))
    new_tnext, new_state = pid.wrap(jnp.asarray(1)).init(
        wrapped, s0, s1, z, None, args, solver.func, solver.error_order(wrapped)
    )
    tnext = jnp.minimum(jnp.where(fresh, new_tnext, tnext), s1)
    pid_state = jax.tree_util.tree_map(lambda a, b: jnp.where(fresh, a, b), new_state, pid_state)
    event = dfx.Event(_cond, root_finder=optx.Bisection(rtol=1e-14, atol=1e-14), direction=False)
    sol = dfx.diffeqsolve(
        term,
        solver,
        t0=s0,
        t1=s1,
        dt0=None,
        y0=z,
        args=args,
        saveat=dfx.SaveAt(subs=(dfx.SubSaveAt(ts=s_out), dfx.SubSaveAt(t1=True)), controller_state=True),
        stepsize_controller=StepBudget(pid, tnext),
        controller_state=(pid_state, budget, tnext, jnp.array(True)),
        event=event,
        max_steps=None,
        throw=False,
    )
    controller_state, _, proposed, _ = sol.controller_state
    counts = jnp.stack([sol.stats["num_steps"], sol.stats["num_accepted_steps"], sol.stats["num_rejected_steps"]])
    return (
        sol.ys[0],
        sol.ts[1][0],
        sol.ys[1][0],
        proposed,
        controller_state,
        counts,
        sol.result == dfx.RESULTS.event_occurred,
        sol.result == dfx.RESULTS.max_steps_reached,
        sol.result == dfx.RESULTS.successful,
        sol.result._value,
    )


def _controller(rtol, atol, step_ts):
    return UnderflowGuard(dfx.PIDController(rtol=rtol, atol=atol, factormax=10.0), step_ts)


@eqx.filter_jit
def _initial_pid_state(args: Args, z, rtol, atol):
    pid = _controller(rtol, atol, jnp.ones(1))
    solver = _solver(rtol, atol)
    wrapped = WrapTerm(dfx.ODETerm(vector_field), jnp.asarray(1))
    return pid.wrap(jnp.asarray(1)).init(wrapped, 0.0, 1.0, z, None, args, solver.func, solver.error_order(wrapped))


@eqx.filter_jit
def _margins(args: Args, z):
    C_max, near_range = kwargs_static(args)
    return margins(z, args, C_max, near_range)


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
    awake = log_a >= log_wake
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

    def enter(run, mode):
        run.tau0 = run.tau
        run.s = 0.0
        run.mode = mode
        run._k_tau = 1.0 if mode == PLATEAU else eps
        run.fresh = True
        if mode == JUMP:
            _, settle = _margins(args_of(run), jnp.asarray(run.z))
            if float(settle) <= 0:  # nothing moves fast: a plateau
                enter(run, PLATEAU)

    if np.any(kind == AWAKE):
        enter(run, JUMP)
    tau_end = float(ts[-1])
    if ts[0] == 0.0 and run.tau == 0.0:
        run.out_z[0], run.out_kind[0], run.out_sigma_r[0], run.filled[0] = z, kind, sigma_r, True

    def s_end(run):
        if run.mode == PLATEAU:
            return tau_end - run.tau0
        return min((tau_end - run.tau0) / eps, JUMP_T_MAX) if eps > 0 else JUMP_T_MAX

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
        ys = np.asarray(ys)
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
            switch(run)
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

    def switch(run):
        """Apply the switch whose margin reached 0 at the event."""
        run.switches += 1
        kinds, settle = (np.asarray(x) for x in _margins(args_of(run), jnp.asarray(run.z)))
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
            if log_wake - log_alpha - np.log(abs(zi)) <= near_range - abs(zi):
                run.kind[i], run.z[i] = AWAKE, log_wake
            else:
                run.kind[i], run.z[i] = CLOCK, near_range ** -(L - 2)
        else:  # leaving
            log_leave = log_wake + np.log(LEAVE)
            if C_max > 0 and log_leave - log_alpha <= np.log(0.5 * near_range):
                run.kind[i], run.z[i] = NEAR, run.sigma_r[i] * np.exp(log_leave - log_alpha)
            else:
                run.kind[i], run.z[i] = CLOCK, float(np.exp(log_eps - (L - 2) * log_leave))
        if run.kind[i] == AWAKE and run.mode == PLATEAU:
            enter(run, JUMP)
        else:
            enter(run, run.mode)

    def status(run):
        going = (not run.filled[-1]) and not run.failed
        return np.asarray(run.stats[0]), np.asarray(run.tau), np.asarray(going)

    run, interrupted = run_segments(advance, run, status, max_steps=max_steps, progress=progress)
    return run, interrupted

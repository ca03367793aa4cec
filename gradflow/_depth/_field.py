"""The vector field of the depth family's exact flow, its switching margins and one compiled solve between two
switches (docs/depth.md, *The exact flow*; the variables are described in ``gradflow._depth._flow``)."""

from __future__ import annotations

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx
from diffrax._term import WrapTerm

from .._solver import UnderflowGuard
from .._solver._controllers import StepBudget
from ._model import DepthModel

CLOCK, NEAR, AWAKE = 0, 1, 2
PLATEAU, JUMP = 0, 1
WAKE_BETA = 1e-2  # a coordinate is integrated in log a from a = a_wake, (2 a_wake)^L = WAKE_BETA · atol, on ...
LEAVE = 0.25  # ... until it falls below LEAVE · a_wake
NEAR_RANGE = 4.0  # ρ = r/α is the variable of an unbalanced coordinate while |ρ| ≤ NEAR_RANGE max_l C_l^{1/2}
EPS_MANIFOLD = 1e-5  # below this ε the plateaus hold the awake coordinates on their slow manifold (see vector_field)
BAUMGARTE = 10.0  # the rate (per unit τ) at which a drift off the slow manifold is pulled back
SETTLED = 1e-2  # a jump ends once every awake coordinate has |g_i| ≤ SETTLED · atol
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
    """``dz/ds``: ``s = τ − τ_0`` on a plateau, ``s = t − t_0`` in a jump (and throughout at ``L = 2``).

    On a plateau the awake coordinates move as ``dy/dτ = (dy/dt)/ε``, stiff at rate ``1/ε``, and sit within O(ε) of
    their slow manifold ``{g_i = 0 on the awake set}``. For ``ε < EPS_MANIFOLD`` (where float64's rounding of
    ``g``, amplified by ``1/ε``, swamps the error control of the stiff solver: with a Gaussian design it stalled at
    ε between 1e-8 and 1e-7) they are held on it: ``dy_A/dτ = −(∂G_A/∂y_A)^{−1} (∂G_A/∂z_Z dz_Z/dτ + κ G_A)`` with
    ``G = dy/dt`` (the implicit function's derivative, with a Baumgarte term ``κ`` pulling back any drift). That drops
    the lag ``ε (dy_A/dτ) / λ``, ε times the manifold's own speed, which on a plateau only the sleeping coordinates
    (``|β_i| ≤ 10⁻² atol``) drive: held and solved exactly, the flows differ by at most 2.5e-10 relative at ε = 1e-4
    and 1e-6 (docs/depth.md; tests/depth/test_flow.py::test_holding_the_slow_manifold_changes_the_flow_below_its_tolerance).
    """
    L = args.model.depth
    log_eps = (L - 2) * args.log_alpha
    slow, fast, _ = _rates(z, args)
    awake = args.kind == AWAKE
    if L == 2:  # s = t (τ = t / log(1/α)), as the diagonal family's log w: the stage equations stay O(1)
        return jnp.where(awake, fast, slow)
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
    if L == 2:  # no clocks: log a, or ρ while |ρ| ≤ NEAR_RANGE max C^{1/2} (unbalanced)
        awake = jnp.where(C_max > 0, z - (la + jnp.log(0.5 * near_range)), jnp.inf)
        close = near_range - jnp.abs(rho)
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
    """Kvaerno5 whose Newton iterations stop at the step's own tolerances (as diffrax's implicit solvers do by
    default): on a plateau the awake coordinates' field is ``g`` amplified by ``1/ε``, and a tighter stop (it was
    1e-10) met the rounding of ``g`` for ``ε`` between ``EPS_MANIFOLD`` and about 1e-6, where the steps then
    shrank until ``max_steps`` (a regression with a Gaussian design at ε = 1e-8: τ = 0.4 of 3 after 3,000 steps; 233
    steps to the end now)."""
    root = optx.Newton(rtol=rtol, atol=atol, cauchy_termination=False)
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

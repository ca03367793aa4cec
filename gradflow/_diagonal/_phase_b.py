"""Phase (B) of Algorithm 1 for diagonal weights (paper eq. 11; docs/math.md, *Algorithm 1: the greedy limit*):
the flow on the support from each start, then Newton's method, in one compiled call.

On ``S_k ∪ {i_k}`` the conservation law keeps ``u_i² − v_i² = 0``, so ``v = s ⊙ u`` throughout and the flow
reduces to the magnitudes ``y = |u|``: ``dy/dt = s ⊙ y ⊙ g(β)``, ``β = s ⊙ y²`` (embedded into ``R^p``, zero off
the support), a system of the support's size. It is integrated in ``z = log y`` (``dz/dt = s ⊙ g(β)``), where the
escape of the new coordinate from ε, of duration ~log(1/ε)/|g_{i_k}|, is a straight line crossed in a few steps
and the step control is on the relative error of the weights. The state is padded to 64 slots with a mask (a
prefix of the slots), beyond that to a power of two, and every Jacobian is built from the active slots only, so
one compilation serves every support up to 64 at the cost of its actual size. The solver is a linearly implicit,
L-stable W-method of order 2 (the escape and the relaxation onto θ^{k+1} run at very different rates): two
evaluations of g and one LU factorisation per step, with a ``∂g/∂β`` kept from step to step by Broyden's update
(rebuilt only when it mispredicts the change of g; the factor ``∂β/∂z = 2β`` is exact at every step), until it is
nearly steady; it is then polished by Newton's method on ``g_S(β_S) = 0``, which starts from the matrix the flow
kept.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np


def reduced_g(model, index, mask) -> Callable:
    """``β_S ↦ g_S``: g on the support coordinates ``index`` (slots outside ``mask`` count as ``β = 0``)."""

    def g(beta):
        return model.g(jnp.zeros(model.p, dtype=beta.dtype).at[index].add(jnp.where(mask, beta, 0.0)))[index]

    return g


@eqx.filter_jit
def restricted_hessian(model, index, mask, signs, y) -> jax.Array:
    """Hessian of ``ũ ↦ L(ũ, s ⊙ ũ)`` in the support coordinates (Assumption 4.3), padded rows zero.

    With ``β = s ⊙ ũ²`` and ``g = −∇_β L``, it is ``−4 D (∂g/∂β) D − 2 diag(s ⊙ g)``, ``D = diag(s ⊙ ũ)``:
    ``∂g/∂β`` is built one column (one JVP of the model's g) per slot of the support and in sequence. ``mask``
    is a prefix of the padded state, so the padded slots cost nothing (one compilation serves every support
    size); batching the columns would make the model's small matrix products batched ones, which are slower on
    CPU.
    """
    g, jvp = jax.linearize(reduced_g(model, index, mask), jnp.where(mask, signs * y * y, 0.0))
    d = jnp.where(mask, signs * y, 0.0)

    def column(j, cols):
        return cols.at[:, j].set(-4 * d * jvp(jax.nn.one_hot(j, y.size, dtype=y.dtype)) * d[j])

    cols = jax.lax.fori_loop(0, jnp.sum(mask), column, jnp.zeros((y.size, y.size), dtype=y.dtype))
    return cols - 2 * jnp.diag(jnp.where(mask, signs * g, 0.0))


class Thresholds(NamedTuple):
    """Phase (B)'s thresholds for one stage, as traced scalars, so that every stage reuses one compilation."""

    speed: jax.Array  # |g_{i_k}(θ^k)|, the new coordinate's speed
    steady: jax.Array  # the flow stops once every support |g_i| is below this (or the coordinate is leaving)
    support: jax.Array  # y_i ≤ support · max y is off the support
    tol: jax.Array  # the local error of log y per step
    dt0: jax.Array  # the first step: the new coordinate's log y moves by about 1
    t1: jax.Array  # the flow's last time
    stationary: jax.Array  # Newton's method stops at max_S |g| ≤ stationary


def _columns(mv, active, size, dtype) -> jax.Array:
    """The matrix of the linear map ``mv`` whose columns ``j ≥ active`` are ``e_j``: one ``mv`` (one JVP) per
    active column, in sequence, so that the padded slots of the reduced state cost nothing.

    Batching the columns would turn each small matrix product of g (one per sample) into a batched one, which
    XLA's CPU backend runs 2–3× slower than the same products one column after the other.
    """

    def body(j, cols):
        return cols.at[:, j].set(mv(jax.nn.one_hot(j, size, dtype=dtype)))

    return jax.lax.fori_loop(0, active, body, jnp.eye(size, dtype=dtype))


class _WState(NamedTuple):
    t: jax.Array
    h: jax.Array  # the next step to try
    z: jax.Array
    f: jax.Array  # the field at z: the last evaluation of an accepted step is the first of the next
    dg: jax.Array  # the kept ∂g/∂β
    steps: jax.Array  # steps tried, accepted or not
    rejected: jax.Array  # the last step was rejected: the next one does not grow
    done: jax.Array  # stop(z, f) after an accepted step
    h_accepted: jax.Array  # the last accepted step
    ratio_accepted: jax.Array  # its error over tol (0: none yet)


def _w_flow(field, dg_of, signs, mask, z0, dg0, stop, dt0, t1, tol, max_steps) -> _WState:
    """``dz/dt = f(z)`` (``field``) from ``z0`` until ``stop(z, f(z))`` holds after an accepted step (or ``t1``, or
    ``max_steps`` steps), by the L-stable linearly implicit W-method of order 2 of Steihaug & Wolfbrandt (the
    formula of MATLAB's ``ode23s``, Shampine & Reichelt 1997, with its third-order error estimate):

        W = I − h d A,   d = 1/(2 + √2),   k₁ = W⁻¹ f(z),   f₁ = f(z + h k₁/2),   k₂ = W⁻¹ (f₁ − k₁) + k₁,
        z⁺ = z + h k₂,   k₃ = W⁻¹ (f(z⁺) − (6 + √2)(k₂ − f₁) − 2 (k₁ − f(z))),   error h (k₁ − 2k₂ + k₃)/6:

    two evaluations of g and one LU factorisation per step, and no iteration. A W-method keeps its order for
    any matrix ``A``; here ``A = diag(s) B diag(2β)`` with ``B`` a kept ``∂g/∂β`` (from ``dg0``) and the factor
    ``∂β/∂z = 2β``, which changes by orders of magnitude while the new coordinate escapes, exact at each step.
    After each accepted step ``B`` takes Broyden's update ``B += (Δg − B Δβ) Δβᵀ / ‖Δβ‖²``, so that it maps
    the step's ``Δβ`` onto the observed ``Δg`` (the secant condition); where it mispredicted ``Δg`` by more than
    ``‖Δg‖`` itself (worse than predicting no change) it is rebuilt instead (``dg_of``, one JVP per active
    slot). The step size follows the RMS of the error over the active slots against ``tol`` (exponent 1/3, with
    Gustafsson's predictive correction after accepted steps, Hairer & Wanner II §IV.8, which foresees the error's
    growth where the new coordinate turns onto the steady state; growth at most ``_FACTORMAX`` per step and none
    right after a rejection).
    """
    eye = jnp.eye(z0.size, dtype=z0.dtype)
    both = mask[:, None] & mask[None, :]
    active = jnp.sum(mask)

    def body(s: _WState) -> _WState:
        beta = jnp.where(mask, signs * jnp.exp(2 * s.z), 0.0)
        lu = jax.scipy.linalg.lu_factor(eye - s.h * _D * jnp.where(both, signs[:, None] * s.dg * (2 * beta), 0.0))

        def solve(b):
            return jax.scipy.linalg.lu_solve(lu, b)

        k1 = solve(s.f)
        f1 = field(s.z + 0.5 * s.h * k1)
        k2 = solve(f1 - k1) + k1
        z1 = s.z + s.h * k2
        f2 = field(z1)
        k3 = solve(f2 - _E32 * (k2 - f1) - 2 * (k1 - s.f))
        ratio = jnp.sqrt(jnp.sum((s.h / 6 * (k1 - 2 * k2 + k3)) ** 2) / active) / tol
        ok = (ratio <= 1) & jnp.all(jnp.isfinite(f2))  # NaN or inf: rejected
        factor = _SAFETY * ratio ** (-1 / 3)
        # Gustafsson's prediction after an accepted step: the error's trend over the last two accepted steps.
        predicted = factor * (s.h / s.h_accepted) * (s.ratio_accepted / ratio) ** (1 / 3)
        factor = jnp.where(ok & (s.ratio_accepted > 0), jnp.minimum(factor, predicted), factor)
        factor = jnp.clip(factor, _FACTORMIN, jnp.where(s.rejected, 1.0, _FACTORMAX))
        factor = jnp.where(jnp.isnan(factor), _FACTORMIN, factor)
        t = jnp.where(ok, s.t + s.h, s.t)
        z, f = jnp.where(ok, z1, s.z), jnp.where(ok, f2, s.f)
        dbeta = jnp.where(mask, signs * jnp.exp(2 * z), 0.0) - beta  # 0 after a rejection
        # Δg − B Δβ on the support (f = s ⊙ g; the padded rows of a rebuilt ∂g/∂β are not zero)
        miss = jnp.where(mask, signs * (f - s.f) - s.dg @ dbeta, 0.0)
        rebuild = ok & (jnp.max(jnp.abs(miss)) > jnp.max(jnp.abs(f - s.f)))
        broyden = s.dg + jnp.outer(miss, dbeta) / jnp.maximum(jnp.sum(dbeta**2), jnp.finfo(z0.dtype).tiny)
        return _WState(
            t=t,
            h=jnp.minimum(s.h * factor, t1 - t),
            z=z,
            f=f,
            dg=jax.lax.cond(rebuild, lambda: dg_of(z), lambda: broyden),
            steps=s.steps + 1,
            rejected=~ok,
            h_accepted=jnp.where(ok, s.h, s.h_accepted),
            ratio_accepted=jnp.where(ok, jnp.maximum(ratio, 1e-10), s.ratio_accepted),
            done=ok & stop(z, f),
        )

    def cond(s: _WState):
        return ~s.done & (s.steps < max_steps) & (s.t < t1)

    no = jnp.array(False)
    return jax.lax.while_loop(
        cond,
        body,
        _WState(
            jnp.zeros((), z0.dtype),
            jnp.asarray(dt0, z0.dtype),
            z0,
            field(z0),
            dg0,
            0,
            no,
            no,
            jnp.ones((), z0.dtype),
            jnp.zeros((), z0.dtype),
        ),
    )


def _dg(g_on, beta, active) -> jax.Array:
    """``∂g/∂β`` on the reduced state at ``β_S`` (minus the β-Hessian of L there): one linearisation of g, then
    one JVP per active slot (:func:`_columns`)."""
    _, lin = jax.linearize(g_on, beta)
    return _columns(lin, active, beta.size, beta.dtype)


def _newton(g_on, dg, signs, y, keep, shrinking, stationary, steps, active):
    """Newton's method on ``g_S(β_S) = 0`` in β from magnitudes ``y`` on the support ``S = keep``.

    ``∂g/∂β = −H`` (H the β-Hessian of L on S), so ``β ← β + H⁻¹ g``. ``dg`` is the ``∂g/∂β`` that the flow
    kept (:func:`_w_flow`): it is used as a chord iteration, at one evaluation of g per step and converging
    linearly at the rate of the matrix's relative error, and rebuilt at the current point (:func:`_dg`, the
    leading ``active`` slots: one JVP, about one evaluation of g, per slot), which restores Newton's quadratic
    convergence, when that is cheaper: when at the rate of the last step (``max_S |g|`` after it over before)
    the chord would need more steps to reach ``stationary`` than ``active + _NEWTON_AFTER`` (the rebuild and
    the Newton steps after it). A step that does not reduce ``max_S |g|`` always rebuilds it.

    A step that would move a coordinate out of its sign orthant (``s_j β_j ≤ 0``) is not taken. If
    that coordinate is leaving (``shrinking``: ``s_j g_j < 0`` where the flow stopped), the root on S
    lies on or beyond the boundary ``β_j = 0``, so the flow's limit has ``β_j = 0``: j is dropped from
    S and the iteration goes on from the same point. (A leaving coordinate whose gradient vanishes at
    the limit decays only like ``t^{−1/2}``, not exponentially, and can still be above the ``support``
    threshold when the flow is steady.) Any other such step fails. Stops at ``max_S |g| ≤ stationary``
    or after ``steps`` steps.

    Returns ``(y, converged, residuals)``: ``residuals[n]`` is ``max_S |g|`` before step n (NaN after
    the last one).
    """
    size = y.size

    def body(state):
        n, y, keep, _, _, residuals, dg = state
        beta = jnp.where(keep, signs * y * y, 0.0)
        g = jnp.where(keep, g_on(beta), 0.0)
        gmax = jnp.max(jnp.abs(g))
        converged = gmax <= stationary
        # At the rate of the last step, the chord needs log(gmax/stationary) / log(rate⁻¹) more steps.
        rate = gmax / residuals[jnp.maximum(n - 1, 0)]
        slow = (n > 0) & ~(jnp.log(gmax / stationary) < -(active + _NEWTON_AFTER) * jnp.log(rate))
        dg = jax.lax.cond(slow & ~converged, lambda: _dg(g_on, beta, active), lambda: dg)
        hess = jnp.where(keep[:, None] & keep[None, :], -dg, jnp.eye(size, dtype=y.dtype))
        beta_next = beta + jnp.linalg.solve(hess, g)
        out = keep & ~(signs * beta_next > 0)
        failed = ~converged & (jnp.any(out & ~shrinking) | ~jnp.all(jnp.isfinite(beta_next)))
        step = ~converged & ~failed & ~jnp.any(out)
        keep = keep & ~(~converged & ~failed & out)
        y = jnp.where(keep, jnp.where(step, jnp.sqrt(jnp.maximum(signs * beta_next, 0.0)), y), 0.0)
        return n + 1, y, keep, converged, failed, residuals.at[n].set(gmax), dg

    def cond(state):
        n, _, _, converged, failed, _, _ = state
        return (n < steps) & ~converged & ~failed

    init = (0, jnp.where(keep, y, 0.0), keep, False, False, jnp.full(steps, jnp.nan, dtype=y.dtype), dg)
    _, y, _, converged, _, residuals, _ = jax.lax.while_loop(cond, body, init)
    return y, converged, residuals


@eqx.filter_jit
def phase_b(model, base, slot, epsilons, factors, index, mask, signs, thresholds, max_steps, newton_steps):
    """Phase (B) from θ^k (magnitudes ``base`` on the reduced support, 0 in the new coordinate's ``slot``): the
    flow of ``z = log y``,

        dz/dt = s ⊙ g(s ⊙ e^{2z})   (on the support; the padded slots stay put),

    until nearly steady, then Newton's method (:func:`_newton`) from its endpoint.

    In ``z`` the escape of the new coordinate from ε is a straight line (``dz_i/dt ≈ |g_i(θ^k)|``) that
    the solver crosses in a few steps, a leaving coordinate stays positive, and the step control is on the
    relative error of ``y``. ``thresholds`` (a ``Thresholds``): the flow stops when every support
    coordinate has ``|g_i| ≤ steady`` or is leaving (``y_i ≤ support · max y`` and shrinking,
    ``s_i g_i < 0``); coordinates with ``y_i ≤ support · max y`` are set to 0 before and after Newton's
    method (the path's definition of the support). The rows run one after the other (``lax.map``): each
    stops at its own step count, and batching them would make every small matrix product of g a slower
    batched one. Row r starts from ``base`` with ``y_slot = epsilons[r] · natural``, times ``factors[r]`` (1, or
    the perturbations of Assumption 4.4), where ``natural = sqrt(|g_{i_k}| / |∂g_{i_k}/∂β_{i_k}|)`` at θ^k
    (``max(‖base‖_∞, 1)`` if that curvature is 0) is the new coordinate's natural size. The flow is
    :func:`_w_flow`; every row starts from ``∂g/∂β`` at θ^k, which also gives that curvature, and Newton's
    method starts from the matrix its flow kept. ``mask`` is a prefix of the padded state, so one compilation
    serves every support that fits. Returns the polished endpoints, a status per row (0: stationary, else an
    ``PhaseB``), the flow's step counts and the Newton residuals.
    """
    speed, steady, support, tol, dt0, t1, stationary = thresholds
    active = jnp.sum(mask)
    g_on = reduced_g(model, index, mask)

    def beta_of(z):
        return jnp.where(mask, signs * jnp.exp(2 * z), 0.0)

    def field(z):
        return jnp.where(mask, signs * g_on(beta_of(z)), 0.0)

    def is_steady(z, f):  # f = s ⊙ g on the support
        leaving = (z <= jnp.log(support) + jnp.max(jnp.where(mask, z, -jnp.inf))) & (f < 0)
        return jnp.all(~mask | (jnp.abs(f) <= steady) | leaving)

    def log_y(y):
        return jnp.where(mask, jnp.log(jnp.where(mask, y, 1.0)), 0.0)

    def dg_of(z):
        return _dg(g_on, beta_of(z), active)

    dg0 = _dg(g_on, jnp.where(mask, signs * base * base, 0.0), active)
    curvature = jnp.abs(dg0[slot, slot])
    natural = jnp.where(curvature > 0, jnp.sqrt(speed / curvature), jnp.maximum(jnp.max(base), 1.0))
    starts = jnp.where(jnp.arange(base.size) == slot, epsilons[:, None] * natural, base) * factors

    def one(y0):
        end = _w_flow(field, dg_of, signs, mask, log_y(y0), dg0, is_steady, dt0, t1, tol, max_steps)
        y = jnp.where(mask, jnp.exp(end.z), 0.0)
        keep = mask & (y > support * jnp.max(y))
        y, converged, residuals = _newton(g_on, end.dg, signs, y, keep, end.f < 0, stationary, newton_steps, active)
        y = jnp.where(y > support * jnp.max(y), y, 0.0)  # a root on the boundary may come out as β_j ≈ +0
        flow_status = jnp.where(end.steps >= max_steps, 1, 2)
        status = jnp.where(end.done, jnp.where(converged, 0, 3), flow_status)
        return y, status, end.steps, residuals

    return jax.lax.map(one, starts)


@eqx.filter_jit
def g_and_loss(model, beta):
    return model.g(beta), model.loss_of_beta(beta)


def _capacity(n: int, p: int) -> int:
    """Padded size of the reduced state: ``_PADDED`` (one compilation for every support up to that size),
    beyond it a power of two ≥ n; at most p."""
    return min(p, max(_PADDED, 1 << (n - 1).bit_length()))


_PADDED = 64
_D = 1 / (2 + math.sqrt(2))  # the W-method's diagonal coefficient (L-stable)
_E32 = 6 + math.sqrt(2)  # and the coefficient of its error estimate
_SAFETY = 0.9  # the step-size controller's safety factor
_FACTORMIN = 0.2  # and its bounds on the change of the step per step
_FACTORMAX = 5.0
_NEWTON_AFTER = 2  # Newton steps after a rebuild of ∂g/∂β, in the cost of a rebuild


class Reduced(eqx.Module):
    index: np.ndarray
    mask: np.ndarray
    signs: np.ndarray


def reduce_support(coords: np.ndarray, signs: np.ndarray, p: int) -> Reduced:
    cap = _capacity(coords.size, p)
    index = np.zeros(cap, dtype=np.int64)
    index[: coords.size] = coords
    mask = np.zeros(cap, dtype=bool)
    mask[: coords.size] = True
    return Reduced(index, mask, np.where(mask, signs[index], 1.0))

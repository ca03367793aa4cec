"""Phase (B) of the greedy low-rank limit, without dense Hessians (docs/math.md, *Full weights: the greedy low-rank
limit*, *How (B) is computed*).

Everything works on the flat vector ``y`` of all factor entries, padded to the full widths, with a ``mask`` of the
active columns, and touches the Hessian ``H`` of ``L(y)`` only through products ``H v`` (forward-over-reverse
differentiation of the gradient, about the cost of two gradients):

- :func:`flow`, the gradient flow until steady: Tsit5 while its steps are limited by accuracy, the exponential
  Rosenbrock method ``exprb32`` (:func:`exponential_step`, φ-functions of ``H`` by :func:`krylov_phi`) once they
  are limited by stability, where an ill-conditioned ``H`` makes the flow stiff.
- :func:`newton`, a trust-region Newton method (:func:`steihaug_cg`) off the factorisation gauge ``(U X, −V Xᵀ)``
  (:func:`project_off_gauge`), the null space of ``H`` at a critical point, to which the gradient is orthogonal (L
  is constant along it): conjugate gradients from 0 give the minimum-norm step ``−H⁺ ∂L/∂y`` of a pseudo-inverse
  Newton method wherever it fits in the ball.
- :func:`min_eig_off_gauge`, the smallest eigenvalue of ``H`` off the gauge (Assumption 4.3): the Lanczos method on
  ``P H P``, with ``P`` the orthogonal projection off the gauge in closed form (:func:`project_off_gauge`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._kit._checks import non_finite_at
from ._gauge import gauge_blocks, jit_by_size, project_off_gauge
from ._krylov import krylov_phi, steihaug_cg
from ._layout import layout_loss


def residual(layout, y, grad, mask, support):
    """``max_c ‖∂L/∂(u_c, v_c)‖ / ‖(u_c, v_c)‖`` over the active columns c of every factor, from the gradient
    ``grad`` in y: ``∂L/∂u_c = −G v_c`` and ``∂L/∂v_c = −Gᵀ u_c``, so this is in the units of G, independent
    of the columns' sizes, and 0 exactly at a critical point of the ranks. A column below ``support`` times the
    largest that is shrinking is leaving (paper Lemma D.4, for columns) and does not count."""
    column = jnp.asarray(layout.columns)
    segments = int(layout.columns.max()) + 1

    def per_column(x):
        return jax.ops.segment_sum(jnp.where(mask, x, 0.0), column, num_segments=segments)

    size, pull, norm = per_column(grad * grad), per_column(grad * y), jnp.sqrt(per_column(y * y))
    leaving = (norm <= support * jnp.max(norm)) & (pull > 0)  # d‖col‖²/dt = −2 ⟨∂L/∂col, col⟩ < 0
    return jnp.max(jnp.where((norm > 0) & ~leaving, jnp.sqrt(size) / jnp.where(norm > 0, norm, 1.0), 0.0))


def newton(model, layout, y, g, mask, support, stationary, scale, steps):
    """A trust-region Newton method on L in the active factor entries (``mask``) until :func:`residual`
    ``≤ stationary`` (Nocedal & Wright, Algorithm 4.1): each step minimises the quadratic model in a ball by
    :func:`steihaug_cg` on Hessian-vector products, to a relative residual ``min(0.5, √(‖∂L/∂y‖ / scale))`` (an
    inexact Newton method, superlinearly convergent, Dembo, Eisenstat & Steihaug 1982; Nocedal & Wright, Algorithm
    7.1: far from the critical point, where the ball cuts the steps short, loose solves save products), off the
    gauge ``(U X, −V Xᵀ)`` (:func:`project_off_gauge` on both sides of H and on the gradient). The gauge is a null space
    of H only at a critical point (its curvature is of the order of the gradient elsewhere), and only the rounding
    of the gradient points along it. Where the Newton step ``−H⁺ ∂L/∂y`` lies inside the ball this is Newton's
    method with the pseudo-inverse of the Hessian; far from the critical point, along the nearly flat directions of
    an ill-conditioned Hessian, the ball keeps every step downhill.

    The ball starts at radius ``‖y‖`` and follows the ratio ρ of the actual to the predicted decrease of L
    (shrunk to ``‖s‖/4`` below ¼, doubled above ¾ where the step reached it); a step is taken where ρ > 1e-4, or,
    with the ball kept, where the predicted decrease is below the rounding of L and the gradient decreases. ``g`` is
    ``∂L/∂y`` at the start. Returns ``(y, converged, steps, Hessian-vector products)``."""
    loss = lambda z: layout_loss(model, layout, z)  # noqa: E731
    rounding = 100 * jnp.finfo(y.dtype).eps

    def evaluate(y):
        value, g = jax.value_and_grad(loss)(y)
        g = jnp.where(mask, g, 0.0)
        return value, g, residual(layout, y, g, mask, support) <= stationary

    def body(state):
        n, hvps, y, value, g, radius, _ = state
        _, hvp = jax.linearize(lambda z: jnp.where(mask, jax.grad(loss)(z), 0.0), y)
        blocks = gauge_blocks(layout, y)
        project = lambda v: project_off_gauge(layout, blocks, v)  # noqa: E731
        matvec = lambda v: project(hvp(project(v)))  # noqa: E731
        forcing = jnp.minimum(0.5, jnp.sqrt(jnp.linalg.norm(g) / scale))
        step, model_value, iterations = steihaug_cg(matvec, project(g), radius, forcing, y.size)
        y_next = jnp.where(mask, y + step, 0.0)
        value_next, g_next, converged = evaluate(y_next)
        predicted = -model_value
        ratio = (value - value_next) / jnp.where(predicted > 0, predicted, 1.0)
        ratio = jnp.where(jnp.isfinite(ratio), ratio, -jnp.inf)  # a step to inf or NaN shrinks the ball
        flat = (predicted <= rounding * jnp.abs(value)) & (jnp.linalg.norm(g_next) < jnp.linalg.norm(g))
        accept = ((ratio > 1e-4) | flat) & jnp.isfinite(value_next) & jnp.all(jnp.isfinite(g_next))
        size = jnp.linalg.norm(step)
        grow = (ratio > 0.75) & (size >= 0.99 * radius)
        radius = jnp.where(flat, radius, jnp.where(ratio < 0.25, 0.25 * size, jnp.where(grow, 2 * radius, radius)))
        return (
            n + 1,
            hvps + iterations,
            jnp.where(accept, y_next, y),
            jnp.where(accept, value_next, value),
            jnp.where(accept, g_next, g),
            radius,
            accept & converged,
        )

    def cond(state):
        n, _, y, _, _, radius, converged = state
        return (n < steps) & ~converged & (radius > rounding * jnp.linalg.norm(y))

    converged = residual(layout, y, g, mask, support) <= stationary
    init = (0, 0, y, loss(y), g, jnp.linalg.norm(y), converged)
    n, hvps, y, _, _, _, converged = jax.lax.while_loop(cond, body, init)
    return y, converged, n, hvps


class _FlowState(NamedTuple):
    t: jax.Array
    h: jax.Array  # the next step to try
    y: jax.Array
    f: jax.Array  # the field −∂L/∂y at y
    steps: jax.Array  # steps tried, accepted or not
    rejected: jax.Array  # the last step was rejected: the next one does not grow
    stiff: jax.Array  # accepted Tsit5 steps at the edge of stability since the last calm stretch
    calm: jax.Array  # accepted Tsit5 steps in a row inside it
    steady: jax.Array  # steady after an accepted step
    exponential_steps: jax.Array  # of them, by exprb32
    hvps: jax.Array  # Hessian-vector products
    record: jax.Array  # (RECORDS, 3): (t, L, ‖y‖) at the first accepted step past each checkpoint; NaN: none
    recorded: jax.Array  # the last checkpoint recorded (−1: none)


RECORDS = 64  # checkpoints of the flow, one per doubling of t ...
_FIRST = 16  # ... from dt0 / 2**_FIRST on (dt0 = 1/σ_1(G), the escape's time scale), far past t1
RUNOFF_POINTS = 6  # the last checkpoints :func:`runs_off` reads (five doublings of t) ...
RUNOFF_DECAY = 0.15  # ... whose growth of ‖y‖ per unit log t must not decay faster than t^(−RUNOFF_DECAY) ...
RUNOFF_ESCAPE = 1.0  # ... nor grow faster than t^RUNOFF_ESCAPE (the new column escaping, not a run-off)


_TSIT5 = diffrax.Tsit5()
_STIFF_EDGE = 3.0  # h ρ beyond this (Tsit5's stability interval on the negative axis ends near −3.5) ...
_STIFF_STEPS = 15  # ... for this many accepted steps: the flow is stiff (as in Hairer's DOPRI5) ...
_CALM_STEPS = 6  # ... unless this many accepted steps in a row were inside it in between


def stiffness_count(stiff, calm, ok, edge):
    """Hairer's stiffness detection of DOPRI5 (Hairer & Wanner, *Solving ODEs II*, §IV.2) after a step (``ok``:
    accepted; ``edge``: ``h ρ ≥ _STIFF_EDGE``): an accepted step at the edge counts (``stiff + 1``) and breaks the
    ``calm`` run; ``_CALM_STEPS`` accepted steps in a row inside the edge clear the count; rejected steps change
    nothing. Where the step-size controller hovers at the stability limit, accepted steps fall on both sides of the
    edge, and a count cleared by every step inside it would never reach ``_STIFF_STEPS``. Returns ``(stiff, calm)``."""
    calm = jnp.where(ok, jnp.where(edge, 0, calm + 1), calm)
    return jnp.where(ok & edge, stiff + 1, jnp.where(calm >= _CALM_STEPS, 0, stiff)), calm


def _error_ratio(error, y, rtol, atol, active):
    """``RMS(error) / (atol + rtol RMS(y))`` over the active entries: the error relative to the size of the factors
    as a whole (an entry-wise relative error would let the smallest entries of the factors set the step)."""
    return jnp.sqrt(jnp.sum(error**2) / active) / (atol + rtol * jnp.sqrt(jnp.sum(y**2) / active))


def flow(field, mask, y0, steady, dt0, t1, rtol, atol, max_steps, *, loss) -> _FlowState:
    """The gradient flow ``dy/dt = f(y) = −∂L/∂y`` (``field``, zero off ``mask``; ``loss``: L) from ``y0`` until
    ``steady(y, f)`` after an accepted step (or ``t1``, or ``max_steps`` steps), with the error of every step against
    :func:`_error_ratio` ``≤ 1`` (safety 0.9, growth at most 10 per step and none right after a rejection), recording
    ``(t, L, ‖y‖)`` once per doubling of t (the evidence :func:`runs_off` reads where phase (B) fails):

    - by Tsit5 (``diffrax.Tsit5().step``, exponent 1/5) while its steps are limited by accuracy, the new column
      escaping and the others following it;
    - by the exponential Rosenbrock method ``exprb32`` (:func:`exponential_step`, exponent 1/3) once Tsit5 is stiff:
      ``_STIFF_STEPS`` accepted steps with ``h ρ ≥ _STIFF_EDGE`` (:func:`stiffness_count`),
      ``ρ ≈ ‖f(y⁺) − f(Y_6)‖ / ‖y⁺ − Y_6‖`` from its last two stages (both at the step's end; Hairer & Wanner,
      *Solving ODEs II*, §IV.2) estimating the largest eigenvalue of the Hessian. Stiffness comes with an
      ill-conditioned Hessian: a slow factor still moving while the fast ones have settled, and the flat directions
      near the end, where an explicit method would need about ``λ_max / λ_min`` steps."""
    active = jnp.sum(mask)
    term = diffrax.ODETerm(lambda t, y, args: field(y))
    tableau = _TSIT5.tableau
    to_stage_6 = jnp.asarray(np.append(tableau.b_sol[:5] - tableau.a_lower[4], tableau.b_sol[5]))  # y⁺ − Y_6

    def explicit(s: _FlowState):
        y, error, dense, (_, f), _ = _TSIT5.step(term, s.t, s.t + s.h, s.y, None, (False, s.f), False)
        k = dense["k"]  # h times the field at the seven stages
        edge = jnp.linalg.norm(k[6] - k[5]) >= _STIFF_EDGE * jnp.linalg.norm(to_stage_6 @ k[:6])
        return y, f, error, jnp.zeros((), jnp.int32), edge, jnp.asarray(1 / 5, y.dtype)

    def exponential(s: _FlowState):
        y, f, error, hvps, converged = exponential_step(field, mask, s.y, s.f, s.h, rtol, atol)
        return y, f, jnp.where(converged, error, jnp.inf), hvps, jnp.array(False), jnp.asarray(1 / 3, y.dtype)

    def body(s: _FlowState) -> _FlowState:
        stiff = s.stiff >= _STIFF_STEPS
        y, f, error, hvps, edge, exponent = jax.lax.cond(stiff, exponential, explicit, s)
        ratio = _error_ratio(error, y, rtol, atol, active)
        ok = (ratio <= 1) & jnp.all(jnp.isfinite(y)) & jnp.all(jnp.isfinite(f))
        factor = jnp.clip(0.9 * ratio ** (-exponent), 0.2, jnp.where(s.rejected, 1.0, 10.0))
        t = jnp.where(ok, s.t + s.h, s.t)
        count, calm = stiffness_count(s.stiff, s.calm, ok, edge)
        y, f = jnp.where(ok, y, s.y), jnp.where(ok, f, s.f)
        checkpoint = jnp.clip(jnp.floor(jnp.log2(t / first)), -1, RECORDS - 1).astype(jnp.int32)
        new = ok & (checkpoint > s.recorded)
        record = jax.lax.cond(
            new,
            lambda: s.record.at[checkpoint].set(jnp.stack([t, loss(y), jnp.linalg.norm(y)])),
            lambda: s.record,
        )
        return _FlowState(
            t=t,
            h=jnp.minimum(s.h * jnp.where(jnp.isfinite(ratio), factor, 0.5), t1 - t),
            y=y,
            f=f,
            steps=s.steps + 1,
            rejected=~ok,
            stiff=jnp.where(stiff, s.stiff, count),
            calm=calm,
            steady=ok & steady(y, f),
            exponential_steps=s.exponential_steps + stiff,
            hvps=s.hvps + hvps,
            record=record,
            recorded=jnp.where(new, checkpoint, s.recorded),
        )

    def cond(s: _FlowState):
        return ~s.steady & (s.steps < max_steps) & (s.t < t1)

    zero, no = jnp.zeros((), jnp.int32), jnp.array(False)
    first = jnp.asarray(dt0, y0.dtype) * 2.0**-_FIRST
    record = jnp.full((RECORDS, 3), jnp.nan, y0.dtype)
    start = _FlowState(
        jnp.zeros((), y0.dtype),
        jnp.asarray(dt0, y0.dtype),
        y0,
        field(y0),
        zero,
        no,
        zero,
        zero,
        no,
        zero,
        zero,
        record,
        -jnp.ones((), jnp.int32),
    )
    return jax.lax.while_loop(cond, body, start)


def exponential_step(field, mask, y, f, h, rtol, atol):
    """One step of the exponential Rosenbrock method ``exprb32`` (Hochbruck, Ostermann & Schweitzer 2009) for
    ``dy/dt = f(y)`` with ``J = −H``, the Jacobian at y:

        U = y + h φ_1(hJ) f(y),   D = f(U) − f(y) − J (U − y),   y⁺ = U + 2h φ_3(hJ) D,

    of order 3, with the exponential Rosenbrock–Euler step U (order 2) as the embedded solution: the error estimate
    is ``2h φ_3(hJ) D``. Exact for a quadratic L, its steps are limited by how fast H changes along the way, not by
    its stiffness (and ``h φ_1(−hH) f → −H⁺ ∂L/∂y``, a Newton step, as h grows). Both φ come from one
    :func:`krylov_phi` call site, ``h φ_1`` and ``2h φ_3`` each to a tenth of the step's error tolerance,
    ``0.1 (atol + rtol RMS(y)) √n`` in the 2-norm. Returns ``(y⁺, f(y⁺), error, Hessian-vector products, both Lanczos methods converged)``."""
    active = jnp.sum(mask)
    _, jvp = jax.linearize(field, y)
    hessian = lambda v: -jvp(jnp.where(mask, v, 0.0))  # noqa: E731
    tol = 0.1 * (atol + rtol * jnp.sqrt(jnp.sum(y**2) / active)) * jnp.sqrt(active) / h

    def stage(i, carry):  # i = 0: U from φ_1(hJ) f; i = 1: y⁺ from φ_3(hJ) D
        u, d, _, _, hvps, converged = carry
        w, hw, m, ok = krylov_phi(hessian, jnp.where(i == 0, f, d), h, 1 + 2 * i, tol / (1 + i))
        point = jnp.where(i == 0, y + h * w, u + 2 * h * w)
        f_point = field(point)
        d = jnp.where(i == 0, f_point - f + h * hw, d)
        return point, d, f_point, 2 * h * w, hvps + m, converged & ok

    init = (y, f, f, f, jnp.zeros((), jnp.int32), jnp.array(True))
    y, _, f, error, hvps, converged = jax.lax.fori_loop(0, 2, stage, init)
    return y, f, error, hvps, converged


def phase_b(model, layout, y0, mask, thresholds, max_steps, newton_steps):
    """Phase (B) from ``y0``: the gradient flow of the factors on ``mask`` (:func:`flow`) until :func:`residual`
    ``≤ steady``, then :func:`newton` until it is ``≤ stationary``. The flow chooses the basin; the trust-region
    Newton method goes down its flat directions and gives the digits. Returns the endpoint, a status (0: stationary,
    else an ``_Outcome``: 1, the flow ran out of steps; 2, it reached t1 without becoming steady; 3, Newton's method
    did not converge), the counts ``(flow steps, gradients, Newton steps, Hessian-vector products)`` and the flow's
    record of ``(t, L, ‖y‖)`` (:func:`flow`)."""
    steady, stationary, support, rtol, atol, t1, dt0, scale = thresholds
    loss = lambda y: layout_loss(model, layout, y)  # noqa: E731
    grad = jax.grad(loss)

    def field(y):
        return jnp.where(mask, -grad(y), 0.0)

    def is_steady(y, f):
        return residual(layout, y, -f, mask, support) <= steady

    end = flow(field, mask, y0, is_steady, dt0, t1, rtol, atol, max_steps, loss=loss)
    newton_steps = jnp.where(end.steady, newton_steps, 0)  # a flow that is not steady has failed already
    y, converged, n_newton, hvps = newton(model, layout, end.y, -end.f, mask, support, stationary, scale, newton_steps)
    status = jnp.where(end.steady, jnp.where(converged, 0, 3), jnp.where(end.steps >= max_steps, 1, 2))
    # Tsit5: six new stages a step (the first is the last of the step before); exprb32: three (with the
    # linearisation); Newton's method: two a step.
    gradients = 1 + 6 * (end.steps - end.exponential_steps) + 3 * end.exponential_steps + 2 * n_newton
    return y, status, jnp.stack([end.steps, gradients, n_newton, end.hvps + hvps]), end.record


_compiled_phase_b = jit_by_size(phase_b)


def solve_phase_b(model, layout, starts, mask, thresholds, max_steps, newton_steps):
    """:func:`phase_b` from each row of ``starts``, one compiled call after the other (so that Ctrl-C stops a stage
    between two of them), compiled quickly for small models, for speed above (:func:`._gauge.jit_by_size`). Returns the
    endpoints, statuses, counts and the flows' records (:func:`flow`) stacked by row."""
    compiled = _compiled_phase_b(layout)
    runs = [compiled(model, layout, y0, mask, thresholds, max_steps, newton_steps) for y0 in starts]
    return tuple(np.stack([np.asarray(run[i]) for run in runs]) for i in range(4))


class RunOff(NamedTuple):
    """The evidence that a flow runs off to infinity (:func:`runs_off`): the checkpoints ``(t, L, ‖y‖)`` it read,
    and the exponent s of the growth, ``Δ‖y‖ / Δlog t ∝ t^s`` (least squares over them)."""

    t: np.ndarray
    loss: np.ndarray
    norm: np.ndarray
    exponent: float


def runs_off(record) -> RunOff | None:
    """Whether the gradient flow whose checkpoints ``record`` holds (rows ``(t, L, ‖y‖)`` once per doubling of t,
    NaN where none; :func:`flow`) runs off to infinity: over its last ``RUNOFF_POINTS`` checkpoints the loss falls
    and ‖y‖ grows at every one, and the growth per unit log t, ``Δ‖y‖ / Δlog t ∝ t^s``, does not slow down as a
    convergent flow's does: ``−RUNOFF_DECAY ≤ s ≤ RUNOFF_ESCAPE``.

    Why this separates the two: a flow that converges to a critical point y* (a bounded flow of an analytic L does,
    by Łojasiewicz's inequality) approaches it like ``‖y − y*‖ ∝ t^(−a)`` (``a = 1/(p − 2)`` at a minimum of order
    p, ``e^(−λt)`` at a non-degenerate one), so its growth per unit log t decays like ``t^(−a)`` or faster: ``s ≤
    −1/4`` at every minimum of order ≤ 6. A flow down a valley whose loss tends to its infimum only at infinity
    grows without bound: like ``log t`` (``s = 0``: cross-entropy, a saturating softmax) or a power of t, at most
    ``√t`` for a loss bounded below (``‖y(t) − y(0)‖ ≤ ∫‖∂L/∂y‖ ≤ √(t (L(0) − inf L))``), so ``s ≤ 1/2``. Faster growth
    is the new column's exponential escape at the start of phase (B), not a run-off. Returns the evidence, or None."""
    record = np.asarray(record)
    rows = record[np.isfinite(record[:, 0])][-RUNOFF_POINTS:]
    if len(rows) < RUNOFF_POINTS:
        return None
    t, loss, norm = rows.T
    if not (np.all(np.diff(loss) < 0) and np.all(np.diff(norm) > 0)):
        return None
    rate = np.diff(norm) / np.diff(np.log(t))
    exponent = float(np.polyfit(0.5 * np.log(t[1:] * t[:-1]), np.log(rate), 1)[0])
    return RunOff(t, loss, norm, exponent) if -RUNOFF_DECAY <= exponent <= RUNOFF_ESCAPE else None


@eqx.filter_jit
def evaluate(model, Ws):
    return model.G(Ws), model.loss_of_weights(Ws)


@eqx.filter_jit
def curvature(model, Ws, directions):
    """``d²/dβ² L(W + β D)`` at β = 0, ``D = directions`` (one per weight matrix): the natural size of a new column
    when D is zero but in the matrix that gains it (one compilation for every matrix)."""

    def along(beta):
        return model.loss_of_weights(tuple(w + beta * d for w, d in zip(Ws, directions)))

    return jax.grad(jax.grad(along))(0.0)


def where_not_finite(model, Ws) -> str:
    """Where the model's loss or ``G`` is not finite at the finite weights ``Ws`` (gradient descent's at its first
    non-finite gradient, a flow's where it stopped), in words; ``""`` if they are not finite or the model is finite
    there (the weights overflowed)."""
    if not all(np.all(np.isfinite(w)) for w in Ws):
        return ""
    G, loss = evaluate(model, tuple(jnp.asarray(w) for w in Ws))
    bad = [name for name, g in zip(model.names, G) if not np.all(np.isfinite(np.asarray(g)))]
    if math.isfinite(float(loss)) and not bad:
        return ""
    shown = ", ".join(f"‖{name}‖₂ = {np.linalg.norm(w, 2):.6g}" for name, w in zip(model.names, Ws))
    size = max(float(np.max(np.abs(w), initial=0.0)) for w in Ws)
    return non_finite_at(float(loss), ", ".join(bad) or "no weight matrix", shown, size)

"""Phase (B) of the greedy low-rank limit (docs/math.md, *Full weights: the greedy low-rank limit*): the gradient
flow of the factors from each start until nearly steady, then Newton's method, in one compiled call.

Phase (B) runs on one flat vector of all factor entries (``_layout``): an explicit ``Tsit5`` until nearly steady
(a ``diffrax.Event``), then Newton's method with a pseudo-inverse Hessian (the factorisation has the gauge
``U → U X``, ``V → V X^{-T}``, a null space of the Hessian).
"""

from __future__ import annotations

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp

from ._layout import layout_loss


def _residual(layout, y, grad, mask, support):
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


@eqx.filter_jit
def phase_b(model, layout, starts, mask, thresholds, max_steps, newton_steps):
    """Phase (B) from each row of ``starts``: the gradient flow of the factors on ``mask`` until
    :func:`_residual` ``≤ steady``, then Newton's method until it is ``≤ stationary``. Returns the endpoints
    and a status per row (0: stationary, else an ``_Outcome``).

    The flow only has to choose the basin: an explicit ``Tsit5`` (the flow of a strict local minimum is not
    stiff, and an implicit method's Jacobians cost more than its steps save), run at ``rtol = min(ode_rtol,
    steady/100)`` because an explicit method hovers around the critical point at about its tolerance and must
    come below ``steady``; Newton's method gives the digits."""
    steady, stationary, support, rtol, atol, t1 = thresholds
    grad = jax.grad(lambda y: layout_loss(model, layout, y))

    def field(t, y, args):
        return jnp.where(mask, -grad(y), 0.0)

    def is_steady(t, y, args, **kwargs):
        return _residual(layout, y, grad(y), mask, support) <= steady

    def one(y0):
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(field),
            diffrax.Tsit5(),
            0.0,
            t1,
            None,
            y0,
            stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
            event=diffrax.Event(is_steady),
            saveat=diffrax.SaveAt(t1=True),
            max_steps=max_steps,
            throw=False,
        )
        y, converged = _newton(model, layout, sol.ys[-1], mask, support, stationary, newton_steps)
        flow_status = jnp.where(sol.result == diffrax.RESULTS.max_steps_reached, 1, 2)
        return y, jnp.where(sol.event_mask, jnp.where(converged, 0, 3), flow_status)

    return jax.lax.map(one, starts)


def _newton(model, layout, y, mask, support, stationary, steps):
    """Newton's method on ``∂L/∂y = 0`` on ``mask`` until :func:`_residual` ``≤ stationary``, with the
    pseudo-inverse of the Hessian: the gauge ``(U X, −V Xᵀ)`` is its null space (eigenvalues below ``1e-9``
    of the largest are dropped; the gradient has no component along it)."""
    loss = lambda z: layout_loss(model, layout, z)  # noqa: E731
    grad = jax.grad(loss)

    def body(state):
        n, y, _, _ = state
        g = jnp.where(mask, grad(y), 0.0)
        hess = jnp.where(mask[:, None] & mask[None, :], jax.hessian(loss)(y), 0.0)
        lam, vec = jnp.linalg.eigh(0.5 * (hess + hess.T))
        keep = jnp.abs(lam) > 1e-9 * jnp.max(jnp.abs(lam))
        step = vec @ jnp.where(keep, (vec.T @ g) / jnp.where(keep, lam, 1.0), 0.0)
        converged = _residual(layout, y, g, mask, support) <= stationary
        y_next = jnp.where(mask, y - step, 0.0)
        failed = ~converged & ~jnp.all(jnp.isfinite(y_next))
        return n + 1, jnp.where(converged | failed, y, y_next), converged, failed

    def cond(state):
        n, _, converged, failed = state
        return (n < steps) & ~converged & ~failed

    _, y, converged, _ = jax.lax.while_loop(cond, body, (0, y, False, False))
    return y, converged


@eqx.filter_jit
def evaluate(model, Ws):
    return model.G(Ws), model.loss_of_weights(Ws)


@eqx.filter_jit
def curvature_along(model, Ws, j, direction):
    """``d²/dβ² L(W + β D)`` at β = 0 with ``D`` in weight matrix j: the natural size of a new column."""

    def along(beta):
        return model.loss_of_weights(tuple(w + beta * direction if i == j else w for i, w in enumerate(Ws)))

    return jax.grad(jax.grad(along))(0.0)


@eqx.filter_jit
def hessian(model, layout, y):
    return jax.hessian(lambda z: layout_loss(model, layout, z))(y)

"""The diagonal flow's vector field in log coordinates, its Jacobian, and where its sleeping coordinates wake
(paper appendix C.3–C.4, eq. 13; docs/math.md, *Rescaled time and log coordinates*).

In the frame where ``u0_i > |v0_i|``, ``y = log w`` solves ``dy/dt = g(β)``, ``β = (w + w̄)(w − w̄)/4``, with
``w̄ = exp(log(w w̄) − y)`` and ``log(w w̄) = log(u² − v²)`` conserved (paper Lemma 4.1).
"""

from __future__ import annotations

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._model import DiagonalModel


class Args(eqx.Module):
    model: DiagonalModel
    log_wwbar: jax.Array  # log(w w̄) = log(u² − v²) after the normalisation, conserved; > −inf by Assumption 4.2
    out_ts: jax.Array | None = None  # the output times in t: only steps across one need their dense output


def exp_weights(y, args: Args):
    """``(w, w̄)`` from ``y = log w``; ``w̄ = (w w̄) / w`` is formed in log space."""
    return jnp.exp(y), jnp.exp(args.log_wwbar - y)


def beta_of(y, args: Args):
    w, wbar = exp_weights(y, args)
    return 0.25 * (w + wbar) * (w - wbar)


def vector_field(t, y, args: Args):
    """``dy/dt = g(β)`` (paper eq. 13 in unscaled time)."""
    del t
    return args.model.g(beta_of(y, args))


class LowRankJacobian(eqx.Module):
    """Columns ``idx`` of the loss Hessian ``∂g/∂β`` (shape ``(p, r)``).

    The Jacobian of the vector field is ``J = ∂g/∂β · diag(u² + v²)``: its columns ``idx`` are
    these times the current ``u_i² + v_i²``, which change by many orders of magnitude while a
    coordinate wakes up, whereas ``∂g/∂β`` changes slowly.
    """

    idx: jax.Array
    hess_cols: jax.Array
    awake: jax.Array  # bool (r,): the columns computed (the others are left at 0)


def log_size(y, args: Args):
    """``log(u² + v²) = log((w² + w̄²)/2)``, the log of ``∂β/∂y``."""
    return jnp.logaddexp(2.0 * y, 2.0 * (args.log_wwbar - y)) - jnp.log(2.0)


def jacobian(y, args: Args, rank: int) -> LowRankJacobian:
    """The ``rank`` columns of ``∂g/∂β`` at ``β(y)`` for the coordinates of largest ``u_i² + v_i²``.

    Columns of sleeping coordinates (``u_i² + v_i² < e^ASLEEP``: their columns of ``J`` are negligible) are
    left at 0 and not computed, so a refresh costs one Jacobian-vector product per awake coordinate.
    """
    log_scale, idx = jax.lax.top_k(log_size(y, args), rank)
    beta = beta_of(y, args)

    def column(i, awake):
        e = jax.nn.one_hot(i, y.shape[0], dtype=y.dtype)
        return jax.lax.cond(awake, lambda: jax.jvp(args.model.g, (beta,), (e,))[1], lambda: jnp.zeros_like(y))

    awake = log_scale > ASLEEP
    cols = jax.lax.map(lambda a: column(*a), (idx, awake))
    return LowRankJacobian(idx=idx, hess_cols=cols.T, awake=awake)


def acceleration(y, hf, args: Args):
    """``h y'' = J (h y')`` at ``y``, from ``hf = h y'``: ``J = ∂g/∂β · diag(u² + v²)``, one Jacobian-vector
    product of g."""
    return jax.jvp(args.model.g, (beta_of(y, args),), (jnp.exp(log_size(y, args)) * hf,))[1]


def wake_horizon(h, y0, y1, args: Args) -> jax.Array:
    """The longest next step after the accepted step ``y0 → y1`` of length ``h`` that lands no sleeping coordinate
    past its jump's onset (the engine's horizon of :class:`~gradflow._solver.PredictiveController`).

    On a plateau ``log w`` moves at the constant speed ``g(θ^k)`` (docs/math.md, *Algorithm 1: the greedy limit*),
    so a sleeping coordinate's ``ℓ_i = log(u_i² + v_i²)`` grows linearly up to its jump; a step whose stages carry it
    past ``ℓ_i ≈ 0`` overflows (explicit) or fails its stage iteration (implicit). The next step is capped so that
    no stage of it (they reach ``REACH · h``) carries a sleeping coordinate (``ℓ_i < AWAKE``), at the speed ``ℓ_i``
    had over the last step, past ``LAND``, nor by more than ``ONSET`` once it is past ``LAND``. A run then lands on
    a jump's onset in one step, instead of growing its step into the jump and shrinking it after each failure.
    """
    ell0, ell1 = log_size(y0, args), log_size(y1, args)
    speed = (ell1 - ell0) / h
    waking = (ell1 < AWAKE) & (speed > 0)
    room = jnp.maximum(LAND - ell1, ONSET)
    return jnp.min(jnp.where(waking, room / (REACH * jnp.where(waking, speed, 1.0)), jnp.inf))


ASLEEP = np.log(1e-10)  # log(u_i² + v_i²) below which a coordinate's Jacobian column is not computed
AWAKE = -5.0  # log(u_i² + v_i²) from which a coordinate is in its jump, not sleeping
LAND = -20.0  # a step lands a waking coordinate's log(u_i² + v_i²) here (β_i ≈ 1e-9) …
ONSET = 8.0  # … and moves it by at most this much more per step
REACH = float(np.max(dfx.Kvaerno5.tableau.c))  # a step's stages reach t0 + 1.23 h (Kvaerno5; Dopri8's, t0 + h)

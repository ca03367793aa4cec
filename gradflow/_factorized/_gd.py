"""Gradient descent in float64 on the factors of a factorised model, for comparison with the exact flow."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._kit._trajectory import gd_status
from ._model import FactorizedModel, check_factors
from ._results import FactorizedGDResult


def gd(
    model: FactorizedModel, *, u0, v0, log_a, alphas, batched, lr, steps, record_every, optimizer, batch_size, seed
) -> FactorizedGDResult:
    """``simulate_gd`` for a factorised model once the checks every family shares are done: full-batch gradient
    descent ``(U, V) ← (U, V) − lr ∇L`` in float64 from ``U_j(0) = α u0[j]``, ``V_j(0) = α v0[j]``; ``α`` one
    scale or a 1-D array (trained together). Step ``k`` sits at rescaled time ``τ = k lr / log(1/α)``."""
    del seed
    if optimizer != "gd" or batch_size is not None:
        raise ValueError("a FactorizedModel trains with full-batch gradient descent only (optimizer='gd').")
    us, vs = check_factors(u0, v0, model)
    Ws, loss, bad = _gd(
        model,
        tuple(map(jnp.asarray, us)),
        tuple(map(jnp.asarray, vs)),
        jnp.asarray(alphas),
        jnp.asarray(float(lr)),
        jnp.asarray(record_every),
        records=steps // record_every,
        batched=batched,
    )
    rec = np.arange(steps // record_every + 1, dtype=np.int64) * record_every
    Ws, loss = tuple(np.asarray(w) for w in Ws), np.asarray(loss)
    finite = np.isfinite(loss) & np.all([np.isfinite(w).all(axis=(-2, -1)) for w in Ws], axis=0)
    result, message, after = gd_status(rec, np.asarray(bad), finite, lr=float(lr), log_alpha=log_a)
    return FactorizedGDResult(
        steps=rec,
        W=tuple(np.where(after[..., None, None], np.nan, w) for w in Ws),
        loss=np.where(after, np.nan, loss),
        log_alpha=np.array(log_a),
        lr=float(lr),
        result=result,
        message=message,
    )


@eqx.filter_jit
def _gd(model, us, vs, alphas, lr, every, *, records, batched):
    """The records ``(W, L)`` of every ``every`` steps, and the first step whose gradient is not finite (−1: none)."""

    def one(alpha):
        theta = (tuple(alpha * u for u in us), tuple(alpha * v for v in vs))
        grad = jax.grad(lambda th: model.loss_value(*th))

        def step(k, carry):
            th, bad = carry
            g = grad(th)
            finite = jnp.all(jnp.array([jnp.all(jnp.isfinite(x)) for x in jax.tree_util.tree_leaves(g)]))
            bad = jnp.where((bad < 0) & ~finite, k, bad)
            return jax.tree_util.tree_map(lambda x, g: x - lr * g, th, g), bad

        def record(th):
            Ws = tuple(u @ v.T for u, v in zip(*th))
            return Ws, model.loss_of_weights(Ws)

        def chunk(carry, c):
            carry = jax.lax.fori_loop(c * every, (c + 1) * every, step, carry)
            return carry, record(carry[0])

        (_, bad), recs = jax.lax.scan(chunk, (theta, jnp.asarray(-1, dtype=jnp.int64)), jnp.arange(records))
        first = record(theta)
        return *jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), first, recs), bad

    return jax.vmap(one)(alphas) if batched else one(alphas)

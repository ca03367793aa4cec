"""Gradient descent in float64 on the factors of a factorised model, for comparison with the exact flow."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

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
    Ws, loss = _gd(
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
    return FactorizedGDResult(
        steps=rec, W=tuple(np.asarray(w) for w in Ws), loss=np.asarray(loss), log_alpha=np.array(log_a), lr=float(lr)
    )


@eqx.filter_jit
def _gd(model, us, vs, alphas, lr, every, *, records, batched):
    def one(alpha):
        theta = (tuple(alpha * u for u in us), tuple(alpha * v for v in vs))
        grad = jax.grad(lambda th: model.loss_value(*th))

        def step(_, th):
            return jax.tree_util.tree_map(lambda x, g: x - lr * g, th, grad(th))

        def record(th):
            Ws = tuple(u @ v.T for u, v in zip(*th))
            return Ws, model.loss_of_weights(Ws)

        def chunk(th, _):
            th = jax.lax.fori_loop(0, every, step, th)
            return th, record(th)

        _, recs = jax.lax.scan(chunk, theta, None, length=records)
        first = record(theta)
        return jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), first, recs)

    return jax.vmap(one)(alphas) if batched else one(alphas)

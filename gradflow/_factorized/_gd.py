"""Gradient descent in float64 on the factors of a factorised model, for comparison with the exact flow."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._kit._trajectory import gd_status
from ._model import FactorizedModel, check_factors, products
from ._phase_b import where_not_finite
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
    us, vs, alphas = tuple(map(jnp.asarray, us)), tuple(map(jnp.asarray, vs)), jnp.asarray(alphas)
    lr_, every = jnp.asarray(float(lr)), jnp.asarray(int(record_every))
    carry, first = _start(model, us, vs, alphas, batched=batched)
    chunks, axis = steps // record_every, int(batched)  # the record axis follows the α axis if batched
    block = min(_BLOCK, 1 << (chunks - 1).bit_length())
    records = [[np.expand_dims(np.asarray(x), axis) for x in jax.tree_util.tree_leaves(first)]]
    for done in range(0, chunks, block):
        active = min(block, chunks - done)
        carry, rec = _advance(
            model, carry, jnp.asarray(done), jnp.asarray(active), every, lr_, block=block, batched=batched
        )
        records.append([np.take(np.asarray(x), np.arange(active), axis=axis) for x in jax.tree_util.tree_leaves(rec)])
    *Ws, loss = (np.concatenate(parts, axis=axis) for parts in zip(*records))
    bad, at = np.asarray(carry[1]), jax.tree_util.tree_map(np.asarray, carry[2])
    rec = np.arange(steps // record_every + 1, dtype=np.int64) * record_every
    Ws, loss = tuple(np.asarray(w) for w in Ws), np.asarray(loss)
    finite = np.isfinite(loss) & np.all([np.isfinite(w).all(axis=(-2, -1)) for w in Ws], axis=0)
    model_at = np.full(bad.shape, "", dtype=object)
    for run in np.ndindex(bad.shape):
        if bad[run] >= 0:
            with np.errstate(over="ignore", invalid="ignore"):  # overflowed factors: not the model's doing
                weights = products(*jax.tree_util.tree_map(lambda x: x[run], at))
            model_at[run] = where_not_finite(model, weights)
    result, message, after = gd_status(rec, bad, finite, lr=float(lr), log_alpha=log_a, model_at=model_at)
    return FactorizedGDResult(
        steps=rec,
        W=tuple(np.where(after[..., None, None], np.nan, w) for w in Ws),
        loss=np.where(after, np.nan, loss),
        log_alpha=np.array(log_a),
        lr=float(lr),
        result=result,
        message=message,
    )


_BLOCK = 64  # records per compiled call: any `steps`, `record_every` and α reuse one compilation


def _record(model, theta):
    Ws = tuple(u @ v.T for u, v in zip(*theta))
    return Ws, model.loss_of_weights(Ws)


@eqx.filter_jit
def _start(model, us, vs, alphas, *, batched):
    """``(U, V)(0) = α (U⁰, V⁰)`` with no non-finite gradient yet (−1), and the first record ``(W, L)``."""

    def one(alpha):
        theta = (tuple(alpha * u for u in us), tuple(alpha * v for v in vs))
        nowhere = jax.tree_util.tree_map(lambda x: jnp.full_like(x, jnp.nan), theta)  # θ at the first bad gradient
        return (theta, jnp.asarray(-1, dtype=jnp.int64), nowhere), _record(model, theta)

    return jax.vmap(one)(alphas) if batched else one(alphas)


@eqx.filter_jit
def _advance(model, carry, done, active, every, lr, *, block, batched):
    """``block`` records ``(W, L)`` of ``every`` steps each, from record ``done`` on; only the first ``active`` take
    steps (the rest repeat the state), so the last, partial block of a run reuses the compilation. The carry keeps
    the first step whose gradient is not finite (−1: none)."""
    grad = jax.grad(lambda th: model.loss_value(*th))

    def one(carry):
        def step(k, carry):
            th, bad, at = carry
            g = grad(th)
            finite = jnp.all(jnp.array([jnp.all(jnp.isfinite(x)) for x in jax.tree_util.tree_leaves(g)]))
            first = (bad < 0) & ~finite
            bad, at = jnp.where(first, k, bad), jax.tree_util.tree_map(lambda a, x: jnp.where(first, x, a), at, th)
            return jax.tree_util.tree_map(lambda x, g: x - lr * g, th, g), bad, at

        def chunk(carry, c):
            first = (done + c) * every
            carry = jax.lax.fori_loop(first, jnp.where(c < active, first + every, first), step, carry)
            return carry, _record(model, carry[0])

        return jax.lax.scan(chunk, carry, jnp.arange(block))

    return jax.vmap(one)(carry) if batched else one(carry)

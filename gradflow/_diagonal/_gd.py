"""Discrete training from small initialisation: gradient descent, SGD and Adam on ``θ = (u, v)``.

This is the training that the paper's experiments (and every earlier reproduction) ran: ``θ ← θ − lr
∇_θ L(θ)`` from ``θ(0) = α (u0, v0)``, in float64 on the plain weights. As ``lr → 0`` gradient
descent follows the gradient flow, with step ``k`` at rescaled time ``τ = k · lr / log(1/α)``; the
comparison with ``simulate_flow`` shows how small ``lr`` must be.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from .._kit._checks import check_int
from .._kit._trajectory import gd_status
from ._checks import check_init
from ._model import DiagonalModel, where_not_finite
from ._results import GDResult

OPTIMIZERS = ("gd", "sgd", "adam")


def gd(
    model: DiagonalModel, *, u0, v0, log_a, alphas, batched, lr, steps, record_every, optimizer, batch_size, seed
) -> GDResult:
    """``simulate_gd`` for a diagonal model once the checks every family shares are done: ``steps`` optimizer steps
    from ``θ(0) = α (u0, v0)``, recorded every ``record_every``."""
    u0, v0 = check_init(u0, v0, model.p, model.names)
    seed = check_int(seed, "seed", minimum=0)
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}; got {optimizer!r}.")
    if optimizer == "sgd" and batch_size is None:
        raise ValueError("optimizer='sgd' needs a batch_size.")
    if optimizer == "gd" and batch_size is not None:
        raise ValueError("optimizer='gd' is full-batch; use optimizer='sgd' for minibatches.")
    if batch_size is not None and check_int(batch_size, "batch_size") > model.n:
        raise ValueError(f"batch_size must be at most the number of samples, n={model.n}; got {batch_size!r}.")

    static = dict(optimizer=optimizer, batch_size=batch_size, batched=batched)
    lr_, every, key = jnp.asarray(float(lr)), jnp.asarray(int(record_every)), jax.random.PRNGKey(int(seed))
    carry, first = _start(model, jnp.asarray(alphas), jnp.asarray(u0), jnp.asarray(v0), lr_, **static)
    chunks, axis = steps // record_every, int(batched)  # the record axis follows the α axis if batched
    block = min(_BLOCK, 1 << (chunks - 1).bit_length())
    records = [[np.expand_dims(np.asarray(x), axis) for x in first]]
    for done in range(0, chunks, block):
        active = min(block, chunks - done)
        carry, rec = _advance(
            model, carry, jnp.asarray(done), jnp.asarray(active), every, lr_, key, block=block, **static
        )
        records.append([np.take(np.asarray(x), np.arange(active), axis=axis) for x in rec])
    u, v, loss = (np.concatenate(parts, axis=axis) for parts in zip(*records))
    rec = np.arange(steps // record_every + 1, dtype=np.int64) * record_every
    finite = np.isfinite(loss) & np.all(np.isfinite(u) & np.isfinite(v), axis=-1)
    model_at = [where_not_finite(model, at[None]) for at in np.asarray(carry[3]).reshape(-1, model.p)]
    model_at = np.array(model_at, dtype=object).reshape(np.shape(carry[2]))
    result, message, after = gd_status(
        rec, np.asarray(carry[2]), finite, lr=float(lr), log_alpha=log_a, model_at=model_at
    )
    u, v = (np.where(after[..., None], np.nan, x) for x in (u, v))
    loss = np.where(after, np.nan, loss)
    return GDResult(
        steps=rec, u=u, v=v, loss=loss, log_alpha=log_a, alpha=alphas, lr=float(lr), result=result, message=message
    )


_BLOCK = 64  # records per compiled call: any `steps` and `record_every` reuse one compilation


def _optimizer(optimizer, lr):
    return optax.adam(lr) if optimizer == "adam" else optax.sgd(lr)


def _vmap_if(batched, fn, in_axes):
    return jax.vmap(fn, in_axes=in_axes) if batched else fn


@eqx.filter_jit
def _start(model, alphas, u0, v0, lr, *, optimizer, batch_size, batched):
    """``θ(0) = α (u0, v0)``, the optimizer state, the first step with a non-finite gradient (−1: none yet) and the
    first record ``(u, v, L)``."""
    del batch_size

    def one(alpha):
        theta = (alpha * u0, alpha * v0)
        nowhere = jnp.full_like(u0, jnp.nan)  # β at the first non-finite gradient
        carry = (theta, _optimizer(optimizer, lr).init(theta), jnp.asarray(-1, dtype=jnp.int64), nowhere)
        return carry, (*theta, model.loss_value(*theta))

    return _vmap_if(batched, one, 0)(alphas)


@eqx.filter_jit
def _advance(model, carry, done, active, record_every, lr, key, *, block, optimizer, batch_size, batched):
    """``block`` records of ``record_every`` optimizer steps each, from record ``done`` on.

    Only the first ``active`` records take steps (the rest repeat the state), so the last, partial
    block of a run reuses the compilation. Step ``k`` draws its minibatch from ``fold_in(key, k)``; the carry keeps
    the first step whose gradient is not finite.
    """
    opt = _optimizer(optimizer, lr)

    def one(carry):
        def step(k, carry):
            theta, state, bad, at = carry
            batch = None
            if batch_size is not None:
                batch = jax.random.permutation(jax.random.fold_in(key, k), model.n)[:batch_size]
            u, v = theta
            g = model.g(u * v, batch=batch)  # ∇_u L = −v ⊙ g, ∇_v L = −u ⊙ g (docs/math.md, the sign convention)
            first = (bad < 0) & ~jnp.all(jnp.isfinite(g))
            bad, at = jnp.where(first, k, bad), jnp.where(first, u * v, at)
            grads = (-v * g, -u * g)
            updates, state = opt.update(grads, state, theta)
            return optax.apply_updates(theta, updates), state, bad, at

        def chunk(carry, c):
            first = (done + c) * record_every
            carry = jax.lax.fori_loop(first, jnp.where(c < active, first + record_every, first), step, carry)
            theta = carry[0]
            return carry, (*theta, model.loss_value(*theta))

        return jax.lax.scan(chunk, carry, jnp.arange(block))

    return _vmap_if(batched, one, 0)(carry)

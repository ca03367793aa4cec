"""Discrete training on a family's plain weights, whatever their shape: gradient descent, SGD or Adam from
``θ(0) = α θ⁰``, in float64, recorded every few steps (what a family's ``gd`` runs once it has checked its start).

The family gives ``loss(model, θ, batch)`` (the loss of the weights ``θ``, a pytree, over the sample indices
``batch``, or all of them if None) and ``record(model, θ)`` (the arrays kept at every record); the gradient is
``jax.grad`` of ``loss``. The records come in blocks of ``_BLOCK`` per compiled call, so that any ``steps`` and
``record_every`` reuse one compilation.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from ._checks import check_int
from ._trajectory import gd_status

OPTIMIZERS = ("gd", "sgd", "adam")

_BLOCK = 64  # records per compiled call


def check_optimizer(optimizer, batch_size, seed, n: int) -> int:
    """The optimizer options of ``simulate_gd`` checked against the ``n`` samples; returns the seed."""
    seed = check_int(seed, "seed", minimum=0)
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}; got {optimizer!r}.")
    if optimizer == "sgd" and batch_size is None:
        raise ValueError("optimizer='sgd' needs a batch_size.")
    if optimizer == "gd" and batch_size is not None:
        raise ValueError("optimizer='gd' is full-batch; use optimizer='sgd' for minibatches.")
    if batch_size is not None and check_int(batch_size, "batch_size") > n:
        raise ValueError(f"batch_size must be at most the number of samples, n={n}; got {batch_size!r}.")
    return seed


def descend(
    model, theta0, alphas, *, loss, record, batched, lr, steps, record_every, optimizer, batch_size, seed
) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """``steps`` optimizer steps on ``θ`` from ``θ(0) = α θ⁰`` (``alphas``: one scale, or a 1-D array trained
    together if ``batched``), step ``k`` drawing its minibatch from ``fold_in(key(seed), k)``.

    Returns the recorded steps ``0, record_every, …, steps`` (``(m,)``), the leaves of ``record`` at each (the record
    axis after the α axis if batched) and the first step whose gradient was not finite per run (−1: none).
    """
    static = dict(loss=loss, record=record, optimizer=optimizer, batch_size=batch_size, batched=batched)
    lr_, every, key = jnp.asarray(float(lr)), jnp.asarray(int(record_every)), jax.random.PRNGKey(int(seed))
    carry, first = _start(model, theta0, jnp.asarray(alphas), lr_, **static)
    chunks, axis = steps // record_every, int(batched)
    block = min(_BLOCK, 1 << (chunks - 1).bit_length())
    records = [[np.expand_dims(np.asarray(x), axis) for x in jax.tree_util.tree_leaves(first)]]
    for done in range(0, chunks, block):
        active = min(block, chunks - done)
        carry, rec = _advance(
            model, carry, jnp.asarray(done), jnp.asarray(active), every, lr_, key, block=block, **static
        )
        records.append([np.take(np.asarray(x), np.arange(active), axis=axis) for x in jax.tree_util.tree_leaves(rec)])
    leaves = [np.concatenate(parts, axis=axis) for parts in zip(*records)]
    rec = np.arange(chunks + 1, dtype=np.int64) * record_every
    return rec, leaves, np.asarray(carry[2])


def train(
    model, theta0, alphas, *, loss, record, batched, log_alpha, lr, steps, record_every, optimizer, batch_size, seed
) -> tuple[np.ndarray, list[np.ndarray], np.ndarray, np.ndarray]:
    """:func:`descend` with its optimizer options checked against ``model.n`` (:func:`check_optimizer`) and the runs'
    ends (:func:`~gradflow._kit._trajectory.gd_status`): ``(steps, records, result, message)``, each run's records
    NaN after the step where it became non-finite."""
    seed = check_optimizer(optimizer, batch_size, seed, model.n)
    options = dict(batched=batched, lr=lr, steps=steps, record_every=record_every, optimizer=optimizer)
    rec, leaves, bad = descend(
        model, theta0, alphas, loss=loss, record=record, batch_size=batch_size, seed=seed, **options
    )
    lead = 1 + int(batched)  # the α axis (if batched) and the record axis
    finite = np.all([np.all(np.isfinite(x), axis=tuple(range(lead, x.ndim))) for x in leaves], axis=0)
    result, message, after = gd_status(rec, bad, finite, lr=float(lr), log_alpha=log_alpha)
    kept = [np.where(after.reshape(after.shape + (1,) * (x.ndim - lead)), np.nan, x) for x in leaves]
    return rec, kept, result, message


def _optimizer(optimizer, lr):
    return optax.adam(lr) if optimizer == "adam" else optax.sgd(lr)


def _vmap_if(batched, fn):
    return jax.vmap(fn) if batched else fn


@eqx.filter_jit
def _start(model, theta0, alphas, lr, *, loss, record, optimizer, batch_size, batched):
    """``θ(0) = α θ⁰``, the optimizer state, no non-finite gradient yet (−1) and the first record."""
    del loss, batch_size

    def one(alpha):
        theta = jax.tree_util.tree_map(lambda x: alpha * x, theta0)
        carry = (theta, _optimizer(optimizer, lr).init(theta), jnp.asarray(-1, dtype=jnp.int64))
        return carry, record(model, theta)

    return _vmap_if(batched, one)(alphas)


@eqx.filter_jit
def _advance(model, carry, done, active, every, lr, key, *, block, loss, record, optimizer, batch_size, batched):
    """``block`` records of ``every`` optimizer steps each, from record ``done`` on; only the first ``active`` take
    steps (the rest repeat the state), so the last, partial block reuses the compilation."""
    opt = _optimizer(optimizer, lr)
    grad = jax.grad(lambda theta, batch: loss(model, theta, batch))

    def one(carry):
        def step(k, carry):
            theta, state, bad = carry
            batch = None
            if batch_size is not None:
                batch = jax.random.permutation(jax.random.fold_in(key, k), model.X.shape[0])[:batch_size]
            grads = grad(theta, batch)
            finite = jnp.all(jnp.array([jnp.all(jnp.isfinite(x)) for x in jax.tree_util.tree_leaves(grads)]))
            bad = jnp.where((bad < 0) & ~finite, k, bad)
            updates, state = opt.update(grads, state, theta)
            return optax.apply_updates(theta, updates), state, bad

        def chunk(carry, c):
            first = (done + c) * every
            carry = jax.lax.fori_loop(first, jnp.where(c < active, first + every, first), step, carry)
            return carry, record(model, carry[0])

        return jax.lax.scan(chunk, carry, jnp.arange(block))

    return _vmap_if(batched, one)(carry)

"""Discrete training from small initialisation: gradient descent, SGD and Adam on ``θ = (u, v)``.

This is the training that the paper's experiments (and every earlier reproduction) ran: ``θ ← θ − lr
∇_θ L(θ)`` from ``θ(0) = α (u0, v0)``, in float64 on the plain weights. As ``lr → 0`` gradient
descent follows the gradient flow, with step ``k`` at rescaled time ``τ = k · lr / log(1/α)``; the
comparison with [`simulate_flow`][gradflow.simulate_flow] shows how small ``lr`` must be.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from ._checks import check_init, check_int, check_scales
from ._config import float64
from ._factorized import FactorizedModel
from ._model import DiagonalModel, check_model

_OPTIMIZERS = ("gd", "sgd", "adam")
_TINY = float(np.finfo(np.float64).tiny)


class GDResult(eqx.Module):
    """Discrete training recorded every ``record_every`` steps (all fields NumPy float64/int64).

    The stored fields are the state the optimizer updated, ``θ = (u, v)``, with the loss and the scale;
    ``ts``, ``beta`` and ``b`` are computed from them. With ``A`` scales every field but ``steps`` and
    ``lr`` gains a leading axis of length ``A`` (so do ``ts``, since ``τ`` depends on α). A
    [`Trajectory`][gradflow.Trajectory].

    Attributes:
        steps: the recorded step numbers ``0, record_every, …, steps``, shape ``(m,)``.
        u, v: the weights, shape ``(m, p)``.
        loss: the full-batch loss ``L(θ)``, shape ``(m,)``.
        log_alpha: ``log α``.
        alpha: ``α``, the float64 number the weights were started from, ``θ(0) = α (u0, v0)``.
        lr: the learning rate.
    """

    steps: np.ndarray
    u: np.ndarray
    v: np.ndarray
    loss: np.ndarray
    log_alpha: np.ndarray
    alpha: np.ndarray
    lr: float

    @property
    def ts(self) -> np.ndarray:
        """The rescaled times ``τ = step · lr / log(1/α)``, shape ``(m,)``."""
        return self.steps * self.lr / -self.log_alpha[..., None]

    @property
    def beta(self) -> np.ndarray:
        """``β = u ⊙ v``, shape ``(m, p)``."""
        return self.u * self.v

    @property
    def b(self) -> np.ndarray:
        """Log-scale weights ``log|w| / log α``, ``w = u + v`` up to the sign frame (as in
        [`FlowResult`][gradflow.FlowResult]); ``|w|`` is clipped to the smallest positive float64, so
        ``b`` stays finite. Shape ``(m, p)``."""
        return np.log(np.maximum(np.abs(self.u + self.v), _TINY)) / self.log_alpha[..., None, None]


@float64
def simulate_gd(
    model: DiagonalModel,
    *,
    u0,
    v0,
    alpha=None,
    log_alpha=None,
    lr: float,
    steps: int,
    optimizer: str = "gd",
    batch_size: int | None = None,
    seed: int = 0,
    record_every: int = 1,
) -> GDResult:
    """Train ``θ = (u, v)`` from ``θ(0) = α (u0, v0)`` with ``steps`` optimizer steps, in float64.

    Args:
        model: the model and data.
        u0, v0: initialisation directions, shape ``(p,)``, with ``|u0_i| ≠ |v0_i|`` (as in
            [`simulate_flow`][gradflow.simulate_flow]).
        alpha: the scale in (0, 1), or a 1-D array of scales (trained together, vmapped).
        log_alpha: ``log α`` (< 0) instead of ``alpha``, scalar or 1-D array. Gradient descent trains the
            weights themselves, so α must be a normal float64 number (``α ≥ 2.2e-308``, ``log α ≥ −708``).
        lr: the learning rate.
        steps: the number of steps; a multiple of ``record_every``.
        optimizer: ``"gd"`` (full-batch gradient descent, ``θ ← θ − lr ∇L``), ``"sgd"`` (the same on
            minibatches of ``batch_size`` samples drawn without replacement at every step) or
            ``"adam"`` (``optax.adam(lr)``, full batch or minibatches if ``batch_size`` is given).
        batch_size: minibatch size for ``"sgd"`` (required) and ``"adam"`` (optional).
        seed: seeds the minibatches.
        record_every: record ``θ`` and the loss every this many steps (memory stays
            ``O(steps / record_every)``).

    Returns:
        A [`GDResult`][gradflow.GDResult]; for a [`FactorizedModel`][gradflow.FactorizedModel] (``u0, v0``
        tuples of factors, ``optimizer="gd"`` only) a [`FactorizedGDResult`][gradflow.FactorizedGDResult].
    """
    if isinstance(model, FactorizedModel):
        from ._rank_flow import rank_gd  # the factorised engine builds on this module

        if optimizer != "gd" or batch_size is not None:
            raise ValueError("a FactorizedModel trains with full-batch gradient descent only (optimizer='gd').")
        kw = dict(alpha=alpha, log_alpha=log_alpha, lr=lr, steps=steps, record_every=record_every)
        return rank_gd(model, u0=u0, v0=v0, **kw)
    check_model(model)
    u0, v0 = check_init(u0, v0, model.p, model.names, stacklevel=3)
    log_a, batched = check_scales(alpha, log_alpha)
    alphas = np.exp(log_a) if alpha is None else np.asarray(alpha, dtype=np.float64)
    if np.any(alphas < _TINY):
        raise ValueError(
            f"simulate_gd trains the weights θ = α (u0, v0) themselves, so α must be a normal float64 number; got "
            f"α = e^{float(np.min(log_a)):.6g} < {_TINY:.3g}. The exact flow takes any log α: use simulate_flow."
        )
    if not (isinstance(lr, (int, float, np.floating)) and np.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a positive number; got {lr!r}.")
    steps, record_every = check_int(steps, "steps"), check_int(record_every, "record_every")
    seed = check_int(seed, "seed", minimum=0)
    if steps % record_every:
        raise ValueError(f"steps ({steps}) must be a multiple of record_every ({record_every}).")
    if optimizer not in _OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {_OPTIMIZERS}; got {optimizer!r}.")
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
    return GDResult(steps=rec, u=u, v=v, loss=loss, log_alpha=log_a, alpha=alphas, lr=float(lr))


_BLOCK = 64  # records per compiled call: any `steps` and `record_every` reuse one compilation


def _optimizer(optimizer, lr):
    return optax.adam(lr) if optimizer == "adam" else optax.sgd(lr)


def _vmap_if(batched, fn, in_axes):
    return jax.vmap(fn, in_axes=in_axes) if batched else fn


@eqx.filter_jit
def _start(model, alphas, u0, v0, lr, *, optimizer, batch_size, batched):
    """``θ(0) = α (u0, v0)``, the optimizer state and the first record ``(u, v, L)``."""
    del batch_size

    def one(alpha):
        theta = (alpha * u0, alpha * v0)
        return (theta, _optimizer(optimizer, lr).init(theta)), (*theta, model.loss_value(*theta))

    return _vmap_if(batched, one, 0)(alphas)


@eqx.filter_jit
def _advance(model, carry, done, active, record_every, lr, key, *, block, optimizer, batch_size, batched):
    """``block`` records of ``record_every`` optimizer steps each, from record ``done`` on.

    Only the first ``active`` records take steps (the rest repeat the state), so the last, partial
    block of a run reuses the compilation. Step ``k`` draws its minibatch from ``fold_in(key, k)``.
    """
    opt = _optimizer(optimizer, lr)

    def one(carry):
        def step(k, carry):
            theta, state = carry
            batch = None
            if batch_size is not None:
                batch = jax.random.permutation(jax.random.fold_in(key, k), model.n)[:batch_size]
            u, v = theta
            g = model.g(u * v, batch=batch)  # ∇_u L = −v ⊙ g, ∇_v L = −u ⊙ g (docs/math.md, the sign convention)
            grads = (-v * g, -u * g)
            updates, state = opt.update(grads, state, theta)
            return optax.apply_updates(theta, updates), state

        def chunk(carry, c):
            first = (done + c) * record_every
            carry = jax.lax.fori_loop(first, jnp.where(c < active, first + record_every, first), step, carry)
            theta = carry[0]
            return carry, (*theta, model.loss_value(*theta))

        return jax.lax.scan(chunk, carry, jnp.arange(block))

    return _vmap_if(batched, one, 0)(carry)

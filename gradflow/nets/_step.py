"""The jitted optimiser step of the training loop, shared by every run with the same loss and optimiser, and the
log of its losses, fetched from the device only at sync points."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Hashable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import optax

from ._configs import TrainConfig
from ._distributed import Layout
from ._optim import make_optimizer


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite."""


def non_finite(what: str, lr: float | None = None) -> NonFiniteLossError:
    """The error that stops a run: ``what`` is not finite (at learning rate ``lr``)."""
    at = "" if lr is None else f" (learning rate {lr:.3g})"
    return NonFiniteLossError(
        f"{what}{at}; stopped, the records and the checkpoint before it are kept. Try a lower learning rate "
        "(lr, --lr) or gradient clipping (TrainConfig.grad_clip)"
    )


@jax.jit
def all_finite(tree) -> jax.Array:
    """Whether every entry of every array of ``tree`` is finite."""
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(a)) for a in jax.tree_util.tree_leaves(tree)]))


class TrainState(eqx.Module):
    """What a checkpoint holds: the model (trained and frozen arrays alike) and the optimiser state."""

    model: eqx.Module
    opt_state: optax.OptState


def split_model(model, trainable=eqx.is_inexact_array):
    """``(params, frozen, static)`` with ``eqx.combine(params, frozen, static)`` the model: the arrays selected by
    ``trainable`` (a filter or a filter spec), the other arrays (used but not trained, e.g. InRank's ``W_0``) and
    the non-array rest (hashable: a static argument of the step)."""
    params, rest = eqx.partition(model, trainable)
    frozen, static = eqx.partition(rest, eqx.is_array)
    return params, frozen, static


def make_step(optimizer: optax.GradientTransformation, loss_fn, traces: list | None = None):
    """The jitted optimiser step, on a model split by :func:`split_model`::

        step(params, opt_state, frozen, static, layout, arrays, idx, lr) -> (params, opt_state, loss, grad_norm)

    ``idx`` holds one micro-batch per row: the loss ``L`` and gradient ``g`` are the means over the rows of
    ``loss_fn(model, arrays, idx[i])`` and its gradient in ``params`` (accumulated by ``lax.scan``), then
    ``params ← params − lr · optimizer.update(g)``. ``params`` and ``opt_state`` are donated (updated in place);
    ``L`` and ``‖g‖₂`` stay on the device, so that the host never waits for a step before queueing the next.
    ``layout`` (static) says where the arrays live: with ``idx`` split over its devices each computes its share of
    every micro-batch; the gradient, parameters and optimiser state are kept in the layout's placement (XLA
    inserts the all-reduce, or the gathers and reduce-scatters of FSDP). ``traces[0]``, if given, counts the
    compilations.
    """

    def step(params, opt_state, frozen, static, layout: Layout, arrays, idx, lr):
        if traces is not None:
            traces[0] += 1  # runs only while tracing

        def micro(carry, micro_idx):
            value = jax.value_and_grad(lambda p: loss_fn(eqx.combine(p, frozen, static), arrays, micro_idx))(params)
            return jax.tree_util.tree_map(jnp.add, carry, value), None

        zeros = (jnp.float32(0), jax.tree_util.tree_map(jnp.zeros_like, params))
        (loss, grads), _ = jax.lax.scan(micro, zeros, idx)
        n = jnp.float32(idx.shape[0])
        loss, grads = loss / n, layout.constrain(jax.tree_util.tree_map(lambda g: g / n, grads))
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, jax.tree_util.tree_map(lambda u: -lr * u, updates))
        return layout.constrain(params), layout.constrain(opt_state), loss, optax.tree.norm(grads)

    # plain jax.jit: eqx.filter_jit waits for every call to finish
    return jax.jit(step, donate_argnums=(0, 1), static_argnums=(3, 4))


class CompiledStep(NamedTuple):
    step: Callable
    traces: list


@functools.lru_cache(maxsize=16)
def compiled_step(loss_fn: Hashable, optimizer: tuple) -> CompiledStep:
    """The jitted step (:func:`make_step`) of ``loss_fn`` with the optimiser of ``_optim.optimizer_key``'s fields,
    shared by all runs with the same loss and optimiser settings (several init scales, run lengths, learning rates,
    the modes of an InRank comparison, device layouts); ``traces[0]`` counts its compilations."""
    traces = [0]
    return CompiledStep(make_step(make_optimizer(TrainConfig(**dict(optimizer))), loss_fn, traces), traces)


class StepLog:
    """Losses and gradient norms of the steps run since the last sync point, still on the device, and the wall
    time of the steps alone.

    ``add`` queues a step's results; ``sync`` waits for the device, fetches the queued results in one transfer,
    books the time since the last ``restart`` to the queued steps (``timed=False``: to none, e.g. for a compiling
    step) and returns them as ``(step, loss, grad_norm)`` floats, raising ``NonFiniteLossError`` at the first
    non-finite loss. Work between ``sync`` and ``restart`` (evaluation, checkpoints, spectra, rank checks) is not
    timed; ``take_timing`` returns and resets ``(seconds, steps)``.
    """

    def __init__(self, schedule):
        self._schedule = schedule
        self._pending: list = []
        self._seconds, self._steps, self._t0 = 0.0, 0, time.perf_counter()

    def add(self, step: int, loss, grad_norm) -> None:
        self._pending.append((step, loss, grad_norm))

    def sync(self, timed: bool = True) -> list[tuple[int, float, float]]:
        values = jax.device_get([(loss, g) for _, loss, g in self._pending])
        if timed:
            self._seconds += time.perf_counter() - self._t0
            self._steps += len(self._pending)
        done = [(step, float(loss), float(g)) for (step, _, _), (loss, g) in zip(self._pending, values)]
        self._pending = []
        for step, loss, _ in done:
            if not math.isfinite(loss):
                raise non_finite(f"loss is {loss} at step {step}", self._schedule(step - 1))
        return done

    def restart(self) -> None:
        self._t0 = time.perf_counter()

    def take_timing(self) -> tuple[float, int]:
        timing, (self._seconds, self._steps) = (self._seconds, self._steps), (0.0, 0)
        return timing

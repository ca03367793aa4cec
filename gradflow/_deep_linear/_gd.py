"""Discrete training of a deep linear network from small initialisation: gradient descent, SGD and Adam on the layers
``W_1, …, W_L`` from ``W_l(0) = α u0[l−1]``, in float64 (``gradflow._kit._descent``).

As ``lr → 0`` gradient descent follows the flow ``dW_l/dt = W_{>l}ᵀ G W_{<l}ᵀ`` (docs/deep-linear.md), step ``k`` at
rescaled time ``τ = k · lr · α^{L−2}`` (``L ≥ 3``; ``k · lr / log(1/α)`` at ``L = 2``).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .._data import mean_loss
from .._kit._descent import train
from ._model import DeepLinearModel, check_layers, product
from ._results import DeepLinearGDResult


def _loss(model: DeepLinearModel, layers, batch):
    """``L(W_L ⋯ W_1)`` over the samples ``batch`` (None: all)."""
    return mean_loss(model.h, model.X, model.Y, model.loss, product(layers), batch=batch)


def _record(model: DeepLinearModel, layers):
    return layers, _loss(model, layers, None)


def gd(
    model: DeepLinearModel, *, u0, v0, log_a, alphas, batched, lr, steps, record_every, optimizer, batch_size, seed
) -> DeepLinearGDResult:
    """``simulate_gd`` for a deep linear network once the checks every family shares are done: ``steps`` optimizer
    steps from ``W_l(0) = α u0[l−1]``, recorded every ``record_every``."""
    if v0 is not None:
        raise ValueError(
            "a DeepLinearModel takes its layers' directions as u0, a tuple of L matrices; v0 is not taken."
        )
    W0 = check_layers(model, u0)
    rec, (*layers, loss), result, message = train(
        model,
        tuple(jnp.asarray(w) for w in W0),
        alphas,
        loss=_loss,
        record=_record,
        batched=batched,
        log_alpha=log_a,
        lr=lr,
        steps=steps,
        record_every=record_every,
        optimizer=optimizer,
        batch_size=batch_size,
        seed=seed,
    )
    return DeepLinearGDResult(
        steps=rec,
        layers=tuple(layers),
        loss=loss,
        log_alpha=np.asarray(log_a),
        alpha=np.asarray(alphas),
        lr=float(lr),
        result=result,
        message=message,
    )

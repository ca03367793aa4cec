"""Discrete training of a depth-L diagonal network from small initialisation: gradient descent, SGD and Adam on the
layers ``w_1, …, w_L`` from ``w_l(0) = α u0[l]``, in float64 (``gradflow._kit._descent``).

As ``lr → 0`` gradient descent follows the gradient flow ``dw_l/dt = g ⊙ Π_{k≠l} w_k``, step ``k`` at rescaled time
``τ = k · lr · α^{L−2}`` (``L ≥ 3``): a plateau lasts ``~α^{−(L−2)} / lr`` steps, which is why GD cannot reach the α
where the stages of a deep network separate, and the exact flow can.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .._data import mean_loss
from .._kit._descent import train
from ._model import DepthModel, check_init
from ._results import DepthGDResult


def _loss(model: DepthModel, W, batch):
    """``L(θ)`` of the layers ``W`` (shape ``(L, p)``) over the samples ``batch`` (None: all)."""
    return mean_loss(model.h, model.X, model.Y, model.loss, jnp.prod(W, axis=0), batch=batch)


def _record(model: DepthModel, W):
    return W, _loss(model, W, None)


def gd(
    model: DepthModel, *, u0, v0, log_a, alphas, batched, lr, steps, record_every, optimizer, batch_size, seed
) -> DepthGDResult:
    """``simulate_gd`` for a depth model once the checks every family shares are done: ``steps`` optimizer steps from
    ``w_l(0) = α u0[l]``, recorded every ``record_every``."""
    if v0 is not None:
        raise ValueError("a DepthModel takes its layers' directions as u0, shape (L, p); v0 is not taken.")
    W0 = check_init(model, u0)
    rec, (layers, loss), result, message = train(
        model,
        jnp.asarray(W0),
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
    return DepthGDResult(
        steps=rec,
        layers=layers,
        loss=loss,
        log_alpha=np.asarray(log_a),
        alpha=np.asarray(alphas),
        lr=float(lr),
        result=result,
        message=message,
    )

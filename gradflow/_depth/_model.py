"""Depth-L diagonal networks ``f(x; θ) = h(x; w_1 ⊙ ⋯ ⊙ w_L)`` (docs/depth.md, *The model*).

The loss is ``L(θ) = (1/n) Σ_j ℓ(y_j, h(x_j; β))`` with ``β = w_1 ⊙ ⋯ ⊙ w_L`` and, as everywhere in gradflow,
``g = −∇_β L``, so gradient flow reads ``dw_l/dt = g ⊙ Π_{k≠l} w_k``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import numpy as np

from .._data import LossSpec, loss_at_each, mean_loss
from .._kit._checks import check_coordinate_model

DEPTHS = (2, 3, 4, 5, 6)


class DepthModel(eqx.Module):
    """A model ``h(x; β)`` with ``β = w_1 ⊙ ⋯ ⊙ w_L ∈ R^p`` (a depth-L diagonal network) and a finite sample
    ``(X, Y)``.

    Args:
        h: ``h(x, beta)``, the prediction for one sample ``x = X[j]`` (a JAX function, twice differentiable in
            ``beta``).
        X: inputs, samples stacked on the first axis.
        Y: targets, samples stacked on the first axis (an integer label per sample for ``"cross_entropy"``).
        p: the number of coordinates of ``β``.
        depth: the number of layers ``L``, 2 … 6.
        loss: ``"square"`` (½‖y − ŷ‖² summed over output entries), ``"cross_entropy"``, or a function
            ``loss(y, y_hat) -> scalar``.
        names: optional label for every coordinate.
    """

    h: Callable
    X: np.ndarray
    Y: np.ndarray
    p: int = eqx.field(static=True)
    depth: int = eqx.field(static=True)
    loss: LossSpec = eqx.field(static=True)
    names: tuple[str, ...] = eqx.field(static=True)

    def __init__(
        self,
        h: Callable,
        X,
        Y,
        *,
        p: int,
        depth: int,
        loss: LossSpec = "square",
        names: Sequence[str] | None = None,
    ):
        if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or int(depth) not in DEPTHS:
            raise ValueError(f"depth must be one of {DEPTHS}; got {depth!r}.")
        self.X, self.Y, self.p, self.names = check_coordinate_model(h, X, Y, p=p, loss=loss, names=names)
        self.h, self.depth, self.loss = h, int(depth), loss

    @property
    def n(self) -> int:
        """The number of samples."""
        return int(self.X.shape[0])

    def loss_of_beta(self, beta) -> jax.Array:
        """``L(β) = (1/n) Σ_j ℓ(y_j, h(x_j; β))``."""
        return mean_loss(self.h, self.X, self.Y, self.loss, beta)

    def g(self, beta) -> jax.Array:
        """``g = −∇_β L``."""
        return -jax.grad(self.loss_of_beta)(beta)


def check_init(model: DepthModel, W0) -> np.ndarray:
    """The layers' initial directions ``W0`` (``w_l(0) = α W0[l]``) as a float64 array of shape ``(L, p)``."""
    try:
        W0 = np.asarray(W0, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(f"u0 must be an array of shape (L, p) = ({model.depth}, {model.p}): {error}") from None
    if W0.shape != (model.depth, model.p):
        raise ValueError(
            f"u0 must hold one row per layer, shape (L, p) = ({model.depth}, {model.p}) (w_l(0) = α u0[l]); "
            f"got {W0.shape}."
        )
    if not np.all(np.isfinite(W0)):
        raise ValueError("u0 contains NaN or inf.")
    return W0


@eqx.filter_jit
def _batched_g(model, betas):
    return jax.vmap(model.g)(betas)


@eqx.filter_jit
def _batched_loss(model, betas):
    return loss_at_each(model.loss_of_beta, betas, model.X)

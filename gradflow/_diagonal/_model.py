"""Models with diagonal weights, ``f(x; θ) = h(x; u ⊙ v)`` (paper Definition 3.1; docs/math.md, *Models with
diagonal weights* and *The loss and the sign convention*).

The loss is ``L(θ) = (1/n) Σ_j ℓ(y_j, h(x_j; u ⊙ v))`` and the sign convention used throughout
gradflow is ``g(θ) = −∇_β L`` at ``β = u ⊙ v``, so gradient flow reads ``du/dt = v ⊙ g``,
``dv/dt = u ⊙ g`` (paper eq. 4).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._config import float64
from .._data import LossSpec, loss_at_each, mean_loss
from .._kit._checks import check_coordinate_model, check_vector, describe_coordinates, non_finite_at


class DiagonalModel(eqx.Module):
    """A model ``h(x; β)`` with ``β = u ⊙ v ∈ R^p`` and a finite sample ``(X, Y)``.

    Args:
        h: ``h(x, beta)``, the prediction for one sample ``x = X[j]`` (a JAX function, twice
            differentiable in ``beta``).
        X: inputs, samples stacked on the first axis.
        Y: targets, samples stacked on the first axis. For ``loss="cross_entropy"`` an integer
            label per sample, and ``h`` returns logits.
        p: the number of diagonal weights.
        loss: ``"square"`` (½‖y − ŷ‖² summed over output entries), ``"cross_entropy"``, or a
            function ``loss(y, y_hat) -> scalar``.
        names: optional label for every coordinate (used in tables and figures).

    The data are stored as NumPy float64, so a model built without ``jax_enable_x64`` still
    evaluates in float64 inside gradflow's entry points.
    """

    h: Callable  # a function (static under eqx.filter_jit) or a module whose arrays are traced
    X: np.ndarray
    Y: np.ndarray
    p: int = eqx.field(static=True)
    loss: LossSpec = eqx.field(static=True)
    names: tuple[str, ...] = eqx.field(static=True)

    def __init__(
        self,
        h: Callable,
        X,
        Y,
        *,
        p: int,
        loss: LossSpec = "square",
        names: Sequence[str] | None = None,
    ):
        self.X, self.Y, self.p, self.names = check_coordinate_model(h, X, Y, p=p, loss=loss, names=names)
        self.h, self.loss = h, loss

    @property
    def n(self) -> int:
        """The number of samples."""
        return int(self.X.shape[0])

    def loss_of_beta(self, beta, *, batch=None) -> jax.Array:
        """``L(β) = (1/n) Σ_j ℓ(y_j, h(x_j; β))``; over the sample indices ``batch`` if given."""
        return mean_loss(self.h, self.X, self.Y, self.loss, beta, batch=batch)

    def loss_value(self, u, v, *, batch=None) -> jax.Array:
        """``L(θ)`` at ``θ = (u, v)``."""
        return self.loss_of_beta(u * v, batch=batch)

    def g(self, beta, *, batch=None) -> jax.Array:
        """``g = −∇_β L`` (the sign convention of docs/math.md, *The loss and the sign convention*)."""
        return -jax.grad(lambda b: self.loss_of_beta(b, batch=batch))(beta)

    def predict(self, beta, X=None) -> jax.Array:
        """``h(x_j; β)`` for every sample of ``X`` (default: the training inputs)."""
        X = jnp.asarray(self.X if X is None else X)
        return jax.vmap(lambda x: self.h(x, beta))(X)


@float64
def evaluate_loss(model: DiagonalModel, beta) -> np.ndarray:
    """``L(β)`` in float64 for one ``beta`` (shape ``(p,)``) or a stack of them (shape ``(..., p)``)."""
    beta = check_vector(beta, model.p, "beta", allow_batch=True)
    flat = beta.reshape(-1, model.p)
    out = _batched_loss(model, jnp.asarray(flat))
    return np.asarray(out).reshape(beta.shape[:-1])


@float64
def evaluate_g(model: DiagonalModel, beta) -> np.ndarray:
    """``g(β) = −∇_β L`` in float64 for one ``beta`` or a stack of them (shape ``(..., p)``)."""
    beta = check_vector(beta, model.p, "beta", allow_batch=True)
    flat = beta.reshape(-1, model.p)
    out = _batched_g(model, jnp.asarray(flat))
    return np.asarray(out).reshape(beta.shape)


def where_not_finite(model: DiagonalModel, betas) -> str:
    """Where the model's loss or ``g`` is not finite at the first of the finite weights ``betas`` (shape ``(k, p)``)
    where either is, in words for a message; ``""`` if there is none (at non-finite weights the run itself
    overflowed, and the model is not to blame)."""
    betas = np.asarray(betas, dtype=np.float64)
    betas = betas[np.all(np.isfinite(betas), axis=-1)]
    if not betas.size:
        return ""
    losses, gs = evaluate_loss(model, betas), evaluate_g(model, betas)
    bad = ~(np.isfinite(losses) & np.all(np.isfinite(gs), axis=-1))
    if not bad.any():
        return ""
    i = int(np.argmax(bad))
    beta, idx = betas[i], np.flatnonzero(~np.isfinite(gs[i]))
    shown = ", ".join(f"{model.names[j]} = {beta[j]:.6g}" for j in range(min(model.p, 4))) + (
        ", …" if model.p > 4 else ""
    )
    where = describe_coordinates(idx, model.names) if idx.size else "no coordinate"
    return non_finite_at(float(losses[i]), where, shown, float(np.max(np.abs(beta))))


@eqx.filter_jit
def _batched_loss(model, betas):
    return loss_at_each(model.loss_of_beta, betas, model.X)


@eqx.filter_jit
def _batched_g(model, betas):
    return jax.vmap(model.g)(betas)


def check_model(model) -> None:
    """A ``TypeError`` unless ``model`` is a :class:`DiagonalModel`."""
    if not isinstance(model, DiagonalModel):
        raise TypeError(f"model must be a gradflow.DiagonalModel; got {type(model).__name__}.")

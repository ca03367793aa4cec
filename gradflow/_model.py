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

from ._checks import check_int, check_vector
from ._config import float64

LossFn = Callable[[jax.Array, jax.Array], jax.Array]
LossSpec = str | LossFn

_LOSSES = ("square", "cross_entropy")


def _square(y, y_hat):
    """``ℓ(y, ŷ) = ½‖y − ŷ‖²`` summed over every output entry."""
    return 0.5 * jnp.sum((y - y_hat) ** 2)


def _cross_entropy(y, y_hat):
    """``ℓ(y, ŷ) = −log softmax(ŷ)_y`` for logits ``ŷ`` and an integer label ``y``."""
    return -jax.nn.log_softmax(y_hat)[y.astype(jnp.int32)]


def check_loss(loss) -> None:
    """``loss`` is ``"square"``, ``"cross_entropy"`` or a function ``loss(y, y_hat)``."""
    if isinstance(loss, str) and loss not in _LOSSES:
        raise ValueError(f"loss must be one of {_LOSSES} or a function loss(y, y_hat); got {loss!r}.")
    if not isinstance(loss, str) and not callable(loss):
        raise TypeError(f"loss must be a string or a function loss(y, y_hat); got {type(loss).__name__}.")


def check_data(X, Y, loss: LossSpec) -> tuple[np.ndarray, np.ndarray]:
    """The sample ``(X, Y)``, samples on the first axis, finite, as float64 (integer labels for cross-entropy)."""
    X = np.asarray(X)
    Y = np.asarray(Y)
    if X.ndim < 1 or Y.ndim < 1:
        raise ValueError(
            f"X and Y must stack the samples on their first axis; got X.shape={X.shape}, Y.shape={Y.shape}."
        )
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"X and Y must have the same number of samples on axis 0; got {X.shape[0]} and {Y.shape[0]}.")
    if X.shape[0] == 0:
        raise ValueError("the data set is empty: X and Y need at least one sample.")
    if not np.issubdtype(X.dtype, np.number) or not np.all(np.isfinite(X)):
        raise ValueError("X must be numeric and finite; it contains NaN or inf (clean or drop those samples).")
    X = X.astype(np.float64)
    if loss == "cross_entropy":
        if Y.ndim != 1 or not np.all(np.isfinite(Y)) or not np.all(np.asarray(Y) == np.round(Y)):
            raise ValueError(
                f"cross_entropy needs one integer class label per sample (Y.shape == (n,)); got Y.shape={Y.shape}."
            )
        return X, Y.astype(np.int64)
    if not np.issubdtype(Y.dtype, np.number) or not np.all(np.isfinite(Y)):
        raise ValueError("Y must be numeric and finite; it contains NaN or inf.")
    return X, Y.astype(np.float64)


def check_output(out, Y: np.ndarray, loss: LossSpec, what: str) -> None:
    """``out`` (the abstract output of ``h`` on one sample, named ``what``) fits the targets ``Y`` and ``loss``."""
    if not hasattr(out, "shape"):
        raise ValueError(f"{what} must return a JAX array.")
    if loss == "cross_entropy":
        if len(out.shape) != 1:
            raise ValueError(f"cross_entropy needs h to return a vector of logits; got shape {out.shape}.")
        if Y.min() < 0 or Y.max() >= out.shape[0]:
            raise ValueError(
                f"class labels must lie in [0, {out.shape[0]}) for {out.shape[0]} logits; "
                f"got labels in [{Y.min()}, {Y.max()}]."
            )
    elif loss == "square" and tuple(out.shape) != tuple(Y.shape[1:]):
        raise ValueError(
            f"{what} returns shape {tuple(out.shape)} but each target Y[j] has shape {Y.shape[1:]}; "
            "for the square loss they must match."
        )


_BLOCK = 256  # samples per block of a sum over the samples


def sample_blocks(n: int) -> list[tuple[int, int]]:
    """``n // 256`` contiguous blocks ``[a, b)`` of the samples ``0 … n−1`` (at least 1, at most 4).

    The blocks of a sum over samples are independent computations, which XLA runs on separate cores: on two
    idle cores the paper toy's g (n = 1000) takes 2.5 ms in its 3 blocks against 4.2 ms in one pass
    (docs/benchmarks.md). The split depends on ``n`` only, so a result does not depend on the machine it was
    computed on.
    """
    k = max(1, min(4, n // _BLOCK))
    edges = [round(i * n / k) for i in range(k + 1)]
    return list(zip(edges[:-1], edges[1:]))


def mean_loss(h: Callable, X, Y, loss: LossSpec, params, *, batch=None) -> jax.Array:
    """``(1/n) Σ_j ℓ(y_j, h(x_j, params))`` over all samples (summed in :func:`sample_blocks`), or over the sample
    indices ``batch``."""
    X, Y = jnp.asarray(X), jnp.asarray(Y)
    if batch is not None:
        X, Y = X[batch], Y[batch]
    ell = _square if loss == "square" else _cross_entropy if loss == "cross_entropy" else loss
    blocks = [(0, X.shape[0])] if batch is not None else sample_blocks(X.shape[0])
    total = sum(jnp.sum(jax.vmap(lambda x, y: ell(y, h(x, params)))(X[a:b], Y[a:b])) for a, b in blocks)
    return total / X.shape[0]


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
        if not callable(h):
            raise TypeError(f"h must be a function h(x, beta); got {type(h).__name__}.")
        p = check_int(p, "p")
        check_loss(loss)
        X, Y = check_data(X, Y, loss)
        self.h = h
        self.X = X
        self.Y = Y
        self.p = int(p)
        self.loss = loss
        if names is None:
            names = tuple(f"β[{i}]" for i in range(self.p))
        names = tuple(str(s) for s in names)
        if len(names) != self.p:
            raise ValueError(f"names must have one label per coordinate (p={self.p}); got {len(names)}.")
        self.names = names
        self._check_h()

    def _check_h(self) -> None:
        """Evaluate ``h`` abstractly on one sample to report shape mismatches before any solve."""
        with jax.enable_x64(True):
            try:
                out = jax.eval_shape(self.h, self.X[0], jnp.zeros(self.p))
            except Exception as err:  # noqa: BLE001 - re-raised with context
                raise ValueError(
                    f"h(x, beta) failed on one sample x of shape {self.X.shape[1:]} and beta of shape ({self.p},): "
                    f"{type(err).__name__}: {err}. Check that h takes a single sample (not the batch) and that p "
                    "matches the length of beta that h expects."
                ) from err
        check_output(out, self.Y, self.loss, "h(x, beta)")

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


@eqx.filter_jit
def _batched_loss(model, betas):
    return jax.vmap(model.loss_of_beta)(betas)


@eqx.filter_jit
def _batched_g(model, betas):
    return jax.vmap(model.g)(betas)


def check_model(model) -> None:
    """A ``TypeError`` unless ``model`` is a :class:`DiagonalModel`."""
    if not isinstance(model, DiagonalModel):
        raise TypeError(f"model must be a gradflow.DiagonalModel; got {type(model).__name__}.")

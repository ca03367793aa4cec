"""Deep linear networks ``f(x; θ) = h(x; W_L ⋯ W_1)`` (docs/deep-linear.md, *The model*).

The loss is ``L(θ) = (1/n) Σ_j ℓ(y_j, h(x_j; W))`` of the end-to-end matrix ``W = W_L ⋯ W_1`` and, as everywhere in
gradflow, ``G = −∇_W L``, so gradient flow reads ``dW_l/dt = W_{>l}ᵀ G W_{<l}ᵀ`` with ``W_{>l} = W_L ⋯ W_{l+1}`` and
``W_{<l} = W_{l−1} ⋯ W_1`` (empty products are identities).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._data import LossSpec, check_data, check_h, check_loss, check_output, loss_at_each, mean_loss
from .._kit._checks import check_int

DEPTHS = (2, 3, 4, 5, 6)


class DeepLinearModel(eqx.Module):
    """A model ``h(x; W)`` of the end-to-end matrix ``W = W_L ⋯ W_1 ∈ R^{m×n}`` of a deep linear network, and a
    sample ``(X, Y)``: deep matrix factorisation, matrix sensing and deep linear regression are choices of ``h``.

    Args:
        h: ``h(x, W)``, the prediction for one sample ``x = X[j]`` from the ``(m, n)`` matrix ``W`` (a JAX function,
            twice differentiable in ``W``), e.g. ``lambda x, W: W @ x`` for linear regression.
        X, Y: inputs and targets, samples stacked on the first axis.
        shape: ``(m, n)``, the shape of ``W``.
        depth: the number of layers ``L``, 2 … 6.
        widths: the ``L − 1`` hidden widths ``d_1, …, d_{L−1}`` (``W_1 ∈ R^{d_1×n}``, ``W_l ∈ R^{d_l×d_{l−1}}``,
            ``W_L ∈ R^{m×d_{L−1}}``), or one int for all; default ``min(m, n)``.
        loss: ``"square"``, ``"cross_entropy"`` or a function ``loss(y, y_hat)``, as for the other models.
        names: optional label for every layer.
    """

    h: Callable
    X: np.ndarray
    Y: np.ndarray
    shape: tuple[int, int] = eqx.field(static=True)
    depth: int = eqx.field(static=True)
    widths: tuple[int, ...] = eqx.field(static=True)
    loss: LossSpec = eqx.field(static=True)
    names: tuple[str, ...] = eqx.field(static=True)

    def __init__(
        self,
        h: Callable,
        X,
        Y,
        *,
        shape: Sequence[int],
        depth: int,
        widths: int | Sequence[int] | None = None,
        loss: LossSpec = "square",
        names: Sequence[str] | None = None,
    ):
        if not callable(h):
            raise TypeError(f"h must be a function h(x, W); got {type(h).__name__}.")
        if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or int(depth) not in DEPTHS:
            raise ValueError(f"depth must be one of {DEPTHS}; got {depth!r}.")
        try:
            m, n = (check_int(k, "shape") for k in shape)
        except (TypeError, ValueError):
            raise ValueError(
                f"shape must be a pair (m, n) of positive integers, the shape of W; got {shape!r}."
            ) from None
        depth = int(depth)
        if widths is None:
            widths = (min(m, n),) * (depth - 1)
        elif isinstance(widths, (int, np.integer)) and not isinstance(widths, bool):
            widths = (widths,) * (depth - 1)
        elif isinstance(widths, (str, bytes)) or not isinstance(widths, Sequence) or len(widths) != depth - 1:
            raise ValueError(f"widths must give the L − 1 = {depth - 1} hidden widths (or one int); got {widths!r}.")
        check_loss(loss)
        self.X, self.Y = check_data(X, Y, loss)
        self.h, self.shape, self.depth, self.loss = h, (m, n), depth, loss
        self.widths = tuple(check_int(d, f"widths[{i}]") for i, d in enumerate(widths))
        names = tuple(f"W_{l + 1}" for l in range(depth)) if names is None else tuple(str(s) for s in names)
        if len(names) != depth:
            raise ValueError(f"names must have one label per layer (L = {depth}); got {len(names)}.")
        self.names = names
        out = check_h(
            h,
            self.X[0],
            jnp.zeros(self.shape),
            what="h(x, W)",
            hint=f"Check that h takes a single sample (not the batch) and the end-to-end matrix W of shape {self.shape}.",
        )
        check_output(out, self.Y, self.loss, "h(x, W)")

    @property
    def n(self) -> int:
        """The number of samples."""
        return int(self.X.shape[0])

    @property
    def layer_shapes(self) -> tuple[tuple[int, int], ...]:
        """The shapes of ``W_1, …, W_L``: ``(d_1, n), (d_2, d_1), …, (m, d_{L−1})``."""
        m, n = self.shape
        sizes = (n, *self.widths, m)
        return tuple((sizes[l + 1], sizes[l]) for l in range(self.depth))

    @property
    def rank(self) -> int:
        """The largest rank of ``W``: ``min(m, n, d_1, …, d_{L−1})``."""
        return min(*self.shape, *self.widths)

    def loss_of_weights(self, W) -> jax.Array:
        """``L(W) = (1/n) Σ_j ℓ(y_j, h(x_j; W))``."""
        return mean_loss(self.h, self.X, self.Y, self.loss, W)

    def G(self, W) -> jax.Array:
        """``G = −∇_W L``."""
        return -jax.grad(self.loss_of_weights)(W)


def product(layers) -> jax.Array:
    """``W_L ⋯ W_1`` of the layers ``(W_1, …, W_L)``."""
    out = layers[0]
    for w in layers[1:]:
        out = w @ out
    return out


@eqx.filter_jit
def losses(model: DeepLinearModel, Ws) -> jax.Array:
    """``L(W)`` of each end-to-end matrix of a stack ``Ws``."""
    return loss_at_each(model.loss_of_weights, Ws, model.X)


def layer_velocities(layers, G) -> tuple[jax.Array, ...]:
    """``(W_{>l}ᵀ G W_{<l}ᵀ)_l``, the gradient flow of the layers ``(W_1, …, W_L)`` for ``G = −∇_W L``: the
    prefix products ``W_{<l}`` and suffix products ``W_{>l}`` once each."""
    L = len(layers)
    below = [None] * L  # W_{<l}ᵀ, None for the identity
    for l in range(1, L):
        below[l] = layers[l - 1].T if below[l - 1] is None else below[l - 1] @ layers[l - 1].T
    out = [None] * L
    left = G  # W_{>l}ᵀ G
    for l in range(L - 1, -1, -1):
        out[l] = left if below[l] is None else left @ below[l]
        left = layers[l].T @ left
    return tuple(out)


@eqx.filter_jit
def flat_velocities(model, y, shapes):
    """The layers' velocities :func:`layer_velocities` of the packed layers ``y``, packed."""
    layers = _unpack(y, shapes)
    return jax.numpy.concatenate([v.ravel() for v in layer_velocities(layers, model.G(product(layers)))])


@eqx.filter_jit
def flat_jacobian(model, y, shapes):
    """The Jacobian of :func:`flat_velocities` in the packed layers."""
    return jax.jacfwd(lambda z: flat_velocities(model, z, shapes))(y)


def check_layers(model: DeepLinearModel, W0, name: str = "u0") -> tuple[np.ndarray, ...]:
    """The layers' initial directions ``W0 = (W0_1, …, W0_L)`` (``W_l(0) = α W0_l``), finite, of the model's layer
    shapes, as float64 arrays. A start whose product is the zero matrix with two or more zero layers never moves
    (a saddle of order ≥ 2): an error."""
    if isinstance(W0, np.ndarray) or not isinstance(W0, (tuple, list)) or len(W0) != model.depth:
        raise ValueError(
            f"{name} must be a tuple of the L = {model.depth} layers' initial directions (W_l(0) = α {name}[l−1]), of "
            f"shapes {model.layer_shapes}; got {type(W0).__name__}"
            + (f" of length {len(W0)}" if isinstance(W0, (tuple, list)) else "")
            + "."
        )
    out = []
    for l, (w, want) in enumerate(zip(W0, model.layer_shapes)):
        try:
            a = np.asarray(w, dtype=np.float64)
        except (TypeError, ValueError) as err:
            raise TypeError(f"{name}[{l}] must be an array of numbers; got {type(w).__name__}.") from err
        if a.shape != want:
            raise ValueError(f"{name}[{l}] (the layer W_{l + 1}) must have shape {want}; got {a.shape}.")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{name}[{l}] contains NaN or inf.")
        out.append(a)
    zero = [l for l, a in enumerate(out) if not np.any(a)]
    if len(zero) >= 2:
        raise ValueError(
            f"{name} has {len(zero)} zero layers ({', '.join(f'W_{l + 1}' for l in zero)}): the flow never leaves such "
            "a start (every layer's velocity has a zero factor). Give nonzero directions, e.g. Gaussian ones."
        )
    return tuple(out)


def _pack(layers):
    return np.concatenate([w.ravel() for w in layers])


def _unpack(y, shapes):
    sizes = [a * b for a, b in shapes]
    offsets = np.cumsum([0, *sizes[:-1]])
    return [y[o : o + k].reshape(s) for o, k, s in zip(offsets, sizes, shapes)]

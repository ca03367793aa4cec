"""What every model family shares: the data, the losses and the mean loss over the samples (docs/math.md, *The loss
and the sign convention*).

The loss of a model ``h(x; params)`` on the sample ``(X, Y)`` is ``L = (1/n) Σ_j ℓ(y_j, h(x_j; params))``.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

LossFn = Callable[[jax.Array, jax.Array], jax.Array]
LossSpec = str | LossFn

_LOSSES = ("square", "cross_entropy")


def _square(y, y_hat):
    """``ℓ(y, ŷ) = ½‖y − ŷ‖²`` summed over every output entry."""
    return 0.5 * jnp.sum((y - y_hat) ** 2)


def _cross_entropy(y, y_hat):
    """``ℓ(y, ŷ) = −log softmax(ŷ)_y`` for logits ``ŷ`` and an integer label ``y``."""
    return -jax.nn.log_softmax(y_hat)[y.astype(jnp.int32)]


def sample_loss(loss: LossSpec) -> LossFn:
    """The per-sample loss ``ℓ(y, ŷ)`` that ``loss`` names (or is)."""
    return _square if loss == "square" else _cross_entropy if loss == "cross_entropy" else loss


def check_loss(loss) -> None:
    """``loss`` is ``"square"``, ``"cross_entropy"`` or a function ``loss(y, y_hat)``."""
    if isinstance(loss, str) and loss not in _LOSSES:
        raise ValueError(f"loss must be one of {_LOSSES} or a function loss(y, y_hat); got {loss!r}.")
    if not isinstance(loss, str) and not callable(loss):
        raise TypeError(f"loss must be a string or a function loss(y, y_hat); got {type(loss).__name__}.")


def check_data(X, Y, loss: LossSpec) -> tuple[np.ndarray, np.ndarray]:
    """The sample ``(X, Y)``, samples on the first axis, real and finite, as float64 (integer labels for
    cross-entropy)."""
    X = np.asarray(X)
    Y = np.asarray(Y)
    if X.ndim < 1 or Y.ndim < 1:
        raise ValueError(
            f"X and Y must stack the samples on their first axis; got X.shape={X.shape}, Y.shape={Y.shape}."
        )
    if X.shape[0] != Y.shape[0]:
        raise ValueError(_count_mismatch(X.shape, Y.shape))
    if X.shape[0] == 0:
        raise ValueError("the data set is empty: X and Y need at least one sample.")
    for name, arr in (("X", X), ("Y", Y)):
        if np.iscomplexobj(arr):
            raise ValueError(
                f"{name} is complex (dtype {arr.dtype}); gradflow's models and losses are real, and casting would drop "
                f"the imaginary part. Pass real data, e.g. its real and imaginary parts as separate features "
                f"(np.concatenate([{name}.real, {name}.imag], axis=-1))."
            )
    if not np.issubdtype(X.dtype, np.number) or not np.all(np.isfinite(X)):
        raise ValueError("X must be numeric and finite; it contains NaN or inf (clean or drop those samples).")
    X = X.astype(np.float64)
    if loss == "cross_entropy":
        return X, _labels(Y)
    if not np.issubdtype(Y.dtype, np.number) or not np.all(np.isfinite(Y)):
        raise ValueError("Y must be numeric and finite; it contains NaN or inf.")
    return X, Y.astype(np.float64)


def _count_mismatch(x_shape, y_shape) -> str:
    """The message for ``X`` and ``Y`` with different numbers of samples on axis 0, with where the other count is."""
    message = (
        f"X and Y must hold the same number of samples on axis 0; X.shape = {x_shape} holds {x_shape[0]} and "
        f"Y.shape = {y_shape} holds {y_shape[0]}."
    )
    for name, shape, count in (("X", x_shape, y_shape[0]), ("Y", y_shape, x_shape[0])):
        if count in shape[1:]:
            axis = shape.index(count, 1)
            message += (
                f" {name} has {count} along axis {axis}: if its samples are there, move them to axis 0 "
                f"(np.moveaxis({name}, {axis}, 0), or drop a leading batch axis)."
            )
            break
    return message


def _labels(Y: np.ndarray) -> np.ndarray:
    """Cross-entropy's class labels: one integer per sample, as int64."""
    if Y.ndim != 1:
        raise ValueError(
            f"cross_entropy needs one integer class label per sample, Y.shape == (n,); got Y.shape={Y.shape} "
            "(for one-hot targets pass Y.argmax(axis=1))."
        )
    if not (np.issubdtype(Y.dtype, np.number) or Y.dtype == bool):
        raise ValueError(f"cross_entropy needs integer class labels in Y; got dtype {Y.dtype}.")
    bad = np.flatnonzero(~np.isfinite(Y) | (Y != np.round(Y)))
    if bad.size:
        raise ValueError(
            f"cross_entropy needs integer class labels in Y; Y[{int(bad[0])}] = {Y[bad[0]]:g} is not an integer "
            f"({bad.size} such label(s)). Pass the class index of each sample."
        )
    return Y.astype(np.int64)


def check_output(out, Y: np.ndarray, loss: LossSpec, what: str) -> None:
    """``out`` (the abstract output of ``h`` on one sample, named ``what``) fits the targets ``Y`` and ``loss``."""
    if not hasattr(out, "shape"):
        raise ValueError(f"{what} must return a JAX array.")
    if jnp.issubdtype(out.dtype, jnp.complexfloating):
        raise ValueError(
            f"{what} returns complex values (dtype {out.dtype}); gradflow's models are real: the loss and its gradient "
            "need a real output. Return real numbers, e.g. the real and imaginary parts stacked."
        )
    if callable(loss):
        _check_custom_loss(loss, Y, out)
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


def _check_custom_loss(loss: Callable, Y: np.ndarray, out) -> None:
    """A function ``loss(y, y_hat)`` returns one real number per sample: a vector would be summed silently (every
    stage time changed), a complex one has no gradient flow."""
    y = jax.ShapeDtypeStruct(Y.shape[1:], Y.dtype)
    with jax.enable_x64(True):
        try:
            value = jax.eval_shape(loss, y, jax.ShapeDtypeStruct(out.shape, out.dtype))
        except Exception as err:  # noqa: BLE001 - re-raised with context
            raise ValueError(
                f"loss(y, y_hat) failed on one sample (y of shape {y.shape}, y_hat of shape {tuple(out.shape)}): "
                f"{type(err).__name__}: {err}."
            ) from err
    if not hasattr(value, "shape") or value.shape != () or not jnp.issubdtype(value.dtype, jnp.floating):
        got = f"shape {value.shape}, dtype {value.dtype}" if hasattr(value, "shape") else type(value).__name__
        raise ValueError(
            f"loss(y, y_hat) must return one real number per sample (shape ()); got {got}. Reduce it over the "
            "output's entries yourself (e.g. jnp.sum), as the summed loss is what the flow descends."
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
    ell = sample_loss(loss)
    blocks = [(0, X.shape[0])] if batch is not None else sample_blocks(X.shape[0])
    total = sum(jnp.sum(jax.vmap(lambda x, y: ell(y, h(x, params)))(X[a:b], Y[a:b])) for a, b in blocks)
    return total / X.shape[0]


_STACK_NUMBERS = 1 << 23  # input numbers one block of a stack's losses spans (64 MB in float64)


def loss_at_each(loss_of: Callable, stack, X) -> jax.Array:
    """``[loss_of(p) for p in stack]`` over the leading axis of the PyTree ``stack`` (the recorded states of a run),
    ``vmap``-ed in blocks of at most ``2²³ / X.size`` states: one ``vmap`` over all of them holds every state's
    intermediates at once (675 outputs of the paper-size attention head: 2.7 GB, and slower than the blocks)."""
    count = jax.tree_util.tree_leaves(stack)[0].shape[0]
    block = max(1, min(count, _STACK_NUMBERS // max(1, int(np.size(X)))))
    return jax.lax.map(loss_of, stack, batch_size=block)


def check_h(h: Callable, x, params, *, what: str, hint: str):
    """The abstract output of ``h(x, params)`` on one sample ``x`` (``jax.eval_shape``, in float64), or a
    ``ValueError`` naming ``what`` (``h``'s signature) with the error and ``hint``, how to fix it."""
    with jax.enable_x64(True):
        try:
            return jax.eval_shape(h, x, params)
        except Exception as err:  # noqa: BLE001 - re-raised with context
            raise ValueError(
                f"{what} failed on one sample x of shape {np.shape(x)}: {type(err).__name__}: {err}. {hint}"
            ) from err

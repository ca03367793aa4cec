"""Models with full, factorised weights, ``f(x; U, V) = h(x; (U_1 V_1ᵀ, …, U_K V_Kᵀ))`` (docs/math.md, *Full
weights: the exact flow*).

Each weight matrix ``W_j ∈ R^{m_j × n_j}`` is a product ``U_j V_jᵀ`` of factors of width ``k_j``. The loss is the
mean over samples of the diagonal models, ``L = (1/n) Σ_s ℓ(y_s, h(x_s; W))``, and the sign convention is the
same: ``G_j = −∇_{W_j} L``, so gradient flow reads ``dU_j/dt = G_j V_j``, ``dV_j/dt = G_jᵀ U_j``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._data import LossSpec, check_data, check_h, check_loss, check_output, mean_loss
from .._kit._checks import NEAR_DEGENERATE, check_int, warn_near_degenerate

Shape = tuple[int, int]


class FactorizedModel(eqx.Module):
    """A model ``h(x; W)`` of weight matrices ``W = (W_1, …, W_K)``, each ``W_j = U_j V_jᵀ``, and a sample ``(X, Y)``.

    Args:
        h: ``h(x, Ws)``, the prediction for one sample ``x = X[s]``, with ``Ws`` a tuple of matrices
            ``W_j`` of shape ``shapes[j]`` (a JAX function, twice differentiable in ``Ws``).
        X, Y: inputs and targets, samples stacked on the first axis (as for
            [`DiagonalModel`][gradflow.DiagonalModel]).
        shapes: ``(m_j, n_j)`` for every weight matrix.
        widths: the factor width ``k_j`` of every ``W_j = U_j V_jᵀ`` (``U_j ∈ R^{m_j × k_j}``,
            ``V_j ∈ R^{n_j × k_j}``); default ``min(m_j, n_j)``, full rank.
        loss: ``"square"``, ``"cross_entropy"`` or a function ``loss(y, y_hat)``, as for ``DiagonalModel``.
        names: optional label for every weight matrix.
    """

    h: Callable
    X: np.ndarray
    Y: np.ndarray
    shapes: tuple[Shape, ...] = eqx.field(static=True)
    widths: tuple[int, ...] = eqx.field(static=True)
    loss: LossSpec = eqx.field(static=True)
    names: tuple[str, ...] = eqx.field(static=True)

    def __init__(
        self,
        h: Callable,
        X,
        Y,
        *,
        shapes: Sequence[Sequence[int]],
        widths: Sequence[int] | None = None,
        loss: LossSpec = "square",
        names: Sequence[str] | None = None,
    ):
        if not callable(h):
            raise TypeError(f"h must be a function h(x, Ws); got {type(h).__name__}.")
        check_loss(loss)
        self.h = h
        self.shapes = _check_shapes(shapes)
        if widths is None:
            widths = tuple(min(s) for s in self.shapes)
        elif isinstance(widths, (int, np.integer)) or len(widths) != len(self.shapes):
            raise ValueError(f"widths must give one width per weight matrix ({len(self.shapes)}); got {widths!r}.")
        self.widths = tuple(check_int(k, f"widths[{j}]") for j, k in enumerate(widths))
        for j, (k, (m, n)) in enumerate(zip(self.widths, self.shapes)):
            if k > min(m, n):
                raise ValueError(
                    f"widths[{j}] = {k} exceeds min(m, n) = {min(m, n)} of shapes[{j}] = {(m, n)}: a wider "
                    "factorisation has the same products U Vᵀ; use at most min(m, n)."
                )
        self.X, self.Y = check_data(X, Y, loss)
        self.loss = loss
        names = tuple(f"W[{j}]" for j in range(len(self.shapes))) if names is None else tuple(str(s) for s in names)
        if len(names) != len(self.shapes):
            raise ValueError(f"names must have one label per weight matrix ({len(self.shapes)}); got {len(names)}.")
        self.names = names
        out = check_h(
            h,
            self.X[0],
            tuple(jnp.zeros(s) for s in self.shapes),
            what="h(x, Ws)",
            hint=f"Check that h takes a single sample (not the batch) and a tuple of matrices of shapes {self.shapes}.",
        )
        check_output(out, self.Y, self.loss, "h(x, Ws)")

    @property
    def n(self) -> int:
        """The number of samples."""
        return int(self.X.shape[0])

    def loss_of_weights(self, Ws, *, batch=None) -> jax.Array:
        """``L(W) = (1/n) Σ_s ℓ(y_s, h(x_s; W))``; over the sample indices ``batch`` if given."""
        return mean_loss(self.h, self.X, self.Y, self.loss, tuple(Ws), batch=batch)

    def loss_value(self, us, vs, *, batch=None) -> jax.Array:
        """``L`` at the factors, ``W_j = U_j V_jᵀ``."""
        return self.loss_of_weights(products(us, vs), batch=batch)

    def G(self, Ws, *, batch=None) -> tuple[jax.Array, ...]:
        """``G_j = −∇_{W_j} L`` for every weight matrix (the sign convention of the diagonal models)."""
        grads = jax.grad(lambda w: self.loss_of_weights(w, batch=batch))(tuple(Ws))
        return tuple(-g for g in grads)

    def predict(self, Ws, X=None) -> jax.Array:
        """``h(x_s; W)`` for every sample of ``X`` (default: the training inputs)."""
        X = jnp.asarray(self.X if X is None else X)
        return jax.vmap(lambda x: self.h(x, tuple(Ws)))(X)


def products(us, vs) -> tuple:
    """``(U_1 V_1ᵀ, …, U_K V_Kᵀ)``."""
    return tuple(u @ v.T for u, v in zip(us, vs))


def _check_shapes(shapes) -> tuple[Shape, ...]:
    try:
        out = tuple((int(m), int(n)) for m, n in shapes)
        ok = len(out) > 0 and all(m >= 1 and n >= 1 for m, n in out)
        ok = ok and all(float(a) == b for s, o in zip(shapes, out) for a, b in zip(s, o))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(
            f"shapes must be a non-empty sequence of (m, n) pairs of positive integers, one per weight matrix; "
            f"got {shapes!r}."
        )
    return out


def check_factors(us, vs, model: FactorizedModel, names: tuple[str, str] = ("u0", "v0")):
    """Initialisation factors: a tuple of ``U_j`` of shape ``(m_j, k_j)`` and of ``V_j`` of shape ``(n_j, k_j)``,
    finite, with ``[U_j; V_j]`` of full column rank ``k_j``. Returns them as tuples of float64 arrays.

    A rank-deficient ``[U_j; V_j]`` stays so under the flow (``Z_j(t) = Φ(t) Z_j(0)`` with ``Φ`` invertible):
    some combination of the factor columns is zero for all time, a narrower factorisation; an error.
    """
    out = []
    for name, factors, side in ((names[0], us, 0), (names[1], vs, 1)):
        if isinstance(factors, np.ndarray) or not isinstance(factors, (tuple, list)):
            if len(model.shapes) == 1 and np.ndim(factors) == 2:
                factors = (factors,)
            else:
                raise ValueError(
                    f"{name} must be a tuple of {len(model.shapes)} matrices, one factor per weight matrix; "
                    f"got {type(factors).__name__}."
                )
        if len(factors) != len(model.shapes):
            raise ValueError(
                f"{name} must hold one factor per weight matrix ({len(model.shapes)}); got {len(factors)}."
            )
        arrs = []
        for j, f in enumerate(factors):
            try:
                a = np.asarray(f, dtype=np.float64)
            except (TypeError, ValueError) as err:
                raise TypeError(f"{name}[{j}] must be an array of numbers; got {type(f).__name__}.") from err
            want = (model.shapes[j][side], model.widths[j])
            if a.shape != want:
                raise ValueError(
                    f"{name}[{j}] must have shape {want} (rows of W_{j} = {model.shapes[j]}"
                    f"{' transposed' if side else ''}, width {model.widths[j]}); got {a.shape}."
                )
            if not np.all(np.isfinite(a)):
                raise ValueError(f"{name}[{j}] contains NaN or inf.")
            arrs.append(a)
        out.append(tuple(arrs))
    for j, (u, v) in enumerate(zip(*out)):
        z = f"[{names[0]}[{j}]; {names[1]}[{j}]]"
        s = np.linalg.svd(np.concatenate([u, v]), compute_uv=False)
        if s[0] == 0:
            raise ValueError(
                f"the initialisation {z} is zero: θ(0) = 0 is a stationary point of the flow, which never leaves it. "
                "Give nonzero factors, e.g. Gaussian ones (the scale is α's)."
            )
        if s[-1] <= 1e-12 * s[0]:
            rank = int(np.sum(s > 1e-12 * s[0]))
            raise ValueError(
                f"the initialisation {z} has rank {rank} < width {model.widths[j]}: a combination of its columns is "
                "zero and stays zero under the flow (degenerate initialisation). "
                f"Use a narrower width (widths[{j}] = {rank}) or perturb the factors, e.g. add a small Gaussian."
            )
        if s[-1] <= NEAR_DEGENERATE * s[0]:
            warn_near_degenerate(
                f"{z} is nearly rank-deficient, σ_min/σ_max = {s[-1] / s[0]:.3g} ≤ {NEAR_DEGENERATE:g}. The flow is "
                "exact, but the combination of its columns along the smallest singular direction starts at α·gap, "
                "gap = σ_min/σ_max, against α for the others",
                float(s[-1] / s[0]),
                "Perturb the factors for a ratio of order one, e.g. add a small Gaussian.",
            )
    return out[0], out[1]

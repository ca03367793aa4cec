"""Diagonal linear regression, ``h(x; β) = ⟨β, x⟩`` (docs/math.md, *Models with diagonal weights*)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .._diagonal import DiagonalModel
from .._kit._checks import check_int
from ._task import Task, check_seed, gaussian_init, sparse_gaussian


def _linear_h(x, beta):
    return jnp.dot(x, beta)


def diagonal_linear_model(X, Y) -> DiagonalModel:
    """The model ``h(x; β) = ⟨β, x⟩`` with the square loss on data ``X ∈ R^{n×p}``, ``Y ∈ R^n``."""
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"diagonal linear regression needs X of shape (n, p); got {X.shape}.")
    Y = np.asarray(Y)
    if Y.ndim != 1:
        raise ValueError(f"diagonal linear regression needs Y of shape (n,); got {Y.shape}.")
    return DiagonalModel(_linear_h, X, Y, p=X.shape[1], loss="square")


def diagonal_linear(
    *,
    n: int = 100,
    p: int = 10,
    nonzero: int | None = None,
    beta_star=None,
    orthonormal: bool = False,
    noise: float = 0.0,
    seed: int = 0,
) -> Task:
    """Seeded diagonal linear regression task ``y = ⟨β*, x⟩ + noise``.

    ``X`` has i.i.d. N(0, 1) entries, or, with ``orthonormal=True``, columns scaled so that
    ``XᵀX / n = I`` (then ``g_i(β) = β*_i − β_i`` and each coordinate solves its own Riccati
    equation; the greedy limit activates coordinates in decreasing ``|β*_i|`` at ``T = 1/|β*_i|``).
    ``beta_star`` defaults to ``nonzero`` N(0, 1) entries on a random support (dense if None).
    """
    n, p, seed = check_int(n, "n"), check_int(p, "p"), check_seed(seed)
    rng = np.random.default_rng([seed, 0])
    if orthonormal:
        if n < p:
            raise ValueError(f"an orthonormal design needs n >= p; got n={n}, p={p}.")
        q, _ = np.linalg.qr(rng.standard_normal((n, p)))
        X = np.sqrt(n) * q
    else:
        X = rng.standard_normal((n, p))
    if beta_star is None:
        beta_star = sparse_gaussian(rng, p, nonzero, "nonzero")
    beta_star = np.asarray(beta_star, dtype=np.float64)
    if beta_star.shape != (p,):
        raise ValueError(f"beta_star must have shape ({p},); got {beta_star.shape}.")
    Y = X @ beta_star + noise * rng.standard_normal(n)
    u0, v0 = gaussian_init(p, seed)
    config = dict(n=n, p=p, nonzero=nonzero, orthonormal=orthonormal, noise=noise, seed=seed)
    return Task("diagonal_linear", diagonal_linear_model(X, Y), u0, v0, beta_star, config)

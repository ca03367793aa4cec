"""The built-in tasks of deep linear networks (docs/deep-linear.md, *Built-in tasks*), InRank's §3 settings: deep matrix
factorisation ``L(W) = ½‖W − W*‖²`` (from the balanced start aligned with ``W*``, Saxe et al.'s decoupled modes) and
deep linear regression ``h(x; W) = W x`` on a whitened design (``XᵀX/N = I``, so that ``L(W) = ½‖W − W*‖²`` too),
learned by ``W = W_L ⋯ W_1``."""

from __future__ import annotations

import numpy as np

from .._kit._checks import check_int
from .._kit._task import Task, check_seed
from ._model import DeepLinearModel

DEFAULT_DEPTH = 3
"""The depth of the built-in tasks unless given."""

SINGULAR_VALUES = (3.0, 2.0, 1.0)
"""The teacher's default singular values (its first ``min(m, n)``): from the aligned start the modes are learned at
``τ → 1/((L−2) s) = 1/3, 1/2, 1`` (L = 3)."""


def _teacher_values(values, rank: int) -> np.ndarray:
    """The teacher's singular values: ``values``, or the first ``rank`` of :data:`SINGULAR_VALUES` if None; 1 to
    ``rank = min(m, n)`` positive numbers."""
    if values is None:
        return np.asarray(SINGULAR_VALUES[:rank])
    try:
        s = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        s = None
    if s is None or s.ndim != 1 or not 1 <= s.size <= rank or not np.all(np.isfinite(s) & (s > 0)):
        raise ValueError(
            f"singular_values must be 1 to min(m, n) = {rank} positive numbers (the teacher's rank is at most "
            f"min(m, n)); got {values!r}."
        )
    return s


def _bases(rng: np.random.Generator, m: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Haar-random orthonormal bases ``A ∈ R^{m×k}``, ``B ∈ R^{n×k}``, ``k = min(m, n)`` (QR of Gaussians)."""
    k = min(m, n)
    a, _ = np.linalg.qr(rng.standard_normal((m, k)))
    b, _ = np.linalg.qr(rng.standard_normal((n, k)))
    return a, b


def _width(width, m: int, n: int) -> int:
    return min(m, n) if width is None else check_int(width, "width")


def _gaussian_layers(shapes, seed: int) -> tuple[np.ndarray, ...]:
    """Seeded i.i.d. N(0, 1) layer directions of the given shapes."""
    rng = np.random.default_rng([seed, 1])
    return tuple(rng.standard_normal(shape) for shape in shapes)


def aligned_layers(A: np.ndarray, B: np.ndarray, depth: int, width: int) -> tuple[np.ndarray, ...]:
    """The balanced start aligned with the bases ``A ∈ R^{m×k}``, ``B ∈ R^{n×k}``: ``W_1 = P Bᵀ``, ``W_l = P Pᵀ``,
    ``W_L = A Pᵀ`` with ``P = I_{width×q}``, ``q = min(k, width)``, so that ``W_{l+1}ᵀW_{l+1} = W_l W_lᵀ = P Pᵀ``
    and ``W_L ⋯ W_1 = A_q B_qᵀ``: each of the first ``q`` modes starts at ``σ = α^L`` (``a⁰ = 1``)."""
    q = min(A.shape[1], width)
    P = np.eye(width, q)
    first, last = P @ B[:, :q].T, A[:, :q] @ P.T
    return (first, *(P @ P.T for _ in range(depth - 2)), last)


def _identity(x, W):
    del x
    return W


def deep_matrix_factorization_model(M, *, depth: int, width: int | None = None) -> DeepLinearModel:
    """``L(W) = ½‖W − M‖²`` of ``W = W_L ⋯ W_1`` (one sample whose target is ``M``), hidden widths ``width``
    (default ``min(m, n)``)."""
    M = np.asarray(M, dtype=np.float64)
    if M.ndim != 2:
        raise ValueError(f"M must be a matrix; got shape {M.shape}.")
    return DeepLinearModel(_identity, np.zeros((1, 1)), M[None], shape=M.shape, depth=depth, widths=width)


def deep_matrix_factorization(
    *,
    m: int = 5,
    n: int = 4,
    depth: int = DEFAULT_DEPTH,
    singular_values=None,
    aligned: bool = True,
    width: int | None = None,
    seed: int = 0,
) -> Task:
    """Deep matrix factorisation ``L(W) = ½‖W_L ⋯ W_1 − W*‖²`` (InRank §3; Saxe et al. 2014).

    ``W* = A diag(s) Bᵀ`` (``m × n``) has the given singular values ``s`` (default ``3, 2, 1``, or its first
    ``min(m, n)``) and Haar-random singular vectors. With ``aligned=True`` the start is balanced and aligned with them
    (:func:`aligned_layers`): the modes decouple into Saxe's ``dσ/dt = L σ^{2−2/L}(s − σ)``, learned at
    ``τ → 1/((L−2) s)`` (``L ≥ 3``) or ``1/s`` (``L = 2``, ``τ = t/log(1/α)``), and the greedy limit's stage times
    are exact; with ``aligned=False`` the layers' directions are i.i.d. N(0, 1) (the stage times from the α-free flow of the
    sleeping layers: docs/deep-linear.md, *The greedy limit*). Hidden widths ``width`` (default ``min(m, n)``).
    """
    m, n, seed = check_int(m, "m"), check_int(n, "n"), check_seed(seed)
    if not isinstance(aligned, (bool, np.bool_)):
        raise ValueError(f"aligned must be true or false; got {aligned!r}.")
    width = _width(width, m, n)
    rng = np.random.default_rng([seed, 0])
    s = _teacher_values(singular_values, min(m, n))
    A, B = _bases(rng, m, n)
    M = (A[:, : s.size] * s) @ B[:, : s.size].T
    model = deep_matrix_factorization_model(M, depth=depth, width=width)
    u0 = aligned_layers(A, B, model.depth, width) if aligned else _gaussian_layers(model.layer_shapes, seed)
    config = dict(m=m, n=n, depth=model.depth, singular_values=tuple(float(x) for x in s), aligned=bool(aligned))
    return Task("deep_matrix_factorization", model, u0, None, M, dict(config, width=width, seed=seed))


def _linear_h(x, W):
    return W @ x


def deep_linear_regression_model(X, Y, *, depth: int, width: int | None = None) -> DeepLinearModel:
    """``h(x; W) = W x`` with the square loss on inputs ``X ∈ R^{N×n}`` and targets ``Y ∈ R^{N×m}``."""
    X, Y = np.asarray(X), np.asarray(Y)
    if X.ndim != 2 or Y.ndim != 2 or X.shape[0] != Y.shape[0]:
        raise ValueError(
            f"deep linear regression needs X of shape (N, n) and Y of shape (N, m); got {X.shape}, {Y.shape}."
        )
    return DeepLinearModel(_linear_h, X, Y, shape=(Y.shape[1], X.shape[1]), depth=depth, widths=width)


def deep_linear_regression(
    *,
    m: int = 3,
    n: int = 5,
    samples: int | None = None,
    depth: int = DEFAULT_DEPTH,
    singular_values=None,
    noise: float = 0.0,
    width: int | None = None,
    seed: int = 0,
) -> Task:
    """Seeded deep linear regression ``y = W* x + noise`` on a whitened design, learned by ``W = W_L ⋯ W_1``
    (InRank §3: ``F(x) = W_L ⋯ W_1 x`` with orthogonal inputs).

    ``X = √N Q`` (``N = samples`` rows, default ``2n``; ``Q`` Haar with orthonormal columns) so that ``XᵀX/N = I``
    and, without noise, ``L(W) = ½‖W − W*‖²``; ``W* ∈ R^{m×n}`` as in :func:`deep_matrix_factorization`. The layers'
    directions ``u0`` are i.i.d. N(0, 1) (``W_l(0) = α u0[l−1]``): InRank's Gaussian start, not aligned with ``W*``.
    """
    m, n, seed = check_int(m, "m"), check_int(n, "n"), check_seed(seed)
    samples = 2 * n if samples is None else check_int(samples, "samples")
    if samples < n:
        raise ValueError(f"a whitened design (XᵀX/N = I) needs samples >= n; got samples={samples}, n={n}.")
    if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not (np.isfinite(noise) and noise >= 0):
        raise ValueError(f"noise must be a non-negative number; got {noise!r}.")
    width = _width(width, m, n)
    rng = np.random.default_rng([seed, 0])
    s = _teacher_values(singular_values, min(m, n))
    A, B = _bases(rng, m, n)
    W_star = (A[:, : s.size] * s) @ B[:, : s.size].T
    q, _ = np.linalg.qr(rng.standard_normal((samples, n)))
    X = np.sqrt(samples) * q
    Y = X @ W_star.T + noise * rng.standard_normal((samples, m))
    model = deep_linear_regression_model(X, Y, depth=depth, width=width)
    config = dict(m=m, n=n, samples=samples, depth=model.depth, singular_values=tuple(float(x) for x in s))
    config.update(noise=float(noise), width=width, seed=seed)
    return Task("deep_linear_regression", model, _gaussian_layers(model.layer_shapes, seed), None, W_star, config)


def saxe_times(s, depth: int) -> np.ndarray:
    """Saxe's stage times from the aligned start (``a⁰ = 1``) in the limit: ``1/((L−2) s)`` for ``L ≥ 3``, ``1/s`` at
    ``L = 2`` (in ``τ = t/log(1/α)``), for the singular values ``s`` from the largest."""
    s = np.sort(np.asarray(s, dtype=np.float64))[::-1]
    return 1.0 / ((depth - 2) * s) if depth > 2 else 1.0 / s

"""Built-in models with full, factorised weights (docs/math.md, *Full weights: the exact flow*): matrix
factorisation, matrix sensing, and the paper's attention head with full weights (§5, Figure 2 d–f).

Each task's teacher is low rank with distinct singular values, so that the flow from small initialisation
learns it one rank at a time; the initial factors are i.i.d. N(0, 1).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._factorized import FactorizedModel
from .._kit._checks import check_int
from ._task import Task, check_seed

SINGULAR_VALUES = (3.0, 2.0, 1.0)
"""The default teacher's singular values of matrix factorisation and sensing (the first ``min(m, n)`` of them)."""
ATTENTION_SINGULAR_VALUES = (1.0, 0.6, 0.3)
"""The default singular values of the full-weight attention teacher's ``W_KQ`` and ``W_VO`` (the first ``dim``)."""


def _singular_values(values, default: tuple[float, ...], rank: int, name: str, limit: str) -> np.ndarray:
    """The teacher's singular values: ``values``, or the first ``rank`` of ``default`` if None; checked (``limit``
    says what sets the largest ``rank``)."""
    if values is None:
        return np.asarray(default[:rank])
    try:
        sv = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        sv = None
    if sv is None or sv.ndim != 1 or not 1 <= sv.size <= rank or not np.all(np.isfinite(sv) & (sv > 0)):
        raise ValueError(
            f"{name} must be 1 to {limit} = {rank} positive numbers (the teacher's rank is at most {limit}); "
            f"got {values!r}."
        )
    return sv


def _width(width, name: str, limit: int, what: str) -> tuple[int] | None:
    """The factor width ``width`` (None: the model's default, ``limit``, which is ``what``) as ``widths`` for one
    factor."""
    if width is None:
        return None
    if isinstance(width, bool) or not isinstance(width, (int, np.integer)) or not 1 <= width <= limit:
        raise ValueError(f"{name} must be an integer in [1, {what} = {limit}]; got {width!r}.")
    return (int(width),)


def _low_rank(rng: np.random.Generator, m: int, n: int, sv: np.ndarray) -> np.ndarray:
    """``A diag(σ) Bᵀ`` with ``A, B`` random orthonormal columns (Haar, via QR of a Gaussian)."""
    a, _ = np.linalg.qr(rng.standard_normal((m, sv.size)))
    b, _ = np.linalg.qr(rng.standard_normal((n, sv.size)))
    return (a * sv) @ b.T


def _matrix_teacher(rng: np.random.Generator, m: int, n: int, singular_values) -> np.ndarray:
    """The ``m × n`` teacher of matrix factorisation and sensing."""
    sv = _singular_values(singular_values, SINGULAR_VALUES, min(m, n), "singular_values", "min(m, n)")
    return _low_rank(rng, m, n, sv)


def _gaussian_factors(shapes, widths, seed: int) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
    """Seeded i.i.d. N(0, 1) factors ``U_j ∈ R^{m_j × k_j}``, ``V_j ∈ R^{n_j × k_j}``."""
    rng = np.random.default_rng([seed, 1])
    us = tuple(rng.standard_normal((m, k)) for (m, _), k in zip(shapes, widths))
    vs = tuple(rng.standard_normal((n, k)) for (_, n), k in zip(shapes, widths))
    return us, vs


def _first(x, Ws):
    del x
    return Ws[0]


def matrix_factorization_model(M, *, width: int | None = None) -> FactorizedModel:
    """``L(U, V) = ½‖U Vᵀ − M‖_F²`` (a sum over entries: one sample whose target is ``M``)."""
    M = np.asarray(M, dtype=np.float64)
    if M.ndim != 2:
        raise ValueError(f"M must be a matrix; got shape {M.shape}.")
    widths = _width(width, "width", min(M.shape), "min(m, n)")
    return FactorizedModel(_first, np.zeros((1, 1)), M[None], shapes=[M.shape], widths=widths, names=("W",))


def matrix_factorization(
    M=None,
    *,
    m: int = 6,
    n: int = 5,
    singular_values=None,
    width: int | None = None,
    seed: int = 0,
) -> Task:
    """Matrix factorisation ``L = ½‖U Vᵀ − M‖_F²`` with Gaussian initial factors ``U0, V0``.

    ``M`` defaults to a random ``m × n`` matrix with the given singular values (random singular vectors; at
    most ``min(m, n)`` of them; default ``(3, 2, 1)``, or its first ``min(m, n)``). From a small initialisation
    the flow learns ``M``'s singular modes one by one, the r-th at rescaled time ``τ ≈ 1/σ_r`` (docs/math.md,
    *Full weights: the exact flow*). ``width`` defaults to ``min(m, n)``.
    """
    rng = np.random.default_rng([check_seed(seed), 0])
    if M is None:
        m, n = check_int(m, "m"), check_int(n, "n")
        M = _matrix_teacher(rng, m, n, singular_values)
    model = matrix_factorization_model(M, width=width)
    us, vs = _gaussian_factors(model.shapes, model.widths, seed)
    config = dict(m=model.shapes[0][0], n=model.shapes[0][1], width=model.widths[0], seed=seed)
    return Task("matrix_factorization", model, us, vs, (model.Y[0],), config)


def _sensing_h(A, Ws):
    return jnp.sum(A * Ws[0])


def matrix_sensing_model(A, y, *, width: int | None = None) -> FactorizedModel:
    """``L = (1/N) Σ_s ½ (y_s − ⟨A_s, U Vᵀ⟩)²`` for measurement matrices ``A ∈ R^{N × m × n}``."""
    A = np.asarray(A)
    if A.ndim != 3:
        raise ValueError(f"matrix sensing needs measurements A of shape (N, m, n); got {A.shape}.")
    widths = _width(width, "width", min(A.shape[1:]), "min(m, n)")
    return FactorizedModel(_sensing_h, A, y, shapes=[A.shape[1:]], widths=widths, names=("W",))


def matrix_sensing(
    *,
    m: int = 6,
    n: int = 5,
    measurements: int = 60,
    singular_values=None,
    noise: float = 0.0,
    width: int | None = None,
    seed: int = 0,
) -> Task:
    """Matrix sensing: ``y_s = ⟨A_s, W*⟩ + noise`` with ``A_s`` of i.i.d. N(0, 1) entries and a low-rank ``W*``
    with the given singular values (as in [`matrix_factorization`][gradflow.models.matrix_factorization]).

    ``E[⟨A, W⟩²] = ‖W‖_F²``, so with many measurements the loss approaches ``½‖W − W*‖_F²``, matrix
    factorisation of ``W*``.
    """
    m, n, measurements = check_int(m, "m"), check_int(n, "n"), check_int(measurements, "measurements")
    rng = np.random.default_rng([check_seed(seed), 0])
    truth = _matrix_teacher(rng, m, n, singular_values)
    A = rng.standard_normal((measurements, m, n))
    y = np.einsum("smn,mn->s", A, truth) + noise * rng.standard_normal(measurements)
    model = matrix_sensing_model(A, y, width=width)
    us, vs = _gaussian_factors(model.shapes, model.widths, seed)
    config = dict(m=m, n=n, measurements=measurements, noise=noise, width=model.widths[0], seed=seed)
    return Task("matrix_sensing", model, us, vs, (truth,), config)


def full_attention_head(X, Ws):
    """``softmax(X W_KQ Xᵀ) X W_VO`` for one sample ``X ∈ R^{T×d}`` (paper eq. 1, no 1/√d), ``Ws = (W_KQ, W_VO)``
    with ``W_KQ = W_K W_Qᵀ`` and ``W_VO = W_V W_Oᵀ``."""
    w_kq, w_vo = Ws
    return jax.nn.softmax(X @ w_kq @ X.T, axis=-1) @ (X @ w_vo)


def attention_full_model(X, Y, *, d_head: int | None = None) -> FactorizedModel:
    """The attention head with full weights, ``W_KQ = W_K W_Qᵀ`` and ``W_VO = W_V W_Oᵀ`` of width ``d_head``
    (default ``d``), with the square loss on ``X, Y ∈ R^{n×T×d}``."""
    X = np.asarray(X)
    if X.ndim != 3:
        raise ValueError(f"the attention head needs X of shape (n, tokens, dim); got {X.shape}.")
    d = X.shape[-1]
    widths = None if d_head is None else _width(d_head, "d_head", d, "dim") * 2
    return FactorizedModel(full_attention_head, X, Y, shapes=[(d, d), (d, d)], widths=widths, names=("KQ", "VO"))


def attention_full(
    *,
    n: int = 200,
    tokens: int = 5,
    dim: int = 6,
    d_head: int | None = None,
    teacher_kq=None,
    teacher_vo=None,
    seed: int = 0,
) -> Task:
    """The paper's toy with full weights (§5, Figure 2 d–f; ``gradflow.nets`` trains it with GD): ``n`` samples of
    ``tokens × dim`` i.i.d. N(0, 1) tokens labelled by a teacher head whose ``W_K W_Qᵀ`` and ``W_V W_Oᵀ`` have
    the singular values ``teacher_kq`` and ``teacher_vo`` (random singular vectors; at most ``dim`` each; default
    ``(1, 0.6, 0.3)``, or its first ``dim``).

    Factors: ``u0 = (W_K, W_V)``, ``v0 = (W_Q, W_O)``, each ``dim × d_head`` (default ``d_head = dim``).
    """
    n, tokens, dim = check_int(n, "n"), check_int(tokens, "tokens"), check_int(dim, "dim")
    kq = _singular_values(teacher_kq, ATTENTION_SINGULAR_VALUES, dim, "teacher_kq", "dim")
    vo = _singular_values(teacher_vo, ATTENTION_SINGULAR_VALUES, dim, "teacher_vo", "dim")
    rng = np.random.default_rng([check_seed(seed), 0])
    X = rng.standard_normal((n, tokens, dim))
    teacher = (_low_rank(rng, dim, dim, kq), _low_rank(rng, dim, dim, vo))
    scores = np.einsum("ntd,de,nse->nts", X, teacher[0], X)
    attn = np.exp(scores - scores.max(axis=-1, keepdims=True))
    attn /= attn.sum(axis=-1, keepdims=True)
    Y = np.einsum("nts,nsd,de->nte", attn, X, teacher[1])
    model = attention_full_model(X, Y, d_head=d_head)
    us, vs = _gaussian_factors(model.shapes, model.widths, seed)
    config = dict(n=n, tokens=tokens, dim=dim, d_head=model.widths[0], seed=seed)
    return Task("attention_full", model, us, vs, teacher, config)

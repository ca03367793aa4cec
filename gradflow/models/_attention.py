"""The diagonal attention head of the paper's eq. 1 and its teacher–student toy task (appendix A).

``h(X; β) = softmax(X diag(β_KQ) Xᵀ) X diag(β_VO)`` with the softmax over each row and no 1/√d
(docs/math.md, *Models with diagonal weights*); ``β = [β_KQ, β_VO] ∈ R^{2d}``, ``u = [w_K, w_V]``,
``v = [w_Q, w_O]``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._data import sample_blocks
from .._diagonal import DiagonalModel
from .._kit._checks import check_int
from ._task import Task, check_seed, gaussian_init, sparse_gaussian


def attention_head(X, beta_kq, beta_vo):
    """One diagonal attention head on tokens ``X ∈ R^{T×d}`` (paper eq. 1 with diagonal weights).

    ``softmax(X diag(β_KQ) Xᵀ) X diag(β_VO)``, with ``diag(β_VO)`` applied after the product: the same
    value, but then ``∂/∂β_VO`` needs no extra matrix product, which makes g about 1.5× cheaper.
    """
    scores = (X * beta_kq) @ X.T
    return (jax.nn.softmax(scores, axis=-1) @ X) * beta_vo


def _attention_h(X, beta):
    d = X.shape[-1]
    return attention_head(X, beta[:d], beta[d:])


def attention_names(d: int, prefix: str = "") -> tuple[str, ...]:
    """Coordinate labels ``KQ[i]`` then ``VO[i]``."""
    return tuple(f"{prefix}KQ[{i}]" for i in range(d)) + tuple(f"{prefix}VO[{i}]" for i in range(d))


class _AttentionHeadModel(DiagonalModel):
    """The diagonal attention head with the square loss, its ``g = −∇_β L`` written out in one fused pass.

    With ``A = softmax(X diag(β_KQ) Xᵀ)``, ``Z = A X``, residual ``R = Z diag(β_VO) − Y`` and
    ``dS = A ⊙ (G − rowsum(A ⊙ G))`` for ``G = R diag(β_VO) Xᵀ`` (the softmax's backward pass), per sample

        −∂L/∂β_VO = −(1/n) Σ_t R_t ⊙ Z_t,     −∂L/∂β_KQ = −(1/n) Σ_t X_t ⊙ (dS X)_t,

    the same values as ``jax.grad`` of the loss to rounding, in four batched matrix products per block of samples
    (the blocks of ``sample_blocks``, which run on separate cores).
    """

    def g(self, beta, *, batch=None) -> jax.Array:
        X, Y = jnp.asarray(self.X), jnp.asarray(self.Y)
        if batch is not None:
            X, Y = X[batch], Y[batch]
        blocks = [(0, X.shape[0])] if batch is not None else sample_blocks(X.shape[0])
        return -sum(_attention_gradient(X[a:b], Y[a:b], beta) for a, b in blocks) / X.shape[0]


def _attention_gradient(X, Y, beta) -> jax.Array:
    """``−Σ_j ∂ℓ_j/∂β`` over the samples of ``X, Y`` (the fused pass of ``_AttentionHeadModel``)."""
    d = X.shape[-1]
    kq, vo = beta[:d], beta[d:]
    A = jax.nn.softmax(jnp.einsum("ntd,nsd->nts", X * kq, X), axis=-1)
    Z = A @ X
    R = Z * vo - Y
    G = jnp.einsum("ntd,nsd->nts", R * vo, X)
    dS = A * (G - jnp.sum(A * G, axis=-1, keepdims=True))
    g_kq = jnp.einsum("ntd,ntd->d", X, dS @ X)
    g_vo = jnp.einsum("ntd,ntd->d", R, Z)
    return jnp.concatenate([g_kq, g_vo])


def diagonal_attention_model(X, Y) -> DiagonalModel:
    """The diagonal attention head with the square loss on ``X, Y ∈ R^{n×T×d}`` (``g`` written out by hand)."""
    X = np.asarray(X)
    if X.ndim != 3:
        raise ValueError(f"the attention head needs X of shape (n, tokens, dim); got {X.shape}.")
    d = X.shape[-1]
    return _AttentionHeadModel(_attention_h, X, Y, p=2 * d, loss="square", names=attention_names(d))


def diagonal_attention(
    *,
    n: int = 1000,
    tokens: int = 10,
    dim: int = 50,
    teacher_nonzero: int | None | tuple[int | None, int | None] = (3, 3),
    seed: int = 0,
) -> Task:
    """The paper's toy task: ``n`` samples of ``tokens × dim`` i.i.d. N(0, 1) tokens, labelled by a teacher head.

    The teacher is a diagonal attention head whose ``β_KQ`` and ``β_VO`` have ``teacher_nonzero = (KQ, VO)``
    N(0, 1) entries on random supports (``None`` makes that part dense; one number or None sets both parts).
    A sparse teacher gives a few well-separated stages; the paper does not state its teacher's sparsity.
    """
    n, tokens, dim = (check_int(v, k) for v, k in ((n, "n"), (tokens, "tokens"), (dim, "dim")))
    kq, vo = _teacher_pair(teacher_nonzero)
    rng = np.random.default_rng([check_seed(seed), 0])
    X = rng.standard_normal((n, tokens, dim))
    teacher = np.concatenate(
        [sparse_gaussian(rng, dim, kq, "teacher_nonzero[0]"), sparse_gaussian(rng, dim, vo, "teacher_nonzero[1]")]
    )
    Y = _teacher_labels(X, teacher)
    u0, v0 = gaussian_init(2 * dim, seed)
    config = dict(n=n, tokens=tokens, dim=dim, teacher_nonzero=(kq, vo), seed=seed)
    return Task("diagonal_attention", diagonal_attention_model(X, Y), u0, v0, teacher, config)


def _teacher_pair(teacher_nonzero) -> tuple:
    """``teacher_nonzero`` as a pair ``(KQ, VO)``: a single number (or None) sets both parts."""
    if teacher_nonzero is None or isinstance(teacher_nonzero, (int, np.integer)):
        return teacher_nonzero, teacher_nonzero
    if isinstance(teacher_nonzero, (tuple, list)) and len(teacher_nonzero) == 2:
        return tuple(teacher_nonzero)
    raise ValueError(
        "teacher_nonzero must be a number of nonzero teacher entries (an integer >= 0, or None for dense) "
        f"or a pair (KQ, VO) of them; got {teacher_nonzero!r}."
    )


def _teacher_labels(X: np.ndarray, teacher: np.ndarray) -> np.ndarray:
    """Teacher outputs in float64 NumPy (independent of the JAX x64 setting)."""
    d = X.shape[-1]
    scores = np.einsum("ntd,d,nsd->nts", X, teacher[:d], X)
    scores -= scores.max(axis=-1, keepdims=True)
    attn = np.exp(scores)
    attn /= attn.sum(axis=-1, keepdims=True)
    return np.einsum("nts,nsd->ntd", attn, X * teacher[d:])

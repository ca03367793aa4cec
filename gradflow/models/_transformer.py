"""The transformer with diagonal attention weights of the paper's Example 3.2.

``Z_0 = X``; for each layer ℓ: ``Z ← Z + Σ_h attention(Z; β_KQ^{ℓ,h}, β_VO^{ℓ,h})`` then
``Z ← Z + σ(Z W_A^ℓ)(W_B^ℓ)ᵀ`` with frozen random feed-forward weights and σ = GELU (tanh form,
twice differentiable). Only attention is trained: ``β = [β_KQ^{ℓ,h} over (ℓ,h), β_VO^{ℓ,h} over (ℓ,h)]``,
so ``p = 2·L·H·d``.
"""

from __future__ import annotations

import equinox as eqx
import jax
import numpy as np

from .._diagonal import DiagonalModel
from .._kit._checks import check_int
from ._attention import attention_head
from ._task import Task, check_seed, gaussian_init, sparse_gaussian


class TransformerForward(eqx.Module):
    """``h(Z; β)`` of Example 3.2 for one sample ``Z ∈ R^{T×d}``, the frozen FFN weights as array fields.

    A module rather than a closure, so that two models built from the same configuration share one
    compilation (``eqx.filter_jit`` keys on the static fields; the weights are traced arrays).
    """

    w_in: np.ndarray  # (L, d, m)
    w_out: np.ndarray  # (L, d, m)
    layers: int = eqx.field(static=True)
    heads: int = eqx.field(static=True)

    def __call__(self, Z, beta):
        d = Z.shape[-1]
        kq = beta[: self.layers * self.heads * d].reshape(self.layers, self.heads, d)
        vo = beta[self.layers * self.heads * d :].reshape(self.layers, self.heads, d)
        for layer in range(self.layers):
            Z = Z + sum(attention_head(Z, kq[layer, h], vo[layer, h]) for h in range(self.heads))
            Z = Z + jax.nn.gelu(Z @ self.w_in[layer], approximate=True) @ self.w_out[layer].T
        return Z


def _gelu_np(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def transformer_names(layers: int, heads: int, d: int) -> tuple[str, ...]:
    """Coordinate labels ``L{ℓ}H{h}.KQ[i]`` for every (layer, head), then the ``VO`` ones."""
    return tuple(
        f"L{l}H{h}.{part}[{i}]" for part in ("KQ", "VO") for l in range(layers) for h in range(heads) for i in range(d)
    )


def diagonal_transformer_model(X, Y, *, w_in, w_out, heads: int) -> DiagonalModel:
    """The diagonal transformer (Example 3.2) on ``X, Y ∈ R^{n×T×d}`` with frozen FFN weights.

    ``w_in`` and ``w_out`` have shape ``(L, d, m)``; ``heads`` is H.
    """
    X = np.asarray(X)
    w_in, w_out = np.asarray(w_in, dtype=np.float64), np.asarray(w_out, dtype=np.float64)
    if X.ndim != 3:
        raise ValueError(f"the transformer needs X of shape (n, tokens, dim); got {X.shape}.")
    d = X.shape[-1]
    if w_in.ndim != 3 or w_in.shape != w_out.shape or w_in.shape[1] != d:
        raise ValueError(f"w_in and w_out must both have shape (layers, {d}, m); got {w_in.shape} and {w_out.shape}.")
    layers = w_in.shape[0]
    heads = check_int(heads, "heads")
    h = TransformerForward(w_in, w_out, layers, heads)
    return DiagonalModel(h, X, Y, p=2 * layers * heads * d, loss="square", names=transformer_names(layers, heads, d))


def diagonal_transformer(
    *,
    n: int = 200,
    tokens: int = 6,
    dim: int = 8,
    layers: int = 2,
    heads: int = 2,
    mlp: int = 16,
    ffn_scale: float = 0.5,
    teacher_nonzero: int | None = 2,
    seed: int = 0,
) -> Task:
    """Seeded teacher–student task for the diagonal transformer of Example 3.2.

    Tokens are i.i.d. N(0, 1); the frozen feed-forward weights are ``W_A ~ N(0, 1/d)`` and
    ``W_B ~ ffn_scale · N(0, 1/m)``; the teacher has ``teacher_nonzero`` N(0, 1) entries in each
    head's ``β_KQ`` and ``β_VO`` (dense if None).
    """
    n, tokens, dim, layers, heads, mlp = (
        check_int(v, k)
        for v, k in ((n, "n"), (tokens, "tokens"), (dim, "dim"), (layers, "layers"), (heads, "heads"), (mlp, "mlp"))
    )
    rng = np.random.default_rng([check_seed(seed), 0])
    X = rng.standard_normal((n, tokens, dim))
    w_in = rng.standard_normal((layers, dim, mlp)) / np.sqrt(dim)
    w_out = ffn_scale * rng.standard_normal((layers, dim, mlp)) / np.sqrt(mlp)
    teacher = np.concatenate(
        [sparse_gaussian(rng, dim, teacher_nonzero, "teacher_nonzero") for _ in range(2 * layers * heads)]
    )
    Y = _teacher_outputs(X, teacher, w_in, w_out, layers, heads)
    u0, v0 = gaussian_init(teacher.size, seed)
    config = dict(
        n=n,
        tokens=tokens,
        dim=dim,
        layers=layers,
        heads=heads,
        mlp=mlp,
        ffn_scale=ffn_scale,
        teacher_nonzero=teacher_nonzero,
        seed=seed,
    )
    model = diagonal_transformer_model(X, Y, w_in=w_in, w_out=w_out, heads=heads)
    return Task("diagonal_transformer", model, u0, v0, teacher, config)


def _teacher_outputs(X, teacher, w_in, w_out, layers, heads) -> np.ndarray:
    """The teacher's outputs in float64 NumPy (independent of the JAX x64 setting)."""
    d = X.shape[-1]
    kq = teacher[: layers * heads * d].reshape(layers, heads, d)
    vo = teacher[layers * heads * d :].reshape(layers, heads, d)
    Z = X.copy()
    for layer in range(layers):
        update = np.zeros_like(Z)
        for h in range(heads):
            scores = np.einsum("ntd,d,nsd->nts", Z, kq[layer, h], Z)
            scores -= scores.max(axis=-1, keepdims=True)
            attn = np.exp(scores)
            attn /= attn.sum(axis=-1, keepdims=True)
            update += np.einsum("nts,nsd->ntd", attn, Z * vo[layer, h])
        Z = Z + update
        Z = Z + _gelu_np(Z @ w_in[layer]) @ w_out[layer].T
    return Z

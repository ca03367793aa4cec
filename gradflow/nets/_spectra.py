"""Spectra of attention-weight products and of their perturbations, in batch over (layer, head).

For head ``h`` of layer ``l`` with slices ``W_Q, W_K, W_V, W_O`` (d_emb × d_head)::

    Δ(W_K W_Qᵀ) = W_K(t) W_Q(t)ᵀ − W_K(0) W_Q(0)ᵀ = A Bᵀ,   A = [W_K(t), −W_K(0)],  B = [W_Q(t), W_Q(0)]

and likewise ``Δ(W_V W_Oᵀ)``. With reduced QR ``A = Q_A R_A``, ``B = Q_B R_B`` the singular values of
``A Bᵀ`` are those of the small ``R_A R_Bᵀ`` (at most 2·d_head square), so no d_emb × d_emb matrix is
formed. Everything runs in float32 on the default device.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from ._layers import attention_weights


class HeadSpectra(eqx.Module):
    """Singular values (descending) per (layer, head) of the ``KQ`` = ``W_K W_Qᵀ`` and ``VO`` = ``W_V W_Oᵀ``
    matrices (or of their perturbations), and their stable ranks ‖M‖_F² / ‖M‖_2².

    Shapes: ``kq``, ``vo`` (layers, heads, r); ``kq_stable_rank``, ``vo_stable_rank`` (layers, heads).
    """

    kq: jax.Array
    vo: jax.Array
    kq_stable_rank: jax.Array
    vo_stable_rank: jax.Array


def product_singular_values(a: jax.Array, b: jax.Array) -> jax.Array:
    """Singular values of ``a @ bᵀ`` for ``a, b`` of shape (..., n, k), via QR of both factors. The small product
    is divided by a power of two near its largest entry before the SVD and the singular values multiplied back
    (exact in float32's normal range), so that LAPACK never sees an overflow: a product that is not finite (a
    diverged run) gives NaN, without LAPACK's messages on stderr."""
    a = a.astype(jnp.float32)
    b = b.astype(jnp.float32)
    _, ra = jnp.linalg.qr(a)
    _, rb = jnp.linalg.qr(b)
    m = ra @ jnp.swapaxes(rb, -1, -2)
    top = jnp.max(jnp.abs(m), axis=(-2, -1), keepdims=True)
    scale = jnp.exp2(jnp.ceil(jnp.log2(jnp.where(top > 0, top, jnp.float32(1)))))
    return jnp.linalg.svd(m / scale, compute_uv=False) * scale[..., 0]


@jax.jit
def stable_rank(s: jax.Array) -> jax.Array:
    """‖M‖_F² / ‖M‖_2² from singular values ``s`` (last axis); 0 for the zero matrix."""
    ratio = normalised(s)  # normalise before squaring: no float32 underflow
    return jnp.sum(jnp.square(ratio), axis=-1)


@jax.jit
def normalised(s: jax.Array) -> jax.Array:
    """Singular values divided by the largest (zeros stay zero)."""
    s = jnp.asarray(s, jnp.float32)
    top = jnp.max(s, axis=-1, keepdims=True)
    return s / jnp.where(top > 0, top, jnp.float32(1))


def _spectra(kq: jax.Array, vo: jax.Array) -> HeadSpectra:
    return HeadSpectra(kq=kq, vo=vo, kq_stable_rank=stable_rank(kq), vo_stable_rank=stable_rank(vo))


@jax.jit
def weight_spectra(model) -> HeadSpectra:
    """Spectra of ``W_K W_Qᵀ`` and ``W_V W_Oᵀ`` for every (layer, head); r = d_head."""
    w = attention_weights(model)
    return _spectra(product_singular_values(w["K"], w["Q"]), product_singular_values(w["V"], w["O"]))


@jax.jit
def perturbation_spectra(model, model0) -> HeadSpectra:
    """Spectra of ``Δ(W_K W_Qᵀ)`` and ``Δ(W_V W_Oᵀ)`` between ``model0`` (initialisation) and ``model``;
    r = min(d_emb, 2·d_head)."""
    w, w0 = attention_weights(model), attention_weights(model0)

    def delta(x, y):
        a = jnp.concatenate([w[x], -w0[x]], axis=-1)
        b = jnp.concatenate([w[y], w0[y]], axis=-1)
        return product_singular_values(a, b)

    return _spectra(delta("K", "Q"), delta("V", "O"))

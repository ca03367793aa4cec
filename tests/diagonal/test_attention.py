"""The diagonal attention head (gradflow/_diagonal/_attention.py, paper eq. 1): its forward pass in NumPy and its
hand-written g against autodiff."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from gradflow import DiagonalModel, models


def test_attention_head_is_eq_1():
    """``softmax(X diag(β_KQ) Xᵀ) X diag(β_VO)`` (paper eq. 1, diagonal weights, no 1/√d), checked in NumPy."""
    rng = np.random.default_rng(0)
    X, kq, vo = rng.standard_normal((5, 3)), rng.standard_normal(3), rng.standard_normal(3)
    scores = X @ np.diag(kq) @ X.T
    attn = np.exp(scores - scores.max(axis=1, keepdims=True))
    attn /= attn.sum(axis=1, keepdims=True)
    with jax.enable_x64(True):
        out = np.asarray(models.attention_head(jnp.asarray(X), jnp.asarray(kq), jnp.asarray(vo)))
    np.testing.assert_allclose(out, attn @ X @ np.diag(vo), rtol=1e-13)


def test_attention_g_written_out_equals_autodiff():
    """The head's hand-written g (one fused pass) is jax.grad of its loss to rounding, on all samples and a batch."""
    m = models.diagonal_attention(n=20, tokens=4, dim=3, seed=3).model
    generic = DiagonalModel(m.h, m.X, m.Y, p=m.p, loss=m.loss)
    g = eqx.filter_jit(lambda model, beta, batch: model.g(beta, batch=batch))  # as the solvers call it: compiled
    with jax.enable_x64(True):
        beta = jnp.asarray(0.7 * np.random.default_rng(2).standard_normal(m.p))
        for batch in (None, jnp.array([3, 0, 7])):
            want = g(generic, beta, batch)
            np.testing.assert_allclose(g(m, beta, batch), want, rtol=0, atol=1e-13 * float(jnp.abs(want).max()))

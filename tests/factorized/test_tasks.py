"""The built-in factorised tasks (gradflow/_factorized/_tasks.py): G = −∇_W L against closed forms, the full attention
head against the diagonal one, and the teachers' zero loss."""

import equinox as eqx
import jax
import numpy as np
import pytest

from gradflow import models


def _g(model, Ws):
    with jax.enable_x64(True):
        return tuple(np.asarray(g) for g in _jit_g(model, tuple(np.asarray(w) for w in Ws)))


@eqx.filter_jit
def _jit_g(model, Ws):
    return model.G(Ws)


@eqx.filter_jit
def _loss(model, Ws):
    return model.loss_of_weights(Ws)


def test_matrix_factorization_gradient_is_m_minus_w():
    """``L = ½‖W − M‖_F²`` (a sum, not a mean): ``G = −∇_W L = M − W``."""
    task = models.matrix_factorization(m=4, n=3, singular_values=(2.0, 1.0), seed=1)
    M = task.teacher_beta[0]
    assert M.shape == (4, 3) and np.allclose(np.linalg.svd(M, compute_uv=False), [2.0, 1.0, 0.0])
    W = np.random.default_rng(0).standard_normal((4, 3))
    (G,) = _g(task.model, (W,))
    np.testing.assert_allclose(G, M - W, rtol=1e-14, atol=1e-14)
    with jax.enable_x64(True):
        loss = float(task.model.loss_value(task.u0, task.v0))
    W0 = task.u0[0] @ task.v0[0].T
    assert loss == pytest.approx(0.5 * np.sum((W0 - M) ** 2), rel=1e-13)


def test_matrix_sensing_gradient():
    """``G = (1/N) Σ_s (y_s − ⟨A_s, W⟩) A_s``; the truth has zero loss."""
    task = models.matrix_sensing(m=3, n=4, measurements=20, singular_values=(1.5,), seed=2)
    A, y = task.model.X, task.model.Y
    W = np.random.default_rng(1).standard_normal((3, 4))
    (G,) = _g(task.model, (W,))
    resid = y - np.einsum("smn,mn->s", A, W)
    np.testing.assert_allclose(G, np.einsum("s,smn->mn", resid, A) / len(y), rtol=1e-12, atol=1e-14)
    assert np.allclose(_g(task.model, task.teacher_beta)[0], 0.0, atol=1e-13)


def test_full_attention_head_with_diagonal_weights_is_the_diagonal_head():
    """With ``W_KQ = diag(β_KQ)``, ``W_VO = diag(β_VO)`` the full head is the diagonal head (paper eq. 1)."""
    rng = np.random.default_rng(3)
    X, kq, vo = rng.standard_normal((5, 3)), rng.standard_normal(3), rng.standard_normal(3)
    with jax.enable_x64(True):
        full = np.asarray(models.full_attention_head(X, (np.diag(kq), np.diag(vo))))
        diag = np.asarray(models.attention_head(X, kq, vo))
    np.testing.assert_allclose(full, diag, rtol=1e-13)


def test_attention_full_task():
    task = models.attention_full(n=30, tokens=4, dim=5, d_head=3, teacher_kq=(1.0, 0.5), seed=4)
    m = task.model
    assert m.shapes == ((5, 5), (5, 5)) and m.widths == (3, 3) and m.names == ("KQ", "VO")
    assert [u.shape for u in task.u0] == [(5, 3), (5, 3)] and [v.shape for v in task.v0] == [(5, 3), (5, 3)]
    assert np.allclose(np.linalg.svd(task.teacher_beta[0], compute_uv=False)[:3], [1.0, 0.5, 0.0], atol=1e-12)
    with jax.enable_x64(True):
        assert float(_loss(m, task.teacher_beta)) < 1e-25
        assert float(_loss(m, tuple(u @ v.T for u, v in zip(task.u0, task.v0)))) > 1e-2
    assert all(np.allclose(g, 0.0, atol=1e-12) for g in _g(m, task.teacher_beta))

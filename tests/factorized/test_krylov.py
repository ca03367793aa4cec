"""The φ functions of the exponential integrators (gradflow/_factorized/_krylov.py): ``φ_1 … φ_4`` against their
series in 40-digit arithmetic, on both sides of ``|z| = 1`` where the evaluation switches from the series to the
recurrence, and near 0 where the recurrence would cancel."""

import math

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
import scipy.linalg

from gradflow._factorized import _krylov
from gradflow._factorized._krylov import phi_functions

Z = np.array([-60.0, -5.0, -1.0001, -1.0, -0.3, -1e-9, 0.0, 1e-9, 0.7, 1.0, 1.0001, 3.0, 20.0])


def phi(j, z):
    """``φ_j(z) = Σ_i z^i / (i + j)!`` in mpmath."""
    with mpmath.workdps(40):
        z = mpmath.mpf(z)
        return float(mpmath.nsum(lambda i: z**i / mpmath.factorial(i + j), [0, mpmath.inf]))


def test_phi_functions_are_their_series():
    with jax.enable_x64(True):
        got = np.asarray(jax.jit(phi_functions)(jnp.asarray(Z)))  # one compilation, not one per operation
    assert got.shape == (4, Z.size)
    want = np.array([[phi(j, z) for z in Z] for j in range(1, 5)])
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=0)
    np.testing.assert_allclose(got[:, Z == 0.0][:, 0], [1 / math.factorial(j) for j in range(1, 5)], rtol=1e-15)


@pytest.fixture
def float64():
    with jax.enable_x64(True):
        yield


def test_steihaug_cg_is_the_pseudo_inverse_newton_step(float64):
    """On a singular positive semi-definite H with g in its range: −H⁺ g inside the ball, the boundary outside it, and
    the boundary along a direction of negative curvature."""
    rng = np.random.default_rng(0)
    q, _ = np.linalg.qr(rng.standard_normal((12, 12)))
    lam = np.concatenate([np.geomspace(1e-3, 5.0, 9), np.zeros(3)])
    H = (q * lam) @ q.T
    g = H @ rng.standard_normal(12)
    newton = -np.linalg.pinv(H, rcond=1e-12, hermitian=True) @ g
    matvec = lambda v: jnp.asarray(H) @ v  # noqa: E731
    step, value, iterations = _krylov.steihaug_cg(matvec, jnp.asarray(g), 10 * np.linalg.norm(newton), 1e-12, 100)
    np.testing.assert_allclose(step, newton, rtol=1e-9, atol=1e-12 * np.linalg.norm(newton))
    assert float(value) == pytest.approx(0.5 * g @ newton, rel=1e-10)  # the model's minimum, −½ gᵀH⁺g
    assert 9 <= iterations <= 20
    radius = 0.3 * np.linalg.norm(newton)
    step, value, _ = _krylov.steihaug_cg(matvec, jnp.asarray(g), radius, 1e-12, 100)
    assert np.linalg.norm(step) == pytest.approx(radius, rel=1e-12)
    step = np.asarray(step)
    assert float(value) == pytest.approx(g @ step + 0.5 * step @ H @ step, rel=1e-10) and value < 0
    indefinite = (q * np.concatenate([[-1.0], lam[1:]])) @ q.T
    step, _, _ = _krylov.steihaug_cg(lambda v: jnp.asarray(indefinite) @ v, jnp.asarray(g), 2.0, 1e-12, 100)
    assert np.linalg.norm(step) == pytest.approx(2.0, rel=1e-12)


@pytest.mark.parametrize("k", [1, 3])
def test_krylov_phi(k, float64):
    """φ_k(−hH) v and H φ_k(−hH) v against the matrix exponential of ``[[−hH, v, 0], [0, 0, I], [0, 0, 0]]``, whose
    last column holds φ_k(−hH) v (Sidje 1998), for H with one negative eigenvalue (the growth of a column near a
    saddle) and a stiff spread of positive ones (h λ up to 40)."""
    rng = np.random.default_rng(2)
    q, _ = np.linalg.qr(rng.standard_normal((40, 40)))
    lam = np.concatenate([[-1.5], np.geomspace(1e-4, 50.0, 39)])
    H = (q * lam) @ q.T
    v, h = rng.standard_normal(40), 0.8
    augmented = np.zeros((40 + k, 40 + k))
    augmented[:40, :40], augmented[:40, 40] = -h * H, v
    augmented[40:, 40:] = np.eye(k, k=1)
    expected = scipy.linalg.expm(augmented)[:40, -1]
    w, hw, steps, converged = _krylov.krylov_phi(lambda x: jnp.asarray(H) @ x, jnp.asarray(v), h, k, 1e-12)
    assert converged and steps < 40
    np.testing.assert_allclose(w, expected, rtol=0, atol=1e-10 * np.linalg.norm(expected))
    np.testing.assert_allclose(hw, H @ expected, rtol=0, atol=1e-9 * np.linalg.norm(H @ expected))

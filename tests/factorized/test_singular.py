"""The log singular values of ``W = U Vᵀ`` from the continuous-QR state (gradflow/_factorized/_singular.py, docs/math.md
*Full weights: the exact flow*): against numpy's SVD where float64 holds ``W``, and against the closed form of
orthogonal columns far below its range."""

import mpmath
import numpy as np

from gradflow._factorized._qr import Factor
from gradflow._factorized._singular import log_singular_values


def factor_of(U, V):
    """``[U; V] = Q diag(e^ρ) R̃`` (R̃ unit upper triangular), as the flow carries it."""
    Z = np.concatenate([U, V])
    Q, R = np.linalg.qr(Z)
    s = np.sign(np.diag(R))
    Q, R = Q * s, R * s[:, None]
    return Factor(Q=Q, rho=np.log(np.diag(R)), R=R / np.diag(R)[:, None], C=Z.T @ Z)


def test_against_numpys_svd():
    rng = np.random.default_rng(0)
    U, V = rng.standard_normal((4, 3)) * [1.0, 0.1, 0.01], rng.standard_normal((5, 3)) * [1.0, 0.1, 0.01]
    want = np.log(np.linalg.svd(U @ V.T, compute_uv=False)[:3])
    got = log_singular_values(factor_of(U, V), 4)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
    assert np.all(np.diff(got) < 0)  # descending


def test_scales_far_apart_against_50_digits():
    """Columns at scales 1, 1e-5, 1e-10 (σ ~ 1, 1e-10, 1e-20, three clusters): the block elimination keeps every
    singular value to float64's relative precision, where an SVD of W in float64 loses the small ones."""
    rng = np.random.default_rng(2)
    U, V = rng.standard_normal((3, 3)) * [1.0, 1e-5, 1e-10], rng.standard_normal((3, 3)) * [1.0, 1e-5, 1e-10]
    with mpmath.workdps(50):
        W = mpmath.matrix(U.tolist()) * mpmath.matrix(V.tolist()).T
        want = np.array([float(mpmath.log(s)) for s in mpmath.svd_r(W, compute_uv=False)])
    got = log_singular_values(factor_of(U, V), 3)
    np.testing.assert_allclose(got, np.sort(want)[::-1], rtol=0, atol=1e-9)
    lost = np.log(np.linalg.svd(U @ V.T, compute_uv=False))
    assert abs(lost[-1] - got[-1]) > 1e-3  # what the float64 SVD of W makes of σ_3


def test_far_below_float64_and_batched():
    """``U = A diag(a)``, ``V = B diag(a)`` with orthonormal ``A, B``: ``σ_i = a_i²`` exactly, ``log a_i`` down to
    −800 (``σ = e^{−1600}``, 0 in float64); a batch of recorded states; a state that is not finite gives NaN."""
    rng = np.random.default_rng(1)
    A, B = np.linalg.qr(rng.standard_normal((3, 3)))[0], np.linalg.qr(rng.standard_normal((4, 3)))[0]
    log_a = np.array([-800.0, 0.5, -30.0])
    rho = log_a + 0.5 * np.log(2.0)  # each column of [A; B] has norm √2
    Q = np.concatenate([A, B]) / np.sqrt(2.0)
    one = Factor(Q=Q, rho=rho, R=np.eye(3), C=np.zeros((3, 3)))
    np.testing.assert_allclose(log_singular_values(one, 3), np.sort(2 * log_a)[::-1], rtol=1e-12)
    batch = Factor(
        Q=np.stack([Q, Q]), rho=np.stack([rho, np.full(3, np.nan)]), R=np.stack([np.eye(3)] * 2), C=np.zeros((2, 3, 3))
    )
    got = log_singular_values(batch, 3)
    np.testing.assert_allclose(got[0], np.sort(2 * log_a)[::-1], rtol=1e-12)
    assert np.all(np.isnan(got[1]))


def test_a_state_numpy_cannot_factor_gives_nan():
    """A state with finite log scales but a non-finite ``Q`` or ``R̃``, or an ``R̃`` whose ``R̃ R̃ᵀ`` overflows,
    gives NaN like a non-finite ``ρ``, beside the finite states of its batch: NumPy's SVD would raise."""
    rng = np.random.default_rng(3)
    good = factor_of(rng.standard_normal((4, 3)), rng.standard_normal((5, 3)))
    Q_nan, R_inf, R_huge = np.array(good.Q), np.array(good.R), np.array(good.R)
    Q_nan[0, 0], R_inf[0, 1], R_huge[0, 2] = np.nan, np.inf, 1e200
    batch = Factor(
        Q=np.stack([good.Q, Q_nan, good.Q, good.Q]),
        rho=np.stack([good.rho] * 4),
        R=np.stack([good.R, good.R, R_inf, R_huge]),
        C=np.stack([good.C] * 4),
    )
    got = log_singular_values(batch, 4)
    np.testing.assert_allclose(got[0], log_singular_values(good, 4), rtol=0, atol=0)
    assert np.all(np.isfinite(got[0])) and np.all(np.isnan(got[1:]))

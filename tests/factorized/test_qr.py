"""The continuous-QR state of a factorised flow (gradflow/_factorized/_qr.py): the sorting gauge, the polar factor."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st


def test_sorting_gauge_rotates_the_columns_only():
    """A swap of the sorting gauge is ``Z → Z O`` (``Z Zᵀ``, hence ``W``, unchanged; ``C̄ → OᵀC̄O`` stays
    ``ZᵀJZ``), keeps ``R̃`` unit upper triangular, and a pass of ``sort_pass`` puts the log scales in order."""
    from gradflow._factorized._qr import Factor, _swap, sort_pass

    rng = np.random.default_rng(0)
    m, k = 4, 3
    base = np.linalg.qr(rng.standard_normal((7, k)))[0] + 1e-3 * rng.standard_normal((7, k))
    z = base * np.array([1e-3, 1.0, 1e3])  # nearly orthogonal columns: log scales increasing in QR order
    q, r = np.linalg.qr(z)
    s = np.sign(np.diag(r))
    q, r = q * s, r * s[:, None]
    J = np.diag([1.0] * m + [-1.0] * (7 - m))
    f = Factor(Q=q, rho=np.log(np.diag(r)), R=r / np.diag(r)[:, None], C=z.T @ J @ z)

    def Z(g):
        return np.asarray(g.Q) @ (np.exp(np.asarray(g.rho))[:, None] * np.asarray(g.R))

    with jax.enable_x64(True):
        g = jax.tree_util.tree_map(np.asarray, eqx.filter_jit(_swap)(jax.tree_util.tree_map(jnp.asarray, f), 1))
        h, changed = eqx.filter_jit(sort_pass)(jax.tree_util.tree_map(jnp.asarray, f))
    for out in (g, jax.tree_util.tree_map(np.asarray, h)):
        np.testing.assert_allclose(Z(out) @ Z(out).T, z @ z.T, atol=1e-9)
        np.testing.assert_allclose(np.asarray(out.C), Z(out).T @ J @ Z(out), atol=1e-8)
        R = np.asarray(out.R)
        np.testing.assert_allclose(np.tril(R, -1), 0.0, atol=1e-15)
        np.testing.assert_allclose(np.diag(R), 1.0, atol=1e-15)
    assert bool(changed) and g.rho[1] > g.rho[2]
    assert np.all(np.diff(np.asarray(h.rho)) < 0.5 * np.log1p(np.diag(np.asarray(h.R), 1) ** 2) + 1.0)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    shape=st.sampled_from([(100, 50), (12, 6), (5, 1)]),
    log_defect=st.floats(-16.0, -1.0),
)
def test_newton_schulz_is_the_svd_polar_factor(seed, shape, log_defect):
    """``newton_schulz`` (``polar``'s way where the SVD fails) is ``U Vᵀ`` of ``Q = U Σ Vᵀ`` to rounding for
    defects from 1e-16 to 0.1, and orthonormal."""
    from gradflow._factorized._qr import newton_schulz

    rng = np.random.default_rng(seed)
    n, k = shape
    q = np.linalg.qr(rng.standard_normal((n, k)))[0]
    Q = q + 10.0**log_defect * rng.standard_normal((n, k)) / np.sqrt(n)
    u, _, vt = np.linalg.svd(Q, full_matrices=False)
    with jax.enable_x64(True):
        P = np.asarray(jax.jit(newton_schulz)(jnp.asarray(Q)))
    np.testing.assert_allclose(P, u @ vt, atol=1e-13)
    np.testing.assert_allclose(P.T @ P, np.eye(k), atol=1e-13)


def test_polar_falls_back_where_the_svd_fails(monkeypatch):
    """``polar`` is the SVD's ``U Vᵀ``; where the SVD returns NaN (LAPACK's failure to converge) on a finite ``Q``,
    Newton–Schulz's; a ``Q`` that is not finite stays not finite."""
    from gradflow._factorized import _qr

    rng = np.random.default_rng(3)
    q = np.linalg.qr(rng.standard_normal((9, 4)))[0]
    Q = q + 1e-6 * rng.standard_normal((9, 4))
    u, _, vt = np.linalg.svd(Q, full_matrices=False)
    with jax.enable_x64(True):
        np.testing.assert_allclose(np.asarray(_qr.polar(jnp.asarray(Q))), u @ vt, atol=1e-14)
        failing = lambda a, full_matrices: tuple(jnp.full_like(x, jnp.nan) for x in jnp.linalg.svd(a, full_matrices))
        monkeypatch.setattr(_qr, "jnp", _WithSVD(failing))
        np.testing.assert_allclose(np.asarray(_qr.polar(jnp.asarray(Q))), u @ vt, atol=1e-13)
        assert np.isnan(np.asarray(_qr.polar(jnp.asarray(np.where(Q > 0.5, np.nan, Q))))).all()


class _WithSVD:
    """``jax.numpy`` with ``linalg.svd`` replaced."""

    def __init__(self, svd):
        self.linalg = type("linalg", (), {"svd": staticmethod(svd)})

    def __getattr__(self, name):
        return getattr(jnp, name)

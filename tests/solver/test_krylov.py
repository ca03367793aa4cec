"""GMRES on matrix-vector products (``gradflow._solver._krylov.gmres``) against a direct solve: its solution, its
residual estimate against the true residual, restarts, and the flag of a solve that does not meet its tolerance."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradflow._solver._krylov import gmres


def _system(size, seed, spread=1.0):
    """A nonsymmetric, well-conditioned ``A`` (the identity plus a random matrix of 2-norm ≈ ``spread``) and ``b``."""
    rng = np.random.default_rng(seed)
    A = np.eye(size) + spread * rng.standard_normal((size, size)) / (2 * np.sqrt(size))
    return A, rng.standard_normal(size)


def _solve(A, b, **options):
    with jax.enable_x64(True):
        A_ = jnp.asarray(A)
        out = jax.jit(lambda b: gmres(lambda x: A_ @ x, b, **options))(jnp.asarray(b))
        return jax.tree_util.tree_map(np.asarray, out)


@pytest.mark.parametrize("size", [1, 7, 40])
def test_solves_to_the_direct_solution(size):
    """In at most ``size`` products GMRES is exact (the Krylov space is the whole space): equal to LU's solution."""
    A, b = _system(size, seed=size)
    out = _solve(A, b, tol=1e-12, dimension=size, restarts=0)
    assert out.converged
    assert out.products <= size + 1
    np.testing.assert_allclose(out.x, np.linalg.solve(A, b), rtol=1e-9, atol=1e-11)


def test_residual_estimate_is_the_true_residual():
    """The Givens rotations' ``|g_k|`` is ``‖b − A x‖₂`` of the ``x`` returned, without forming it; it meets ``tol``
    and stops early (fewer products than unknowns)."""
    A, b = _system(200, seed=1, spread=0.5)
    out = _solve(A, b, tol=1e-6 * np.linalg.norm(b), dimension=200, restarts=0)
    true = np.linalg.norm(b - A @ out.x)
    assert out.converged and out.products < 60
    assert true <= 1e-6 * np.linalg.norm(b) * 1.01
    assert abs(out.residual - true) <= 1e-10 * np.linalg.norm(b)


def test_restarts_reach_what_one_short_space_does_not():
    """A space of 5 vectors does not reach 1e-10 on a system of 60 unknowns; restarted from the ``x`` it reaches it
    does, the products counting every cycle's."""
    A, b = _system(60, seed=2, spread=0.8)
    tol = 1e-10 * np.linalg.norm(b)
    once = _solve(A, b, tol=tol, dimension=5, restarts=0)
    assert not once.converged and once.products == 6
    again = _solve(A, b, tol=tol, dimension=5, restarts=40)
    assert again.converged and again.products > 6
    np.testing.assert_allclose(again.x, np.linalg.solve(A, b), rtol=1e-8, atol=1e-9)


def test_zero_right_hand_side():
    """``b = 0`` is solved by ``x = 0`` at once, without a division by its norm."""
    A, _ = _system(5, seed=3)
    out = _solve(A, np.zeros(5), tol=0.0, dimension=5, restarts=2)
    assert np.all(out.x == 0.0) and np.all(np.isfinite(out.x))

"""The explicit steps of the leap integrator (gradflow/_factorized/_explicit.py): the stiffness estimate is the
dominant eigenvalue of a linear field, the error norm is diffrax's, the sorting test is ``sort_pass``'s, and the
tolerances' thresholds follow from ``atol + rtol``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradflow._factorized._explicit import LeapTolerances, _error_norm, _stiffness, unsorted
from gradflow._factorized._qr import SWAP_MARGIN, Factor


@pytest.fixture(autouse=True)
def float64():
    with jax.enable_x64(True):
        yield


def test_stiffness_is_the_dominant_eigenvalue_of_a_linear_field():
    """For ``f(y) = A y`` and two stages along the dominant eigenvector, ‖k7 − k6‖/‖y7 − y6‖ = |λ_max|; over a
    pytree of leaves; 0 where the stages coincide."""
    A = np.diag([-40.0, -1.0, 0.5])
    y6 = (jnp.array([1.0, 0.2, 0.3]), jnp.array([2.0]))
    y7 = (y6[0] + jnp.array([1e-3, 0.0, 0.0]), y6[1])
    k = [(jnp.asarray(A) @ y[0], -40.0 * y[1]) for y in (y6, y7)]
    assert float(_stiffness(y6, y7, *k)) == pytest.approx(40.0, rel=1e-9)
    assert float(_stiffness(y6, y6, *k)) == 0.0


def test_error_norm_is_the_rms_over_atol_plus_rtol_y_and_inf_if_not_finite():
    tol = LeapTolerances(rtol=1e-3, atol=1e-6)
    y0, y1 = (jnp.array([1.0, -2.0]),), (jnp.array([3.0, 0.0]),)
    err = (jnp.array([1e-5, 4e-6]),)
    scale = 1e-6 + 1e-3 * np.array([3.0, 2.0])
    want = np.sqrt(np.mean((np.array([1e-5, 4e-6]) / scale) ** 2))
    assert float(_error_norm(y0, y1, err, tol)) == pytest.approx(want, rel=1e-12)
    assert float(_error_norm(y0, y1, (jnp.array([np.nan, 0.0]),), tol)) == np.inf
    assert tol.quiet == pytest.approx(1e-3 + 1e-6) and tol.rest == pytest.approx(1e-3 * tol.quiet)
    assert tol.gap == pytest.approx(-np.log(tol.quiet) + 2.0)


def test_unsorted_is_a_log_scale_above_the_one_before_by_more_than_the_margin():
    def factor(rho, r=0.0):
        R = np.eye(len(rho)) + np.diag([r] * (len(rho) - 1), 1)
        return Factor(Q=jnp.eye(len(rho)), rho=jnp.asarray(rho), R=jnp.asarray(R), C=jnp.zeros((len(rho),) * 2))

    assert not bool(unsorted(factor([0.0, -5.0, -9.0])))
    assert not bool(unsorted(factor([0.0, SWAP_MARGIN - 0.01])))  # within the margin
    assert bool(unsorted(factor([0.0, SWAP_MARGIN + 0.01])))
    r = 3.0  # a coupling of the two columns widens the margin by ½ log(1 + r²)
    assert not bool(unsorted(factor([0.0, SWAP_MARGIN + 0.5 * np.log1p(r * r) - 0.01], r)))

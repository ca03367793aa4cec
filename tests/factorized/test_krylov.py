"""The φ functions of the exponential integrators (gradflow/_factorized/_krylov.py): ``φ_1 … φ_4`` against their
series in 40-digit arithmetic, on both sides of ``|z| = 1`` where the evaluation switches from the series to the
recurrence, and near 0 where the recurrence would cancel."""

import math

import jax
import jax.numpy as jnp
import mpmath
import numpy as np

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

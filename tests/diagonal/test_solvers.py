"""The diagonal flow's implicit solver (gradflow/_diagonal/_solvers.py): its dense output is exact for quintics, and
it rejects a step that overflows (as Tsit5 does) rather than turning it into inf or NaN."""

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import theory
from gradflow import models
from gradflow._config import float64
from gradflow._diagonal._field import Args, vector_field
from gradflow._diagonal._frame import apply_frame, frame_of
from gradflow._diagonal._solvers import _QuinticHermite, implicit_solver

LIN = models.diagonal_linear(n=50, p=8, orthonormal=True, seed=0)


@given(st.lists(st.floats(-3, 3), min_size=6, max_size=6), st.floats(0.1, 10.0))
@settings(max_examples=25, deadline=None)
def test_quintic_hermite_reproduces_quintics(coeffs, h):
    """The implicit steps' dense output is exact for every polynomial of degree ≤ 5."""
    c = np.asarray(coeffs)
    y = np.polynomial.Polynomial(c)
    t0, t1 = 2.0, 2.0 + h
    k = np.array([h * y.deriv()(t0), h * y.deriv()(t1), h**2 * y.deriv(2)(t0), h**2 * y.deriv(2)(t1)])
    ts = np.linspace(t0, t1, 7)
    got = float64(lambda: np.asarray(_QuinticHermite(t0, t1, y(t0), y(t1), jnp.asarray(k))(jnp.asarray(ts))))()
    np.testing.assert_allclose(got, y(ts), rtol=0, atol=1e-9 * max(1.0, np.abs(y(ts)).max()))


@pytest.mark.parametrize("solver", ["default", "tsit5"])
def test_overshooting_step_is_rejected_not_nan(solver):
    """A first step as long as the whole run overflows exp(y) (y0 + h f(y0) ≈ 2e4 in log w): the step
    must be rejected and retried (diffrax turns a non-finite error estimate into a rejection, and
    the implicit solver's failed stage iteration likewise), never turned into inf/NaN."""
    la, tau = -2000.0, 0.5
    un, vn = apply_frame(LIN.u0, LIN.v0, *frame_of(LIN.u0, LIN.v0))
    log_c = np.log(un - np.abs(vn)) + np.log(un + np.abs(vn))
    with jax.enable_x64(True):
        args = Args(model=LIN.model, log_wwbar=jnp.asarray(2 * la + log_c))
        y0 = jnp.asarray(la + np.log(un + vn))
        t1 = tau * -la
        overshoot = y0 + t1 * vector_field(0.0, y0, args)
        assert not np.all(np.isfinite(np.asarray(vector_field(0.0, overshoot, args))))
        sol = dfx.diffeqsolve(
            dfx.ODETerm(vector_field),
            implicit_solver(8, 1e-8) if solver == "default" else dfx.Tsit5(),
            0.0,
            t1,
            t1,
            y0,
            args=args,
            saveat=dfx.SaveAt(t1=True),
            stepsize_controller=dfx.PIDController(rtol=0.0, atol=1e-8),
            max_steps=20_000,
            throw=False,
        )
        assert sol.result == dfx.RESULTS.successful
        assert int(sol.stats["num_rejected_steps"]) > 0
        beta = np.asarray(0.25 * (jnp.exp(2 * sol.ys[0]) - jnp.exp(2 * (2 * la + log_c - sol.ys[0]))))
    ref = theory.diagonal_linear_beta_rescaled(tau, LIN.teacher_beta, LIN.u0, LIN.v0, log_alpha=la)
    np.testing.assert_allclose(beta, ref, atol=1e-6)

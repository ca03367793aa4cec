"""SciPy's Radau with a floor on Newton's tolerance (gradflow/_solver/_radau.py): the tolerance, and a stiff solve
against its closed form. Its effect on long plateaus: tests/deep_linear/test_split.py and docs/deep-linear.md."""

import warnings

import numpy as np
import pytest
from scipy.integrate import Radau, solve_ivp
from scipy.linalg import LinAlgWarning

from gradflow._solver import RadauNewtonFloor
from gradflow._solver._radau import NEWTON_TOL_FLOOR


def _decay(t, y):
    return -y


@pytest.mark.parametrize("rtol", [1e-10, 1e-8, 1e-6, 1e-4, 1e-2])
def test_newtons_tolerance_is_scipys_with_a_floor(rtol):
    """``max(min(0.03, rtol^{1/2}), 1e-3)``: SciPy's from ``rtol = 1e-6`` up, the floor below."""
    ours = RadauNewtonFloor(_decay, 0.0, np.ones(2), 1.0, rtol=rtol, atol=1e-12)
    scipys = Radau(_decay, 0.0, np.ones(2), 1.0, rtol=rtol, atol=1e-12)
    assert ours.newton_tol == max(scipys.newton_tol, NEWTON_TOL_FLOOR)
    assert ours.newton_tol == pytest.approx(max(min(0.03, rtol**0.5), 1e-3))


def test_a_stiff_solve_keeps_its_tolerance():
    """Prothero–Robinson, ``y' = −λ (y − cos t) − sin t`` with ``λ = 1e6`` from ``y(0) = 2``: ``y = cos t + e^{−λt}``,
    solved at ``rtol = atol = 1e-8`` to within 1e-7 of it at its steps, as SciPy's Radau is."""
    lam = 1e6

    def rhs(t, y):
        return -lam * (y - np.cos(t)) - np.sin(t)

    for method in (RadauNewtonFloor, "Radau"):  # at the steps (the dense output between them is of order 3)
        sol = solve_ivp(rhs, (0.0, 10.0), [2.0], method=method, rtol=1e-8, atol=1e-8, jac=lambda t, y: [[-lam]])
        assert sol.success and sol.t.size > 10
        np.testing.assert_allclose(sol.y[0], np.cos(sol.t) + np.exp(-lam * sol.t), rtol=0, atol=1e-7)


def test_a_trial_step_that_diverges_is_quiet(monkeypatch):
    """A trial step whose Newton iterates overflow, or whose iteration matrix is singular, warns nothing (SciPy rejects
    it and retries shorter): the step SciPy's Radau takes is wrapped; outside it the warnings are as they were."""

    def noisy_step(self):
        np.linalg.norm(np.array([1e300, 1e300]))  # overflows in its dot product
        warnings.warn("Diagonal number 1 is exactly zero. Singular matrix.", LinAlgWarning, stacklevel=1)
        return True, None

    monkeypatch.setattr(Radau, "_step_impl", noisy_step)
    solver = RadauNewtonFloor(_decay, 0.0, np.ones(2), 1.0, rtol=1e-8, atol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert solver._step_impl() == (True, None)
    with pytest.warns(RuntimeWarning, match="overflow"), pytest.warns(LinAlgWarning):
        noisy_step(solver)

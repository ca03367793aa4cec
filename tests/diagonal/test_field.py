"""The diagonal flow's vector field (gradflow/_diagonal/_field.py): the Jacobian columns of the awake coordinates and
the wake horizon that caps a step at a waking coordinate."""

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np

from gradflow import models
from gradflow._diagonal._field import LAND, ONSET, REACH, Args, jacobian, wake_horizon
from gradflow._diagonal._flow import default_rank
from gradflow._solver import PredictiveController

LIN = models.diagonal_linear(n=50, p=8, orthonormal=True, seed=0)  # ∂g/∂β = −I


def test_jacobian_columns_of_awake_coordinates_only():
    """On the orthonormal linear task ``∂g/∂β = −I``: the refresh gives the columns ``−e_i`` of the coordinates of
    largest ``u_i² + v_i²``, and 0 (not computed) for those asleep (``u_i² + v_i² < 1e-10``)."""
    assert (default_rank(100, False), default_rank(100, True), default_rank(8, False)) == (64, 16, 8)
    y = np.array([0.0, -1.0, -30.0, -40.0, -2.0, -50.0, -60.0, -70.0])  # log w; w w̄ = e^{-200}: w̄ negligible
    with jax.enable_x64(True):
        jac = jacobian(jnp.asarray(y), Args(model=LIN.model, log_wwbar=jnp.full(8, -200.0)), 4)
    np.testing.assert_array_equal(np.asarray(jac.idx), [0, 1, 4, 2])
    want = -np.eye(8)[:, [0, 1, 4, 2]]
    want[:, 3] = 0.0  # coordinate 2: u² + v² = e^{-60}/2, asleep
    np.testing.assert_allclose(np.asarray(jac.hess_cols), want, atol=1e-12)


def _predict(steps, y0, y1s, errors, log_wwbar=-2000.0):
    """The step ``PredictiveController`` with the wake horizon proposes after each accepted step ``[t, t + h]`` from
    ``y0`` to ``y1s[k]`` with scaled error ``errors[k]`` (the next starting where the last ended); rtol 0, atol 1e-8,
    factormax 10."""
    with jax.enable_x64(True):
        ctrl = PredictiveController(dfx.PIDController(rtol=0.0, atol=1e-8, factormax=10.0), wake_horizon)
        args = Args(model=LIN.model, log_wwbar=jnp.full(8, log_wwbar))
        _, state = ctrl.init(None, 0.0, 1.0, jnp.asarray(y0), 1.0, args, None, 5)
        t, y, out = 0.0, jnp.asarray(y0), []
        for h, y1, e in zip(steps, y1s, errors):
            y1 = jnp.asarray(y1)
            err = jnp.full(8, 1e-8 * e)  # rms: e
            keep, t0, t1, _, state, _ = ctrl.adapt_step_size(t, t + h, y, y1, args, err, 5, state)
            assert bool(keep)
            out.append(float(t1 - t0))
            t, y = t + h, y1
    return out


def test_wake_horizon_lands_the_waking_coordinate():
    """A sleeping coordinate whose ``ℓ = log(u² + v²) = 2 y − log 2`` climbs by 2 per unit of ``t``: the next step
    (the integral one would be 10×) ends where the stages, reaching ``REACH h`` past its start, take ``ℓ`` to
    ``LAND``; once past it, ``ℓ`` moves by ``ONSET`` per step. A coordinate moving down does not cap the step."""
    y0 = np.zeros(8)
    y0[[2, 5]] = [-100.0, -16.0]  # ℓ ≈ −200.7 (moving down), ℓ ≈ −32.7 (moving up)
    y1 = y0.copy()
    y1[[2, 5]] = [-101.0, -15.0]  # ℓ_5 = −30.69 after the step
    ell1 = 2 * y1[5] - np.log(2.0)
    far = _predict([1.0], y0, [y1], [1e-6])
    np.testing.assert_allclose(far, [(LAND - ell1) / (2 * REACH)], rtol=1e-9)
    y2 = y1.copy()
    y2[5] = (LAND + 1 + np.log(2.0)) / 2  # ℓ_5 = −19: past LAND
    near = _predict([1.0, 1.0], y0, [y1, y2], [1e-6, 1e-6])
    np.testing.assert_allclose(near[1], ONSET / (2 * (y2[5] - y1[5]) * REACH), rtol=1e-9)

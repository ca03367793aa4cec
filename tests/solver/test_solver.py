"""The solver kit: the predictive step-size control, solving onto output times, and how a solve ended."""

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np

from gradflow._solver import PredictiveController, solve_onto, solve_status


def _never(h, y0, y1, args):
    return jnp.inf


def test_predictive_step_extrapolates_the_error_growth():
    """Gustafsson's step: after errors 0.1 then 0.2 at h = 1, the next step is
    ``0.9 (1/0.2)^(1/5) (0.1/0.2)^(1/5) = 0.9 · 2.5^(1/5)``, shorter than the integral step ``0.9 · 5^(1/5)``; after the
    first step, with no history, the integral step."""
    with jax.enable_x64(True):
        ctrl = PredictiveController(dfx.PIDController(rtol=0.0, atol=1e-8, factormax=10.0), _never)
        y = jnp.zeros(3)
        _, state = ctrl.init(None, 0.0, 1.0, y, 1.0, None, None, 5)
        t, got = 0.0, []
        for e in (0.1, 0.2):
            keep, t0, t1, _, state, _ = ctrl.adapt_step_size(t, t + 1.0, y, y, None, jnp.full(3, 1e-8 * e), 5, state)
            assert bool(keep)
            got.append(float(t1 - t0))
            t += 1.0
    np.testing.assert_allclose(got, [0.9 * 10**0.2, 0.9 * 2.5**0.2], rtol=1e-12)


def test_an_engines_horizon_caps_the_step():
    """The horizon the engine supplies shortens the proposed step after an accepted one, and only then."""
    with jax.enable_x64(True):
        ctrl = PredictiveController(dfx.PIDController(rtol=0.0, atol=1e-8), lambda h, y0, y1, args: 0.25 * h)
        y = jnp.zeros(2)
        _, state = ctrl.init(None, 0.0, 1.0, y, 1.0, None, None, 5)
        keep, t0, t1, *_ = ctrl.adapt_step_size(0.0, 2.0, y, y, None, jnp.full(2, 1e-9), 5, state)
    assert bool(keep) and float(t1 - t0) == 0.5


def test_solve_onto_steps_onto_every_output_time():
    """``dy/dt = −y`` onto six output times with Tsit5: ``e^{−t}`` to the tolerance, a successful result and the
    step counts (accepted + rejected = all)."""
    with jax.enable_x64(True):
        ts = jnp.linspace(0.0, 2.0, 6)
        controller = dfx.PIDController(rtol=0.0, atol=1e-10)
        ys, result, (steps, accepted, rejected) = solve_onto(
            lambda t, y, args: -y, dfx.Tsit5(), jnp.ones(1), None, ts, controller, None
        )
    np.testing.assert_allclose(np.asarray(ys)[:, 0], np.exp(-np.asarray(ts)), atol=1e-8)
    assert result == dfx.RESULTS.successful and int(steps) == int(accepted) + int(rejected)


def test_solve_status_says_where_a_run_stopped():
    """Two runs: one reached every output time, one hit its step cap after the second."""
    hit = jnp.array([False, True])
    results = jax.vmap(lambda h: dfx.RESULTS.where(h, dfx.RESULTS.max_steps_reached, dfx.RESULTS.successful))(hit)
    finished = np.array([[True, True, True], [True, True, False]])
    ts, log_a = np.array([0.0, 1.0, 2.0]), np.array([-10.0, -20.0])
    result, message = solve_status(results, finished, ts, log_a, 7, what="simulate_flow", advice="")
    assert result.tolist() == ["successful", "max_steps_reached"]
    assert message[0] == "" and message[1] == (
        "simulate_flow hit max_steps=7 at log α = -20: the flow stopped after τ = 1 (ts[-1] = 2). Raise max_steps, "
        "loosen atol, or shorten ts."
    )

"""The step-size controllers: Gustafsson's predictive step and an engine's horizon, the guard against step-size
underflow, and the step budget of a solve run in segments."""

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradflow._solver import PredictiveController, UnderflowGuard
from gradflow._solver._controllers import SNAP, UNDERFLOW, StepBudget


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


def _pid():
    """The integral controller: the step after one of length ``h`` with scaled error ``E`` is
    ``h · clip(0.9 E^(−1/5), 0.2, 10)`` (error order 5)."""
    return dfx.PIDController(rtol=0.0, atol=1e-8, factormin=0.2, factormax=10.0)


def _error(scaled):
    """The error estimate whose scaled norm (atol = 1e-8, rtol = 0) is ``scaled``."""
    return jnp.full(2, 1e-8 * scaled)


def _step(ctrl, state, t0, t1, scaled):
    """``(kept, next step's start, its end, state, result)`` after the step ``t0 → t1``."""
    y = jnp.zeros(2)
    keep, next_t0, next_t1, _, state, result = ctrl.adapt_step_size(t0, t1, y, y, None, _error(scaled), 5, state)
    return bool(keep), float(next_t0), float(next_t1), state, result


def _init(ctrl):
    return ctrl.init(None, 0.0, 10.0, jnp.zeros(2), 1.0, None, None, 5)[1]


def test_underflow_guard_stops_a_step_below_the_resolution_of_t():
    """A proposed step below ``UNDERFLOW`` ulps of ``max(|t|, 1)`` ends the solve with ``dt_min_reached``: the step
    of 1e-8 proposed after one of 1e-9 (E = 0.9⁵: growth 10) is below 100 ulps (2.2e-8) at t = 1e6, not at t = 0."""
    with jax.enable_x64(True):
        guard = UnderflowGuard(_pid())
        for t0, stuck in ((0.0, False), (1e6, True)):
            keep, next_t0, next_t1, _, result = _step(guard, _init(guard), t0, t0 + 1e-9, 0.9**5 * 1e-5)
            assert keep and next_t1 - next_t0 == pytest.approx(1e-8, rel=0.1)  # t = 1e6 holds steps to 1e-10
            assert (1e-8 < UNDERFLOW * np.finfo(np.float64).eps * max(t0, 1.0)) == stuck
            assert result == (dfx.RESULTS.dt_min_reached if stuck else dfx.RESULTS.successful)


def test_underflow_guard_with_floor_zero_takes_steps_below_eps_near_t_zero():
    """With ``floor = 0`` (a held plateau's clock, gradflow/_deep_linear/_held.py) the resolution is ``|t|``'s alone: a
    step of 1e-17 proposed at t = 0 goes on, which ``floor = 1`` stops; at t = 1e6 both stop a step of 1e-8."""
    with jax.enable_x64(True):
        for floor, t0, stuck in ((0.0, 0.0, False), (1.0, 0.0, True), (0.0, 1e6, True)):
            guard = UnderflowGuard(_pid(), floor=floor)
            step = 1e-18 if t0 == 0.0 else 1e-9
            keep, next_t0, next_t1, _, result = _step(guard, _init(guard), t0, t0 + step, 0.9**5 * 1e-5)
            assert keep and result == (dfx.RESULTS.dt_min_reached if stuck else dfx.RESULTS.successful)


def test_underflow_guard_never_lengthens_the_step_after_a_rejected_one():
    """After a rejected step the next (accepted) step proposes no longer a step than its own; otherwise, and after
    any accepted step, the inner controller's (10 times longer, its ``factormax``)."""
    with jax.enable_x64(True):
        guard = UnderflowGuard(_pid())
        keep, _, end, state, _ = _step(guard, _init(guard), 0.0, 0.5, 100.0)  # E = 100: rejected
        assert not keep and end == pytest.approx(0.5 * 0.9 * 100 ** (-1 / 5), rel=1e-12)
        keep, start, after_rejection, state, _ = _step(guard, state, 0.0, end, 1e-10)
        assert keep and after_rejection - start == pytest.approx(end, rel=1e-12)
        keep, start, next_end, _, _ = _step(guard, state, end, 2 * end, 1e-10)
        assert keep and next_end - start == pytest.approx(10 * end, rel=1e-12)
        _, start, fresh, _, _ = _step(guard, _init(guard), 0.0, end, 1e-10)
        assert fresh - start == pytest.approx(10 * end, rel=1e-12)


def test_underflow_guard_stretches_a_step_onto_an_output_time_it_would_miss_by_a_sliver():
    """A step 0 → 0.5 whose error (E = (0.9/1.9)⁵) lets the next grow by 1.9 ends at 1.45: stretched onto an output
    time at 1.5 (0.05 away, within ``SNAP`` = 0.1 of its length 0.95), not onto one at 2 (0.55 away) nor past one."""
    assert SNAP == 0.1
    with jax.enable_x64(True):
        ends = []
        for out_ts in ([0.0, 1.5], [0.0, 2.0], [0.0, 1.4], None):
            guard = UnderflowGuard(_pid(), None if out_ts is None else jnp.array(out_ts))
            keep, start, end, _, _ = _step(guard, _init(guard), 0.0, 0.5, (0.9 / 1.9) ** 5)
            assert keep and start == 0.5
            ends.append(end)
    assert ends[0] == 1.5 and ends[1:] == pytest.approx([1.45] * 3, rel=1e-12)


def test_step_budget_ends_the_segment_with_the_step_that_spends_it():
    """The state ``(inner state, steps left, proposed end, kept)``: each step spends one; the one that leaves none
    ends the solve with ``max_steps_reached`` (kept as usual), and the next segment starts at ``tnext``."""
    with jax.enable_x64(True):
        budget = StepBudget(_pid(), jnp.asarray(0.25))
        assert float(budget.init(None, 0.0, 10.0, jnp.zeros(2), None, None, None, 5)[0]) == 0.25
        state = (_init(_pid()), jnp.asarray(2), jnp.asarray(0.0), jnp.array(True))
        keep, _, end, state, result = _step(budget, state, 0.0, 0.5, 1e-10)
        assert keep and result == dfx.RESULTS.successful and int(state[1]) == 1
        assert float(state[2]) == end and bool(state[3])
        keep, _, _, state, result = _step(budget, state, 0.5, end, 1e-10)
        assert keep and result == dfx.RESULTS.max_steps_reached and int(state[1]) == 0

"""The diagonal family's results (gradflow/_diagonal/_results.py): a state perturbed in its weights, at any scale."""

import numpy as np
import pytest

from gradflow import FlowState
from gradflow._diagonal._frame import apply_frame, frame_of


def _state(u, v):
    """A state of float64 weights (u, v) with |u| ≠ |v|, in the frame u_n > |v_n|."""
    swap, sign = frame_of(u, v)
    un, vn = apply_frame(u, v, swap, sign)
    return FlowState(log_w=np.log(un + vn), log_wbar=np.log(un - vn), swap=swap, sign=sign)


def test_perturbed_state_is_the_state_of_the_perturbed_weights():
    """θ + (du, dv) in every orientation: the new frame flips the sign where w' < 0 and swaps u, v
    where w' w̄' < 0; log w, log w̄ are those of the perturbed weights."""
    u = np.array([0.5, -0.3, 0.2, 0.7, -0.1, 0.4])
    v = np.array([0.1, 0.2, -0.6, -0.2, -0.5, 0.3])
    du = np.array([0.0, -0.5, 0.9, -1.1, 0.3, 0.0])
    dv = np.array([0.0, 0.4, 0.1, 0.0, 0.2, -0.05])
    state = _state(u, v)
    new = state.perturbed(du, dv)
    np.testing.assert_allclose(new.u, u + du, rtol=1e-14)
    np.testing.assert_allclose(new.v, v + dv, rtol=1e-14)
    ref = _state(u + du, v + dv)
    np.testing.assert_allclose(new.log_w, ref.log_w, rtol=0, atol=1e-14)
    np.testing.assert_allclose(new.log_wbar, ref.log_wbar, rtol=0, atol=1e-14)
    np.testing.assert_array_equal(new.swap, ref.swap)
    np.testing.assert_array_equal(new.sign, ref.sign)
    assert not np.array_equal(new.swap, state.swap) and not np.array_equal(new.sign, state.sign)
    assert new.log_w[0] == state.log_w[0] and new.log_wbar[0] == state.log_wbar[0]  # untouched: bit for bit
    one = FlowState(
        log_w=np.array([0.0, 0.0]), log_wbar=np.array([-1.0, -1.0]), swap=np.zeros(2, bool), sign=np.ones(2)
    )
    with pytest.raises(ValueError, match=r"\|u_i\| = \|v_i\| at coordinates \[1\]"):
        one.perturbed(np.array([0.0, -1.0]), 0.0)  # w' = w + du = 0: u + du = −v


def test_perturbed_state_below_float64_range():
    """w̄ = e^{−2000} (0 in float64), so u = v in float64: a shift of one weight gives w̄' from the shift
    alone, and the untouched coordinate keeps log w̄ = −2000 exactly."""
    state = FlowState(
        log_w=np.array([0.1, -0.2]),
        log_wbar=np.array([-2000.0, -2000.0]),
        swap=np.array([False, True]),
        sign=np.array([1.0, -1.0]),
    )
    u, v = state.u, state.v
    assert u[1] == v[1] == -0.5 * np.exp(-0.2)
    # coordinate 1 is swapped and negated: dv = 0.01 lowers u_n, so w̄' = w̄ − 0.01 < 0 and u, v swap back
    new = state.perturbed(np.array([0.0, 0.0]), np.array([0.0, 0.01]))
    assert new.log_w[0] == 0.1 and new.log_wbar[0] == -2000.0
    assert new.log_wbar[1] == pytest.approx(np.log(0.01), abs=1e-15) and not new.swap[1] and new.sign[1] == -1.0
    assert new.u[1] == pytest.approx(u[1], rel=1e-15) and new.v[1] == pytest.approx(v[1] + 0.01, rel=1e-15)
    # du = 1 makes w' = w − 1 < 0 and w̄' = w̄ + 1 = 1: the sign flips as well
    flipped = state.perturbed(np.array([0.0, 1.0]), np.array([0.0, 0.0]))
    assert flipped.log_wbar[1] == 0.0 and not flipped.swap[1] and flipped.sign[1] == 1.0
    assert flipped.log_w[1] == pytest.approx(np.log(1 - np.exp(-0.2)), abs=1e-15)
    assert flipped.u[1] == pytest.approx(u[1] + 1, rel=1e-15) and flipped.v[1] == pytest.approx(v[1], rel=1e-15)

"""The sign frame u_n > |v_n| of the log-coordinate flow, and the weights of an exact state."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from gradflow._diagonal._frame import apply_frame, frame_of, weights

_weights = st.lists(st.floats(-3, 3).filter(lambda x: abs(x) > 1e-3), min_size=6, max_size=6)


@given(_weights)
def test_frame_normalises_and_is_an_involution(values):
    u, v = np.array(values[:3]), np.array(values[3:])
    v = np.where(np.abs(u) == np.abs(v), 0.5 * v, v)
    swap, sign = frame_of(u, v)
    un, vn = apply_frame(u, v, swap, sign)
    assert np.all(un > np.abs(vn))
    np.testing.assert_array_equal(un * vn, u * v)  # β and u² − v² up to the swap's sign are kept
    back = apply_frame(un, vn, swap, sign)
    np.testing.assert_array_equal(back[0], u)
    np.testing.assert_array_equal(back[1], v)


def test_weights_of_a_state_below_the_float64_range():
    """w = e^{−0.2}, w̄ = e^{−2000} (0 in float64): u_n = v_n = w/2, mapped through the frame."""
    u, v = weights(np.array([-0.2, -0.2]), np.array([-2000.0, -2000.0]), np.array([False, True]), np.array([1.0, -1.0]))
    half = 0.5 * np.exp(-0.2)
    np.testing.assert_allclose(u, [half, -half], rtol=1e-15)
    np.testing.assert_allclose(v, [half, -half], rtol=1e-15)

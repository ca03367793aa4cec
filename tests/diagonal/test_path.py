"""Greedy paths (gradflow/_diagonal/_path.py): the piecewise views of the limit, stage by stage."""

import numpy as np
import pytest
from diagonal_common import P, linear, quiet


def test_path_views_are_piecewise():
    beta_star = np.array([2.0, 0.0, -1.0, 0.0])
    path = quiet(linear(beta_star))
    T1, T2 = path.times[1], path.times[2]
    assert (T1, T2) == pytest.approx((0.5, 1.0))
    tau = np.array([[0.0, 0.25], [T1, 0.75], [T2, 5.0]])
    np.testing.assert_array_equal(path.stage_at(tau), [[0, 0], [1, 1], [2, 2]])
    assert path.weights_at(tau).shape == (3, 2, P)
    np.testing.assert_allclose(path.weights_at(0.75), [2.0, 0, 0, 0], atol=1e-9)
    np.testing.assert_allclose(path.loss_at([0.1, 0.75, 3.0]), [2.5, 0.5, 0.0], atol=1e-9)
    # b is linear in τ on each stage: b^1 − (τ − T_1) g(θ^1) with g(θ^1) = β* − β^1.
    np.testing.assert_allclose(path.b_at(0.75), path.b[1] - 0.25 * np.array([0, 0, -1.0, 0]), atol=1e-12)
    np.testing.assert_allclose(path.b_at(T2)[2], 2.0)
    with pytest.raises(ValueError, match="non-negative"):
        path.stage_at(-1.0)

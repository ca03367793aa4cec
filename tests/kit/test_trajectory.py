"""What every family's runs share (gradflow/_kit/_trajectory.py): the trajectory protocol, batched results sliced by
α with their shared fields kept, the time index, and how gradient descent ended."""

from types import SimpleNamespace

import numpy as np
import pytest

from gradflow._kit._trajectory import AbstractGDResult, Trajectory, check_time_index, gd_status


class _GD(AbstractGDResult):
    pass


def _gd(log_alpha):
    A = len(log_alpha)
    return _GD(
        steps=np.array([0, 10, 20]),
        loss=np.arange(3.0 * A).reshape(A, 3),
        log_alpha=np.asarray(log_alpha, dtype=np.float64),
        lr=0.1,
        result=np.full(A, "successful"),
        message=np.full(A, ""),
    )


def test_a_batch_slices_by_alpha_and_keeps_its_shared_steps():
    gd = _gd([-1.0, -2.0, -4.0])
    one = gd[1]
    np.testing.assert_array_equal(one.steps, [0, 10, 20])
    np.testing.assert_array_equal(one.loss, [3.0, 4.0, 5.0])
    np.testing.assert_allclose(one.ts, [0.0, 0.5, 1.0])  # τ = step · lr / log(1/α)
    np.testing.assert_allclose(gd.ts[2], [0.0, 0.25, 0.5])
    assert gd[[0, 2]].log_alpha.tolist() == [-1.0, -4.0] and gd[1:].result.tolist() == ["successful"] * 2
    with pytest.raises(TypeError, match="holds a single run"):
        one[0]


def test_anything_with_the_fields_is_a_trajectory():
    fields = dict(ts=0, beta=0, b=0, loss=0, log_alpha=0)
    assert isinstance(SimpleNamespace(**fields), Trajectory)
    assert not isinstance(SimpleNamespace(**{k: v for k, v in fields.items() if k != "b"}), Trajectory)


def test_time_index():
    assert check_time_index(np.int64(-1), 4) == -1 and type(check_time_index(np.int64(3), 4)) is int
    for bad in (4, -5, 1.0, True):
        with pytest.raises(IndexError, match="k must be an integer index into the 4 recorded times"):
            check_time_index(bad, 4)


def test_gd_status_finds_the_first_non_finite_step():
    steps = np.array([0, 10, 20, 30])
    finite = np.array([[True] * 4, [True, True, False, False], [True] * 4, [False] * 4])
    result, message, after = gd_status(steps, np.array([-1, 25, 5, -1]), finite, lr=0.1, log_alpha=[-1.0] * 4)
    assert result.tolist() == ["successful", "non_finite", "non_finite", "non_finite"]
    assert message[0] == "" and "became non-finite at step 20" in message[1] and "lower lr" in message[1]
    assert "at step 5" in message[2] and "at the start" in message[3] and "smaller u0, v0 or α" in message[3]
    assert after.tolist() == [
        [False] * 4,
        [False, False, False, True],
        [False, True, True, True],
        [False, True] + [True] * 2,
    ]

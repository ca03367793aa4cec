"""The shared input checks: integers, scales, times, vectors and the degenerate-initialisation rule."""

import math
import warnings

import numpy as np
import pytest

from gradflow import AssumptionWarning
from gradflow._diagonal._checks import check_init
from gradflow._kit._checks import (
    NEAR_DEGENERATE,
    check_int,
    check_scales,
    check_times,
    check_vector,
    init_checked,
)


def test_check_int():
    assert check_int(np.int64(3), "n") == 3 and type(check_int(np.int64(3), "n")) is int
    assert check_int(0, "seed", minimum=0) == 0
    for bad in (0, -1, 2.0, True, "3"):
        with pytest.raises(ValueError, match=r"n must be a positive integer; got"):
            check_int(bad, "n")
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        check_int(-1, "seed", minimum=0)


def test_check_scales_alpha_and_log_alpha_agree():
    log_a, batched = check_scales(1e-8, None)
    assert log_a == np.log(1e-8) and not batched
    log_a, batched = check_scales(None, [-2.0, -1e4])
    np.testing.assert_array_equal(log_a, [-2.0, -1e4])
    assert batched


@pytest.mark.parametrize(
    "alpha, log_alpha, error, match",
    [
        (None, None, ValueError, "give exactly one of alpha"),
        (0.1, -2.0, ValueError, "give exactly one of alpha"),
        (0.0, None, ValueError, r"alpha must lie in \(0, 1\); got 0.0. .*pass log_alpha instead"),
        ([0.5, 1.0], None, ValueError, r"alpha must lie in \(0, 1\); got 1.0"),
        (None, 0.0, ValueError, "log_alpha must be finite and negative"),
        (None, -np.inf, ValueError, "log_alpha must be finite and negative"),
        (np.ones((2, 2)) / 2, None, ValueError, "scalar or a non-empty 1-D array"),
        ([], None, ValueError, "scalar or a non-empty 1-D array"),
        ("small", None, TypeError, "alpha must be a number"),
    ],
)
def test_check_scales_errors(alpha, log_alpha, error, match):
    with pytest.raises(error, match=match):
        check_scales(alpha, log_alpha)


def test_check_scales_names_the_arguments():
    with pytest.raises(ValueError, match="give exactly one of alphas .* or log_alphas"):
        check_scales(None, None, names=("alphas", "log_alphas"))


def test_check_times_and_vector():
    np.testing.assert_array_equal(check_times([0, 0.5, 2]), [0.0, 0.5, 2.0])
    with pytest.raises(ValueError, match=r"strictly increasing; got ts\[1\] = 2.0 >= ts\[2\] = 2.0"):
        check_times([0, 2, 2])
    assert check_vector([1, 2], 2, "u0").dtype == np.float64
    with pytest.raises(ValueError, match=r"u0 contains NaN or inf at index \[1\]"):
        check_vector([1, np.nan], 2, "u0")


def test_exact_degeneracy_is_an_error_naming_coordinates_and_fix():
    u0, v0 = np.array([1.0, 0.5, 0.0, 2.0]), np.array([0.2, -0.5, 0.0, 1.0])
    with pytest.raises(ValueError, match=r"at coordinates \[1, 2\] \(a, b\).*Assumption 4.2.*u0\[i\] \*= 1.1"):
        check_init(u0, v0, 4, names=("x", "a", "b", "y"))


def test_near_degeneracy_warns_with_the_log_alpha_it_needs():
    """Below the threshold the warning fires and names log(1/gap) of the smallest gap; above it, nothing."""
    v0 = np.array([1.0, 2.0, -1.0])
    u0 = np.array([0.3, 2.0 * (1 - 0.5 * NEAR_DEGENERATE), 1.0 + 1e-9])
    with pytest.warns(AssumptionWarning, match=r"coordinates \[1, 2\].*log\(1/gap\) = 20\.7") as record:
        check_init(u0, v0, 3)
    assert len(record) == 1 and record[0].filename == __file__  # at the first line outside gradflow
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_init(np.array([0.3, 2.0 * (1 - 2 * NEAR_DEGENERATE), 2.0]), v0, 3)
        with init_checked():  # a caller that checked once silences the repeats
            check_init(u0, v0, 3)
    assert math.log(1 / NEAR_DEGENERATE) == pytest.approx(13.8, abs=0.05)

"""The shared input checks (gradflow/_kit/_checks.py): integers, scales, times, vectors, the range of log α a flow's
state resolves, a model of coordinates (the degenerate-initialisation rule: tests/diagonal/test_checks.py)."""

import numpy as np
import pytest

from gradflow._kit._checks import (
    EPS,
    RESOLUTION,
    check_coordinate_model,
    check_depth_demo,
    check_int,
    check_log_range,
    check_scales,
    check_times,
    check_vector,
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


def test_the_log_range_is_the_state_float64_resolves():
    """A state reaching ``reach · |log α|`` is resolved to a tenth of ``atol + rtol`` down to ``log α = −(atol +
    rtol) / (RESOLUTION · eps · reach)``: −2.25e6 for diagonal weights (reach 2) at atol = 1e-8."""
    lowest = -1e-8 / (RESOLUTION * EPS * 2.0)
    assert lowest == pytest.approx(-2.2518e6, rel=1e-4)
    options = dict(rtol=0.0, atol=1e-8, names=("alpha", "log_alpha"), state="log w", flow="the flow")
    check_log_range([-10.0, lowest], None, reach=2.0, **options)
    match = r"^log_alpha = -2\.3e\+06 is below .*: the flow's state log w reaches 2·\|log α\| = 4\.6e\+06, .*\(eps·\|log w\|\)"
    with pytest.raises(ValueError, match=match):
        check_log_range([-10.0, -2.3e6], None, reach=2.0, **options)
    check_log_range(-2.3e6, None, reach=1.0, **options)  # a state reaching |log α| goes twice as far
    with pytest.raises(ValueError, match=r"reaches \|log α\| = 5e\+06"):
        check_log_range(-5e6, None, reach=1.0, **options)
    with pytest.raises(ValueError, match="ts"):
        check_log_range(-10.0, np.array([0.0, 1e13]), reach=2.0, **options)  # t = τ log(1/α) beyond T_MAX


def test_a_coordinate_model_is_checked_and_kept_as_float64():
    def h(x, beta):
        return x @ beta

    X, Y, p, names = check_coordinate_model(h, [[1, 2]], [3], p=2, loss="square", names=None)
    assert X.dtype == Y.dtype == np.float64 and p == 2 and type(p) is int and names == ("β[0]", "β[1]")
    assert check_coordinate_model(h, [[1, 2]], [3], p=2, loss="square", names=("a", 5))[3] == ("a", "5")
    with pytest.raises(TypeError, match="^h must be a function h"):
        check_coordinate_model(None, [[1, 2]], [3], p=2, loss="square", names=None)
    with pytest.raises(ValueError, match=r"^names must have one label per coordinate \(p=2\); got 1"):
        check_coordinate_model(h, [[1, 2]], [3], p=2, loss="square", names=("a",))
    with pytest.raises(ValueError, match="p must be a positive integer"):
        check_coordinate_model(h, [[1, 2]], [3], p=0, loss="square", names=None)
    with pytest.raises(ValueError, match=r"\(p = 3\)"):  # h at β = 0 of shape (p,) fails: the hint names p
        check_coordinate_model(h, [[1, 2]], [3], p=3, loss="square", names=None)


def test_a_depth_demos_task_and_depths():
    """A demo over depths takes a task of its family, without a depth among the task's options, and depths of the
    family's, each refusal naming what to give."""
    tasks, allowed = {"saxe_modes": None}, (2, 3, 4)
    check_depth_demo("saxe_modes", (("n", 3),), (2, 3), tasks=tasks, allowed=allowed, family="depth")
    with pytest.raises(ValueError, match=r"built-in task of the depth family, one of \['saxe_modes'\]; got 'x'"):
        check_depth_demo("x", (), (3,), tasks=tasks, allowed=allowed, family="depth")
    with pytest.raises(ValueError, match=r"depths=\(\.\.\.\), not as a model option"):
        check_depth_demo("saxe_modes", (("depth", 3),), (3,), tasks=tasks, allowed=allowed, family="depth")
    for depths in ((), (3, 7)):
        with pytest.raises(ValueError, match=r"non-empty tuple of depths in \(2, 3, 4\)"):
            check_depth_demo("saxe_modes", (), depths, tasks=tasks, allowed=allowed, family="depth")

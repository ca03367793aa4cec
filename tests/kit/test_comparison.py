"""The comparisons' shared pieces: rate fits, first crossings, windows and the check of the runs' scales."""

import math
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

from gradflow._kit._comparison import (
    asymptotic_range,
    check_fit_range,
    check_run_scales,
    default_times,
    detect,
    fit_rate,
    fit_rates,
    warn_unresolved,
    windows,
)


def test_fit_rate_recovers_the_exponent():
    log_alpha = -np.array([5.0, 20.0, 80.0, 320.0])
    r, c = fit_rate(log_alpha, 3.0 * (-log_alpha) ** -1.0)
    assert r == pytest.approx(1.0) and c == pytest.approx(math.log(3.0))
    assert math.isnan(fit_rate(log_alpha[:1], [0.1])[0])
    assert math.isnan(fit_rate(log_alpha[:2], [np.nan, 0.1])[0])


def test_fit_rates_fits_every_column():
    log_alpha = -np.array([5.0, 20.0, 80.0])
    x = (-log_alpha)[:, None, None]
    d = np.concatenate([x**-1.0, 2.0 * x**-0.5], axis=-1) * np.ones((1, 3, 1))  # (A, 3 windows, 2 matrices)
    np.testing.assert_allclose(fit_rates(log_alpha, d), np.tile([1.0, 0.5], (3, 1)))
    assert fit_rates(log_alpha, np.zeros((3, 0))).shape == (0,)  # no stage time to fit


def test_detect_interpolates_first_crossing():
    ts = np.array([0.0, 1.0, 2.0, 3.0])
    loss = np.array([1.0, 1.0, 0.0, 0.0])
    assert detect(ts, loss, [0.75, 0.25, -1.0]) == pytest.approx([1.25, 1.75, np.nan], nan_ok=True)


def test_windows():
    starts, ends = windows(np.array([0.0, 1.0, 3.0]), 0.25, 5.0)
    np.testing.assert_allclose(starts, [0.25, 1.25, 3.25])
    np.testing.assert_allclose(ends, [0.75, 2.75, 5.0])


def test_run_scales_must_match_the_alphas():
    check_run_scales([-1.0, -2.0], np.array([-1.0, -2.0]))
    with pytest.raises(ValueError, match="2 runs for 3 values"):
        check_run_scales([-1.0, -2.0], np.array([-1.0, -2.0, -3.0]))
    with pytest.raises(ValueError, match="order of alpha="):
        check_run_scales([-2.0, -1.0], np.array([-1.0, -2.0]))


STAGES = np.array([0.0, 1.0736, 1.311, 1.9508])  # T_k of a diagonal attention head


@pytest.mark.parametrize("log_alpha", [-10.0, -1000.0, -1e4])
def test_default_times_resolve_every_jump_down_to_a_hundredth_of_one_over_log_one_over_alpha(log_alpha):
    """Around every T_k the grid is at most 26% of the distance from T_k apart, from 0.01 / log(1/α) to δ: a flow's
    stage time, ``O(1/log 1/α)`` from T_k, is then detected to a quarter of its error. The even grid alone is 1.9e-3
    apart, more than a jump at log α = −1000 is wide."""
    delta = 0.05
    ts = default_times(STAGES, delta=delta, log_alphas=[-5.0, log_alpha])
    finest = 0.01 / -log_alpha
    for T in STAGES[1:]:
        for side in (-1, 1):
            d = np.sort(side * (ts - T))
            d = d[(d >= finest * (1 - 1e-9)) & (d <= delta * (1 + 1e-9))]
            assert d[0] == pytest.approx(finest, rel=1e-9) and d[-1] == pytest.approx(delta, rel=1e-9)
            assert np.all(np.diff(d) <= 0.26 * d[1:]), (T, side)
    even = default_times(STAGES, delta=delta)
    assert np.all(np.isin(even, ts)) and ts.size - even.size <= 2 * 3 * (10 * math.log10(delta / finest) + 2)


@pytest.mark.parametrize(
    "detected, spacing, warned",
    [
        ([1.0736 + 2e-3], 1e-2, ["log α = -1000, k = 1"]),  # the error is the grid's
        ([1.0736 + 2e-3], 1e-4, []),  # resolved
        ([np.nan], 1e-2, []),  # not detected: nothing to resolve
    ],
)
def test_an_error_within_the_grid_spacing_is_reported(detected, spacing, warned):
    ts = np.arange(0.0, 2.0, spacing)
    run = SimpleNamespace(ts=ts)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_unresolved("flow", np.array([-1000.0]), STAGES[:2], np.array([detected]), [run])
    messages = [str(w.message) for w in caught]
    assert len(messages) == len(warned) and all(x in m for x in warned for m in messages), messages
    assert all(w.filename == __file__ for w in caught)  # at the caller's line


def test_the_default_fit_range_is_the_scales_whose_stage_times_are_within_delta():
    log_alpha = np.array([-5.0, -20.0, -100.0, -1000.0])
    detected = STAGES[1:] + np.array([0.3, 0.04, 0.008, 0.0008])[:, None]
    np.testing.assert_array_equal(asymptotic_range(log_alpha, detected, STAGES, 0.05), [-1000.0, -20.0])
    # fewer than two asymptotic scales: every scale
    np.testing.assert_array_equal(asymptotic_range(log_alpha, detected + 0.045, STAGES, 0.05), [-1000.0, -5.0])


@pytest.mark.parametrize("bad", [(-1.0,), (-1.0, -10.0), ("a", "b"), None])
def test_a_bad_fit_range_is_refused(bad):
    with pytest.raises(ValueError, match="fit_range must be"):
        check_fit_range(bad)


@pytest.mark.parametrize("unit, finest", [(1e-3, 1e-5), (math.exp(-1000.0), 1e-14 * 1.25 * STAGES[-1])])
def test_a_depth_familys_jumps_are_resolved_to_its_time_unit_down_to_taus_resolution(unit, finest):
    """With ``time_unit = α^{L−2}`` (depth L) the refined times reach ``0.01 α^{L−2}`` from every T_k (a jump is
    about ``α^{L−2}`` wide in τ), but not below float64's resolution of τ (``1e-14`` of the last time)."""
    delta = 0.05
    ts = default_times(STAGES, delta=delta, log_alphas=[math.log(1e-3)], time_unit=unit)
    for T in STAGES[1:]:
        d = np.abs(ts - T)
        assert np.min(d[d > 0]) == pytest.approx(finest, rel=1e-6)
    assert ts.size < 2000  # about 10 per decade from the finest to δ, per side and stage

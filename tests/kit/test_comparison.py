"""The comparisons' shared pieces: rate fits, first crossings, windows and the check of the runs' scales."""

import math

import numpy as np
import pytest

from gradflow._kit._comparison import check_run_scales, detect, fit_rate, fit_rates, windows


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

"""compare_limits on the orthonormal diagonal linear model, where the greedy limit is known in closed form.

With ``XᵀX / n = I`` the greedy path activates the coordinates in decreasing ``|β*_i|`` at
``T = 1/|β*_i|`` (SPEC §3), so the stage times detected on the flow must approach those values.
"""

import json
import math

import numpy as np
import pytest

import theory

from gradflow import models
from gradflow._greedy import greedy_limit
from gradflow._compare import Comparison, _detect, _directions, compare_limits, fit_rate

BETA_STAR = np.array([1.6, 0.0, -1.0, 0.55])
ALPHAS = (1e-3, 1e-8, 1e-24)


@pytest.fixture(scope="module")
def task():
    return models.diagonal_linear(n=16, p=4, orthonormal=True, beta_star=BETA_STAR, seed=3)


@pytest.fixture(scope="module")
def comparison(task):
    # the assumption checks do not change the path; skipping them keeps the test fast
    path = greedy_limit(task.model, u0=task.u0, v0=task.v0, check_assumptions=False)
    return compare_limits(task.model, alphas=ALPHAS, u0=task.u0, v0=task.v0, path=path, gd=dict(lr=0.02))


def test_fit_rate_recovers_the_exponent():
    log_alpha = -np.array([5.0, 20.0, 80.0, 320.0])
    r, c = fit_rate(log_alpha, 3.0 * (-log_alpha) ** -1.0)
    assert r == pytest.approx(1.0) and c == pytest.approx(math.log(3.0))
    assert math.isnan(fit_rate(log_alpha[:1], [0.1])[0])
    assert math.isnan(fit_rate(log_alpha[:2], [np.nan, 0.1])[0])


def test_detect_interpolates_first_crossing():
    ts = np.array([0.0, 1.0, 2.0, 3.0])
    loss = np.array([1.0, 1.0, 0.0, 0.0])
    assert _detect(ts, loss, [0.75, 0.25, -1.0]) == pytest.approx([1.25, 1.75, np.nan], nan_ok=True)


def test_stage_times_are_one_over_beta_star(comparison):
    oracle = theory.greedy_orthonormal_stages(BETA_STAR).times  # T_k = 1/|β*_(k)|
    np.testing.assert_allclose(comparison.stage_times[1:], oracle, rtol=1e-6)
    # detected on the flow: closer to 1/|β*_(k)| as α decreases, within 5% at the smallest α
    err = comparison.time_error
    assert np.all(np.diff(err, axis=0) < 0)
    np.testing.assert_allclose(comparison.detected_times[-1], oracle, rtol=0.05)


def test_distances_shrink_as_alpha_decreases(comparison):
    for q in ("beta", "b", "loss", "time"):
        worst = comparison.worst(q)
        assert np.all(np.isfinite(worst)) and np.all(np.diff(worst) < 0), (q, worst)
    assert np.all(np.diff(comparison.b_distance, axis=0) < 0)
    # b and the stage times converge like 1/log(1/α)
    assert 0.6 < comparison.summary()["b"] < 1.4
    assert 0.6 < comparison.summary()["time"] < 1.4


def test_records_table_and_pytree(comparison):
    K = comparison.stage_times.size - 1
    records = comparison.to_records()
    assert len(records) == 2 * len(ALPHAS) * (K + 1)  # flow and gd
    assert {"method", "alpha", "stage", "T_greedy", "T_detected", "beta_distance", "b_distance"} <= set(records[0])
    json.dumps(records)
    table = comparison.to_table().splitlines()
    assert table[0].startswith("method,log_alpha,alpha,stage") and len(table) == len(records) + 1
    assert isinstance(comparison, Comparison)
    assert {r["quantity"] for r in comparison.rate_records()} == {"beta", "b", "loss", "time"}


def test_gd_comparison(comparison):
    gd = comparison.gd
    assert gd is not None and gd.method == "gd" and gd.b_distance.shape == comparison.b_distance.shape
    # with a small learning rate GD follows the flow: the same stage times, to within the step
    np.testing.assert_allclose(gd.detected_times, comparison.detected_times, atol=0.02)
    assert np.all(np.diff(gd.time_error, axis=0) < 0)
    assert {r["method"] for r in comparison.to_records()} == {"flow", "gd"}


def test_bad_input(task):
    with pytest.raises(ValueError, match="exactly one"):
        compare_limits(task.model, u0=task.u0, v0=task.v0)
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        compare_limits(task.model, alphas=[2.0], u0=task.u0, v0=task.v0)
    with pytest.raises(ValueError, match="threshold"):
        compare_limits(task.model, alphas=[1e-2], u0=task.u0, v0=task.v0, threshold=1.5)


def test_restart_directions_keep_asleep_weights_apart():
    log_alpha = math.log(1e-32)
    u = np.array([3e-20, 0.4, -2e-7])
    v = np.array([3e-20, -0.1, -2e-7 * (1 - 1e-9)])  # |u| = |v| in float64, then a resolvable gap
    u0, v0 = _directions(u, v, log_alpha, larger_u=np.array([False, True, True]))
    assert np.all(np.abs(u0) != np.abs(v0))
    assert abs(u0[0]) < abs(v0[0])  # the side of u² − v² at the flow's start is kept
    np.testing.assert_allclose(u0 * v0 * 1e-64, u * v, rtol=1e-11)
    np.testing.assert_allclose(u0[1:], u[1:] * 1e32, rtol=1e-12)
    with pytest.raises(ValueError, match="1e-300"):
        _directions(u, v, -1000.0, larger_u=np.ones(3, bool))

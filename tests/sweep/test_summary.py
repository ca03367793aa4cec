"""A sweep's summary over seeds: stage times, stage counts, assumption failures and rates per model setting."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gradflow._sweep import _summary


def test_rates_recover_a_power_law():
    """A task whose worst distance is C·(log 1/α)^(−r) at each α has rate r."""
    las = np.log([1e-2, 1e-4, 1e-8, 1e-16])
    rows = [
        dict(point=str(a), task="t", log_alpha=la, stage=k, b_distance=3.0 * (-la) ** -0.75 / (1 + k), time_error=0.0)
        for a, la in enumerate(las)
        for k in range(3)
    ]
    assert _summary._task_rate(rows, "b") == pytest.approx(0.75, abs=1e-12)
    assert math.isnan(_summary._task_rate(rows, "time"))  # no positive time error to fit


def _rows(task, seed, n, times, fails, rate, log_alphas=(-10.0, -100.0)):
    """The rows of one task at each α: its stages (``times``: T_0..T_K), Assumption 4.2 failing at the stages in
    ``fails``, the distance of b at stage k ``(log 1/α)^(−rate) / (1 + k)`` and a time error of rate 0.25 (none
    for a rate of 1)."""
    K = len(times) - 1
    return [
        dict(
            point=f"{task}{la}",
            task=task,
            model="m",
            n=n,
            p=3,
            seed=seed,
            log_alpha=la,
            stage=k,
            num_stages=K,
            T_greedy=t,
            ok_4_2=k not in fails,
            ok_4_3=True,
            ok_4_4=True,
            b_distance=(-la) ** -rate / (1 + k),
            time_error=math.nan if rate == 1.0 else 0.1 * (-la) ** -0.25,
        )
        for la in log_alphas
        for k, t in enumerate(times)
    ]


def test_summary_pools_the_seeds_of_each_setting():
    """Two settings of one model (n = 1, 2; p the same): two seeds with 2 and 1 stages (4.2 failing in one) and
    rates 0.5 and 1; one seed at one α with no stage, which has no rate."""
    rows = _rows("t1", 0, 1, [0.0, 1.0, 3.0], {2}, 0.5) + _rows("t2", 1, 1, [0.0, 2.0], set(), 1.0)
    rows += _rows("t3", 0, 2, [0.0], set(), 0.5, log_alphas=(-10.0,))
    assert _summary.quantities(rows) == ("b", "time")
    first, second = _summary.summarise(rows)
    assert (first.label, first.tasks, second.label, second.tasks) == ("m n=1", 2, "m n=2", 1)
    assert list(first.stage_times) == [1, 2] and second.stage_times == {}
    assert first.stage_times[1].tolist() == [1.0, 2.0] and first.stage_times[2].tolist() == [3.0]
    assert first.num_stages.tolist() == [2, 1] and second.num_stages.tolist() == [0]
    assert first.failures == {"4.2": 0.5, "4.3": 0.0, "4.4": 0.0}
    assert second.failures == {"4.2": 0.0, "4.3": 0.0, "4.4": 0.0}
    np.testing.assert_allclose(first.rates["b"], [0.5, 1.0], rtol=1e-12)
    np.testing.assert_allclose(first.rates["time"], [0.25], rtol=1e-12)  # t2 has no finite time error
    assert second.rates["b"].size == second.rates["time"].size == 0  # one α: no rate

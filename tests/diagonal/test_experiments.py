"""The perturb-and-continue checks (gradflow/_diagonal/_experiments.py, paper appendix A) on the orthonormal diagonal
linear model, where the coordinates are uncoupled (``g_i = β*_i − β_i``): a coordinate that is not perturbed must
follow the unperturbed flow exactly, whatever the others do."""

import math

import numpy as np
import pytest

from gradflow import models, perturb_and_continue, simulate_flow

BETA_STAR = np.array([1.6, 0.0, -1.0, 0.55])


@pytest.fixture(scope="module")
def task():
    return models.diagonal_linear(n=16, p=4, orthonormal=True, beta_star=BETA_STAR, seed=3)


PTS = np.linspace(0.0, 2.5, 51)  # stages at τ = 0.625 (i = 0), 1.0 (i = 2), 1.82 (i = 3)
SCALES = (math.log(1e-8), -2000.0)  # -2000: far below float64 (α ≈ 1e-869)


@pytest.fixture(scope="module")
def flows(task):
    return {la: simulate_flow(task.model, u0=task.u0, v0=task.v0, ts=PTS, log_alpha=la) for la in SCALES}


@pytest.mark.parametrize("log_alpha", SCALES)
def test_zero_noise_continues_the_flow(task, flows, log_alpha):
    """std = 0 restarts from the exact states: the reference flow again. The late start is padded
    (NaN-padded in the result) to the same number of times, so both runs share one compilation."""
    pert = perturb_and_continue(task.model, flows[log_alpha], starts=[16, 40], std=0.0, span=1.2, kind="plateau")
    assert pert.ts.shape == (2, 25) and pert.beta.shape == (2, 25, 4)
    np.testing.assert_array_equal(pert.ts[0], PTS[16:41])
    np.testing.assert_array_equal(pert.ts[1, :11], PTS[40:])
    assert np.all(np.isnan(pert.ts[1, 11:])) and np.all(np.isnan(pert.beta[1, 11:]))
    np.testing.assert_allclose(pert.beta[0], pert.reference_beta[0], rtol=0, atol=1e-7)
    np.testing.assert_allclose(pert.beta[1, :11], pert.reference_beta[1, :11], rtol=0, atol=1e-7)
    assert np.all(pert.initial_deviation <= 1e-14) and np.all(pert.final_deviation <= 1e-7)


@pytest.mark.slow  # fast twins: the zero-noise and unperturbed-coordinate tests of the same runs
def test_runs_end_with_their_window(task):
    """Recorded times that cluster (around the stage at τ = 1) make the longest window hold many times: a run
    that starts on the first plateau (τ = 0.5) still ends at τ + span, NaN-padded to the common shape, and its
    final deviation is the one at that window's last time (not at a later jump)."""
    ts = np.union1d(PTS, 1.0 + np.linspace(-0.02, 0.02, 21))
    flow = simulate_flow(task.model, u0=task.u0, v0=task.v0, ts=ts, log_alpha=SCALES[0])
    pert = perturb_and_continue(task.model, flow, starts=[10], std=0.05, span=0.3, kind="plateau")
    kept = ts[(ts >= ts[10]) & (ts <= ts[10] + 0.3)]
    np.testing.assert_array_equal(pert.ts[0, : kept.size], kept)
    assert np.all(np.isnan(pert.ts[0, kept.size :])) and pert.ts.shape[1] > kept.size
    dev = np.max(np.abs(pert.beta[0] - pert.reference_beta[0]), axis=-1)
    assert pert.final_deviation[0] == dev[kept.size - 1]


@pytest.mark.parametrize("log_alpha, threshold", [(SCALES[0], 0.1), (SCALES[1], 1e-5)])
def test_unperturbed_coordinates_follow_the_flow(task, flows, log_alpha, threshold):
    """Perturbed at τ = 0.8, after the first stage: only the awake coordinate 0 is above the threshold.
    The others keep their exact (log w, log w̄) and wake at the reference times (coordinate 2 through
    w̄, i.e. through the conserved u² − v², at τ = 1), while coordinate 0 returns to its plateau."""
    pert = perturb_and_continue(
        task.model, flows[log_alpha], starts=[16], std=0.05, span=1.2, kind="plateau", threshold=threshold
    )
    np.testing.assert_array_equal(pert.perturbed, [[True, False, False, False]])
    beta, ref = pert.beta[0], pert.reference_beta[0]
    np.testing.assert_allclose(beta[:, 1:], ref[:, 1:], rtol=0, atol=1e-6)
    np.testing.assert_allclose(ref[-1, 2:], BETA_STAR[2:], atol=0.05)  # both woke within the window
    assert abs(beta[0, 0] - ref[0, 0]) > 1e-3 and abs(beta[-1, 0] - ref[-1, 0]) < 1e-6

"""The depth demo and pipeline: the depth-separation measure on curves built from the greedy limit (fast), the
configuration's checks, the built-in tasks, and (slow: compiles the flow at two depths) the quick demo end to end."""

import math
import types

import numpy as np
import pytest

import gradflow
from gradflow._depth._pipeline import (
    PIPELINE,
    QUICK_DEPTH,
    DepthDemoConfig,
    plateau_overlap,
    run_depth_demo,
    threshold_alpha,
)

PATH = types.SimpleNamespace(times=np.array([0.0, 1.0, 2.0, 4.0]), loss=np.array([7.0, 2.5, 0.5, 0.0]))


def test_plateau_overlap_is_zero_on_the_staircase_and_measures_a_blur():
    ts = np.linspace(0.0, 5.0, 501)
    staircase = PATH.loss[np.searchsorted(PATH.times, ts, side="right") - 1]
    np.testing.assert_array_equal(plateau_overlap(PATH, ts, staircase), 0.0)
    blurred = staircase.copy()
    blurred[np.isclose(ts, 1.5)] = 2.5 - 0.2 * (7.0 - 0.5)  # plateau 1 is 20 % into its neighbours' drops
    np.testing.assert_allclose(plateau_overlap(PATH, ts, blurred), [0.0, 0.2, 0.0])


def test_threshold_alpha_is_the_largest_alpha_from_which_on_stages_separate():
    log_alphas = np.log([1e-1, 1e-2, 1e-4, 1e-8])
    overlap = np.array([[0.5, 0.3], [0.05, 0.2], [0.01, 0.02], [0.0, 0.001]])
    assert threshold_alpha(log_alphas, overlap, 0.1) == pytest.approx(np.log(1e-4))
    assert threshold_alpha(log_alphas, overlap, 0.25) == pytest.approx(np.log(1e-2))
    assert math.isnan(threshold_alpha(log_alphas, overlap[::-1], 0.1))  # the smallest α does not separate
    assert threshold_alpha(log_alphas[::-1], overlap[::-1], 0.1) == pytest.approx(np.log(1e-4))  # any order


def test_config_refuses_bad_depths_models_and_scales():
    with pytest.raises(ValueError, match="depths must be"):
        DepthDemoConfig(depths=(1, 3))
    with pytest.raises(ValueError, match="built-in task of the depth family"):
        DepthDemoConfig(model="diagonal_linear")
    with pytest.raises(ValueError, match="not as a model option"):
        DepthDemoConfig(model_options=(("depth", 3),))
    with pytest.raises(ValueError, match="above float64's range"):
        DepthDemoConfig(gd_log_alphas=(-1000.0,))
    with pytest.raises(ValueError, match="at L = 2 the depth demo draws Saxe's closed form"):
        DepthDemoConfig(model="depth_linear", depths=(2, 3))
    options = dict(log_alphas=(-5.0, -10.0), tau_max=None, num_times=50, max_stages=None, perturb=False)
    config = PIPELINE.configure("depth_linear", (("depth", 4), ("p", 5), ("seed", 1)), rtol=0.0, atol=1e-8, **options)
    assert config.depths == (4,) and config.model_options == (("p", 5), ("seed", 1)) and config.gd_log_alphas == ()
    assert config.task(4).model.depth == 4 and config.task(4).model.p == 5
    with pytest.raises(ValueError, match="--perturb"):
        PIPELINE.configure("saxe_modes", (), rtol=0.0, atol=1e-8, **dict(options, perturb=True))


@pytest.mark.slow
def test_quick_depth_demo_end_to_end(tmp_path, unoptimised_xla):
    """L = 2, 3 on Saxe's modes: the files, the greedy stage times at their closed forms, L = 3 separating at a far
    larger α than L = 2, GD beside the flow; a re-run reuses everything."""
    result = run_depth_demo(QUICK_DEPTH, out=tmp_path, progress=False)
    for name in ("report.md", "comparison.csv", "comparison.json", "figures/curves.png", "figures/separation.png"):
        assert (tmp_path / name).exists(), name
    two, three = result.runs
    np.testing.assert_allclose(two.path.times[1:], [1 / 3, 1 / 2, 1.0], rtol=1e-6)
    np.testing.assert_allclose(three.path.times[1:], [1 / 3, 1 / 2, 1.0], rtol=1e-6)
    log_alphas = np.asarray(QUICK_DEPTH.log_alphas)
    separates = [threshold_alpha(log_alphas, run.overlap, QUICK_DEPTH.separation) for run in result.runs]
    assert separates[1] > separates[0] or math.isnan(separates[0]), separates
    assert isinstance(result.runs[1].gd[0], gradflow.DepthGDResult)
    assert "Depth separation" in (tmp_path / "report.md").read_text()
    again = run_depth_demo(QUICK_DEPTH, out=tmp_path, progress=False)
    assert all(how == "reused" for _, how, _ in again.log)

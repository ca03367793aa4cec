"""The deep linear demo and pipeline: the configuration's checks (the flow's range of α among them), Saxe's staircase
at L = 2, ``gradflow compare`` and ``gradflow demo --deep-linear`` on tiny tasks (slow: compiles the flow), and a
fast twin at one depth and one α."""

import math

import numpy as np
import pytest

import gradflow
from gradflow import models
from gradflow._cli import main
from gradflow._deep_linear._pipeline import (
    PIPELINE,
    QUICK_DEEP_LINEAR,
    DeepLinearDemoConfig,
    SaxeStaircase,
    closed_form_times,
    run_deep_linear_demo,
)

TINY = (("m", 2), ("n", 2), ("singular_values", (2.0, 1.0)))


def test_config_refuses_bad_depths_models_and_scales():
    with pytest.raises(ValueError, match="built-in task of the deep linear family"):
        DeepLinearDemoConfig(model="saxe_modes")
    with pytest.raises(ValueError, match="not as a model option"):
        DeepLinearDemoConfig(model_options=(("depth", 3),))
    with pytest.raises(ValueError, match="depths must be a non-empty tuple"):
        DeepLinearDemoConfig(depths=(1, 3))
    with pytest.raises(ValueError, match="depths must hold one L ≥ 3"):
        DeepLinearDemoConfig(depths=(2,))
    with pytest.raises(ValueError, match="at L = 2 the deep linear demo draws Saxe's closed form"):
        DeepLinearDemoConfig(model="deep_linear_regression", depths=(2, 3))
    with pytest.raises(ValueError, match="at L = 2 the deep linear demo draws Saxe's closed form"):
        DeepLinearDemoConfig(model_options=(("aligned", False),), depths=(2, 3))
    # the flow's range: α = 5e-10 is taken at L = 3 to 6 (the split reaches the small-α path's α ≤ 1e-10), 5e-14 at
    # atol = 1e-12 is not (the split stops at 1e-13, the small-α path starts at 1e-14)
    DeepLinearDemoConfig(depths=(3, 4, 5, 6), log_alphas=(math.log(5e-10),))
    with pytest.raises(ValueError, match="is below what float64 resolves for a deep linear network of depth L = 3"):
        DeepLinearDemoConfig(depths=(3, 6), log_alphas=(math.log(5e-14),), atol=1e-12)
    with pytest.raises(ValueError, match="num_times must be an integer >= 2"):
        DeepLinearDemoConfig(num_times=1)
    for config in PIPELINE.demo.configs.values():  # the demo's own scales lie inside the range
        assert isinstance(config, DeepLinearDemoConfig) and config.aligned


def test_configure_for_gradflow_compare():
    options = dict(log_alphas=(-2.0, -4.0), tau_max=None, num_times=50, max_stages=None, perturb=False)
    config = PIPELINE.configure(
        "deep_linear_regression", (("depth", 4), ("m", 2), ("seed", 1)), rtol=0.0, atol=1e-8, **options
    )
    assert config.depths == (4,) and config.model_options == (("m", 2), ("seed", 1)) and not config.aligned
    assert config.task(4).model.depth == 4 and config.task(4).model.shape == (2, 5)
    assert PIPELINE.configure("deep_matrix_factorization", (), rtol=0.0, atol=1e-8, **options).depths == (3,)
    with pytest.raises(ValueError, match="needs --depth 3 or more"):
        PIPELINE.configure("deep_matrix_factorization", (("depth", 2),), rtol=0.0, atol=1e-8, **options)
    with pytest.raises(ValueError, match="--perturb"):
        PIPELINE.configure("deep_matrix_factorization", (), rtol=0.0, atol=1e-8, **dict(options, perturb=True))
    with pytest.raises(ValueError, match="--tau-max"):
        PIPELINE.configure("deep_matrix_factorization", (), rtol=0.0, atol=1e-8, **dict(options, tau_max=2.0))


def test_saxe_staircase_holds_the_strongest_modes_from_one_over_s():
    rng = np.random.default_rng(0)
    U, _ = np.linalg.qr(rng.standard_normal((4, 3)))
    V, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    M = (U[:, :2] * [1.0, 4.0]) @ V[:, :2].T
    path = SaxeStaircase.of(M, rank=3)
    np.testing.assert_allclose(path.times, [0.0, 0.25, 1.0])
    np.testing.assert_allclose(path.loss, [8.5, 0.5, 0.0], atol=1e-12)
    np.testing.assert_allclose(path.W[-1], M, atol=1e-12)
    np.testing.assert_allclose(path.singular_values_at([0.1, 0.5, 2.0]), [[0, 0, 0], [4, 0, 0], [4, 1, 0]], atol=1e-12)


def test_fast_twin_one_depth_one_alpha(tmp_path):
    """The demo's code path at L = 3 on a 2×2 teacher and one α: its files, the greedy times at Saxe's, the stage
    times detected near them; a re-run reuses everything."""
    config = DeepLinearDemoConfig(model_options=TINY, depths=(3,), log_alphas=(math.log(1e-2),), num_times=30)
    result = run_deep_linear_demo(config, out=tmp_path, progress=False)
    for name in ("report.md", "comparison.csv", "comparison.json", "figures/singular_values.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    (run,) = result.runs
    np.testing.assert_allclose(run.path.times[1:], [0.5, 1.0], rtol=1e-6)
    np.testing.assert_allclose(closed_form_times(config, run), [0.5, 1.0])
    np.testing.assert_allclose(run.detected[0], [0.5, 1.0], atol=0.05)
    assert "Saxe's closed form" in (tmp_path / "report.md").read_text()
    again = run_deep_linear_demo(config, out=tmp_path, progress=False)
    assert all(how == "reused" for _, how, _ in again.log)


@pytest.mark.slow
def test_quick_demo_end_to_end(tmp_path, capsys):
    """``gradflow demo --deep-linear --quick``: L = 2 and 3 on the 3×3 aligned task, Saxe's times at both depths, the
    flows' detected times near them, and at L = 3 ten times nearer at α = 1e-2 than at 1e-1 (a power of α; at L = 2
    they converge as 1/log(1/α))."""
    assert main(["demo", "--deep-linear", "--quick", "--out", str(tmp_path), "--no-progress"]) == 0
    out = tmp_path / "deep_linear"
    for name in (
        "report.md",
        "comparison.csv",
        "comparison.json",
        "figures/stage_times.png",
        "figures/convergence_L=3.png",
    ):
        assert (out / name).stat().st_size > 0, name
    assert "greedy T_k" in capsys.readouterr().out
    result = run_deep_linear_demo(QUICK_DEEP_LINEAR, out=out, progress=False)  # reused
    for run in result.runs:
        closed = closed_form_times(QUICK_DEEP_LINEAR, run)
        np.testing.assert_allclose(run.path.times[1:], closed, rtol=1e-6)
        error = np.abs(run.detected - closed)
        assert np.all(error < 0.2), (run.depth, error)
        if run.depth == 3:
            assert np.all(error[1] < 0.2 * error[0]), error


@pytest.mark.slow
def test_compare_command(tmp_path, capsys):
    """``gradflow compare`` of a deep linear task writes its report; a scale outside the flow's range, or L = 2, is
    refused in one line before anything runs."""
    argv = ["compare", "--model", "deep_matrix_factorization", "--m", "2", "--n", "2", "--singular-values", "2", "1"]
    argv += ["--num-times", "40", "--out", str(tmp_path), "--no-progress"]
    assert main(argv + ["--alpha", "1e-1", "1e-2"]) == 0
    assert "fitted r" in capsys.readouterr().out
    assert "# gradflow compare: deep_matrix_factorization at L = 3" in (tmp_path / "report.md").read_text()
    assert main(argv + ["--alpha", "5e-14", "--depth", "6", "--atol", "1e-12"]) == 2  # between the split and small α
    assert "is below what float64 resolves for a deep linear network" in capsys.readouterr().err
    assert main(argv + ["--alpha", "1e-1", "--depth", "2"]) == 2
    assert "needs --depth 3 or more" in capsys.readouterr().err
    assert main(argv + ["--alpha", "1e-1", "--samples", "4"]) == 2
    assert "--samples does not apply to deep_matrix_factorization" in capsys.readouterr().err


def test_greedy_command_and_its_checkpoint(tmp_path, capsys):
    """``gradflow greedy`` of a deep linear task (it keeps a checkpoint); a path resumed from a checkpoint of its
    first stage equals the one computed at once, its checks included; a checkpoint is refused for another model,
    ``check_assumptions`` or ``seed``."""
    argv = ["greedy", "--model", "deep_linear_regression", "--m", "2", "--n", "3", "--singular-values", "2", "1"]
    assert main(argv + ["--out", str(tmp_path / "cli")]) == 0
    assert "gap to runner-up" in capsys.readouterr().out
    assert (tmp_path / "cli" / "greedy.md").exists() and not (tmp_path / "cli" / "greedy-stages.npz").exists()
    task = models.deep_linear_regression(m=2, n=3, singular_values=(2.0, 1.0))
    whole = gradflow.greedy_limit(task.model, u0=task.u0)
    kept = tmp_path / "stages.npz"
    first = gradflow.greedy_limit(task.model, u0=task.u0, max_stages=1, checkpoint=kept)
    assert first.times.size == 2 and kept.exists()
    resumed = gradflow.greedy_limit(task.model, u0=task.u0, checkpoint=kept)
    np.testing.assert_array_equal(resumed.times, whole.times)
    np.testing.assert_array_equal(resumed.W, whole.W)
    np.testing.assert_array_equal(resumed.delta_gap, whole.delta_gap)
    np.testing.assert_array_equal(resumed.loss, whole.loss)
    np.testing.assert_array_equal(resumed.hessian_min_eig, whole.hessian_min_eig)
    np.testing.assert_array_equal(resumed.perturbation_spread, whole.perturbation_spread)  # the perturbations resume
    other = models.deep_linear_regression(m=2, n=3, singular_values=(2.0, 1.0), seed=1)
    with pytest.raises(ValueError, match="keeps the stages of another greedy path"):
        gradflow.greedy_limit(other.model, u0=other.u0, checkpoint=kept)
    for options in (dict(check_assumptions=False), dict(seed=1)):
        with pytest.raises(ValueError, match="keeps the stages of another greedy path"):
            gradflow.greedy_limit(task.model, u0=task.u0, checkpoint=kept, **options)

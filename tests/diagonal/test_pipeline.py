"""The diagonal family's pipeline (gradflow/_diagonal/_pipeline.py, ``gradflow demo``) on its reduced configuration:
every file, a re-run that recomputes nothing, and ``gradflow compare``'s run of it under its own name."""

import numpy as np
import pytest

from gradflow._demo import pipeline_of
from gradflow._diagonal import DIAGONAL
from gradflow._diagonal._pipeline import PAPER_LOG_ALPHAS, QUICK, DemoConfig, run_demo
from gradflow._kit._report import format_alpha


def test_config_validation():
    with pytest.raises(ValueError, match="unknown model"):
        DemoConfig(model="mlp")
    with pytest.raises(ValueError, match="alpha"):
        DemoConfig(log_alphas=(1.0,))
    with pytest.raises(ValueError, match="figure_log_alphas shares no scale"):
        DemoConfig(log_alphas=(-3.0,))
    assert DemoConfig(log_alphas=(-3.0,), figure_log_alphas=None).drawn() == [0]
    default = DemoConfig()
    assert len(default.log_alphas) == 11 and min(default.log_alphas) == -1e4
    assert [default.log_alphas[a] for a in default.drawn()] == list(PAPER_LOG_ALPHAS)


@pytest.mark.slow  # `make demo` runs it; fast twins: tests/demo/test_steps.py (reuse), tests/diagonal/test_report.py,
# tests/diagonal/test_compare.py::test_save_load_plot_report (what it writes)
def test_quick_demo_writes_everything_and_reuses_it(tmp_path):
    result = run_demo(QUICK, out=tmp_path, progress=False)
    expected = ["report.md", "comparison.csv", "comparison.json", "log.txt"] + [
        f"figures/{name}.png"
        for name in ("loss", "beta_KQ", "beta_VO", "log_weights", "convergence", "perturb_plateau", "perturb_stage")
    ]
    for name in expected:
        assert (tmp_path / name).stat().st_size > 0, name
    results = sorted((tmp_path / "results").glob("*.npz"))
    assert len(results) == 1 + len(QUICK.log_alphas) + 2
    assert {w for _, w, _ in result.log} == {"computed"}
    # Figure 9's check: perturbed at random plateau times, the flow returns to the unperturbed one
    plateau = result.perturbations["plateau"]
    assert np.all(plateau.final_deviation < plateau.initial_deviation)
    report = (tmp_path / "report.md").read_text()
    assert "Greedy limit" in report and "Hessian min eig" in report and "fitted r" in report
    # the report's numbers are the computed ones, and checks that QUICK skips are not claimed as passed
    for T in result.path.times[1:]:
        assert f"| {T:.4g} |" in report
    assert not QUICK.check_assumptions and "4.3 not run" in report and "4.3 ✓" not in report
    # log α = −1e4 is compared and fitted, not drawn per α; the grid resolves its stage times near T_k
    assert f"α = {format_alpha(-1e4)} |" in report and "α ∈ {0.01, 1e-8, 1e-16}" in report and "figures draw" in report
    T = result.path.times[1:]
    assert np.all(np.abs(result.comparison.detected_times[-1] - T) < 2e-3 * T)
    mtimes = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file() and p.name != "log.txt"}

    again = run_demo(QUICK, out=tmp_path, progress=False)
    assert {w for _, w, _ in again.log} == {"reused"}
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes
    np.testing.assert_array_equal(again.comparison.b_distance, result.comparison.b_distance)
    # gradflow compare runs the same pipeline under its own name: the finished runs reused, the report retitled
    assert report.startswith("# gradflow demo: diagonal_attention\n")
    table = (tmp_path / "comparison.csv").read_bytes()
    pipeline_of(DIAGONAL).run(QUICK, out=tmp_path, progress=False)
    assert (tmp_path / "report.md").read_text().startswith("# gradflow compare: diagonal_attention\n")
    assert (tmp_path / "comparison.csv").read_bytes() == table

"""The factorised family's pipeline (gradflow/_factorized/_pipeline.py, ``gradflow demo --full-weights``) and the
factorised tasks on the command line."""

import dataclasses
import json
import math

import numpy as np
import pytest

from gradflow._cli import _commands, main
from gradflow._factorized import figure2_order
from gradflow._factorized._pipeline import FIGURE2_ALPHAS, PAPER_FULL, QUICK_FULL, RankDemoConfig
from gradflow._io import load_result


def test_config_validation():
    with pytest.raises(ValueError, match="unknown model 'diagonal_attention'"):
        RankDemoConfig(model="diagonal_attention")
    with pytest.raises(ValueError, match="float64's range"):
        RankDemoConfig(gd_log_alphas=(-1000.0,))
    with pytest.raises(ValueError, match="gd_lr"):
        RankDemoConfig(gd_lr=0.0)
    with pytest.raises(ValueError, match="method must be one of .*; got 'dopri5'"):
        RankDemoConfig(method="dopri5")
    assert RankDemoConfig().log_alphas[-1] == -1000.0 and min(RankDemoConfig().log_alphas[:-1]) == math.log(1e-32)
    assert figure2_order(("KQ", "VO")) == [1, 0] and figure2_order(("W",)) == [0]


def test_paper_size_config_and_wiring(tmp_path, monkeypatch, capsys):
    """``--paper-size`` runs ``PAPER_FULL`` (the paper's head, Figure 2's α and −1000) into its own claimed folder;
    nothing is computed here."""
    task = dict(PAPER_FULL.model_options)
    assert (task["n"], task["tokens"], task["dim"]) == (1000, 10, 50)
    assert task["teacher_kq"] == task["teacher_vo"] == (1.0, 0.6, 0.3)
    assert PAPER_FULL.log_alphas == tuple(math.log(a) for a in FIGURE2_ALPHAS) + (-1000.0,)
    assert min(PAPER_FULL.gd_log_alphas) > math.log(np.finfo(np.float64).tiny)
    assert PAPER_FULL.method == "leap" and RankDemoConfig().method == "auto"  # the leaps compile faster there
    ran = []

    class Stop(Exception):
        pass

    def run(config, *, out, force, progress):
        ran.append((config, out))
        raise Stop

    demos = _commands.demos
    monkeypatch.setattr(
        _commands, "demos", lambda: dict(demos(), factorized=dataclasses.replace(demos()["factorized"], run=run))
    )
    argv = ["demo", "--full-weights", "--paper-size", "--out", str(tmp_path), "--no-progress"]
    with pytest.raises(Stop):
        main(argv)
    assert ran == [(PAPER_FULL, str(tmp_path / "full_weights_paper"))]
    record = json.loads((tmp_path / "full_weights_paper" / "gradflow.json").read_text())
    assert record == dict(command="demo", quick=False, paper_size=True)
    (tmp_path / "full_weights_paper" / "gradflow.json").write_text(json.dumps(dict(command="demo", quick=True)))
    assert main(argv) == 2 and "pass --overwrite to replace it" in capsys.readouterr().err
    assert main(["demo", "--paper-size", "--out", str(tmp_path)]) == 2
    assert "--paper-size applies to the full-weights demo" in capsys.readouterr().err
    assert main(["demo", "--full-weights", "--paper-size", "--quick"]) == 2
    assert "argument --quick: not allowed with argument --paper-size" in capsys.readouterr().err
    assert len(ran) == 1


def test_cli_errors_for_factorised_models(capsys):
    """Options that do not apply to a factorised task are one-line errors, before anything is computed."""
    assert main(["compare", "--model", "attention_full", "--perturb"]) == 2
    assert "--perturb applies to the models with diagonal weights" in capsys.readouterr().err
    assert main(["greedy", "--model", "matrix_factorization", "--p", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "gradflow: error: --p does not apply to matrix_factorization (it takes --m --n --seed)"
    assert main(["flow", "--model", "diagonal_linear", "--measurements", "3"]) == 2
    assert "--measurements does not apply to diagonal_linear" in capsys.readouterr().err


@pytest.mark.slow  # fast twins: the wiring above, the diagonal quick demo (the steps reused), and
# tests/factorized/test_compare.py::test_report_and_figures_of_a_full_weight_comparison (what it writes)
def test_quick_full_weights_demo_writes_everything_and_reuses_it(tmp_path, capsys):
    """``gradflow demo --full-weights`` on its reduced configuration (about 10 s): every file, the report's numbers,
    rank jumps converging to the greedy T_k, and a re-run that recomputes nothing."""
    argv = ["demo", "--full-weights", "--quick", "--out", str(tmp_path), "--no-progress"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    out = tmp_path / "full_weights"
    assert "greedy T_k" in printed and "fitted r" in printed and str(out / "report.md") in printed
    for name in ("report.md", "comparison.csv", "comparison.json", "log.txt") + tuple(
        f"figures/{f}.png" for f in ("spectra", "log_scales", "ranks", "convergence")
    ):
        assert (out / name).stat().st_size > 0, name
    results = {p.name.split("-")[0]: load_result(p) for p in (out / "results").glob("*.npz")}
    assert len(results) == 1 + len(QUICK_FULL.log_alphas) + len(QUICK_FULL.gd_log_alphas)
    path = results["greedy"]
    data = json.loads((out / "comparison.json").read_text())
    assert len(data["greedy"]) == path.times.size and data["greedy_message"] == path.message
    records = [r for r in data["records"] if r["method"] == "flow"]
    assert len(records) == len(QUICK_FULL.log_alphas) * path.times.size
    # the rank jumps detected on the flows approach the greedy T_k as α decreases, the smallest α within 2%
    detected = np.array([[r["T_detected"] for r in records if r["stage"] == k] for k in range(1, path.times.size)])
    err = np.abs(detected - path.times[1:, None])
    assert np.all(np.diff(err, axis=1) < 0) and np.all(err[:, -1] < 0.02 * path.times[1:])
    report = (out / "report.md").read_text()
    assert report.startswith("# gradflow demo --full-weights: attention_full\n")
    for T in path.times[1:]:
        assert f"| {T:.4g} |" in report
    assert "What is exact and what is conjectured" in report and "| log₁₀ ε σ_1 (GD) |" in report
    assert report.count("minimum not run") == path.times.size - 1  # QUICK_FULL skips the checks; W̄^0 = 0 needs none
    mtimes = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and p.name != "log.txt"}
    assert main(argv) == 0
    assert "0 steps computed" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes


@pytest.mark.slow
def test_flow_and_greedy_commands_on_matrix_factorisation(tmp_path, capsys):
    """``flow`` and ``greedy`` with a factorised task: the saved results are the requested runs, T_r = 1/σ_r."""
    sizes = ["--model", "matrix_factorization", "--m", "4", "--n", "3"]
    argv = ["flow", *sizes, "--log-alpha", "-10", "-1000", "--num-times", "40", "--out", str(tmp_path / "flow")]
    assert main(argv) == 0
    assert "singular values W" in capsys.readouterr().out
    runs = [load_result(p) for p in sorted((tmp_path / "flow" / "results").glob("flow_alpha=*.npz"))]
    assert sorted(float(r.log_alpha) for r in runs) == [-1000.0, -10.0]
    assert all(r.log_singular_values[0].shape == (40, 3) and r.result == "successful" for r in runs)
    for name in ("spectra", "log_scales"):
        assert (tmp_path / "flow" / "figures" / f"{name}.png").stat().st_size > 0
    assert main(["greedy", *sizes, "--out", str(tmp_path / "greedy")]) == 0
    assert "rank +1 in" in capsys.readouterr().out
    path = load_result(tmp_path / "greedy" / "greedy.npz")
    sigma = np.linalg.svd(path.W[0][-1], compute_uv=False)  # the last saddle is M itself
    np.testing.assert_allclose(path.times[1:], 1.0 / sigma, rtol=1e-6)

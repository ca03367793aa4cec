"""The commands: subcommands on tiny models, their output folders (their options and bad inputs: ``test_options.py``)."""

import subprocess
import sys

import numpy as np
import pytest

from gradflow._cli import _commands, main
from gradflow._io import load_result


def test_python_dash_m_and_no_network_imports():
    """``python -m gradflow demo --help`` works and the own commands do not import ``gradflow.nets``."""
    code = (
        "import runpy, sys\n"
        "sys.argv = ['gradflow', 'demo', '--help']\n"
        "try:\n    runpy.run_module('gradflow', run_name='__main__')\n"
        "except SystemExit as e:\n    print('exit', e.code)\n"
        "print('nets imported:', any(m.startswith('gradflow.nets') for m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "--out" in out and "--quick" not in out
    assert "exit 0" in out and "nets imported: False" in out


def test_flow_command(tmp_path, capsys):
    argv = [
        "flow",
        "--model",
        "diagonal_linear",
        "--n",
        "12",
        "--p",
        "3",
        "--alpha",
        "1e-2",
        "1e-6",
        "--num-times",
        "50",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 0
    assert "final loss" in capsys.readouterr().out
    assert (tmp_path / "figures" / "loss.png").stat().st_size > 0
    # the parsed options reach the solver: one result per α, at those α, on the chosen model and times
    results = [load_result(p) for p in sorted((tmp_path / "results").glob("flow_alpha=*.npz"))]
    np.testing.assert_allclose(sorted(float(r.log_alpha) for r in results), np.log([1e-6, 1e-2]), rtol=1e-15)
    assert all(r.log_w.shape == (50, 3) and np.all(r.result == "successful") for r in results)
    # another run into the same folder is refused before it computes, and leaves every file as it was
    files = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    assert main([a.replace("1e-6", "1e-8") for a in argv]) == 2
    assert "holds the output of another run (gradflow flow;" in capsys.readouterr().err
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")} == files
    # the same run again, or another one with --overwrite, writes over it
    assert main(argv) == 0 and main([a.replace("1e-6", "1e-8") for a in argv] + ["--overwrite"]) == 0
    assert (tmp_path / "results" / "flow_alpha=1e-8.npz").exists()


@pytest.mark.slow
def test_greedy_command(tmp_path, capsys):
    assert main(["greedy", "--model", "diagonal_linear", "--n", "12", "--p", "3", "--out", str(tmp_path)]) == 0
    assert "T_k" in capsys.readouterr().out
    assert (tmp_path / "greedy.npz").exists() and (tmp_path / "greedy.md").exists()


@pytest.mark.slow
def test_compare_command(tmp_path, capsys):
    argv = [
        "compare",
        "--model",
        "diagonal_linear",
        "--n",
        "12",
        "--p",
        "3",
        "--alpha",
        "1e-3",
        "1e-9",
        "--num-times",
        "200",
        "--out",
        str(tmp_path),
        "--no-progress",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "fitted r" in out and "greedy T_k" in out
    for name in ("report.md", "comparison.csv", "comparison.json", "figures/loss.png", "figures/beta_all.png"):
        assert (tmp_path / name).exists(), name
    assert main(argv) == 0
    assert "0 steps computed" in capsys.readouterr().out


@pytest.mark.slow
def test_compare_perturb_below_float64(tmp_path, capsys):
    """``compare --perturb`` at α = e^{−1000} (below 1e-300): the perturbed runs restart from exact log states."""
    argv = [
        "compare",
        "--model",
        "diagonal_linear",
        "--n",
        "12",
        "--p",
        "3",
        "--log-alpha",
        "-1000",
        "--num-times",
        "60",
        "--perturb",
        "--out",
        str(tmp_path),
        "--no-progress",
    ]
    assert main(argv) == 0
    capsys.readouterr()
    assert "Perturb-and-continue checks (paper appendix A) at α = e^-1000" in (tmp_path / "report.md").read_text()
    for kind in ("plateau", "stage"):
        assert (tmp_path / "figures" / f"perturb_{kind}.png").stat().st_size > 0
        (path,) = (tmp_path / "results").glob(f"perturb_{kind}-*.npz")
        pert = load_result(path)
        # Only weights above the threshold are perturbed: before the first stage at α = e^{−1000} none is.
        moved = pert.perturbed.any(axis=-1)
        assert moved.any() and np.all((pert.initial_deviation > 0) == moved)
        assert np.all(pert.final_deviation < 1e-6)


@pytest.mark.slow
def test_compare_own_model(own_task_module, capsys):
    tmp_path = own_task_module
    argv = ["compare", "--model", "own_task_module:make", "--alpha", "1e-3", "1e-9", "--num-times", "200"]
    assert main(argv + ["--out", "out", "--no-progress"]) == 0
    assert "fitted r" in capsys.readouterr().out
    for name in ("report.md", "comparison.csv", "figures/b.png", "figures/convergence.png", "results/comparison.npz"):
        assert (tmp_path / "out" / name).exists(), name
    assert "## Greedy limit" in (tmp_path / "out" / "report.md").read_text()


def test_demo_flags_come_from_the_families(capsys):
    """``gradflow demo`` has a flag for every family's demo that declares one (the registry's pipelines), refuses
    two, and says which demos have a paper size."""
    flags = {d.flag for d in _commands.demos().values()}
    assert flags == {None, "--full-weights", "--depth", "--deep-linear"}
    from gradflow._cli import build_parser

    with pytest.raises(SystemExit):
        build_parser(networks=False).parse_args(["demo", "--help"])
    shown = capsys.readouterr().out
    assert "--full-weights" in shown and "Saxe's modes" in shown and "with --full-weights: the paper" in shown
    assert "--deep-linear" in shown and "aligned deep matrix factorisation" in " ".join(shown.split())
    assert main(["demo", "--full-weights", "--depth"]) == 2
    assert "--full-weights and --depth are different demos: give one" in capsys.readouterr().err
    assert main(["demo", "--depth", "--paper-size"]) == 2
    assert "--paper-size applies to the full-weights demo: give --full-weights too" in capsys.readouterr().err

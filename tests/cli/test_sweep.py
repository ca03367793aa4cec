"""``gradflow sweep``: a bad config or environment in one line (the sweeps themselves: tests/sweep/test_run.py)."""

from pathlib import Path

from gradflow._cli import main


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sweep.toml"
    path.write_text(text)
    return path


def test_cli_reports_a_bad_config_on_one_line(tmp_path, capsys):
    path = _config(tmp_path, "alphas = [0.1]\n[[model]]\nname = 'diagonal_linear'\ndim = 3")
    assert main(["sweep", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gradflow: error: ") and "model[0].dim" in err and "\n" not in err


def test_a_bad_process_count_in_the_environment_is_one_line(tmp_path, capsys, monkeypatch):
    """``--distributed`` reads the processes from JAX's variables: one that is not a number is named, before JAX's
    distributed runtime starts."""
    monkeypatch.setenv("JAX_PROCESS_ID", "first")
    path = _config(tmp_path, "alphas = [0.1]\n[[model]]\nname = 'diagonal_linear'\n")
    assert main(["sweep", str(path), "--distributed", "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip() == "gradflow: error: JAX_PROCESS_ID='first' is not an integer"

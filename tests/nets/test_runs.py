"""Run folders of the networks' commands: an earlier run is never overwritten without --overwrite, --resume may
lengthen a run, Ctrl-C stops within seconds keeping what has finished, and bad input ends in one line (status 2)."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from nets_common import DIGITS, SMALL_TOY, TOY, tiny_recipe, vit

from gradflow._cli import main
from gradflow.nets import (
    RunExistsError,
    load_images,
    load_text,
    read_metrics,
    train,
    train_toy_attention,
)

pytestmark = pytest.mark.usefixtures("unoptimised_xla")  # conftest.py: compile fast

TOY_ARGV = ["toy-attention", "--init-scale", "0.1", "--lr", "0.05", "--n", "20", "--tokens", "3", "--dim", "4"]


def _files(folder):
    """Every file under ``folder`` with its bytes."""
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _one_line_error(capfd) -> str:
    err = capfd.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_a_rerun_refuses_to_overwrite_and_overwrite_starts_again(tmp_path):
    """Issue 20: a re-run without --resume restarted at step 0 over the checkpoint and the metrics."""
    first = train_toy_attention(SMALL_TOY, steps=30, out=tmp_path, **TOY)
    before = _files(tmp_path)
    with pytest.raises(RunExistsError, match=r"holds a run at step 30 of 30: pass --resume .* or --overwrite"):
        train_toy_attention(SMALL_TOY, steps=30, out=tmp_path, **{**TOY, "lr": 0.01})
    assert _files(tmp_path) == before
    again = train_toy_attention(SMALL_TOY, steps=20, out=tmp_path, overwrite=True, **{**TOY, "lr": 0.01})
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [0, 10, 20]
    assert again.loss[0] == first.loss[0] and again.loss[-1] != first.loss[2]


@pytest.mark.parametrize(
    "argv, run",
    [
        (["vit", "--steps", "2"], "scale_1"),
        (["gpt", "--init-scale", "1", "0.5"], "scale_0.5"),
        (TOY_ARGV, "alpha_0.1"),
        (["inrank", "--modes", "full"], "full"),
    ],
    ids=["vit", "gpt", "toy-attention", "inrank"],
)
def test_every_command_refuses_an_earlier_run_before_training(tmp_path, capfd, argv, run):
    (tmp_path / run / "checkpoint").mkdir(parents=True)
    (tmp_path / run / "checkpoint" / "meta.json").write_text(json.dumps({"step": 7, "total_steps": 10}))
    (tmp_path / run / "metrics.jsonl").write_text(json.dumps({"step": 5, "loss": 1.0}) + "\n")
    before = _files(tmp_path)
    assert main([*argv, "--out", str(tmp_path)]) == 2
    err = _one_line_error(capfd)
    assert f"{run} holds a run at step 7 of 10: pass --resume" in err and "--overwrite" in err
    assert _files(tmp_path) == before
    assert main([*argv, "--out", str(tmp_path), "--resume", "--overwrite"]) == 2
    assert "not allowed with argument" in capfd.readouterr().err


def test_resume_may_lengthen_a_run(tmp_path):
    """Issue 20: `vit --resume` refused more --steps (the recipe's length was part of the run's description)."""
    kw = dict(seed=0, out=tmp_path, progress=False)
    train(vit(), tiny_recipe(4), DIGITS, **kw)
    kept = read_metrics(tmp_path / "metrics.jsonl")
    resumed = train(vit(), tiny_recipe(6), DIGITS, resume=True, **kw)
    assert resumed.steps == 6 and resumed.metrics[: len(kept)] == kept
    assert json.loads((tmp_path / "checkpoint" / "meta.json").read_text())["step"] == 6
    with pytest.raises(ValueError, match=r"at step 6, past the 4 steps of this run; ask for 6 steps or more"):
        train(vit(), tiny_recipe(4), DIGITS, resume=True, **kw)
    with pytest.raises(ValueError, match="resume=True continues .* overwrite=True starts it again: choose one"):
        train(vit(), tiny_recipe(6), DIGITS, resume=True, overwrite=True, **kw)


def test_sigint_to_a_command_stops_it_within_seconds_keeping_its_runs(tmp_path, capfd):
    """`gradflow toy-attention` in a subprocess, interrupted once it has written records: it exits (130) within
    seconds, with the checkpoint of the step it stopped at, its records intact and a line that says to resume; a
    re-run without --resume refuses and changes nothing."""
    out, run = tmp_path / "out", tmp_path / "out" / "alpha_0.1"
    argv = [*TOY_ARGV, "--steps", "100000000", "--record-every", "20", "--out", str(out)]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_DISABLE_MOST_OPTIMIZATIONS": "1"}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    proc = subprocess.Popen([sys.executable, "-m", "gradflow", *argv], env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not ((run / "metrics.jsonl").exists() and len(read_metrics(run / "metrics.jsonl")) >= 3):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else ""
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert time.monotonic() - sent < 10 and proc.returncode == 130, err
    meta = json.loads((run / "checkpoint" / "meta.json").read_text())
    assert f"interrupted after step {meta['step']} of 100000000" in err and "continue with --resume" in err
    steps = [r["step"] for r in read_metrics(run / "metrics.jsonl")]
    assert steps == list(range(0, meta["step"] + 1, 20)) and len(steps) >= 3
    before = _files(out)
    assert main(argv) == 2 and "pass --resume" in _one_line_error(capfd)
    assert _files(out) == before


@pytest.mark.parametrize(
    "argv",
    [
        [*TOY_ARGV, "--lr", "1e6", "--steps", "40", "--record-every", "1"],
        ["vit", "--steps", "6", "--lr", "1e30", "--checkpoint-every", "1", "--no-progress"],
    ],
    ids=["toy-attention", "vit"],
)
def test_a_non_finite_loss_ends_in_one_line_keeping_the_finished_part(tmp_path, capfd, argv):
    """Issue 20: a non-finite loss in vit or toy-attention exited 1 with a traceback. Records, measurements and
    checkpoints are made only of finite parameters (the loss of a step is that of the parameters before it)."""
    assert main([*argv, "--out", str(tmp_path)]) == 2
    err = _one_line_error(capfd)
    assert "lower learning rate" in err and "--overwrite" in err
    step = int(re.match(r"gradflow: error: (loss is \S+ at|the [ \w]+ after) step (\d+)", err).group(2))
    (run,) = tmp_path.iterdir()
    for record in read_metrics(run / "metrics.jsonl") if (run / "metrics.jsonl").exists() else []:
        numbers = np.hstack([np.ravel(v) for v in record.values() if not isinstance(v, str)])
        assert record["step"] < step and np.all(np.isfinite(numbers))
    assert json.loads((run / "checkpoint" / "meta.json").read_text())["step"] == step - 1
    for measured in (run / "spectra").glob("*.npz"):
        assert all(np.all(np.isfinite(a)) for a in np.load(measured).values())


def test_a_file_as_data_dir_is_named_a_file(tmp_path, capfd):
    """Issue 20: `vit --data-dir` given a file said the folder "does not exist"."""
    file = tmp_path / "cifar.tar.gz"
    file.write_bytes(b"not a folder")
    assert main(["vit", "--data-dir", str(file), "--out", str(tmp_path / "out")]) == 2
    err = _one_line_error(capfd)
    assert f"{file} is a file, not a folder" in err and "cifar-10-batches-py/" in err
    with pytest.raises(NotADirectoryError, match="is a file, not a folder; give .*wikitext-103-raw/"):
        load_text(file)
    with pytest.raises(NotADirectoryError, match="is a file, not a folder"):
        load_images(file)

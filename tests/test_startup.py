"""Ctrl-C while ``python -m gradflow`` imports JAX: one line and exit status 130, never a traceback."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process")
@pytest.mark.parametrize("after, delay", [("startup", 0.0), ("startup", 0.2), ("launch", 0.5)])
def test_ctrl_c_while_the_command_starts(after, delay):
    """SIGINT ``delay`` seconds after the child was launched, or after ``gradflow._startup`` (the package's first
    import) finished (``-X importtime`` reports each import as it finishes), while JAX's imports take seconds: exit
    130 with one line on stderr (it was a traceback from inside JAX's import)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-m", "gradflow", "--help"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    if after == "startup":
        assert any(line.rstrip().endswith("gradflow._startup") for line in child.stderr), "gradflow._startup not run"
    time.sleep(delay)
    child.send_signal(signal.SIGINT)
    rest = child.stderr.read()
    child.wait(timeout=30)
    said = [line for line in rest.splitlines() if not line.startswith("import time:")]
    if child.returncode == 0:  # --help finished first: nothing to test at this delay
        pytest.skip(f"the start took under {delay} s")
    assert (child.returncode, said) == (130, ["gradflow: interrupted while starting; nothing was computed"]), rest

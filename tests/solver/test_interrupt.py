"""Ctrl-C: a long flow, sent SIGINT in a subprocess, stops within seconds and keeps what it reached."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    import gradflow
    from gradflow import models

    task = models.diagonal_linear(n=200, p=400, nonzero=200, seed=0)
    ts = np.linspace(0.0, 3.0, 31)
    run = dict(u0=task.u0, v0=task.v0, ts=ts)
    gradflow.simulate_flow(task.model, log_alpha=-2e6, max_steps=1, throw=False, **run)  # compiles the long flow
    print("solving", flush=True)
    clock = time.perf_counter()
    try:
        gradflow.simulate_flow(task.model, log_alpha=-2e6, **run)  # minutes: 1,000s of implicit steps
    except gradflow.Interrupted as stop:
        flow = stop.result
        reached = np.all(np.isfinite(flow.log_w), axis=-1)  # the times after are +inf, as after a failure
        print(f"interrupted {flow.result} {int(reached.sum())} {bool(np.all(np.isfinite(flow.loss[reached])))}")
        print(f"steps {int(flow.stats['num_steps'])} {time.perf_counter() - clock:.1f}", flush=True)
        sys.exit(3)
    print("finished", flush=True)
    """
)


@pytest.mark.skipif(os.name != "posix", reason="SIGINT to a subprocess")
def test_ctrl_c_stops_a_long_flow_within_seconds_keeping_the_times_reached():
    env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout.readline().strip() == "solving", proc.stderr.read()
        time.sleep(3.0)
        sent = time.perf_counter()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        waited = time.perf_counter() - sent
    finally:
        proc.kill()
    assert proc.returncode == 3, err
    words = out.split()
    assert words[:2] == ["interrupted", "interrupted"] and words[3] == "True", out
    assert int(words[2]) >= 1 and int(words[5]) > 0, out  # τ = 0 at least, and the steps taken are counted
    assert waited < 10.0, f"Ctrl-C took {waited:.1f} s to stop the flow"

"""Ctrl-C: a long flow, sent SIGINT in a subprocess, stops within seconds and keeps what it reached."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gradflow._config import deferred_interrupts, stop_requested

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


@pytest.mark.slow  # fast twins: the test below, the leaps' and the sweep's Ctrl-C tests
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


IN_COMPILATION = textwrap.dedent(
    """
    import os, signal, threading
    import jax
    import numpy as np
    import gradflow
    from gradflow import models

    task = models.attention_full(n=20, tokens=3, dim=4, teacher_kq=(1, 0.5), teacher_vo=(1, 0.5))
    sent = []

    def ctrl_c_while_compiling(event, duration, **kwargs):  # a large program lowered: XLA compiles it next
        if event == "/jax/core/compile/jaxpr_to_mlir_module_duration" and duration > 0.05 and not sent:
            sent.append(True)
            threading.Timer(0.02, os.kill, (os.getpid(), signal.SIGINT)).start()

    jax.monitoring.register_event_duration_secs_listener(ctrl_c_while_compiling)
    try:
        gradflow.simulate_flow(task.model, u0=task.u0, v0=task.v0, ts=np.linspace(0.0, 3.0, 5), log_alpha=-100)
    except gradflow.Interrupted as stop:
        print("interrupted", stop.result.result, sent, flush=True)
    """
)


@pytest.mark.skipif(os.name != "posix", reason="SIGINT to a subprocess")
def test_ctrl_c_during_a_compilation_stops_the_flow_without_crashing_the_process():
    """Ctrl-C while XLA compiles the full-weight flow's program. Python's own ``KeyboardInterrupt`` would leave the
    compilation running in XLA's threads, and the interpreter's exit then freed the client under it: a segmentation
    fault at exit, every time (issue 26). Deferred to the end of the compiled call, it stops the flow, which exits."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", IN_COMPILATION], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["interrupted", "interrupted", "[True]"], proc.stdout + proc.stderr[-2000:]


def test_ctrl_c_in_a_deferred_block_sets_the_stop_flag_and_is_raised_at_its_end():
    """Inside an entry point Ctrl-C only asks the loops to stop (``stop_requested``); unless one of them raises, it
    is raised as the block ends, and the user's handler is back. A second Ctrl-C is raised at once."""
    with pytest.raises(KeyboardInterrupt):
        with deferred_interrupts():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)
            assert stop_requested()
            finished = True
    assert finished and not stop_requested()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt), deferred_interrupts():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1.0)
        pytest.fail("a second Ctrl-C did not stop the block")
    assert not stop_requested()


@pytest.mark.slow
@pytest.mark.skipif(os.name != "posix", reason="SIGINT to a subprocess")
def test_ctrl_c_at_any_time_never_crashes_the_full_weight_commands(tmp_path):
    """The probe of issue 26, repeated: ``gradflow compare`` on a full-weight attention head, sent SIGINT at six
    times from its greedy step to its flows (compilations among them), once it has started (an interrupted import is
    Python's). Before the interrupt was deferred, four of
    six such runs ended in a segmentation fault (exit 139) after the "interrupted" line. Every run now exits 130,
    or 0 where it finished first, within seconds."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
    argv = ["compare", "--model", "attention_full", "--dim", "4", "--tokens", "3", "--n", "30"]
    argv += ["--log-alpha", "-10", "-100", "-1000", "--num-times", "40", "--no-progress", "--overwrite"]
    for k, delay in enumerate((0.0, 1.0, 2.0, 3.5, 5.0, 7.0)):  # after the command has started: its folder claimed
        out = tmp_path / f"run{k}"
        cmd = [sys.executable, "-m", "gradflow", *argv, "--out", str(out)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        while not (out / "gradflow.json").exists() and proc.poll() is None:
            time.sleep(0.02)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        sent = time.perf_counter()
        _, err = proc.communicate(timeout=120)
        assert proc.returncode in (0, 130), f"SIGINT after {delay} s: exit {proc.returncode}\n{err[-2000:]}"
        assert time.perf_counter() - sent < 30, f"SIGINT after {delay} s took {time.perf_counter() - sent:.0f} s"
        if proc.returncode == 130:
            assert "gradflow: interrupted" in err

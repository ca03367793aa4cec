"""The training loop: Ctrl-C stops a run after the step in flight, with a checkpoint there, and the resumed run
ends as the uninterrupted one."""

import json
import os
import signal

import numpy as np
import pytest
from nets_common import SMALL_TOY, TOY

from gradflow.nets import RunInterrupted, read_metrics, train_toy_attention
from gradflow.nets._step import StepLog

pytestmark = pytest.mark.usefixtures("unoptimised_xla")  # conftest.py: compile fast


def test_ctrl_c_stops_after_the_step_with_a_checkpoint_and_resumes_exactly(tmp_path, monkeypatch):
    """SIGINT at step 37 (between two records): the run stops after that step with a checkpoint there, says how to
    resume, and the resumed run ends as the uninterrupted one."""
    full = train_toy_attention(SMALL_TOY, steps=60, **TOY)
    add = StepLog.add

    def interrupt_at_37(self, step, loss, grad_norm):
        add(self, step, loss, grad_norm)
        if step == 37:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(StepLog, "add", interrupt_at_37)
    with pytest.raises(RunInterrupted, match=r"after step 37 of 60; .* continue with --resume"):
        train_toy_attention(SMALL_TOY, steps=60, out=tmp_path, **TOY)
    monkeypatch.undo()
    assert json.loads((tmp_path / "checkpoint" / "meta.json").read_text())["step"] == 37
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [0, 10, 20, 30]
    resumed = train_toy_attention(SMALL_TOY, steps=60, out=tmp_path, resume=True, **TOY)
    for name in ("step", "loss", "sv_kq", "sv_vo"):
        np.testing.assert_array_equal(getattr(resumed, name), getattr(full, name))
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

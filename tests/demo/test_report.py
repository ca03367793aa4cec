"""What the pipelines' reports share (gradflow/_demo/_report.py): the facts of a run and the comparison's windows."""

import math
from types import SimpleNamespace

import numpy as np

from gradflow._demo._report import run_facts, windows_text


def test_a_runs_facts_and_windows():
    task = SimpleNamespace(config=dict(n=64, seed=0))
    comparison = SimpleNamespace(
        log_alpha=np.array([math.log(0.01), math.log(1e-32)]), window_end=np.array([1.0, 2.0, 3.75]), delta=0.0625
    )
    assert run_facts(task, comparison) == ("n=64, seed=0", "0.01, 1e-32", 3.75)
    assert run_facts(task, comparison).horizon == 3.75
    assert windows_text(comparison) == (
        "Windows are [T_k + δ, T_{k+1} − δ] with δ = 0.0625 (the last window ends at τ = 3.75). "
    )

"""The diagonal family's text (gradflow/_diagonal/_report.py): the greedy path's table, row by row from the path,
with the checks that did not run said so."""

from types import SimpleNamespace

import numpy as np

from gradflow._diagonal._report import greedy_rows, greedy_summary


def _path():
    """A stand-in for a one-stage GreedyPath whose Hessian and perturbation checks did not run at stage 1."""
    return SimpleNamespace(
        times=np.array([0.0, 0.625]),
        loss=np.array([2.0, 0.5]),
        support=np.array([[False, False, False], [True, False, False]]),
        activated=np.array([0]),
        runner_up=np.array([-1]),
        sign=np.array([False]),
        delta_gap=np.array([0.375]),
        hessian_min_eig=np.array([1.0, np.nan]),
        perturbation_spread=np.array([np.nan]),
        epsilon_discrepancy=np.array([1e-12]),
        assumptions_ok=np.array([[True, True, True], [True, True, True]]),
        message="no coordinate activates: the path has converged",
        warnings=(),
    )


def test_the_greedy_table_is_the_paths():
    header, rows = greedy_rows(_path(), ("a", "b", "c"))
    assert header[:5] == ["k", "T_k", "coordinate i_k", "v sign", "L(θ^k)"] and header[-1] == "assumptions"
    assert rows[0][:6] == [0, 0.0, "–", "–", 2.0, 0] and rows[0][-1] == "4.2 ✓, 4.3 ✓, 4.4 ✓"
    assert rows[1][:8] == [1, 0.625, "a", "= −sign u", 0.5, 1, 0.375, "–"]
    assert rows[1][-1] == "4.2 ✓, 4.3 not run, 4.4 not run"
    text = greedy_summary(_path(), ("a", "b", "c"))
    assert "| 1 | 0.625 | a | = −sign u | 0.5 | 1 | 0.375 | – |" in text
    assert text.endswith("The path ends with: no coordinate activates: the path has converged.\n")

"""The deep linear family's text (gradflow/_deep_linear/_report.py): the greedy path's table, row by row from the
path, on a stand-in path."""

from types import SimpleNamespace

import numpy as np

from gradflow._deep_linear._report import greedy_rows, greedy_summary


def path():
    """A stand-in for a two-stage DeepLinearGreedyPath of a rank-2 W."""
    return SimpleNamespace(
        times=np.array([0.0, 0.5, 1.25]),
        loss=np.array([2.5, 0.5, 0.0]),
        gradient_singular_values=np.array([[2.0, 1.0], [1.0, 0.0], [0.0, 0.0]]),
        delta_gap=np.array([0.75, np.inf]),
        epsilon_discrepancy=np.array([1e-12, 2e-12]),
        perturbation_spread=np.array([3e-12, 4e-12]),
        stationarity=np.array([0.0, 1e-13, 1e-14]),
        hessian_min_eig=np.array([np.inf, -0.5, np.nan]),
        assumptions_ok=np.array([[True, True, True], [True, False, True], [True, True, True]]),
        result="successful",
        message="",
        warnings=("a warning",),
    )


def test_the_greedy_table_is_the_paths():
    header, rows = greedy_rows(path())
    assert header == ["k", "T_k", "L(W^k)", "σ_1(G_k)", "σ_2(G_k)", "gap to runner-up"] + [
        "ε discrepancy",
        "perturbation spread",
        "stationarity",
        "Hessian min eig",
        "assumptions",
    ]
    assert rows[0] == [0, 0.0, 2.5, 2.0, 1.0, None, None, None, 0.0, np.inf, "4.2 ✓, 4.3 ✓, 4.4 ✓"]
    assert rows[1][6:] == [1e-12, 3e-12, 1e-13, -0.5, "4.2 ✓, 4.3 ✗, 4.4 ✓"]
    assert rows[2][:8] == [2, 1.25, 0.0, 0.0, 0.0, np.inf, 2e-12, 4e-12] and np.isnan(rows[2][9])
    assert rows[2][10] == "4.2 ✓, 4.3 not run, 4.4 ✓"
    text = greedy_summary(path())
    assert "| 2 | 1.25 | 0 |" in text
    assert "The path ends with: successful." in text and text.endswith("- a warning\n")

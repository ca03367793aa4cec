"""The factorised family's text (gradflow/_factorized/_report.py): the greedy low-rank table, row by row from the
path of two matrix factorisations, and the rank-jump table of a comparison."""

from types import SimpleNamespace

import numpy as np
from two_mf import SIGMA_1, SIGMA_2

from gradflow._factorized._report import rank_greedy_rows, rank_greedy_summary, rank_jump_rows


def test_the_greedy_table_is_the_paths(mf_path):
    header, rows = rank_greedy_rows(mf_path, ("W1", "W2"))
    assert header[:5] == ["k", "T_k", "rank +1 in", "ranks", "L(W̄^k)"] and header[-1] == "assumptions"
    assert [row[2] for row in rows] == ["–", "W1", "W2", "W1", "W2", "W1"]  # the matrices take turns
    assert rows[3][3] == "W1: 2, W2: 1" and rows[5][3] == "W1: 3, W2: 2"
    np.testing.assert_allclose([row[1] for row in rows], mf_path.times, rtol=0)
    last = 0.5 * SIGMA_2[2] ** 2  # M_2's third mode is never learned at width 2
    assert rows[5][4] == np.float64(mf_path.loss[5]) and abs(rows[5][4] - last) < 1e-12
    assert rows[0][5:7] == [None, None] and rows[1][6] == mf_path.singular_gap[0]
    assert all(row[-1] == "escape ✓, minimum ✓, ε-limit ✓" for row in rows)
    text = rank_greedy_summary(mf_path, ("W1", "W2"))
    assert "| 1 | 0.3333" in text and text.endswith(f"The path ends with: {mf_path.message}.\n")
    assert np.isclose(mf_path.times[1], 1 / SIGMA_1[0])


def test_the_rank_jump_table_has_a_column_per_alpha():
    comparison = SimpleNamespace(
        names=("KQ", "VO"),
        activated=np.array([1, 0]),
        stage_times=np.array([0.0, 0.5, 1.25]),
        detected_times=np.array([[0.51, 1.3], [0.501, 1.26]]),
        log_alpha=np.log([1e-2, 1e-4]),
    )
    header, rows = rank_jump_rows(comparison)
    assert header == ["k", "rank +1 in", "greedy T_k", "α = 0.01", "α = 1e-4"]
    assert rows == [[1, "VO", 0.5, 0.51, 0.501], [2, "KQ", 1.25, 1.3, 1.26]]

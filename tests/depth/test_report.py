"""The depth family's text (gradflow/_depth/_report.py): the greedy table, row by row from the limit, and the report of
a comparison."""

import numpy as np
import pytest
from depth_common import MODEL3

import gradflow
from gradflow._depth._report import comparison_report, greedy_rows


def test_the_greedy_table_is_the_paths(balanced_path):
    """Stages at 1/3, 1/2, 1 (T_k = 1/((L − 2) s_k)), one coordinate each, no runner-up at the last."""
    header, rows = greedy_rows(balanced_path, MODEL3.names)
    assert header[:8] == ["k", "T_k", "coordinate i_k", "sign", "L(β^k)", "|S_k|", "Δ gap to runner-up", "runner-up"]
    assert [row[2] for row in rows] == ["–", "β[0]", "β[1]", "β[2]"] and [row[5] for row in rows] == [0, 1, 2, 3]
    np.testing.assert_allclose([row[1] for row in rows], [0.0, 1 / 3, 1 / 2, 1.0], rtol=1e-12)
    np.testing.assert_allclose([row[4] for row in rows], [7.0, 2.5, 0.5, 0.0], atol=1e-12)  # ½ Σ of the unlearned s²
    assert [row[7] for row in rows] == ["–", "β[1]", "β[2]", "–"] and rows[3][6] == np.inf
    assert all(row[-1] == "4.2 ✓, 4.3 ✓" for row in rows)


def test_the_comparison_report_has_the_power_rates(on_limit_comparison):
    text, data = comparison_report(on_limit_comparison)
    assert "Power rates" in text and "| weights | 3 | 3 | 3 |" in text
    np.testing.assert_allclose(data["power_rates"]["weights"][:3], 3.0, rtol=1e-9)


@pytest.mark.slow
def test_report_and_figures_on_the_limit(on_limit_comparison, tmp_path):
    """gradflow.report writes the family's tables (with the power rates) and figures from the comparison alone."""
    text = gradflow.report(on_limit_comparison, tmp_path).read_text()
    assert "Power rates" in text and "| weights | 3 | 3 | 3 |" in text
    assert {f.name for f in (tmp_path / "figures").iterdir()} == {"loss.png", "weights.png", "b.png", "convergence.png"}

"""A sweep's summary figures: those the data support, one bar or box per model setting."""

from __future__ import annotations

import numpy as np

from gradflow._sweep import _plots
from gradflow._sweep._summary import GroupSummary


def _group(label, num_stages, rates):
    return GroupSummary(
        label=label,
        tasks=len(num_stages),
        stage_times={1: np.array([1.0, 2.0])},
        num_stages=np.array(num_stages),
        failures={"4.2": 0.5, "4.3": 0.0, "4.4": 1.0},
        rates=rates,
    )


def test_summary_figures_are_those_the_data_support(tmp_path, monkeypatch):
    """Stage times, stage counts and failures for any task; rates only with a fitted rate; nothing without tasks.
    The bars count the seeds with each K, per setting."""
    figures, save = [], _plots.save_figure
    monkeypatch.setattr(_plots, "save_figure", lambda fig, path: figures.append(fig) or save(fig, path))
    groups = [_group("a", [1, 2, 2], {"b": np.array([0.5, 0.7]), "time": np.array([])}), _group("b", [2], {})]
    paths = _plots.summary_figures(groups, tmp_path)
    assert [p.name for p in paths] == ["stage_times.png", "num_stages.png", "assumptions.png", "rates.png"]
    assert all(p.stat().st_size > 0 for p in paths)
    bars = [[round(p.get_height()) for p in ax.patches] for ax in figures[1].axes]
    assert bars == [[1, 2, 0, 1]]  # K = 1, 2 for group a, then group b
    failures = [p.get_height() for p in figures[2].axes[0].patches]
    assert failures == [0.5, 0.0, 1.0] * 2
    no_rates = [_group("a", [1], {"b": np.array([])})]
    assert [p.name for p in _plots.summary_figures(no_rates, tmp_path / "x")] == [p.name for p in paths[:3]]
    assert _plots.summary_figures([_group("a", [], {})], tmp_path / "y") == []

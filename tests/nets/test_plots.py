"""The networks' figures: the ranks of an InRank run, the losses of runs at several scales."""

import numpy as np
import pytest

from gradflow.nets import _plots, plot_inrank_ranks
from gradflow.nets._plots import plot_losses
from gradflow.nets._runs import MetricsLog


@pytest.fixture
def figures(monkeypatch):
    """The figures drawn (``_plots._save`` still saves them)."""
    drawn, save = [], _plots._save
    monkeypatch.setattr(_plots, "_save", lambda fig, path: drawn.append(fig) or save(fig, path))
    return drawn


def _rank_records(n_layers=3):
    records = [
        {
            "step": s,
            "phase": "inrank",
            **{
                n: {"rank": [2 + s // 4 + l for l in range(n_layers)], "explained_ratio": [0.95] * n_layers}
                for n in ("fc_in", "fc_out")
            },
        }
        for s in (4, 8, 12)
    ]
    switch = {"step": 12, "phase": "fixed-rank", **{n: {"rank": records[-1][n]["rank"]} for n in ("fc_in", "fc_out")}}
    return records + [switch]


def test_rank_figure(tmp_path, figures):
    """One panel per matrix; per layer a step line through its ranks (drawn on to ``until``), their mean, and a
    dotted line at the switch to fixed rank; read from ``ranks.jsonl``."""
    log = MetricsLog(tmp_path / "ranks.jsonl")
    for record in _rank_records():
        log.append(record)
    path = plot_inrank_ranks(log.path, tmp_path / "figures" / "ranks.png", until=20, title="inrank-efficient")
    assert path.exists()
    axes = figures[0].axes
    assert [ax.get_title() for ax in axes] == ["fc_in", "fc_out"]
    for ax in axes:
        *layers, mean, switch = ax.get_lines()
        assert len(layers) == 3
        for l, line in enumerate(layers):  # records at steps 4, 8, 12 (and the switch at 12), then on to 20
            np.testing.assert_array_equal(line.get_xdata(), [4, 8, 12, 12, 20])
            np.testing.assert_array_equal(line.get_ydata(), [3 + l, 4 + l, 5 + l, 5 + l, 5 + l])
        np.testing.assert_array_equal(mean.get_ydata(), [4, 5, 6, 6, 6])
        assert list(switch.get_xdata()) == [12, 12]
    many = plot_inrank_ranks(_rank_records(n_layers=36), tmp_path / "many.png")  # GPT-2 large: 36 layers
    assert len(figures[1].axes[0].get_lines()) == 36 + 2 and many.exists()
    with pytest.raises(ValueError, match="no rank records"):
        plot_inrank_ranks([], tmp_path / "empty.png")


def test_losses_figure(tmp_path, figures):
    """One training-loss line per scale, largest first, and the evaluation losses as dots of its colour."""
    metrics = {
        0.1: [dict(step=1, loss=2.0), dict(step=2, loss=1.5), dict(step=2, eval_loss=1.7)],
        1.0: [dict(step=1, loss=2.5), dict(step=2, loss=2.25)],
    }
    assert plot_losses(metrics, tmp_path / "losses.png").exists()
    big, small, evals = figures[0].axes[0].get_lines()
    assert [big.get_label(), small.get_label()] == ["init scale 1", "init scale 0.1"]
    assert big.get_ydata().tolist() == [2.5, 2.25] and small.get_ydata().tolist() == [2.0, 1.5]
    assert evals.get_xdata().tolist() == [2] and evals.get_ydata().tolist() == [1.7]
    assert evals.get_color() == small.get_color()

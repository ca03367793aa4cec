"""The deep linear family's figure (gradflow/_deep_linear/_plots.py): what it draws, the singular values or their log
scales of every run and the greedy limit's, on stand-ins for the runs and the path."""

from types import SimpleNamespace

import numpy as np
import pytest

from gradflow._deep_linear._plots import plot_singular_values

TS = np.linspace(0.0, 2.0, 21)


def run(log_alpha):
    sv = np.stack([3 / (1 + np.exp(-(TS - 1) / -log_alpha)), 0.1 * TS], axis=1)
    return SimpleNamespace(ts=TS, singular_values=sv, b=np.log(sv + 1e-3) / log_alpha, log_alpha=np.float64(log_alpha))


PATH = SimpleNamespace(
    singular_values_at=lambda x: np.stack([np.where(x < 1, 0, 3.0), 0 * x], axis=1),
    b_at=lambda x: np.stack([np.where(x < 1, 1, 0.0), 1 + 0 * x], axis=1),
)


@pytest.mark.parametrize("quantity, field", [("weights", "singular_values"), ("b", "b")])
def test_draws_every_runs_values_and_the_limit(quantity, field):
    runs = [run(np.log(1e-2)), run(np.log(1e-4))]
    ax = plot_singular_values(runs, path=PATH, title="t", quantity=quantity).axes[0]
    drawn = [line for line in ax.get_lines() if len(line.get_xdata())]  # not the legend's empty entries
    assert len(drawn) == 2 * 2 + 2  # two values per run, and the limit's two
    for j, line in enumerate(drawn[:4]):
        np.testing.assert_array_equal(line.get_ydata(), getattr(runs[j // 2], field)[:, j % 2])
    limit = getattr(PATH, "singular_values_at" if quantity == "weights" else "b_at")
    for r, line in enumerate(drawn[4:]):
        assert line.get_linestyle() == "--"
        np.testing.assert_array_equal(line.get_ydata(), limit(line.get_xdata())[:, r])
    assert drawn[4].get_xdata()[-1] == TS[-1]  # the limit spans the runs
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["α = 0.01", "α = 1e-4", "greedy limit"]
    assert ax.get_title() == "t" and ax.get_xlabel().startswith("rescaled time")

"""The depth family's figure (gradflow/_depth/_plots.py): what it draws, every run's β or clocks and the greedy
limit's, with the coordinates' labels, on flows built exactly on the limit (nothing compiled but the limit)."""

import numpy as np
from depth_common import MODEL3

from gradflow._depth._plots import plot_coordinates


def test_draws_every_runs_coordinates_and_the_limit(balanced_path, on_limit_comparison):
    path, flows = balanced_path, on_limit_comparison.runs
    runs = [flows[0], flows[1]]
    ax = plot_coordinates(runs, MODEL3.names, path=path, title="β", quantity="weights").axes[0]
    drawn = [line for line in ax.get_lines() if len(line.get_xdata())]  # not the legend's empty entries
    assert len(drawn) == 2 * 3 + 3  # three coordinates per run, and the limit's three
    for j, line in enumerate(drawn[:6]):
        np.testing.assert_array_equal(line.get_ydata(), runs[j // 3].beta[:, j % 3])
    for i, line in enumerate(drawn[6:]):  # the staircase β^k from T_k on
        assert line.get_linestyle() == "--"
        np.testing.assert_array_equal(line.get_xdata(), [*path.times, runs[0].ts[-1]])
        np.testing.assert_array_equal(line.get_ydata(), [*np.asarray(path.beta)[:, i], path.beta[-1][i]])
    assert {t.get_text() for t in ax.texts} == set(MODEL3.names)  # labels at the final values


def test_draws_the_clocks_on_a_log_scale_until_they_run_out(balanced_path, on_limit_comparison):
    path, flows = balanced_path, on_limit_comparison.runs
    ax = plot_coordinates([flows[0]], MODEL3.names, path=path, title="c", quantity="b").axes[0]
    drawn = [line for line in ax.get_lines() if len(line.get_xdata())]
    assert ax.get_yscale() == "log" and len(drawn) == 3 + 3
    np.testing.assert_array_equal(drawn[0].get_ydata(), flows[0].clock[:, 0])
    x = drawn[3].get_xdata()
    clocks = path.b_at(x)
    np.testing.assert_array_equal(drawn[5].get_ydata(), np.where(clocks[:, 2] > 0, clocks[:, 2], np.nan))
    assert np.isnan(drawn[5].get_ydata()[-1])  # the last coordinate is learned at τ = 1 < 1.5: its clock ran out

"""Figures for factorised weights: what each plot draws, and that a saved figure reads back as an image."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
from matplotlib.image import imread

from gradflow._factorized._compare import _compare_runs, _Run
from gradflow._factorized._plots import LABELS, plot_log_scales, plot_ranks, plot_spectra
from gradflow._kit._plots import plot_convergence, save_figure

NAMES = ("KQ", "VO")
TS = np.linspace(0.0, 3.0, 31)


def _path():
    """A stand-in for a two-jump FactorizedGreedyPath of two 2×2 matrices: KQ gains rank 1 at τ = 1, VO at τ = 2."""
    times = np.array([0.0, 1.0, 2.0])
    WKQ = np.array([np.zeros((2, 2)), np.diag([1.0, 0.0]), np.diag([1.0, 0.0])])
    WVO = np.array([np.zeros((2, 2)), np.zeros((2, 2)), np.diag([0.5, 0.0])])
    rates = np.array([[[1.0, 0.2], [0.5, 0.1]], [[0.2, np.nan], [0.5, 0.1]], [[0.2, np.nan], [0.1, np.nan]]])
    b = np.array([[[1.0, 1.0], [1.0, 1.0]], [[0.8, np.nan], [0.5, 0.9]], [[0.6, np.nan], [0.8, np.nan]]])

    def stage_at(tau):
        return np.searchsorted(times, np.asarray(tau, dtype=np.float64), side="right") - 1

    def b_at(tau):
        tau = np.asarray(tau, dtype=np.float64)
        k = stage_at(tau)
        return b[k] - (tau - times[k])[..., None, None] * rates[k]

    return SimpleNamespace(
        times=times,
        activated=np.array([0, 1]),
        ranks=np.array([[0, 0], [1, 0], [1, 1]]),
        W=(WKQ, WVO),
        loss=np.array([1.0, 0.4, 0.1]),
        stage_at=stage_at,
        sleeping_at=b_at,
    )


def _run(log_alpha):
    """Singular values that jump to the path's at τ = 1 (KQ) and τ = 2 (VO), from α² (sharper for smaller α)."""
    L = -log_alpha
    jump = lambda T, s: np.log(s) - np.logaddexp(0.0, 2 * L * (T - TS) + np.log(s))  # noqa: E731
    log_sv = (
        np.stack([jump(1.0, 1.0), 2 * log_alpha + np.zeros_like(TS)], -1),
        np.stack([jump(2.0, 0.5), 2 * log_alpha + np.zeros_like(TS)], -1),
    )
    W = tuple(np.einsum("tk,kij->tij", np.exp(s), np.array([[[1.0, 0], [0, 0]], [[0, 0], [0, 1.0]]])) for s in log_sv)
    loss = 0.1 + 0.3 * (TS < 2) + 0.6 * (TS < 1)
    return SimpleNamespace(
        ts=TS,
        W=W,
        log_singular_values=log_sv,
        singular_values=tuple(np.exp(s) for s in log_sv),
        loss=loss,
        log_alpha=np.array(log_alpha),
    )


@pytest.fixture(scope="module")
def runs():
    return [_run(math.log(a)) for a in (1e-2, 1e-8)] + [_run(-1000.0)]


def test_spectra_draws_every_singular_value_and_the_staircase(runs, tmp_path):
    gd = [runs[0]]
    fig = plot_spectra(runs, _path(), names=NAMES, factors=["VO", "KQ"], gd=gd, title="Figure 2")
    axes = fig.axes
    assert [ax.get_title() for ax in axes] == ["singular values of W_VO", "singular values of W_KQ", "training loss"]
    # per panel: 2 singular values × 3 flows, 2 of GD, then the staircase (2 step lines)
    vo = axes[0].get_lines()
    assert len(vo) == 3 * 2 + 2 + 2
    np.testing.assert_allclose(vo[0].get_ydata(), runs[0].singular_values[1][:, 0])
    assert vo[6].get_linestyle() == ":"
    stair = vo[-2]
    assert stair.get_linestyle() == "--" and max(stair.get_ydata()) == 0.5
    assert axes[2].get_legend() is not None
    assert imread(save_figure(fig, tmp_path / "spectra.png")).ndim == 3
    with pytest.raises(ValueError, match="unknown weight matrix"):
        plot_spectra(runs, _path(), names=NAMES, factors=["QK"])


def test_log_scales_stay_visible_below_float64(runs):
    fig = plot_log_scales(runs, _path(), names=NAMES)
    lines = fig.axes[0].get_lines()
    deepest = lines[4].get_ydata()  # α = e^-1000, the first singular value of KQ
    assert np.all(np.isfinite(deepest)) and deepest[0] == pytest.approx(1.0, abs=1e-3) and deepest[-1] < 1e-3
    greedy = [ln for ln in lines if ln.get_linestyle() == "--"]
    assert len(greedy) == 2  # the limit's log scales of both singular values
    x, y = greedy[0].get_data()
    np.testing.assert_allclose(y[x <= 1.0], 1.0 - x[x <= 1.0], atol=1e-12)


def test_ranks(runs):
    fig = plot_ranks(runs, _path(), names=NAMES)
    stable, count = fig.axes[0], fig.axes[2]  # KQ: stable rank, number of O(1) singular values
    assert stable.get_lines()[2].get_ydata()[-1] == pytest.approx(1.0)  # log α = −1000: σ = (1, α²)
    greedy = stable.get_lines()[-1].get_ydata()
    assert np.isnan(greedy[0]) and list(greedy[1:]) == [1.0, 1.0, 1.0]  # W̄ = 0 has no stable rank
    assert "above 0.5" in count.get_title()  # half the smallest singular value the saddles give W_KQ
    deepest = count.get_lines()[2].get_ydata()
    assert list(deepest[TS < 0.9]) == [0] * 9 and list(deepest[TS > 1.1]) == [1] * 19
    assert list(count.get_lines()[-1].get_ydata()) == [0, 1, 1, 1]


def test_convergence_labels(runs):
    runs_ = [_Run(float(r.log_alpha), r.ts, r.W, r.log_singular_values, r.loss) for r in runs]
    comparison = _compare_runs(_path(), runs_, widths=(2, 2), names=NAMES)
    fig = plot_convergence(comparison, labels=LABELS, title="Rank")
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any(s.startswith("|rank jump detected") for s in labels) and "Rank" in fig.axes[0].get_title()

"""Figures: what each plot draws, that a saved figure reads back as an image; α labels; coordinate grouping."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
from matplotlib.image import imread

from gradflow._demo._report import plot_perturbation
from gradflow._diagonal._compare import _compare_runs, _Run
from gradflow._diagonal._experiments import Perturbation
from gradflow._diagonal._plots import LABELS, coordinate_groups, plot_coordinates, significant
from gradflow._kit._plots import plot_convergence, plot_loss, save_figure
from gradflow._kit._report import format_alpha

NAMES = ("KQ[0]", "KQ[1]", "VO[0]", "VO[1]")


def _path():
    """A stand-in for a two-stage GreedyPath (the fields and ``b_at`` that the plots use)."""
    times = np.array([0.0, 1.0, 2.0])
    b = np.array([[1.0, 1, 1, 1], [0, 0.5, 1.5, 0.8], [0, 0.2, 2, 0.6]])
    g = np.array([[1.0, 0.5, -0.5, 0.2], [0, 0.3, -0.5, 0.2], [0, 0, 0, 0]])

    def b_at(tau):
        k = np.searchsorted(times, tau, side="right") - 1
        return b[k] - (tau - times[k])[..., None] * g[k]

    beta = np.array([[0.0, 0, 0, 0], [1.0, 0, 0, 0], [1.0, 0, -0.5, 0]])
    return SimpleNamespace(times=times, beta=beta, loss=np.array([1.0, 0.5, 0.1]), b=b, g=g, b_at=b_at)


def _flow(log_alpha, ts):
    s = -log_alpha
    beta = np.stack([1 / (1 + np.exp(-s * (ts - 1))), 0 * ts, -0.5 / (1 + np.exp(-s * (ts - 2))), 0 * ts], axis=1)
    loss = 1.0 - 0.5 * beta[:, 0] + 0.8 * beta[:, 2]
    return SimpleNamespace(ts=ts, beta=beta, b=np.tanh(beta), loss=loss, log_alpha=np.asarray(log_alpha))


@pytest.fixture
def flows():
    ts = np.linspace(0, 2.5, 200)
    return [_flow(math.log(a), ts) for a in (1e-2, 1e-8)]


def test_format_alpha():
    assert format_alpha(math.log(0.1)) == "0.1"
    assert format_alpha(math.log(1e-32)) == "1e-32"
    assert format_alpha(math.log(2.5e-300)) == "2.5e-300"
    assert format_alpha(-1.0) == "0.368"
    assert format_alpha(-700.0) == "9.86e-305"  # a normal float64 number: written as one
    # below float64's normal range (≈ e^-708.4) no float64 number is α: log α itself, never "5.08e-435"
    assert format_alpha(-745.0) == "e^-745"
    assert format_alpha(-1000.0) == "e^-1000"
    assert format_alpha(-10000.0) == "e^-10000"
    assert format_alpha(-1000.5) == "e^-1000.5"


def test_coordinate_groups():
    groups = coordinate_groups(NAMES)
    assert list(groups) == ["KQ", "VO"] and groups["VO"].tolist() == [2, 3]
    assert list(coordinate_groups(("L0H1.KQ[0]", "L0H1.VO[0]"))) == ["KQ", "VO"]
    assert list(coordinate_groups(("β[0]", "β[1]"))) == ["all"]


def test_significant(flows):
    assert significant(_path(), [f.beta for f in flows]).tolist() == [True, False, True, False]


def _perturbation(flow):
    ts = flow.ts
    return Perturbation(
        kind="plateau",
        std=0.05,
        threshold=1e-5,
        log_alpha=float(flow.log_alpha),
        start_times=ts[[50]],
        ts=ts[None, 50:80],
        beta=flow.beta[None, 50:80] + 0.01,
        reference_beta=flow.beta[None, 50:80],
        perturbed=np.array([[True, False, True, False]]),
        initial_deviation=np.array([0.01]),
        final_deviation=np.array([0.01]),
    )


def test_save_figure_writes_a_readable_image_atomically(tmp_path, flows):
    fig = plot_loss(flows, _path())
    path = save_figure(fig, tmp_path / "sub" / "loss.png")
    image = imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    assert np.ptp(image[..., :3]) > 0.5  # something is drawn on the white background
    assert [p.name for p in path.parent.iterdir()] == ["loss.png"]  # no temporary file left behind


def test_loss_plot_draws_each_run_and_the_greedy_staircase(flows):
    path = _path()
    ax = plot_loss(flows, path).axes[0]
    lines = ax.get_lines()
    for line, flow in zip(lines, flows):
        np.testing.assert_array_equal(line.get_ydata(), flow.loss)
    stair = lines[len(flows)]
    np.testing.assert_array_equal(stair.get_xdata(), [0.0, 1.0, 2.0, 2.5])  # T_k up to the last time
    np.testing.assert_array_equal(stair.get_ydata(), [1.0, 0.5, 0.1, 0.1])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["α = 0.01", "α = 1e-8", "greedy limit"]


def test_coordinate_plot_draws_the_chosen_coordinates_and_the_limit(flows):
    path = _path()
    ax = plot_coordinates(flows, NAMES, [0, 2], path=path, title="b", quantity="b").axes[0]
    drawn = [line for line in ax.get_lines() if len(line.get_xdata())]  # not the legend's empty entries
    for j, line in enumerate(drawn[: 2 * len(flows)]):
        np.testing.assert_array_equal(line.get_ydata(), flows[j // 2].b[:, [0, 2][j % 2]])
    limit = drawn[2 * len(flows)]  # the greedy b, piecewise linear in τ
    np.testing.assert_allclose(limit.get_ydata(), path.b_at(limit.get_xdata())[:, 0])
    assert {t.get_text() for t in ax.texts} == {"KQ[0]", "VO[0]"}  # labels at the final values
    assert ax.get_ylabel().startswith("b_i")


def test_convergence_plot_draws_the_worst_distances_and_their_fits(flows):
    runs = [_Run(float(f.log_alpha), f.ts, f.beta, f.b, f.loss) for f in flows]
    comparison = _compare_runs(_path(), runs)
    ax = plot_convergence(comparison, labels=LABELS).axes[0]
    markers = [line for line in ax.get_lines() if line.get_marker() == "o"]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert len(markers) == len(labels) >= 1
    for line, label in zip(markers, labels):
        np.testing.assert_array_equal(line.get_xdata(), -comparison.log_alpha)
        assert "r = " in label


def test_perturbation_plot_draws_perturbed_and_reference_runs(flows):
    pert = _perturbation(flows[1])
    fig = plot_perturbation(pert, flows[1], NAMES, coordinate_groups(NAMES), title="perturbed")
    assert len(fig.axes) == 2  # KQ and VO
    for ax, i in zip(fig.axes, (0, 2)):  # one perturbed coordinate in each group
        reference, perturbed = ax.get_lines()[:2]
        np.testing.assert_array_equal(reference.get_ydata(), flows[1].beta[:, i])
        np.testing.assert_array_equal(perturbed.get_ydata(), pert.beta[0, :, i])
        assert [t.get_text() for t in ax.get_legend().get_texts()] == [NAMES[i]]

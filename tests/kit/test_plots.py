"""What every family's figures share (gradflow/_kit/_plots.py): a written figure reads back as an image, runs coloured
by α with their legend, the greedy limit dashed, the loss figure of any family's runs."""

import math
from types import SimpleNamespace

import numpy as np
from matplotlib.image import imread

from gradflow._kit._plots import (
    by_alpha,
    draw_greedy,
    label_axes,
    new_figure,
    plot_loss,
    plot_per_depth,
    plot_stage_times_by_depth,
    save_figure,
)


def _path():
    """A stand-in for a two-stage greedy path: its stage times and losses."""
    return SimpleNamespace(times=np.array([0.0, 1.0, 2.0]), loss=np.array([1.0, 0.5, 0.1]))


def _flows():
    ts = np.linspace(0, 2.5, 50)
    return [SimpleNamespace(ts=ts, loss=np.exp(-a * ts), log_alpha=np.asarray(math.log(a))) for a in (1e-2, 1e-8)]


def test_save_figure_writes_a_readable_image_atomically(tmp_path):
    fig = plot_loss(_flows(), _path())
    path = save_figure(fig, tmp_path / "sub" / "loss.png")
    image = imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    assert np.ptp(image[..., :3]) > 0.5  # something is drawn on the white background
    assert [p.name for p in path.parent.iterdir()] == ["loss.png"]  # no temporary file left behind


def test_loss_plot_draws_each_run_and_the_greedy_staircase():
    flows, path = _flows(), _path()
    ax = plot_loss(flows, path).axes[0]
    lines = ax.get_lines()
    for line, flow in zip(lines, flows):
        np.testing.assert_array_equal(line.get_ydata(), flow.loss)
    stair = lines[len(flows)]
    np.testing.assert_array_equal(stair.get_xdata(), [0.0, 1.0, 2.0, 2.5])  # T_k up to the last time
    np.testing.assert_array_equal(stair.get_ydata(), [1.0, 0.5, 0.1, 0.1])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["α = 0.01", "α = 1e-8", "greedy limit"]


def test_runs_by_alpha_and_the_greedy_limit():
    ax = new_figure().add_subplot()
    flows = _flows()[::-1]
    assert all(run is flow for (run, _), flow in zip(by_alpha(ax, flows), flows, strict=True))
    colours = [colour for _, colour in by_alpha(new_figure().add_subplot(), flows)]
    assert colours[0] != colours[1] and sum(colours[1][:3]) > sum(colours[0][:3])  # darker for the smaller α
    draw_greedy(ax, [0.0, 1.0, 2.0], [1.0, 0.5, 0.5], steps=True)
    label_axes(ax, ylabel="loss", title="t")
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["α = 1e-8", "α = 0.01", "greedy limit"]
    stair = [line for line in ax.get_lines() if len(line.get_xdata())][0]
    assert stair.get_drawstyle() == "steps-post" and stair.get_linestyle() == "--"
    assert ax.get_xlabel().startswith("rescaled time τ") and ax.get_title() == "t"


def test_stage_times_by_depth_draw_every_stage_once_labelled():
    """Per depth and stage: the limit's ``T_k``, the closed form's where it has one, and one
    dot per α at the detected time; each kind labelled once, the ticks at the depths."""
    log_alphas = np.log([1e-2, 1e-4])
    rows = [
        (3, np.array([0.0, 1 / 3, 1 / 2]), np.array([1 / 3, 1 / 2]), np.array([[0.30, 0.45], [0.33, 0.49]])),
        (4, np.array([0.0, 1 / 6]), np.array([np.nan]), np.array([[0.16], [0.166]])),
    ]
    fig = plot_stage_times_by_depth(
        rows, log_alphas, greedy_label=lambda depth: f"greedy at {depth}", closed_label="closed", title="T"
    )
    ax = fig.axes[0]
    lines = ax.get_lines()
    assert len(lines) == 3 * (1 + 2) + 2  # three stages: the limit and two α each; the closed form where finite
    limits = [line for line in lines if line.get_marker() == "o"]
    assert [float(line.get_ydata()[0]) for line in limits] == [1 / 3, 1 / 2, 1 / 6]
    dots = [float(line.get_ydata()[0]) for line in lines if line.get_marker() == "."]
    assert dots == [0.30, 0.33, 0.45, 0.49, 0.16, 0.166]
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert labels == ["greedy at 3", "closed", "detected on each flow (darker: smaller α)", "greedy at 4"]
    assert list(ax.get_xticks()) == [3, 4]


def test_per_depth_panels_are_titled_and_labelled_by_depth():
    """One panel per run, each drawn by ``draw``, titled by its depth over its rescaled time; the first alone has the
    y label and the legend."""
    runs = [SimpleNamespace(depth=2), SimpleNamespace(depth=4)]
    drawn = []

    def draw(ax, run):
        drawn.append(run.depth)
        ax.plot([0, 1], [run.depth, 0], label=f"run {run.depth}")

    fig = plot_per_depth(runs, draw, ylabel="loss", title="curves")
    assert drawn == [2, 4] and len(fig.axes) == 2 and fig._suptitle.get_text() == "curves"
    first, second = fig.axes
    assert [ax.get_title() for ax in fig.axes] == ["L = 2", "L = 4"]
    assert [ax.get_xlabel() for ax in fig.axes] == ["τ = t / log(1/α)", "τ = t α^2"]
    assert first.get_ylabel() == "loss" and second.get_ylabel() == ""
    assert first.get_legend() is not None and second.get_legend() is None

"""Figures: every plot writes a non-empty PNG; α labels; coordinate grouping."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from gradflow._compare import Perturbation, _compare_runs
from gradflow._plots import (
    coordinate_groups,
    format_alpha,
    plot_convergence,
    plot_coordinates,
    plot_loss,
    plot_perturbation,
    save_figure,
    significant,
)

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


def _check_png(path):
    assert path.exists() and path.stat().st_size > 1000
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_format_alpha():
    assert format_alpha(math.log(0.1)) == "0.1"
    assert format_alpha(math.log(1e-32)) == "1e-32"
    assert format_alpha(-10000.0) == "1.14e-4343"
    assert format_alpha(math.log(2.5e-300)) == "2.5e-300"


def test_coordinate_groups():
    groups = coordinate_groups(NAMES)
    assert list(groups) == ["KQ", "VO"] and groups["VO"].tolist() == [2, 3]
    assert list(coordinate_groups(("L0H1.KQ[0]", "L0H1.VO[0]"))) == ["KQ", "VO"]
    assert list(coordinate_groups(("β[0]", "β[1]"))) == ["all"]


def test_significant(flows):
    assert significant(_path(), [f.beta for f in flows]).tolist() == [True, False, True, False]


def test_plots_write_png(tmp_path, flows):
    path = _path()
    save_figure(plot_loss(flows, path), tmp_path / "loss.png")
    save_figure(plot_coordinates(flows, NAMES, [0, 1], path=path, title="KQ"), tmp_path / "kq.png")
    save_figure(plot_coordinates(flows, NAMES, [0, 2], path=path, title="b", quantity="b"), tmp_path / "b.png")
    save_figure(plot_coordinates(flows, NAMES, [2, 3], title="no path"), tmp_path / "vo.png")
    runs = [(float(f.log_alpha), f.ts, f.beta, f.b, f.loss) for f in flows]
    save_figure(plot_convergence(_compare_runs(path, runs)), tmp_path / "conv.png")
    ts = flows[1].ts
    pert = Perturbation(
        kind="plateau",
        std=0.05,
        threshold=1e-5,
        log_alpha=float(flows[1].log_alpha),
        start_times=ts[[50]],
        ts=ts[None, 50:80],
        beta=flows[1].beta[None, 50:80] + 0.01,
        reference_beta=flows[1].beta[None, 50:80],
        perturbed=np.array([[True, False, True, False]]),
        initial_deviation=np.array([0.01]),
        final_deviation=np.array([0.01]),
    )
    save_figure(
        plot_perturbation(pert, flows[1], NAMES, coordinate_groups(NAMES), title="perturbed"), tmp_path / "p.png"
    )
    for name in ("loss", "kq", "b", "vo", "conv", "p"):
        _check_png(tmp_path / f"{name}.png")

"""compare_limits on the orthonormal diagonal linear model, where the greedy limit is known in closed form.

With ``XᵀX / n = I`` the greedy path activates the coordinates in decreasing ``|β*_i|`` at
``T = 1/|β*_i|`` (docs/math.md, *Algorithm 1*), so the stage times detected on the flow must approach those values.
"""

import json
import math
import re
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

import gradflow
import theory
from gradflow import (
    AssumptionWarning,
    Comparison,
    Trajectory,
    compare_limits,
    greedy_limit,
    models,
    simulate_flow,
)
from gradflow._kit._comparison import fit_rate, fit_rates

BETA_STAR = np.array([1.6, 0.0, -1.0, 0.55])
ALPHAS = (1e-3, 1e-8, 1e-24)


@pytest.fixture(scope="module")
def task():
    return models.diagonal_linear(n=16, p=4, orthonormal=True, beta_star=BETA_STAR, seed=3)


@pytest.fixture(scope="module")
def signed_path(task):
    # the assumption checks do not change the path; skipping them keeps the test fast
    return greedy_limit(task.model, u0=task.u0, v0=task.v0, check_assumptions=False)


@pytest.fixture(scope="module")
def comparison(task, signed_path):
    return compare_limits(task.model, alpha=ALPHAS, u0=task.u0, v0=task.v0, path=signed_path, gd=dict(lr=0.02))


def test_the_flows_are_recorded_finely_around_every_stage_time(task, signed_path, monkeypatch):
    """By default compare_limits records the flows 0.01 / log(1/α) of the smallest α from every T_k and ever
    coarser out to δ: an even grid of 1,000 times would cap the detected errors at its spacing (issue 26)."""
    import gradflow._api

    recorded = []

    def record(model, *, ts, **options):
        recorded.append(ts)
        raise KeyboardInterrupt  # enough: the times are known

    monkeypatch.setattr(gradflow._api, "simulate_flow", record)
    with pytest.raises(KeyboardInterrupt):
        compare_limits(task.model, log_alpha=[-10.0, -1000.0], u0=task.u0, v0=task.v0, path=signed_path)
    (ts,) = recorded
    for T in signed_path.times[1:]:
        near = np.abs(ts - T)
        assert np.min(near[near > 0]) == pytest.approx(1e-5, rel=1e-6)


def test_rates_are_fitted_over_the_asymptotic_scales_and_say_which(comparison):
    """Only α = 1e-24 detects every stage time within δ of T_k: fewer than two asymptotic scales, so the rates are
    fitted over all three, and say so; a fit range picks scales (summary, rate_records)."""
    far = np.abs(comparison.detected_times - comparison.stage_times[1:]) > comparison.delta
    np.testing.assert_array_equal(far.any(axis=1), [True, True, False])
    np.testing.assert_allclose(comparison.fit_range, [math.log(1e-24), math.log(1e-3)])
    assert "3 of 3 scales" in comparison.fit_description() and "fewer than two" in comparison.fit_description()
    small = (math.log(1e-25), math.log(1e-7))
    fitted = comparison.summary(fit_range=small)["time"]
    assert fitted == pytest.approx(fit_rate(np.log(ALPHAS[1:]), comparison.worst("time")[1:])[0])
    assert fitted != comparison.summary()["time"] and "2 of 3 scales" in comparison.fit_description(small)
    records = [r for r in comparison.rate_records(fit_range=small) if r["method"] == "flow"]
    assert {r["fit_log_alpha_max"] for r in records} == {math.log(1e-8)}
    worst = [r for r in records if r["quantity"] == "time" and r["stage"] == "worst"]
    assert worst[0]["exponent"] == pytest.approx(fitted)


def test_stage_times_are_one_over_beta_star(comparison):
    oracle = theory.greedy_orthonormal_stages(BETA_STAR).times  # T_k = 1/|β*_(k)|
    np.testing.assert_allclose(comparison.stage_times[1:], oracle, rtol=1e-6)
    # detected on the flow: closer to 1/|β*_(k)| as α decreases, within 5% at the smallest α
    err = comparison.time_error
    assert np.all(np.diff(err, axis=0) < 0)
    np.testing.assert_allclose(comparison.detected_times[-1], oracle, rtol=0.05)


def test_distances_shrink_as_alpha_decreases(comparison):
    for q in ("weights", "b", "loss", "time"):
        worst = comparison.worst(q)
        assert np.all(np.isfinite(worst)) and np.all(np.diff(worst) < 0), (q, worst)
    assert np.all(np.diff(comparison.b_distance, axis=0) < 0)
    # b and the stage times converge like 1/log(1/α)
    assert 0.6 < comparison.summary()["b"] < 1.4
    assert 0.6 < comparison.summary()["time"] < 1.4


def test_records_table_and_pytree(comparison):
    K = comparison.stage_times.size - 1
    records = comparison.to_records()
    assert len(records) == 2 * len(ALPHAS) * (K + 1)  # flow and gd
    assert {"method", "alpha", "stage", "T_greedy", "T_detected", "beta_distance", "b_distance"} <= set(records[0])
    json.dumps(records)
    table = comparison.to_table().splitlines()
    assert table[0].startswith("method,log_alpha,alpha,stage") and len(table) == len(records) + 1
    assert isinstance(comparison, Comparison)
    assert {r["quantity"] for r in comparison.rate_records()} == {"beta", "b", "loss", "time"}


def test_gd_comparison(comparison):
    gd = comparison.gd
    assert gd is not None and gd.method == "gd" and gd.b_distance.shape == comparison.b_distance.shape
    # with a small learning rate GD follows the flow: the same stage times, to within the step
    np.testing.assert_allclose(gd.detected_times, comparison.detected_times, atol=0.02)
    assert np.all(np.diff(gd.time_error, axis=0) < 0)
    assert {r["method"] for r in comparison.to_records()} == {"flow", "gd"}
    assert comparison.result == gd.result == "successful" and comparison.message == gd.message == ""


def test_bad_input(task):
    with pytest.raises(ValueError, match="exactly one"):
        compare_limits(task.model, u0=task.u0, v0=task.v0)
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        compare_limits(task.model, alpha=[2.0], u0=task.u0, v0=task.v0)
    with pytest.raises(ValueError, match="threshold"):
        compare_limits(task.model, alpha=[1e-2], u0=task.u0, v0=task.v0, threshold=1.5)


def test_comparison_keeps_its_runs_and_slices_by_alpha(task, comparison):
    """compare_limits keeps the flows it ran and the path; a comparison, its flows and its gradient descents slice
    by α, the rates fitted again over the runs kept."""
    flows, gd = comparison.runs, comparison.gd
    assert (
        isinstance(flows, gradflow.FlowResult) and comparison.path is not None and comparison.names == task.model.names
    )
    np.testing.assert_array_equal(flows.log_alpha, comparison.log_alpha)
    assert len(gd.runs) == len(ALPHAS) and isinstance(gd.runs[0], gradflow.GDResult)
    last = comparison[1:]
    np.testing.assert_array_equal(last.b_distance, comparison.b_distance[1:])
    np.testing.assert_allclose(last.b_rate, fit_rates(last.log_alpha, last.b_distance))
    np.testing.assert_array_equal(last.runs[0].beta, flows.beta[1])
    np.testing.assert_array_equal(last.gd.log_alpha, gd.log_alpha[1:])
    one = comparison[0]
    assert one.result == "single_scale" and one.log_alpha.shape == (1,) and np.all(np.isnan(one.time_rate))
    # a flow: one run drops the batch axis, a slice keeps it; the shared times stay
    first = flows[0]
    assert first.log_alpha.shape == () and first.beta.shape == flows.beta.shape[1:] and first.ts is flows.ts
    assert first.stats["max_steps"] is None and first.stats["num_steps"] == flows.stats["num_steps"][0]
    np.testing.assert_array_equal(flows[[2, 0]].b, flows.b[[2, 0]])
    with pytest.raises(IndexError, match="out of range"):
        flows[3]
    with pytest.raises(TypeError, match="single run"):
        first[0]


def test_scales_from_the_flows(task, comparison):
    """Given flows, compare_limits takes their α; α given as well must be theirs."""
    again = compare_limits(task.model, u0=task.u0, v0=task.v0, path=comparison.path, flows=comparison.runs)
    np.testing.assert_array_equal(again.weights_distance, comparison.weights_distance)
    with pytest.raises(ValueError, match="records log α"):
        compare_limits(
            task.model, alpha=ALPHAS[::-1], u0=task.u0, v0=task.v0, path=comparison.path, flows=comparison.runs
        )
    with pytest.raises(ValueError, match="the flows' log_alpha must be distinct"):
        compare_limits(task.model, u0=task.u0, v0=task.v0, path=comparison.path, flows=[comparison.runs[0]] * 2)


def test_save_load_plot_report(comparison, tmp_path):
    """The comparison with its runs saved and read back whole; a file of a newer format refused, one of format 1
    (the old names) read; the figures and the report drawn from it alone."""
    file = gradflow.save(comparison, tmp_path / "c.npz")
    again = gradflow.load(file)
    np.testing.assert_array_equal(again.runs.log_w, comparison.runs.log_w)
    np.testing.assert_array_equal(again.gd.runs[2].u, comparison.gd.runs[2].u)
    assert again.names == comparison.names and again.path.message == comparison.path.message
    with np.load(file) as data:
        arrays = {k: data[k] for k in data.files}
    assert int(arrays["__gradflow_format__"]) == 2
    np.savez(tmp_path / "new.npz", **dict(arrays, __gradflow_format__=np.asarray(3)))
    with pytest.raises(ValueError, match="newer gradflow"):
        gradflow.load(tmp_path / "new.npz")
    old = json.loads(str(arrays.pop("__gradflow_header__")))
    old["fields"] = {("beta_distance" if k == "weights_distance" else k): v for k, v in old["fields"].items()}
    for name in ("runs", "path", "names"):
        del old["fields"][name]
    np.savez(tmp_path / "old.npz", __gradflow_header__=np.asarray(json.dumps(old)), **arrays)
    version_1 = gradflow.load(tmp_path / "old.npz")
    np.testing.assert_array_equal(version_1.weights_distance, comparison.weights_distance)
    assert version_1.runs is None
    loss = gradflow.plot.loss(again)
    assert len(loss.axes[0].lines) == len(ALPHAS) + 1  # the flows and the limit's staircase
    b = gradflow.plot.b(again.runs[1:], again.path).axes[0]
    limit = b.lines[-1]  # the last coordinate's limit, dashed over the flows
    np.testing.assert_allclose(limit.get_ydata(), again.path.b_at(limit.get_xdata())[:, -1])
    assert gradflow.plot.weights(again.gd.runs[0]).axes and gradflow.plot.convergence(again).axes
    report = gradflow.report(again, tmp_path / "report", title="linear")
    text = report.read_text()
    assert "## Greedy limit" in text and "### Stage times" in text and "![b](figures/b.png)" in text
    assert "exponents r: beta: " in text  # the reports keep the tables' names
    assert {p.name for p in (tmp_path / "report" / "figures").iterdir()} == {
        f"{n}.png" for n in gradflow._outputs.FIGURES
    }
    csv = (tmp_path / "report" / "comparison.csv").read_text().splitlines()
    assert csv[0].startswith("method,log_alpha,alpha,stage") and len(csv) == len(comparison.to_records()) + 1
    with pytest.raises(ValueError, match="holds no runs"):
        gradflow.report(version_1, tmp_path / "no")


DEPRECATED = {
    "Comparison.beta_distance": (lambda c: c.beta_distance, lambda c: c.weights_distance),
    "Comparison.beta_rate": (lambda c: c.beta_rate, lambda c: c.weights_rate),
    'Comparison quantity "beta"': (lambda c: c.worst("beta"), lambda c: c.worst("weights")),
    'Comparison.summary()["beta"]': (lambda c: c.summary()["beta"], lambda c: c.summary()["weights"]),
    "GreedyPath.coordinate": (lambda c: c.path.coordinate, lambda c: c.path.activated),
    "GreedyPath.beta_at()": (lambda c: c.path.beta_at([0.5, 2.0]), lambda c: c.path.weights_at([0.5, 2.0])),
}


@pytest.mark.parametrize("old", list(DEPRECATED))
def test_old_names_warn_and_work(comparison, old):
    deprecated, new = DEPRECATED[old]
    with pytest.warns(DeprecationWarning, match=re.escape(old)) as record:
        value = deprecated(comparison)
    assert record[0].filename == __file__  # the warning points at the caller
    np.testing.assert_array_equal(value, new(comparison))


@pytest.mark.parametrize("old, new", [("alphas", "alpha"), ("log_alphas", "log_alpha")])
def test_old_keywords_warn_and_work(task, comparison, old, new):
    scales = comparison.log_alpha if new == "log_alpha" else np.exp(comparison.log_alpha)
    kw = dict(u0=task.u0, v0=task.v0, path=comparison.path, flows=comparison.runs)
    with pytest.warns(DeprecationWarning, match=rf"compare_limits\({old}=\.\.\.\) is deprecated"):
        again = compare_limits(task.model, **{old: scales}, **kw)
    np.testing.assert_array_equal(again.b_distance, comparison.b_distance)
    with pytest.raises(TypeError, match="deprecated name"), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        compare_limits(task.model, **{old: scales, new: scales}, **kw)
    with pytest.raises(TypeError, match="unexpected keyword argument 'alphaz'"):
        compare_limits(task.model, alphaz=scales, **kw)


@pytest.fixture(scope="module")
def path(task):
    return greedy_limit(task.model, check_assumptions=False)


def _times(comparison):
    """The comparison's recorded times: flows on them share its flows' program (compiled once per run shape)."""
    return comparison.runs.ts


def test_runs_are_trajectories(task, path, comparison):
    """compare_limits reads any Trajectory (ts, beta, b, loss, log_alpha), checked against the scales given."""
    flow = simulate_flow(task.model, u0=task.u0, v0=task.v0, ts=_times(comparison), log_alpha=np.log(ALPHAS))
    # a minimal trajectory of one run (a later engine's result type only needs these attributes)
    run = SimpleNamespace(ts=flow.ts, beta=flow.beta[1], b=flow.b[1], loss=flow.loss[1], log_alpha=flow.log_alpha[1])
    assert isinstance(run, Trajectory) and not isinstance(SimpleNamespace(ts=flow.ts), Trajectory)
    one = compare_limits(task.model, alpha=[ALPHAS[1]], u0=task.u0, v0=task.v0, path=path, flows=[run])
    both = compare_limits(task.model, alpha=ALPHAS, u0=task.u0, v0=task.v0, path=path, flows=flow)
    np.testing.assert_array_equal(one.b_distance[0], both.b_distance[1])
    assert one.result == "single_scale" and np.all(np.isnan(one.b_rate)) and both.result == "successful"
    with pytest.raises(TypeError, match="Trajectory"):
        compare_limits(task.model, alpha=[ALPHAS[1]], u0=task.u0, v0=task.v0, path=path, flows=[flow.beta[1]])
    with pytest.raises(ValueError, match="records log α"):
        compare_limits(task.model, alpha=[ALPHAS[0]], u0=task.u0, v0=task.v0, path=path, flows=[run])


def test_near_degenerate_initialisation_warns_once(task, path, comparison):
    """compare_limits checks the initialisation once for the flows and gradient descent (and the greedy path
    when it computes it, which warns alike: see test_greedy)."""
    u0 = task.u0.copy()
    u0[1] = task.v0[1] * (1 - 1e-8)
    with pytest.warns(AssumptionWarning, match="near-degenerate") as record:
        compare_limits(task.model, alpha=ALPHAS, u0=u0, v0=task.v0, path=path, ts=_times(comparison), gd=dict(lr=0.05))
    assert len([w for w in record if "near-degenerate" in str(w.message)]) == 1
    assert record[0].filename == __file__

"""compare_limits for factorised weights against matrix factorisation from an aligned, balanced start, where both
the flow and the greedy low-rank limit are known in closed form.

``M = A diag(σ) Bᵀ``, ``U(0) = α A diag(c)``, ``V(0) = α B diag(c)``: the modes decouple, ``W = A diag(s) Bᵀ`` with
``ds_i/dt = 2 s_i (σ_i − s_i)``, so ``1/s_i = 1/σ_i + (1/(α² c_i²) − 1/σ_i) e^{−2σ_i t}``. The greedy limit learns
mode r at ``T_r = 1/σ_r`` (docs/math.md, *Full weights: the greedy low-rank limit*); the sleeping modes have log
scales ``e_i = 1 − σ_i τ``.
"""

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

import gradflow
import theory
from gradflow import FactorizedFlowResult, RankComparison, compare_limits, models
from gradflow._factorized._compare import stable_rank
from gradflow._factorized._path import predicted_log_scales
from gradflow._kit._comparison import fit_rates

SIGMA = np.array([2.0, 1.0, 0.5, 0.0])  # M has rank 3; the fourth mode has σ = 0 and never grows
C = np.array([1.3, 0.7, 1.1, 0.9])
ALPHAS = (1e-4, 1e-16, 1e-64)
LOG_ALPHAS = np.log(ALPHAS)
TS = np.linspace(0.0, 2.5, 2001)


def _orthonormal(rng, n, k):
    return np.linalg.qr(rng.standard_normal((n, k)))[0]


@pytest.fixture(scope="module")
def setup():
    rng = np.random.default_rng(0)
    A, B = _orthonormal(rng, 5, 4), _orthonormal(rng, 4, 4)
    M = (A * SIGMA) @ B.T
    model = models.matrix_factorization_model(M)
    return SimpleNamespace(model=model, A=A, B=B, M=M, u0=(A * C,), v0=(B * C,))


def closed_form_flow(setup, log_alpha, ts=TS):
    """The exact flow of the module docstring, in log space (any α)."""
    L = -log_alpha
    t = ts[:, None] * L
    with np.errstate(divide="ignore"):
        grown = np.where(
            SIGMA > 0,
            -np.log(np.where(SIGMA > 0, SIGMA, 1.0)) + np.log(-np.expm1(-2.0 * SIGMA * t)),
            np.log(2.0 * t),
        )
        start = 2.0 * L - 2.0 * np.log(C) - 2.0 * SIGMA * t  # log of e^{−2σt} / (α² c²)
        log_s = -np.logaddexp(grown, start)
    s = np.exp(log_s)
    W = np.einsum("ik,tk,jk->tij", setup.A, s, setup.B)
    loss = 0.5 * np.sum((s - SIGMA) ** 2, axis=1)
    return SimpleNamespace(
        ts=ts, W=(W,), log_singular_values=(-np.sort(-log_s, axis=1),), loss=loss, log_alpha=np.array(log_alpha)
    )


class ClosedFormPath:
    """The greedy low-rank limit of the aligned matrix factorisation (the attributes compare_limits reads)."""

    def __init__(self, M):
        stages = theory.matrix_factorization_stages(M)
        self.times = stages.times
        K = self.times.size - 1
        self.W = (stages.saddles,)
        self.activated = np.zeros(K, dtype=int)
        self.ranks = np.arange(K + 1)[:, None]
        self.loss = np.array([0.5 * np.sum((w - M) ** 2) for w in stages.saddles])

    def stage_at(self, tau):
        return np.searchsorted(self.times, np.asarray(tau, dtype=np.float64), side="right") - 1

    def sleeping_at(self, tau):
        """The sleeping modes' exponents ``1 − σ_i τ`` for ``i > r_k``, ascending, NaN-padded to width 4."""
        tau = np.asarray(tau, dtype=np.float64)
        k = self.stage_at(tau)
        e = 1.0 - SIGMA * tau[..., None]
        out = np.full(tau.shape + (4,), np.nan)
        for i in range(4):
            src = i + k
            out[..., i] = np.where(src < 4, np.take_along_axis(e, np.clip(src, 0, 3)[..., None], -1)[..., 0], np.nan)
        return out[..., None, :]


@pytest.fixture(scope="module")
def path(setup):
    return ClosedFormPath(setup.M)


@pytest.fixture(scope="module")
def comparison(setup, path):
    flows = [closed_form_flow(setup, la) for la in LOG_ALPHAS]
    return compare_limits(setup.model, alpha=ALPHAS, u0=setup.u0, v0=setup.v0, path=path, flows=flows)


def test_closed_form_flow_solves_the_flow(setup):
    """The oracle itself: dU/dt = G V with G = M − U Vᵀ, by a centred difference at α = 1e-2."""
    la = math.log(1e-2)
    ts = np.array([0.3, 0.3 + 1e-6, 0.3 - 1e-6])
    flow = closed_form_flow(setup, la, ts)
    W = flow.W[0]
    np.testing.assert_allclose(np.exp(flow.log_singular_values[0][0]), np.linalg.svd(W[0], compute_uv=False))
    dW = (W[1] - W[2]) / (2e-6 * -la)
    U = setup.A * np.sqrt(np.einsum("ik,ij,jk->k", setup.A, W[0], setup.B))
    V = setup.B * np.sqrt(np.einsum("ik,ij,jk->k", setup.A, W[0], setup.B))
    G = setup.M - W[0]
    np.testing.assert_allclose(dW, G @ V @ V.T + U @ U.T @ G, atol=1e-6)


def test_rank_jumps_are_detected_at_one_over_sigma(comparison):
    """The r-th singular value reaches half of σ_r at τ = 1/σ_r − log(c_r²/σ_r) / (2 σ_r log(1/α)) exactly."""
    assert isinstance(comparison, RankComparison)
    np.testing.assert_allclose(comparison.stage_times[1:], 1.0 / SIGMA[:3])
    L = -LOG_ALPHAS[:, None]
    sigma, c = SIGMA[:3], C[:3]
    expected = (1.0 - np.log(c**2 / sigma) / (2.0 * L)) / sigma  # threshold 0.5: (1/θ − 1) = 1
    np.testing.assert_allclose(comparison.detected_times, expected, rtol=2e-4)
    assert comparison.summary()["time"] == pytest.approx(1.0, abs=1e-3)


def test_log_scales_converge_like_one_over_log(comparison):
    """Sleeping modes sit at b = 1 − σ τ − log c / log(1/α), learned ones at log σ / (2 log α): d = O(1/log(1/α))."""
    d = comparison.b_distance[..., 0]
    assert np.all(np.isfinite(d)) and np.all(np.diff(d, axis=0) < 0)
    # d · log(1/α) → the largest offset on window k: |log σ_i| / 2 (learned, i < k) or |log c_i| (sleeping, i ≥ k)
    offset = np.array(
        [max(np.abs(np.log(SIGMA[:k])).max(initial=0) / 2, np.abs(np.log(C[k:])).max()) for k in range(4)]
    )
    np.testing.assert_allclose(d[-1] * -LOG_ALPHAS[-1], offset, rtol=1e-4)
    assert np.all(np.diff(d * -LOG_ALPHAS[:, None], axis=0) <= 1e-12)
    assert comparison.b_rate.shape == (4, 1) and np.all(np.abs(comparison.b_rate - 1.0) < 0.1)


def test_weights_and_loss_approach_the_saddles(comparison):
    """On the windows W and L approach the truncated SVDs and their loss, exponentially fast in log(1/α)."""
    for q in ("weights", "loss"):
        worst = comparison.worst(q)
        assert np.all(np.diff(worst) < 0), (q, worst)
        assert worst[-1] < 1e-6
    assert comparison.weights_distance.shape == (3, 4, 1) and comparison.loss_distance.shape == (3, 4)


def test_records_and_rates(comparison):
    records = comparison.to_records()
    assert len(records) == len(ALPHAS) * 4
    assert {"factor", "rank[W]", "W_distance[W]", "b_distance[W]", "T_detected"} <= set(records[0])
    json.dumps(records)
    assert comparison.to_table().splitlines()[0].startswith("method,log_alpha,alpha,stage,factor")
    rates = comparison.rate_records()
    assert {r["quantity"] for r in rates} == {"W", "b", "loss", "time"}
    assert sum(r["stage"] == "worst" for r in rates) == 4
    with pytest.raises(ValueError, match="quantity"):
        comparison.worst("beta")


def test_batched_run_equals_runs(setup, path):
    """One batched result (a leading axis of length A) gives the same comparison as one result per α."""
    runs = [closed_form_flow(setup, la) for la in LOG_ALPHAS]
    batched = SimpleNamespace(
        ts=TS,
        W=(np.stack([r.W[0] for r in runs]),),
        log_singular_values=(np.stack([r.log_singular_values[0] for r in runs]),),
        loss=np.stack([r.loss for r in runs]),
        log_alpha=LOG_ALPHAS,
    )
    one = compare_limits(setup.model, log_alpha=LOG_ALPHAS, u0=setup.u0, v0=setup.v0, path=path, flows=batched)
    many = compare_limits(setup.model, log_alpha=LOG_ALPHAS, u0=setup.u0, v0=setup.v0, path=path, flows=runs)
    np.testing.assert_array_equal(one.b_distance, many.b_distance)
    np.testing.assert_array_equal(one.detected_times, many.detected_times)


def test_bad_runs(setup, path):
    run = closed_form_flow(setup, LOG_ALPHAS[0])
    kw = dict(u0=setup.u0, v0=setup.v0, path=path)
    with pytest.raises(TypeError, match="log_singular_values"):
        compare_limits(setup.model, alpha=ALPHAS[:1], flows=[SimpleNamespace(ts=TS, loss=run.loss)], **kw)
    with pytest.raises(ValueError, match="records log α"):
        compare_limits(setup.model, alpha=ALPHAS[1:2], flows=[run], **kw)
    with pytest.raises(ValueError, match="2 values of alpha"):
        compare_limits(setup.model, alpha=ALPHAS[:2], flows=[run], **kw)
    with pytest.raises(ValueError, match="threshold"):
        compare_limits(setup.model, alpha=ALPHAS[:1], flows=[run], threshold=0.0, **kw)
    with pytest.raises(ValueError, match="u0"):
        compare_limits(setup.model, alpha=ALPHAS[:1], u0=(setup.B,), v0=setup.v0, path=path, flows=[run])


def test_predicted_log_scales_and_stable_rank(path):
    tau = np.array([0.0, 0.6, 1.5])  # stages 0, 1, 2
    b = predicted_log_scales(path, tau, 0, 4)
    np.testing.assert_allclose(b[0], [1.0, 1.0, 1.0, 1.0])
    np.testing.assert_allclose(b[1], [0.0, 1 - 0.6, 1 - 0.3, 1.0])
    np.testing.assert_allclose(b[2], [0.0, 0.0, 1 - 0.75, 1.0])
    W = np.zeros((3, 4, 4))
    W[1, 0, 0] = 2.0
    W[2] = np.diag([2.0, 2.0, 0.0, 0.0])
    np.testing.assert_allclose(stable_rank(W), [0.0, 1.0, 2.0])


def test_gradient_descent_follows_the_flow(setup, path):
    """``gd=dict(lr=...)`` runs float64 GD (``simulate_gd``) at every α: with a small step it detects the rank jumps
    where the exact flow does, and it is reported as ``comparison.gd``."""
    la = LOG_ALPHAS[:1]
    flows = [closed_form_flow(setup, la[0])]
    kw = dict(u0=setup.u0, v0=setup.v0, path=path, flows=flows, ts=TS)
    comparison = compare_limits(setup.model, log_alpha=la, gd=dict(lr=0.005, record_every=4), **kw)
    gd = comparison.gd
    assert gd is not None and gd.method == "gd" and gd.weights_distance.shape == comparison.weights_distance.shape
    np.testing.assert_allclose(gd.detected_times, comparison.detected_times, atol=0.01)
    assert {r["method"] for r in comparison.to_records()} == {"flow", "gd"}


def test_old_names_warn_and_work(comparison):
    """The names before one vocabulary across families (CHANGELOG.md): each warns and gives the new one's value."""
    for old, new in (("W_distance", "weights_distance"), ("W_rate", "weights_rate"), ("factor", "activated")):
        with pytest.warns(DeprecationWarning, match=f"RankComparison.{old} is deprecated") as record:
            value = getattr(comparison, old)
        assert record[0].filename == __file__
        np.testing.assert_array_equal(value, getattr(comparison, new))
    with pytest.warns(DeprecationWarning, match='RankComparison quantity "W"'):
        np.testing.assert_array_equal(comparison.worst("W"), comparison.worst("weights"))


def test_comparison_slices_and_keeps_the_runs(comparison):
    assert len(comparison.runs) == len(ALPHAS) and comparison.path is not None
    part = comparison[[0, 2]]
    np.testing.assert_array_equal(part.weights_distance, comparison.weights_distance[[0, 2]])
    assert part.activated is comparison.activated and part.runs[1] is comparison.runs[2]
    np.testing.assert_allclose(part.b_rate, fit_rates(part.log_alpha, part.b_distance))


def test_full_weight_results_speak_the_vocabulary(setup, comparison):
    """A full-weight flow's ``b`` (log σ / (2 log α)), ``weights``, ``state_at`` and slicing; the figures of a
    comparison of stand-in runs, drawn by its family."""
    runs = [closed_form_flow(setup, la) for la in LOG_ALPHAS[:2]]
    flow = FactorizedFlowResult(
        ts=TS,
        W=(np.stack([r.W[0] for r in runs]),),
        log_singular_values=(np.stack([r.log_singular_values[0] for r in runs]),),
        loss=np.stack([r.loss for r in runs]),
        log_alpha=LOG_ALPHAS[:2],
        stats=dict(num_steps=np.array([3, 4]), max_steps=None),
        result=np.array(["successful"] * 2),
        message=np.array([""] * 2),
    )
    np.testing.assert_allclose(flow.b[0][1], runs[1].log_singular_values[0] / (2 * LOG_ALPHAS[1]))
    expected = 1.0 + np.log(np.sort(C)[::-1]) / LOG_ALPHAS[:2, None]  # at τ = 0 σ_i = α² c_i², descending
    np.testing.assert_allclose(flow.b[0][:, 0], expected, rtol=1e-9)
    assert flow.weights is flow.W
    one = flow[1]
    assert one.log_alpha.shape == () and one.W[0].shape == (TS.size, 5, 4) and one.stats["num_steps"] == 4
    state = flow.state_at(-1)
    np.testing.assert_array_equal(state.W[0], flow.W[0][:, -1])
    np.testing.assert_array_equal(state.log_singular_values[0], flow.log_singular_values[0][:, -1])
    figure = gradflow.plot.b(comparison)
    assert len(figure.axes[0].lines) >= len(ALPHAS) * 4


def test_report_and_figures_of_a_full_weight_comparison(setup, tmp_path):
    """``gradflow.report`` on full weights (the fast test of what the full-weights demo writes), with the greedy
    low-rank limit computed: the rank-jump times 1/σ_r in the report, its figures, and the table with a row per run
    and stage."""
    path = gradflow.greedy_limit(setup.model, u0=setup.u0, v0=setup.v0, check_assumptions=False)
    np.testing.assert_allclose(path.times[1:], 1.0 / SIGMA[:3], rtol=1e-9)
    flows = []
    for la in LOG_ALPHAS:  # the closed form as the flow's result type
        f = closed_form_flow(setup, la)
        stats = dict(num_steps=np.asarray(0), max_steps=None, solver="closed form")
        fields = dict(ts=f.ts, W=f.W, log_singular_values=f.log_singular_values, loss=f.loss, log_alpha=f.log_alpha)
        flows.append(
            FactorizedFlowResult(**fields, stats=stats, result=np.asarray("successful"), message=np.asarray(""))
        )
    comparison = compare_limits(setup.model, alpha=ALPHAS, u0=setup.u0, v0=setup.v0, path=path, flows=flows)
    text = gradflow.report(comparison, tmp_path / "report", title="closed form").read_text()
    assert text.startswith("# gradflow comparison: closed form\n")
    for T in 1.0 / SIGMA[:3]:
        assert f"| {T:.4g} |" in text, T
    figures = {p.name for p in (tmp_path / "report" / "figures").iterdir()}
    assert figures and all((tmp_path / "report" / "figures" / f).stat().st_size > 0 for f in figures)
    csv = (tmp_path / "report" / "comparison.csv").read_text().splitlines()
    assert len(csv) == len(comparison.to_records()) + 1

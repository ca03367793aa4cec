"""The depth family (docs/depth.md): the model's checks, the conservation laws of the reduced state, the depth-L
greedy limit against Saxe's learning times, and (slow: each compiles the flow) the exact flow against Saxe's closed
form, DOP853 on the raw layers, the diagonal family at depth 2, and the greedy limit as α → 0."""

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.integrate import solve_ivp

import gradflow
import theory
from gradflow._depth._flow import AWAKE, CLOCK, NEAR, initial_state, layers_of, reduce_start, wake_scale

S = np.array([3.0, 2.0, 1.0])


def whitened(depth, s=S):
    """``L(β) = ½ ‖β − s‖²``: ``g = s − β`` (Saxe's whitened regression; each coordinate is one mode)."""
    n = len(s)
    X, Y = np.sqrt(n) * np.eye(n), np.sqrt(n) * s
    return gradflow.DepthModel(lambda x, b: x @ b, X, Y, p=n, depth=depth)


def test_model_refuses_bad_depths_and_starts():
    with pytest.raises(ValueError, match="depth must be one of"):
        whitened(7)
    model = whitened(3)
    with pytest.raises(ValueError, match=r"shape \(L, p\) = \(3, 3\)"):
        gradflow.simulate_flow(model, u0=np.ones((2, 3)), ts=[0.0, 1.0], alpha=1e-2)
    with pytest.raises(ValueError, match="v0 is not taken"):
        gradflow.simulate_flow(model, u0=np.ones((3, 3)), v0=np.ones(3), ts=[0.0, 1.0], alpha=1e-2)


@given(
    st.integers(3, 6),
    st.lists(st.floats(0.05, 3.0), min_size=6 * 4, max_size=6 * 4),
    st.lists(st.booleans(), min_size=6 * 4, max_size=6 * 4),
    st.floats(-50.0, -0.5),
)
def test_reduced_state_keeps_the_conservation_laws(depth, mags, negs, log_alpha):
    """At the start and after moving the smallest layer anywhere, w_l² − w_k² = α² (W0[l]² − W0[k]²)."""
    p = 4
    W0 = (np.array(mags[: depth * p]) * np.where(negs[: depth * p], -1.0, 1.0)).reshape(depth, p)
    red = reduce_start(W0)
    log_wake = wake_scale(depth, 1e-8)
    z, kind, sigma_r = initial_state(red, log_alpha, depth, log_wake)
    log_w, sign = layers_of(red, depth, log_alpha, z[None], kind[None], sigma_r[None])
    np.testing.assert_allclose(log_w[0], log_alpha + np.log(np.abs(W0)), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(sign[0], np.sign(W0))
    # any later state: the smallest layer at log a = −3 (awake) or its clock/ρ at 0.7
    for k, value in ((AWAKE, -3.0), (CLOCK, 0.7), (NEAR, -0.7)):
        kinds = np.full(p, k)
        log_w, sign = layers_of(red, depth, log_alpha, np.full((1, p), value), kinds[None], sigma_r[None])
        w2 = np.exp(2 * (log_w[0] - log_alpha))  # (w_l/α)²
        np.testing.assert_allclose(w2 - w2[0], W0**2 - W0[0] ** 2, rtol=1e-9, atol=1e-13 * np.max(w2) + 1e-12)


MODEL3 = whitened(3)  # one model, so that its compiled functions are shared


@pytest.mark.parametrize("depth", [3, pytest.param(4, marks=pytest.mark.slow)])
def test_greedy_limit_gives_saxe_learning_times(depth):
    """Whitened modes from balanced starts W0 = a0: T_k = a0^{-(L-2)} / ((L-2) s_k), β^k the staircase of s."""
    a0 = np.array([1.0, 0.8, 1.3])
    W0 = np.broadcast_to(a0, (depth, 3)).copy()
    path = gradflow.greedy_limit(MODEL3 if depth == 3 else whitened(depth), u0=W0)
    order = np.argsort(a0 ** -(depth - 2) / S)
    np.testing.assert_allclose(path.times[1:], np.sort(a0 ** -(depth - 2) / ((depth - 2) * S)), rtol=1e-9)
    np.testing.assert_array_equal(path.activated, order)
    for k in range(1, 4):
        expected = np.where(np.isin(np.arange(3), order[:k]), S, 0.0)
        np.testing.assert_allclose(path.beta[k], expected, atol=1e-7)
    assert path.result == "successful" and np.all(path.hessian_min_eig[1:] > 0)


def test_greedy_limit_clock_moves_linearly_and_depends_on_the_start():
    """A coordinate with s g < 0 never wakes from a balanced start; its clock grows as (L − 2)|g| τ."""
    W0 = np.ones((3, 3))
    W0[0, 1] = -1.0  # β_1 < 0 from the start, g_1 = 2 wants it positive: it cannot change sign
    path = gradflow.greedy_limit(MODEL3, u0=W0)
    np.testing.assert_array_equal(path.activated, [0, 2])
    np.testing.assert_allclose(path.times[1:], [1 / 3, 1.0])
    assert path.b_at(2.0)[1] == pytest.approx(1.0 + 2.0 * 2.0)  # c = 1 + (L−2)|g| τ
    with pytest.raises(ValueError, match="DiagonalModel"):
        gradflow.greedy_limit(whitened(2), u0=np.ones((2, 3)))


# --- the exact flow (each test compiles it: slow) --------------------------------------------------------------------


def saxe_check(depth, log_alpha, a0=1.0):
    """Saxe's per-mode law: at the closed-form times where σ = q s the flow has σ = q s, within 1e-6 in time."""
    model = whitened(depth)
    alpha = np.exp(log_alpha)
    sigma0 = (alpha * a0) ** depth
    qs = np.array([0.1, 0.5, 0.9])
    unit = alpha ** (depth - 2) if depth > 2 else 1.0 / np.log(1.0 / alpha)  # τ = t · unit
    times = np.array([[theory.saxe_time(q * s, s, sigma0, depth) * unit for q in qs] for s in S])
    ts = np.concatenate([[0.0], np.sort(times.ravel())])
    flow = gradflow.simulate_flow(model, u0=np.full((depth, 3), a0), ts=ts, log_alpha=log_alpha, atol=1e-10)
    for i, s in enumerate(S):
        for j, q in enumerate(qs):
            k = np.flatnonzero(ts == times[i, j])[0]
            sigma = q * s
            speed = depth * sigma ** (2 - 2 / depth) * (s - sigma) / unit  # dσ/dτ
            assert abs(flow.beta[k, i] - sigma) / speed < 1e-6, (depth, log_alpha, i, q)
    return flow


@pytest.mark.slow
@pytest.mark.parametrize("depth", [2, 3, 4])
@pytest.mark.parametrize("alpha", [1e-2, 1e-3])
def test_flow_follows_saxe_closed_form(depth, alpha, unoptimised_xla):
    saxe_check(depth, np.log(alpha))


@pytest.mark.slow
def test_balanced_depth_two_flow_at_small_alpha(unoptimised_xla):
    """L = 2 from a balanced start, solved in t (in τ it took no step from log α ≈ −18 on): Saxe's closed form at
    α = 1e-8, and at log α = −1000 each mode learned at τ = 1/s, its jump O(1/log(1/α)) wide."""
    saxe_check(2, np.log(1e-8))
    T = 1.0 / S
    ts = np.sort(np.concatenate([[0.0], T - 0.02, T + 0.02, [1.2]]))
    flow = gradflow.simulate_flow(whitened(2), u0=np.ones((2, 3)), ts=ts, log_alpha=-1000.0)
    for i, Ti in enumerate(T):
        before, after = np.flatnonzero(ts == Ti - 0.02)[0], np.flatnonzero(ts == Ti + 0.02)[0]
        assert abs(flow.beta[before, i]) < 1e-12 and flow.beta[after, i] == pytest.approx(S[i], rel=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("depth", [3, 4])
def test_flow_at_log_alpha_minus_1000_has_the_clock_stage_times(depth, unoptimised_xla):
    model = whitened(depth)
    T = 1.0 / ((depth - 2) * S)
    ts = np.sort(np.concatenate([[0.0], T - 1e-6, T + 1e-6, [1.2 * T.max()]]))
    flow = gradflow.simulate_flow(model, u0=np.ones((depth, 3)), ts=ts, log_alpha=-1000.0, atol=1e-10)
    for i, Ti in enumerate(T):
        before, after = np.flatnonzero(ts == Ti - 1e-6)[0], np.flatnonzero(ts == Ti + 1e-6)[0]
        assert abs(flow.beta[before, i]) < 1e-12 and flow.beta[after, i] == pytest.approx(S[i], rel=1e-9)


@pytest.mark.slow
def test_flow_matches_dop853_on_the_raw_layers_unbalanced(unoptimised_xla):
    """A correlated regression with mixed signs and unbalanced layers (L = 3, α = 0.3): the raw layer flow."""
    rng = np.random.default_rng(1)
    n, p, depth, alpha = 6, 4, 3, 0.3
    X = rng.normal(size=(n, p))
    Y = X @ np.array([1.5, -1.0, 0.5, 0.0]) + 0.1 * rng.normal(size=n)
    model = gradflow.DepthModel(lambda x, b: x @ b, X, Y, p=p, depth=depth)
    W0 = rng.uniform(0.5, 1.5, size=(depth, p)) * rng.choice([-1.0, 1.0], size=(depth, p))
    ts = np.linspace(0.0, 3.0, 13)  # τ = t α
    flow = gradflow.simulate_flow(model, u0=W0, ts=ts, alpha=alpha, atol=1e-10)

    def rhs(_, w):
        w = w.reshape(depth, p)
        g = X.T @ (Y - X @ np.prod(w, axis=0)) / n
        return np.stack([g * np.prod(np.delete(w, l, axis=0), axis=0) for l in range(depth)]).ravel()

    sol = solve_ivp(
        rhs, (0, ts[-1] / alpha), (alpha * W0).ravel(), method="DOP853", rtol=1e-12, atol=1e-14, t_eval=ts / alpha
    )
    raw = sol.y.T.reshape(len(ts), depth, p)
    np.testing.assert_allclose(flow.layers, raw, rtol=1e-6, atol=1e-8)


@pytest.mark.slow
def test_depth_two_equals_the_diagonal_family(unoptimised_xla):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(8, 3))
    Y = X @ np.array([1.0, -0.5, 0.25])
    u0, v0 = np.array([1.0, 0.3, -0.8]), np.array([0.4, -1.1, 0.2])
    ts = np.linspace(0.0, 4.0, 9)
    diag = gradflow.simulate_flow(
        gradflow.DiagonalModel(lambda x, b: x @ b, X, Y, p=3), u0=u0, v0=v0, ts=ts, alpha=1e-3
    )
    deep = gradflow.simulate_flow(
        gradflow.DepthModel(lambda x, b: x @ b, X, Y, p=3, depth=2), u0=np.stack([u0, v0]), ts=ts, alpha=1e-3
    )
    np.testing.assert_allclose(deep.beta, diag.beta, rtol=1e-5, atol=1e-9)


@pytest.mark.slow
def test_flow_cost_is_flat_in_log_alpha(unoptimised_xla):
    model = whitened(3)
    ts = np.linspace(0.0, 1.5, 7)
    flow = gradflow.simulate_flow(model, u0=np.ones((3, 3)), ts=ts, log_alpha=[np.log(1e-4), -1e4])
    steps = flow.stats["num_steps"]
    assert steps[1] <= 1.5 * steps[0], steps
    np.testing.assert_allclose(flow.beta[1, -1], S, rtol=1e-8)


@pytest.mark.slow
def test_flow_approaches_the_greedy_limit(unoptimised_xla):
    """Correlated regression, mixed signs, L = 3: the flow tends to the depth-L Algorithm 1 on every window."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(12, 4))
    Y = X @ np.array([2.0, -1.0, 0.6, 0.0])
    model = gradflow.DepthModel(lambda x, b: x @ b, X, Y, p=4, depth=3)
    W0 = np.ones((3, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gradflow.AssumptionWarning)
        cmp = gradflow.compare_limits(model, u0=W0, v0=None, log_alphas=np.log([1e-2, 1e-3, 1e-4]))
    d = cmp.weights_distance
    assert np.all(d[-1] < d[0]) and np.all(d[-1] < 1e-2), d
    assert np.all(cmp.weights_power > 0.5), cmp.weights_power


# --- the family's surface on a flow built on the greedy limit (no flow compiled) -------------------------------------

W_BALANCED = np.ones((3, 3))


@pytest.fixture(scope="module")
def balanced_path():
    """The greedy limit of ``MODEL3`` from the balanced start (stages at 1/3, 1/2, 1)."""
    return gradflow.greedy_limit(MODEL3, u0=W_BALANCED)


@pytest.fixture(scope="module")
def on_limit_comparison(balanced_path):
    """The comparison of two flows built on the limit (log α = −4, −6) with it."""
    flow = on_the_limit(balanced_path, [-4.0, -6.0], np.linspace(0.0, 1.5, 31))
    with pytest.warns(UserWarning, match="are the grid's"):  # the jumps are steps between recorded times
        return gradflow.compare_limits(MODEL3, u0=W_BALANCED, v0=None, path=balanced_path, flows=flow)


def on_the_limit(path, log_alphas, ts):
    """A batched ``DepthFlowResult`` of the balanced L = 3 whitened model that is exactly on the greedy limit: the
    awake coordinates at ``β^k``, the sleeping ones at their clocks ``c = path.b_at(τ)`` (``|β| = (α/c)^3``)."""
    from gradflow._depth._results import DepthFlowResult

    stage = path.stage_at(ts)
    awake = path.support[stage]
    clock = np.where(awake, 1.0, path.b_at(ts))
    log_a = np.stack(
        [
            np.where(awake, np.log(np.abs(np.where(awake, path.beta[stage], 1.0))) / 3, la - np.log(clock))
            for la in log_alphas
        ]
    )
    beta = np.exp(3 * log_a)
    B, m = len(log_alphas), len(ts)
    return DepthFlowResult(
        ts=ts,
        log_w=np.repeat(log_a[:, :, None, :], 3, axis=2),
        sign=np.ones((B, m, 3, 3)),
        loss=0.5 * np.sum((beta - S) ** 2, axis=-1),
        log_alpha=np.asarray(log_alphas, dtype=np.float64),
        stats=dict(num_steps=np.zeros(B, int), max_steps=None),
        result=np.full(B, "successful"),
        message=np.full(B, ""),
    )


def test_comparison_and_slicing_on_the_limit(balanced_path, on_limit_comparison):
    """On the limit the clocks' distance is 0 and the sleeping β ∝ α³ (weights_power = L = 3 where a coordinate
    sleeps); runs and comparisons slice by α."""
    path, cmp = balanced_path, on_limit_comparison
    flow, ts = cmp.runs, cmp.runs.ts
    np.testing.assert_array_equal(flow[1].beta, flow.beta[1])
    np.testing.assert_array_equal(flow[1:].ts, ts)
    sleeping = ts < 1.0
    np.testing.assert_allclose(flow[0].clock[sleeping, 2], path.b_at(ts[sleeping])[:, 2], rtol=1e-12)
    assert isinstance(cmp, gradflow.DepthComparison) and cmp.names == MODEL3.names
    assert np.nanmax(cmp.b_distance) < 1e-12
    np.testing.assert_allclose(cmp.weights_power[:3], 3.0, rtol=1e-9)
    assert not hasattr(cmp, "beta_distance") and not hasattr(cmp, "beta_rate")  # never released: no old names
    one = cmp[1:]
    assert one.log_alpha.tolist() == [-6.0] and one.result == "single_scale" and np.all(np.isnan(one.weights_power))
    assert one.runs[0].log_alpha == -6.0 and one.path is path
    family = gradflow._registry.family_of(MODEL3)
    assert family.activated(path, MODEL3.names, 1) == MODEL3.names[0]
    assert len(family.stage_rows(cmp)[1]) == 3


@pytest.mark.slow
def test_report_and_figures_on_the_limit(on_limit_comparison, tmp_path):
    """gradflow.report writes the family's tables (with the power rates) and figures from the comparison alone."""
    text = gradflow.report(on_limit_comparison, tmp_path).read_text()
    assert "Power rates" in text and "| weights | 3 | 3 | 3 |" in text
    assert {f.name for f in (tmp_path / "figures").iterdir()} == {"loss.png", "weights.png", "b.png", "convergence.png"}


def test_greedy_checkpoint_resumes_and_refuses_another_start(balanced_path, tmp_path):
    full = balanced_path
    file = tmp_path / "path.npz"
    first = gradflow.greedy_limit(MODEL3, u0=W_BALANCED, max_stages=1, checkpoint=file)
    assert first.num_stages == 1
    resumed = gradflow.greedy_limit(MODEL3, u0=W_BALANCED, checkpoint=file)
    np.testing.assert_array_equal(resumed.times, full.times)
    np.testing.assert_array_equal(resumed.beta, full.beta)
    with pytest.raises(ValueError, match="another greedy path"):
        gradflow.greedy_limit(MODEL3, u0=2 * W_BALANCED, checkpoint=file)


def test_flow_refuses_scales_float64_cannot_resolve():
    with pytest.raises(ValueError, match=r"log α ≥ .* at these tolerances"):
        gradflow.simulate_flow(MODEL3, u0=W_BALANCED, ts=[0.0, 1.0], log_alpha=-1e12)
    with pytest.raises(TypeError, match="DepthSolver"):
        gradflow.simulate_flow(MODEL3, u0=W_BALANCED, ts=[0.0, 1.0], alpha=1e-2, solver=gradflow.DiagonalSolver())

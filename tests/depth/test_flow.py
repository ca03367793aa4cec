"""The depth family's exact flow (docs/depth.md, *The exact flow*): the conservation laws of the reduced state, and
(slow: each compiles the flow) the flow against Saxe's closed form, DOP853 on the raw layers and the diagonal family
at depth 2."""

import jax.numpy as jnp
import numpy as np
import pytest
from depth_common import S, whitened
from hypothesis import given
from hypothesis import strategies as st
from scipy.integrate import solve_ivp

import gradflow
import theory
from gradflow._depth._flow import AWAKE, CLOCK, NEAR, initial_state, layers_of, reduce_start, wake_scale


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


def _tied_regression(depth):
    """Woodworth et al.'s tied regression ``β = u^L − v^L`` as a ``DepthModel`` of 2d coordinates whose difference
    is β (``h(x; w) = ⟨x, w_+ − w_−⟩``), every layer starting at α: a balanced start stays balanced, every layer
    moving as ``dw/dt = w^{L−1} g``, the tied flow ``du/dt = L u^{L−1} g`` slowed by L."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(5, 3))
    Y = X @ np.array([1.5, -0.8, 0.0]) + 0.1 * rng.normal(size=5)
    model = gradflow.DepthModel(lambda x, w: jnp.dot(x, w[:3] - w[3:]), X, Y, p=6, depth=depth)
    return model, X, Y


@pytest.mark.parametrize(
    "depth, alpha",
    [(3, 1e-2), (3, 1e-3), (4, 1e-2)],
)
@pytest.mark.slow  # each compiles a flow; the fast twin: test_plateaus_do_not_stall_where_rounding_meets_stiffness
# (the same tied model's flow, to the same learned coordinates), and the depth theory's Woodworth oracle tests
def test_tied_weights_follow_woodworths_trajectory(depth, alpha):
    """The flow of tied diagonal linear regression against Woodworth et al.'s exact trajectory
    (``theory.woodworth_tied_beta``: ``β(t) = α^L h_L(α^{L−2} L(L−2) Xᵀμ(t))``, μ by DOP853), at the tied time
    ``t = τ α^{−(L−2)} / L``, through the jumps and to the fit."""
    model, X, Y = _tied_regression(depth)
    ts = np.linspace(0.0, 3.0 / (depth - 2), 31)
    flow = gradflow.simulate_flow(model, u0=np.ones((depth, 6)), ts=ts, alpha=alpha, rtol=1e-10, atol=1e-12)
    beta = np.asarray(flow.beta)[:, :3] - np.asarray(flow.beta)[:, 3:]
    exact = theory.woodworth_tied_beta(ts * alpha ** -(depth - 2) / depth, X, Y, alpha, depth, rtol=1e-13)
    assert np.max(np.abs(exact[-1])) > 1.0  # the trajectory learned its coordinates
    np.testing.assert_allclose(beta, exact, rtol=0, atol=1e-7)  # the oracle's own error: ~1e-8 at L = 4
    plateau = np.abs(exact) < 1e-3  # where an absolute tolerance says nothing: relative, as the flow's tolerance
    np.testing.assert_allclose(beta[plateau], exact[plateau], rtol=1e-5)


@pytest.mark.parametrize("depth", [3, pytest.param(4, marks=pytest.mark.slow)])  # slow: another compilation
def test_plateaus_do_not_stall_where_rounding_meets_stiffness(depth):
    """Tied regression with a Gaussian design (``g`` carries rounding): at ``α^{L−2}`` = 2e-8 (and 1.2e-8) the exact
    solve of the awake coordinates on plateaus stalled (τ = 0.4 of 3 after 3,000 steps at L = 3) where ``g``'s
    rounding, amplified by ``α^{−(L−2)}``, met Newton's tolerance; now it takes the steps of the smallest scale (the
    fast L = 3 leaves out 1.2e-8 for time; the slow L = 4 runs it)."""
    model, _, _ = _tied_regression(depth)
    ts = np.linspace(0.0, 3.0 / (depth - 2), 7)
    steps = []
    for eps in (2e-8, 1e-20) if depth == 3 else (2e-8, 1.2e-8, 1e-20):
        log_alpha = np.log(eps) / (depth - 2)
        flow = gradflow.simulate_flow(model, u0=np.ones((depth, 6)), ts=ts, log_alpha=log_alpha, max_steps=1000)
        steps.append(int(flow.stats["num_steps"]))
        assert np.all(np.isfinite(flow.beta)) and np.max(np.abs(flow.beta[-1, :3] - flow.beta[-1, 3:])) > 1.0
    assert max(steps) <= 1.1 * steps[-1], steps


@pytest.mark.slow  # compiles a flow; the fast twin: test_plateaus_do_not_stall_where_rounding_meets_stiffness (every
# output of flows down to α^{L−2} = 1e-20 finite)
def test_outputs_at_the_stage_times_themselves_are_finite():
    """At log α = −1000 a jump takes no τ at all, and the step that runs past a wake is placed back by the event: its
    dense output just before the event may put the waking clock at or below 0 within the tolerance. An output time
    exactly at ``T_k`` (4e-15 before the wake, in float64) read that as a NaN β in a successful flow; the clock is now
    read no lower than the vector field reads it (a ≤ 2 a_wake), so β there is the plateau's."""
    T = 1.0 / S
    ts = np.sort(np.concatenate([[0.0, 1.2 * T.max()], T, T - 1e-12, T + 1e-12]))
    flow = gradflow.simulate_flow(whitened(3), u0=np.ones((3, 3)), ts=ts, log_alpha=-1000.0)
    assert flow.result == "successful" and np.all(np.isfinite(flow.beta))
    for i, Ti in enumerate(T):
        at, after = np.flatnonzero(ts == Ti)[0], np.flatnonzero(ts == Ti + 1e-12)[0]
        assert abs(flow.beta[at, i]) < 1e-12 and flow.beta[after, i] == pytest.approx(S[i], rel=1e-9)


@pytest.mark.slow  # two compilations; the fast twin: test_plateaus_do_not_stall_where_rounding_meets_stiffness
@pytest.mark.parametrize("depth", [3, 4])
def test_holding_the_slow_manifold_changes_the_flow_below_its_tolerance(depth, monkeypatch):
    """Where both apply (α^{L−2} = 1e-4, 1e-6), the plateaus held on the awake coordinates' slow manifold and solved
    exactly give the same flow to 1e-9 relative (measured: 2.5e-10), far below ``atol``: the hold drops only the lag
    ``α^{L−2}`` times the manifold's speed (docs/depth.md), which justifies holding it from α^{L−2} = 1e-5 down."""
    from gradflow._depth import _field
    from gradflow._depth import _flow as depth_flow

    model, _, _ = _tied_regression(depth)
    ts = np.linspace(0.0, 3.0 / (depth - 2), 61)
    log_alpha = np.log([1e-4, 1e-6]) / (depth - 2)
    flows = []
    for threshold in (1e-8, 1.0):  # exact plateaus at both scales, then held at both
        monkeypatch.setattr(_field, "EPS_MANIFOLD", threshold)
        monkeypatch.setattr(depth_flow, "EPS_MANIFOLD", threshold)
        flows.append(np.asarray(gradflow.simulate_flow(model, u0=np.ones((depth, 6)), ts=ts, log_alpha=log_alpha).beta))
    exact, held = flows
    np.testing.assert_allclose(held, exact, rtol=1e-9, atol=1e-300)

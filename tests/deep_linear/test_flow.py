"""The deep linear family's model and exact flow (docs/deep-linear.md): the model's checks, the conservation laws
``W_{l+1}ᵀW_{l+1} − W_l W_lᵀ`` of the layer flow (a Hypothesis property, cheap), the refused range, and the flow
against Saxe's closed form (one fast run; L = 2, 3, 4 at α = 1e-2, 1e-3 slow), DOP853 on the raw layers and the
factorised family at depth 2 (slow: each compiles a flow)."""

import warnings

import equinox as eqx
import jax
import numpy as np
import pytest
from deep_linear_common import A0, S, aligned, whitened
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy.integrate import solve_ivp

import gradflow
import theory
from gradflow._deep_linear._checks import lowest_log_alpha
from gradflow._deep_linear._model import layer_velocities, product


def rescaled(t, alpha, depth):
    return t * alpha ** (depth - 2) if depth > 2 else t / np.log(1 / alpha)


def crossing_errors(flow, ts, depth, alpha, s=S, a0=A0):
    """The flow's half-way times' errors in τ against Saxe's closed form: the flow's ``σ_r`` at the closed form's
    half-way time ``τ_r`` (recorded at ``ts``), off ``s_r/2`` by ``δσ``, is ``δσ / (dσ/dτ)`` late."""
    sigma = np.diagonal(flow.W, axis1=-2, axis2=-1)
    errors = []
    for r in range(len(s)):
        tau = rescaled(theory.saxe_time(s[r] / 2, s[r], (alpha * a0[r]) ** depth, depth), alpha, depth)
        k = int(np.argmin(np.abs(ts - tau)))
        assert ts[k] == pytest.approx(tau, rel=1e-14)
        rate = rescaled(1.0, alpha, depth) ** -1 * depth * (s[r] / 2) ** (2 - 2 / depth) * (s[r] / 2)
        errors.append((sigma[k, r] - s[r] / 2) / rate)
    return np.array(errors)


def half_way_times(depth, alpha, s=S, a0=A0):
    taus = [rescaled(theory.saxe_time(s[r] / 2, s[r], (alpha * a0[r]) ** depth, depth), alpha, depth) for r in range(3)]
    return np.sort(np.array([0.0, *taus, 1.3 * max(taus)]))


def test_model_checks_its_shapes_and_start():
    with pytest.raises(ValueError, match="depth must be one of"):
        whitened(7)
    with pytest.raises(ValueError, match="widths must give the L − 1 = 2 hidden widths"):
        gradflow.DeepLinearModel(lambda x, W: W @ x, np.eye(3), np.eye(3), shape=(3, 3), depth=3, widths=(3,))
    with pytest.raises(ValueError, match=r"returns shape \(3,\)"):
        gradflow.DeepLinearModel(lambda x, W: W @ x, np.eye(3), np.eye(3)[:, :2], shape=(3, 3), depth=3)
    model = gradflow.DeepLinearModel(
        lambda x, W: W @ x, np.eye(3), np.eye(3)[:, :2], shape=(2, 3), depth=3, widths=(4, 5)
    )
    assert model.layer_shapes == ((4, 3), (5, 4), (2, 5)) and model.rank == 2
    with pytest.raises(ValueError, match=r"u0\[1\] \(the layer W_2\) must have shape \(5, 4\)"):
        gradflow.simulate_flow(model, u0=(np.ones((4, 3)),) * 3, ts=[0.0, 1.0], alpha=0.1)
    with pytest.raises(ValueError, match="v0 is not taken"):
        gradflow.simulate_flow(model, u0=aligned(3), v0=aligned(3), ts=[0.0, 1.0], alpha=0.1)
    zeros = (np.zeros((4, 3)), np.zeros((5, 4)), np.ones((2, 5)))
    with pytest.raises(ValueError, match="2 zero layers"):
        gradflow.simulate_flow(model, u0=zeros, ts=[0.0, 1.0], alpha=0.1)


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 6), st.integers(0, 2**32 - 1))
def test_the_layer_flow_conserves_the_balance(depth, seed):
    """``d/dt (W_{l+1}ᵀW_{l+1} − W_l W_lᵀ) = 0`` along ``dW_l/dt = W_{>l}ᵀ G W_{<l}ᵀ`` for any layers and any G
    (Arora, Cohen & Hazan 2018), and the velocities are ``−∂L/∂W_l`` of ``L = −⟨G, W_L ⋯ W_1⟩``."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 5, size=depth + 1)
    layers = [rng.standard_normal((sizes[l + 1], sizes[l])) for l in range(depth)]
    G = rng.standard_normal((sizes[-1], sizes[0]))
    v = layer_velocities(layers, G)
    for l in range(depth - 1):
        W, Wn, dW, dWn = layers[l], layers[l + 1], v[l], v[l + 1]
        drift = dWn.T @ Wn + Wn.T @ dWn - dW @ W.T - W @ dW.T
        np.testing.assert_allclose(drift, 0.0, atol=1e-10 * (1 + np.abs(Wn.T @ Wn).max() ** 2 + np.abs(G).max() ** 2))
    for l in range(depth):  # a directional derivative of ⟨G, W_L ⋯ W_1⟩ along a random E_l
        E = rng.standard_normal(layers[l].shape)
        moved = [w + 1e-6 * E if k == l else w for k, w in enumerate(layers)]
        fd = (np.sum(G * product(moved)) - np.sum(G * product(layers))) / 1e-6
        assert np.sum(v[l] * E) == pytest.approx(fd, rel=1e-4, abs=1e-6)


@given(hnp.arrays(np.float64, 2, elements=st.floats(1e-9, 1e-2)))
def test_refused_range_is_the_stated_one(tols):
    atol, rtol = float(tols[0]), float(tols[1])
    for depth in (3, 4, 6):
        lowest = lowest_log_alpha(depth, 1.0, rtol, atol)
        model = whitened(depth)
        with pytest.raises(ValueError, match=f"takes log α ≥ {lowest:.4g}"):
            gradflow.simulate_flow(
                model, u0=aligned(depth), ts=[0.0, 1.0], log_alpha=lowest - 1e-3, atol=atol, rtol=rtol
            )


def test_refused_range_at_the_default_tolerances():
    """At ``atol = 1e-8`` the stated range takes α = 1e-3 at L = 3, 4, α = 1e-2 at L = 5, not α = 1e-3 at L = 5."""
    assert lowest_log_alpha(4, 1.0, 0.0, 1e-8) < np.log(1e-3) < lowest_log_alpha(5, 1.0, 0.0, 1e-8)
    assert lowest_log_alpha(5, 1.0, 0.0, 1e-8) < np.log(1e-2)
    with pytest.raises(ValueError, match=r"log α ≥ .* not built yet"):
        gradflow.simulate_flow(whitened(5), u0=aligned(5), ts=[0.0, 1.0], alpha=1e-3)


def test_flow_crosses_at_saxes_times():
    """One compiled flow (L = 3, two scales in a batch): the half-way times within 1e-6 of Saxe's closed form, the
    balance conserved, ``b`` from 1 to 0, the batched result sliced by α, and ``max_steps``."""
    depth, alphas = 3, np.array([1e-2, 3e-3])
    ts = half_way_times(depth, alphas[0])
    model = whitened(depth)
    flow = gradflow.simulate_flow(model, u0=aligned(depth), ts=ts, alpha=alphas)
    assert flow.W.shape == (2, len(ts), 3, 3) and flow.b.shape == (2, len(ts), 3)
    np.testing.assert_array_less(np.abs(crossing_errors(flow[0], ts, depth, alphas[0])), 1e-6)
    one = flow[1]
    assert float(one.log_alpha) == pytest.approx(np.log(3e-3)) and one.W.shape == (len(ts), 3, 3)
    state = one.state_at(2)
    np.testing.assert_allclose(state.W, product(state.layers), rtol=1e-12, atol=1e-15)
    for l in range(depth - 1):  # balanced at the start: W_{l+1}ᵀ W_{l+1} = W_l W_lᵀ for all time
        Wl, Wn = one.layers[l], one.layers[l + 1]
        gap = np.swapaxes(Wn, -1, -2) @ Wn - Wl @ np.swapaxes(Wl, -1, -2)
        np.testing.assert_allclose(gap, 0.0, atol=1e-8 * np.abs(Wn).max() ** 2)
    np.testing.assert_allclose(one.b[0], 1.0 + np.log(A0[np.argsort(-A0)]) / np.log(3e-3), rtol=1e-12)
    np.testing.assert_allclose(one.b[-1], np.log(S) / (depth * np.log(3e-3)), atol=1e-6)
    assert one.stats["num_steps"] < 1000, one.stats
    short = gradflow.simulate_flow(model, u0=aligned(depth), ts=ts, alpha=alphas[0], max_steps=20, throw=False)
    assert short.result == "max_steps_reached" and "max_steps=20" in str(short.message)
    assert np.isnan(short.loss[-1]) and short.stats["num_steps"] == 20
    with pytest.raises(RuntimeError, match="max_steps=20"):
        gradflow.simulate_flow(model, u0=aligned(depth), ts=ts, alpha=alphas[0], max_steps=20)


@pytest.mark.slow
@pytest.mark.parametrize("depth", [2, 3, 4])
@pytest.mark.parametrize("alpha", [1e-2, 1e-3])
def test_saxe_half_way_times(depth, alpha):
    """Saxe's per-mode law (SPEC oracle; ``theory.saxe_time``, the ₂F₁ closed form): the flow's half-way times within
    1e-6 in τ (measured: ≤ 1e-7 at L = 3, 4)."""
    ts = half_way_times(depth, alpha)
    flow = gradflow.simulate_flow(whitened(depth), u0=aligned(depth), ts=ts, alpha=alpha)
    np.testing.assert_array_less(np.abs(crossing_errors(flow, ts, depth, alpha)), 1e-6)


def raw_layer_flow(model, W0, alpha, t):
    """DOP853 on the raw layers ``dW_l/dt = W_{>l}ᵀ G W_{<l}ᵀ`` from ``W_l(0) = α W0_l``, in the unscaled time."""
    shapes = model.layer_shapes
    sizes = [a * b for a, b in shapes]
    gradient = eqx.filter_jit(lambda model, W: model.G(W))

    def unpack(y):
        return [y[o : o + k].reshape(s) for o, k, s in zip(np.cumsum([0, *sizes[:-1]]), sizes, shapes)]

    def rhs(_, y):
        layers = unpack(y)
        G = np.asarray(gradient(model, product(layers)))
        return np.concatenate([v.ravel() for v in layer_velocities(layers, G)])

    y0 = np.concatenate([alpha * w.ravel() for w in W0])
    with jax.enable_x64(True):  # G in float64, as gradflow computes it
        sol = solve_ivp(rhs, (0.0, t[-1]), y0, method="DOP853", rtol=1e-12, atol=1e-14, t_eval=t)
    assert sol.success
    return np.stack([product(unpack(y)) for y in sol.y.T])


@pytest.mark.slow
def test_flow_matches_dop853_on_the_raw_layers():
    """A rectangular 3×2 regression, widths (4, 3), an unbalanced Gaussian start at α = 0.1 and L = 3: W within
    1e-6 of DOP853's on the raw layers."""
    rng = np.random.default_rng(1)
    X = rng.standard_normal((12, 2))
    Y = X @ np.array([[2.0, -1.0], [0.5, 1.5], [1.0, 0.0]]).T
    model = gradflow.DeepLinearModel(lambda x, W: W @ x, X, Y, shape=(3, 2), depth=3, widths=(4, 3))
    W0 = tuple(rng.standard_normal(s) for s in model.layer_shapes)
    alpha, ts = 0.1, np.linspace(0.0, 1.5, 7)
    flow = gradflow.simulate_flow(model, u0=W0, ts=ts, alpha=alpha)
    reference = raw_layer_flow(model, W0, alpha, ts / alpha)
    np.testing.assert_allclose(flow.W, reference, atol=1e-6 * np.abs(reference).max())


@pytest.mark.slow
def test_depth_two_is_the_factorised_flow():
    """At L = 2, ``W = W_2 W_1 = U Vᵀ`` with ``U = W_2``, ``V = W_1ᵀ``: the factorised family's flow, and the same ``b``."""
    rng = np.random.default_rng(2)
    X = rng.standard_normal((10, 3))
    Y = X @ np.array([[1.5, 0.0, -1.0], [0.0, 0.7, 0.3]]).T
    deep = gradflow.DeepLinearModel(lambda x, W: W @ x, X, Y, shape=(2, 3), depth=2, widths=2)
    fact = gradflow.FactorizedModel(lambda x, Ws: Ws[0] @ x, X, Y, shapes=[(2, 3)], widths=[2])
    W1, W2 = rng.standard_normal((2, 3)), rng.standard_normal((2, 2))
    ts, alpha = np.linspace(0.0, 2.0, 9), 1e-3
    a = gradflow.simulate_flow(deep, u0=(W1, W2), ts=ts, alpha=alpha)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gradflow.AssumptionWarning)
        b = gradflow.simulate_flow(fact, u0=(W2,), v0=(W1.T,), ts=ts, alpha=alpha)
    np.testing.assert_allclose(a.W, b.W[0], atol=1e-6)
    np.testing.assert_allclose(a.b, b.b[0], atol=1e-6)

"""simulate_gd for deep linear networks: first order in lr to Saxe's closed form on the whitened task, its rescaled
times and log scales, a batch of scales, and its checks."""

import numpy as np
import pytest
from deep_linear_common import A0, S, aligned, whitened

import gradflow
import theory


def test_gd_converges_to_saxe_closed_form_at_first_order_in_lr():
    """L = 3, α = 0.3, the aligned balanced start: the times where GD's singular values cross q s_r are Saxe's, up
    to an error ∝ lr."""
    depth, alpha = 3, 0.3
    model = whitened(depth)
    qs = np.array([0.1, 0.5, 0.9])
    T = np.array([[theory.saxe_time(q * s, s, (alpha * a) ** depth, depth) for q in qs] for s, a in zip(S, A0)])
    errors = []
    for lr in (4e-3, 2e-3):
        steps = int(np.ceil(1.05 * T.max() / lr))
        run = gradflow.simulate_gd(model, u0=aligned(depth), alpha=alpha, lr=lr, steps=steps)
        assert isinstance(run, gradflow.DeepLinearGDResult) and run.result == "successful"
        np.testing.assert_allclose(run.ts, run.steps * lr * alpha)  # τ = k lr α^{L−2}
        sigma = np.diagonal(run.W, axis1=-2, axis2=-1)  # the modes stay aligned: W diagonal
        np.testing.assert_allclose(run.W - np.einsum("ti,ij->tij", sigma, np.eye(3)), 0.0, atol=1e-12)
        t = run.steps * lr
        errors.append(np.array([np.interp(qs * s, sigma[:, r], t) for r, s in enumerate(S)]) - T)
    assert np.max(np.abs(errors[1])) < 2e-2
    np.testing.assert_allclose(errors[0] / 2, errors[1], rtol=3e-2)  # first order: halving lr halves the error


def test_gd_batches_scales_and_speaks_the_flows_vocabulary():
    """Two scales trained together are each run alone; ``b = log σ/(L log α)`` starts at 1 + log(a0)/log α."""
    depth = 3
    model = whitened(depth)
    both = gradflow.simulate_gd(model, u0=aligned(depth), alpha=[1e-2, 1e-1], lr=1e-2, steps=40, record_every=10)
    one = gradflow.simulate_gd(model, u0=aligned(depth), alpha=1e-1, lr=1e-2, steps=40, record_every=10)
    assert both.W.shape == (2, 5, 3, 3) and both.ts.shape == (2, 5)
    np.testing.assert_allclose(both[1].W, one.W, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(both.ts[0], one.steps * 1e-2 * 1e-2)
    b0 = 1.0 + np.log(np.sort(A0)[::-1]) / np.log(1e-2)
    np.testing.assert_allclose(both[0].b[0], b0, rtol=1e-12)


def test_gd_refuses_v0_and_reports_divergence():
    model = whitened(3)
    with pytest.raises(ValueError, match="takes its layers' directions as u0"):
        gradflow.simulate_gd(model, u0=aligned(3), v0=aligned(3), alpha=0.1, lr=1e-2, steps=2)
    with pytest.raises(ValueError, match="u0 must be a tuple of the L = 3 layers"):
        gradflow.simulate_gd(model, u0=np.ones((3, 3)), alpha=0.1, lr=1e-2, steps=2)
    with pytest.raises(ValueError, match="optimizer='sgd' needs a batch_size"):
        gradflow.simulate_gd(model, u0=aligned(3), alpha=0.1, lr=1e-2, steps=2, optimizer="sgd")
    run = gradflow.simulate_gd(model, u0=aligned(3), alpha=0.9, lr=5.0, steps=40, throw=False)
    assert run.result == "non_finite" and "lower lr" in str(run.message)
    assert np.isnan(run.loss[-1]) and all(np.isnan(w[-1]).all() for w in run.layers)

"""simulate_gd for depth-L diagonal networks: first-order in lr to Saxe's closed form, its rescaled times, its
checks, and (slow: compiles the flow) GD at a small lr against the exact flow through compare_limits."""

import numpy as np
import pytest

import gradflow
import theory

S = np.array([3.0, 2.0, 1.0])


def linear(x, beta):
    return x @ beta


def whitened(depth, s=S):
    """``L(β) = ½ ‖β − s‖²`` (one ``h`` for every test: the compiled steps are shared)."""
    n = len(s)
    X, Y = np.sqrt(n) * np.eye(n), np.sqrt(n) * s
    return gradflow.DepthModel(linear, X, Y, p=n, depth=depth)


def test_gd_converges_to_saxe_closed_form_at_first_order_in_lr():
    """L = 3, α = 0.1, balanced start: the times where GD's modes cross q s are Saxe's, up to an error ∝ lr."""
    depth, alpha = 3, 0.1
    model = whitened(depth)
    qs = np.array([0.1, 0.5, 0.9])
    T = np.array([[theory.saxe_time(q * s, s, alpha**depth, depth) for q in qs] for s in S])
    errors = []
    for lr in (4e-3, 2e-3):
        steps = int(np.ceil(1.05 * T.max() / lr))
        run = gradflow.simulate_gd(model, u0=np.ones((depth, 3)), alpha=alpha, lr=lr, steps=steps)
        assert isinstance(run, gradflow.DepthGDResult) and run.result == "successful"
        np.testing.assert_allclose(run.ts, run.steps * lr * alpha)  # τ = k lr α^{L−2}
        t = run.steps * lr
        errors.append(np.array([np.interp(qs * s, run.beta[:, i], t) for i, s in enumerate(S)]) - T)
    assert np.max(np.abs(errors[1])) < 5e-3
    np.testing.assert_allclose(errors[0] / 2, errors[1], rtol=2e-2)  # first order: halving lr halves the error


def test_gd_batches_scales_and_keeps_each_depths_clock():
    model = whitened(3)
    W0 = np.array([[1.0, 0.5, -1.0], [0.5, 1.0, 1.0], [1.0, 1.0, 0.5]])
    both = gradflow.simulate_gd(model, u0=W0, alpha=[1e-2, 1e-1], lr=1e-2, steps=40)
    one = gradflow.simulate_gd(model, u0=W0, alpha=1e-1, lr=1e-2, steps=40)
    np.testing.assert_allclose(both[1].layers, one.layers, rtol=1e-12)
    np.testing.assert_allclose(both.ts, both.steps * 1e-2 * np.array([[1e-2], [1e-1]]))
    np.testing.assert_allclose(one.layers[0], 0.1 * W0)
    np.testing.assert_allclose(one.b[0], np.mean(np.log(0.1 * np.abs(W0)), axis=0) / np.log(0.1))
    np.testing.assert_allclose(one.clock[0], 1.0 / np.prod(np.abs(W0), axis=0) ** (1 / 3))  # c = (α/a)^{L−2}
    two = gradflow.DepthGDResult(
        steps=one.steps,
        layers=one.layers[:, :2],
        loss=one.loss,
        log_alpha=np.log(0.1),
        alpha=0.1,
        lr=1e-2,
        result=one.result,
        message=one.message,
    )
    np.testing.assert_allclose(two.ts, two.steps * 1e-2 / np.log(10.0))  # τ = k lr / log(1/α) at L = 2


def test_gd_refuses_v0_and_bad_shapes_and_reports_divergence():
    model = whitened(3)
    with pytest.raises(ValueError, match="v0 is not taken"):
        gradflow.simulate_gd(model, u0=np.ones((3, 3)), v0=np.ones(3), alpha=0.1, lr=1e-2, steps=2)
    with pytest.raises(ValueError, match=r"shape \(L, p\) = \(3, 3\)"):
        gradflow.simulate_gd(model, u0=np.ones(3), alpha=0.1, lr=1e-2, steps=2)
    with pytest.raises(ValueError, match="optimizer='sgd' needs a batch_size"):
        gradflow.simulate_gd(model, u0=np.ones((3, 3)), alpha=0.1, lr=1e-2, steps=2, optimizer="sgd")
    run = gradflow.simulate_gd(model, u0=np.ones((3, 3)), alpha=0.9, lr=5.0, steps=40, throw=False)
    assert run.result == "non_finite" and "lower lr" in str(run.message)
    assert np.isnan(run.loss[-1])


@pytest.mark.slow
def test_compare_limits_takes_gd_which_tracks_the_exact_flow():
    """Saxe's modes, L = 3: compare_limits(gd=...) runs GD at every α, at τ = k lr α; at a small lr its distances to
    the greedy limit on every window are the exact flow's, to O(lr)."""
    model = whitened(3)
    cmp = gradflow.compare_limits(model, u0=np.ones((3, 3)), log_alpha=np.log([1e-2, 1e-3]), gd=dict(lr=2e-3))
    assert isinstance(cmp.gd, gradflow.DepthComparison) and cmp.gd.method == "gd"
    assert isinstance(cmp.gd.runs[1], gradflow.DepthGDResult)
    np.testing.assert_allclose(cmp.gd.runs[1].ts[-1], cmp.runs.ts[-1], rtol=1e-3)  # both reach the same τ
    np.testing.assert_allclose(cmp.gd.weights_distance, cmp.weights_distance, atol=2e-2)
    np.testing.assert_allclose(cmp.gd.detected_times, cmp.detected_times, atol=2e-3)

"""Comparing deep linear flows with their greedy limit (docs/deep-linear.md, *The comparison*): the distances per
stage window and the detected stage times of flows a known offset from a stand-in limit (nothing compiled), the
refusals, and (slow: compiles flows) the convergence on the aligned whitened task."""

import warnings
from types import SimpleNamespace

import numpy as np
import pytest
from deep_linear_common import aligned, whitened

import gradflow
from gradflow._deep_linear._compare import DeepLinearComparison, compare
from gradflow._deep_linear._results import DeepLinearFlowResult

DEPTH = 3
TS = np.linspace(0.0, 3.0, 301)
LIMIT = SimpleNamespace(  # a stand-in for a two-stage DeepLinearGreedyPath of a 2×2 W (the fields compare reads)
    times=np.array([0.0, 1.0, 2.0]),
    W=np.array([np.zeros((2, 2)), np.diag([2.0, 0.0]), np.diag([2.0, 1.0])]),
    b=np.array([[1.0, 1.0], [0.0, 1.0], [0.0, 0.0]]),
    loss=np.array([2.5, 0.5, 0.0]),
)


def offset_run(log_alpha, d):
    """A flow that sits ``d`` off the limit in every entry of ``W``, in ``b`` and in the loss at every time."""
    stage = np.searchsorted(LIMIT.times, TS, side="right") - 1
    W = LIMIT.W[stage] + d
    return DeepLinearFlowResult(
        ts=TS,
        layers=(W, np.broadcast_to(np.eye(2), W.shape), np.broadcast_to(np.eye(2), W.shape)),
        W=W,
        log_singular_values=DEPTH * log_alpha * (LIMIT.b[stage] + d),  # b = log σ / (L log α)
        loss=LIMIT.loss[stage] + d,
        log_alpha=np.float64(log_alpha),
        stats=dict(num_steps=0, max_steps=None),
        result=np.array("successful"),
        message=np.array(""),
    )


MODEL = gradflow.DeepLinearModel(lambda x, W: W @ x, np.eye(2), np.eye(2), shape=(2, 2), depth=DEPTH)
LOG_ALPHAS = np.array([-2.0, -4.0])
OFFSETS = (1e-2, 1e-4)


def test_distances_and_stage_times_of_flows_off_the_limit():
    runs = [offset_run(la, d) for la, d in zip(LOG_ALPHAS, OFFSETS)]
    with pytest.warns(UserWarning, match="are the grid's"):  # the loss steps at T_k on the grid
        cmp = compare(MODEL, LIMIT, runs, LOG_ALPHAS)
    assert isinstance(cmp, DeepLinearComparison) and cmp.names == ("W_1", "W_2", "W_3")
    for q in ("weights", "b", "loss"):
        np.testing.assert_allclose(getattr(cmp, f"{q}_distance"), np.array(OFFSETS)[:, None] * [1, 1, 1], rtol=1e-9)
    # detected within one grid step
    np.testing.assert_array_less(np.abs(cmp.detected_times - LIMIT.times[1:]), TS[1] + 1e-12)
    one = cmp[1:]
    assert one.log_alpha.tolist() == [-4.0] and one.result == "single_scale"
    np.testing.assert_array_equal(one.weights_distance, cmp.weights_distance[1:])


def test_compare_refuses_gd_other_results_and_a_run_per_scale():
    runs = [offset_run(la, d) for la, d in zip(LOG_ALPHAS, OFFSETS)]
    with pytest.raises(ValueError, match="exact flows only"):
        compare(MODEL, LIMIT, runs, LOG_ALPHAS, method="gd")
    with pytest.raises(TypeError, match="DeepLinearFlowResult; got SimpleNamespace"):
        compare(MODEL, LIMIT, [runs[0], SimpleNamespace(log_alpha=-4.0)], LOG_ALPHAS)
    with pytest.raises(ValueError, match="got 1 runs for 2 values of alpha"):
        compare(MODEL, LIMIT, runs[:1], LOG_ALPHAS)


@pytest.mark.slow
def test_comparison_of_the_aligned_task_converges():
    """compare_limits on the aligned whitened task (L = 3): the weights' distance falls like α^L, the stage times'
    errors like α^{L−2}."""
    depth = 3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        comparison = gradflow.compare_limits(whitened(depth), u0=aligned(depth), alpha=[1e-2, 1e-3])
    assert comparison.result == "successful"
    ratio = comparison.weights_distance[1, :3] / comparison.weights_distance[0, :3]
    np.testing.assert_array_less(ratio, 3e-3)  # α^L: 1e-3
    np.testing.assert_array_less(comparison.time_error[1] / comparison.time_error[0], 0.2)  # α^{L−2}: 0.1

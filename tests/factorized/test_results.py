"""The factorised family's results (gradflow/_factorized/_results.py): what gradient descent's result derives from the
weights (singular values, their log scales b, the rescaled times) and a flow state's singular values, against
numpy."""

import numpy as np

from gradflow._factorized._results import FactorizedFlowState, FactorizedGDResult, log_scales

LOG_ALPHAS = np.log([1e-2, 1e-3])


def test_log_scales_are_one_at_alpha_squared_and_zero_at_one():
    log_sv = np.array([[[2 * LOG_ALPHAS[0], 0.0]], [[2 * LOG_ALPHAS[1], LOG_ALPHAS[1]]]])  # (B, m, k)
    np.testing.assert_allclose(log_scales(log_sv, LOG_ALPHAS), [[[1.0, 0.0]], [[1.0, 0.5]]], rtol=1e-15)


def test_gd_result_reads_the_singular_values_their_scales_and_times():
    rng = np.random.default_rng(0)
    W = (rng.standard_normal((2, 3, 4, 3)), rng.standard_normal((2, 3, 2, 2)))  # A = 2 scales, m = 3 records
    W[1][0, 0] = 0.0  # σ = 0: clipped to the smallest float64 in the logs
    run = FactorizedGDResult(
        steps=np.array([0, 5, 10]),
        W=W,
        loss=np.zeros((2, 3)),
        log_alpha=LOG_ALPHAS,
        lr=0.1,
        result=np.array(["successful"] * 2),
        message=np.array([""] * 2),
    )
    assert run.weights is run.W
    for j in range(2):
        sv = np.linalg.svd(W[j], compute_uv=False)
        np.testing.assert_allclose(run.singular_values[j], sv, rtol=1e-12)
        log_sv = np.log(np.maximum(sv, np.finfo(np.float64).tiny))
        np.testing.assert_allclose(run.log_singular_values[j], log_sv, rtol=1e-12)
        np.testing.assert_allclose(run.b[j], log_sv / (2 * LOG_ALPHAS[:, None, None]), rtol=1e-12)
    assert np.all(np.isfinite(run.b[1]))
    np.testing.assert_allclose(run.ts, np.array([0, 5, 10]) * 0.1 / -LOG_ALPHAS[:, None], rtol=1e-12)  # k lr / log(1/α)


def test_flow_state_singular_values_underflow_to_zero():
    state = FactorizedFlowState(W=(np.zeros((2, 2)),), log_singular_values=(np.array([0.5, -1e4]),))
    np.testing.assert_array_equal(state.singular_values[0], [np.exp(0.5), 0.0])

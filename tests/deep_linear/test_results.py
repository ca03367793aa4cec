"""The deep linear family's results (gradflow/_deep_linear/_results.py): what the flow's and gradient descent's
results derive from the layers (the end-to-end matrix, its singular values and log scales ``b``, the rescaled
times), checked on hand-made layers against numpy."""

import numpy as np
import pytest

from gradflow._deep_linear._results import DeepLinearFlowResult, DeepLinearGDResult

LOG_ALPHA = np.log(0.1)


def layers(rng, m=4):
    """Three layers of a 2×3 W with hidden widths 4, 3, recorded at ``m`` times."""
    return tuple(rng.standard_normal((m, *shape)) for shape in ((4, 3), (3, 4), (2, 3)))


def test_gd_result_reads_the_end_to_end_matrix_its_scales_and_times():
    Ws = layers(np.random.default_rng(0))
    steps = np.array([0, 10, 20, 30])
    run = DeepLinearGDResult(
        steps=steps,
        layers=Ws,
        loss=np.zeros(4),
        log_alpha=np.float64(LOG_ALPHA),
        alpha=np.float64(0.1),
        lr=0.01,
        result=np.array("successful"),
        message=np.array(""),
    )
    W = Ws[2] @ Ws[1] @ Ws[0]
    sv = np.linalg.svd(W, compute_uv=False)
    assert run.depth == 3
    np.testing.assert_allclose(run.W, W, rtol=1e-14)
    np.testing.assert_allclose(run.singular_values, sv, rtol=1e-12)
    np.testing.assert_allclose(run.b, np.log(sv) / (3 * LOG_ALPHA), rtol=1e-12)  # b = log σ / (L log α)
    np.testing.assert_allclose(run.ts, steps * 0.01 * 0.1, rtol=1e-12)  # τ = k lr α^{L−2}


def test_flow_result_state_and_scales():
    Ws = layers(np.random.default_rng(1))
    W = Ws[2] @ Ws[1] @ Ws[0]
    log_sv = np.log(np.linalg.svd(W, compute_uv=False))
    flow = DeepLinearFlowResult(
        ts=np.linspace(0.0, 1.0, 4),
        layers=Ws,
        W=W,
        log_singular_values=log_sv,
        loss=np.zeros(4),
        log_alpha=np.float64(LOG_ALPHA),
        stats=dict(num_steps=0, max_steps=None),
        result=np.array("successful"),
        message=np.array(""),
    )
    assert flow.depth == 3 and flow.weights is flow.W
    np.testing.assert_allclose(flow.singular_values, np.exp(log_sv), rtol=1e-14)
    np.testing.assert_allclose(flow.b, log_sv / (3 * LOG_ALPHA), rtol=1e-14)
    state = flow.state_at(-1)
    np.testing.assert_array_equal(state.W, W[-1])
    np.testing.assert_array_equal(state.layers[1], Ws[1][-1])
    np.testing.assert_array_equal(state.log_singular_values, log_sv[-1])
    with pytest.raises(IndexError, match="integer index into the 4 recorded times"):
        flow.state_at(4)

"""The depth family's results (gradflow/_depth/_results.py): what the flow's and gradient descent's results derive
from the layers (β, the log scales b, the clocks, the rescaled times), on hand-made layers against numpy; the flow's
state below float64's range."""

import numpy as np

from gradflow._depth._results import DepthFlowResult, DepthGDResult

LOG_ALPHA = np.log(0.1)
LAYERS = np.array([[[0.1, -0.2], [0.3, 0.2], [-0.1, 0.2]], [[1.0, -2.0], [0.5, 2.0], [2.0, 1.0]]])  # (m, L, p)


def test_gd_result_reads_beta_its_scales_clocks_and_times():
    run = DepthGDResult(
        steps=np.array([0, 10]),
        layers=LAYERS,
        loss=np.zeros(2),
        log_alpha=np.float64(LOG_ALPHA),
        alpha=np.float64(0.1),
        lr=0.01,
        result=np.array("successful"),
        message=np.array(""),
    )
    beta = np.prod(LAYERS, axis=1)
    log_a = np.log(np.abs(beta)) / 3  # log |β|^{1/L}
    assert run.depth == 3
    np.testing.assert_allclose(run.beta, beta, rtol=1e-14)
    np.testing.assert_allclose(run.b, log_a / LOG_ALPHA, rtol=1e-12)
    np.testing.assert_allclose(run.clock, np.exp(LOG_ALPHA - log_a), rtol=1e-12)  # (α/|β|^{1/L})^{L−2}
    np.testing.assert_allclose(run.ts, [0.0, 10 * 0.01 * 0.1], rtol=1e-12)  # τ = k lr α^{L−2}


def test_flow_result_reads_the_same_from_log_layers_at_any_scale():
    def flow(log_w, sign, log_alpha):
        return DepthFlowResult(
            ts=np.array([0.0, 1.0]),
            log_w=log_w,
            sign=sign,
            loss=np.zeros(2),
            log_alpha=np.float64(log_alpha),
            stats=dict(num_steps=0, max_steps=None),
            result=np.array("successful"),
            message=np.array(""),
        )

    run = flow(np.log(np.abs(LAYERS)), np.sign(LAYERS), LOG_ALPHA)
    gd = DepthGDResult(
        steps=np.array([0, 1]),
        layers=LAYERS,
        loss=np.zeros(2),
        log_alpha=np.float64(LOG_ALPHA),
        alpha=np.float64(0.1),
        lr=1.0,
        result=np.array("successful"),
        message=np.array(""),
    )
    np.testing.assert_allclose(run.layers, LAYERS, rtol=1e-14)
    for field in ("beta", "b", "clock"):
        np.testing.assert_allclose(getattr(run, field), getattr(gd, field), rtol=1e-12)
    # α = e^{-1e4}, the first time's layers e^{-1e4} smaller: β underflows to 0, b is read off log |w| exactly
    deep = flow(np.log(np.abs(LAYERS)) + np.array([-1e4, 0.0])[:, None, None], np.sign(LAYERS), -1e4)
    assert np.all(deep.beta[0] == 0) and np.all(np.isfinite(deep.b[0]))
    np.testing.assert_allclose(deep.b[0], (np.sum(np.log(np.abs(LAYERS[0])), axis=0) - 3e4) / 3 / -1e4, rtol=1e-12)

"""The depth family's shared test task: Saxe's whitened regression, one compiled model of it at L = 3, and flows built
exactly on its greedy limit (tests/depth/; the fixtures that compute that limit are in conftest.py)."""

import numpy as np

import gradflow

S = np.array([3.0, 2.0, 1.0])


def whitened(depth, s=S):
    """``L(β) = ½ ‖β − s‖²``: ``g = s − β`` (Saxe's whitened regression; each coordinate is one mode)."""
    n = len(s)
    X, Y = np.sqrt(n) * np.eye(n), np.sqrt(n) * s
    return gradflow.DepthModel(lambda x, b: x @ b, X, Y, p=n, depth=depth)


MODEL3 = whitened(3)  # one model, so that its compiled functions are shared


W_BALANCED = np.ones((3, 3))


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

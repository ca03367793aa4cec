"""Comparing depth-L flows with their greedy limit (docs/depth.md): flows built exactly on the limit (nothing compiled
but the limit) and, slow, the flow tending to the limit as α → 0."""

import warnings

import numpy as np
import pytest
from depth_common import MODEL3

import gradflow


@pytest.mark.slow
def test_flow_approaches_the_greedy_limit():
    """Correlated regression, mixed signs, L = 3: the flow tends to the depth-L Algorithm 1 on every window. (Compiled
    with XLA's optimisations: the flows take hundreds of steps, and unoptimised code ran this for over 10 minutes.)"""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(12, 4))
    Y = X @ np.array([2.0, -1.0, 0.6, 0.0])
    model = gradflow.DepthModel(lambda x, b: x @ b, X, Y, p=4, depth=3)
    W0 = np.ones((3, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gradflow.AssumptionWarning)
        cmp = gradflow.compare_limits(model, u0=W0, v0=None, log_alpha=np.log([1e-2, 1e-3, 1e-4]))
    d = cmp.weights_distance
    assert np.all(d[-1] < d[0]) and np.all(d[-1] < 1e-2), d
    assert np.all(cmp.weights_power > 0.5), cmp.weights_power


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

"""The scales float64 resolves in a depth-L flow (gradflow/_depth/_checks.py): the refused range, in the message."""

import pytest
from depth_common import MODEL3, W_BALANCED

import gradflow


def test_flow_refuses_scales_float64_cannot_resolve():
    with pytest.raises(ValueError, match=r"log α ≥ .* at these tolerances"):
        gradflow.simulate_flow(MODEL3, u0=W_BALANCED, ts=[0.0, 1.0], log_alpha=-1e12)

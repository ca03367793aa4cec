"""The depth model (docs/depth.md, *The model*): its checks of the depth and of the start."""

import numpy as np
import pytest
from depth_common import whitened

import gradflow


def test_model_refuses_bad_depths_and_starts():
    with pytest.raises(ValueError, match="depth must be one of"):
        whitened(7)
    model = whitened(3)
    with pytest.raises(ValueError, match=r"shape \(L, p\) = \(3, 3\)"):
        gradflow.simulate_flow(model, u0=np.ones((2, 3)), ts=[0.0, 1.0], alpha=1e-2)
    with pytest.raises(ValueError, match="v0 is not taken"):
        gradflow.simulate_flow(model, u0=np.ones((3, 3)), v0=np.ones(3), ts=[0.0, 1.0], alpha=1e-2)

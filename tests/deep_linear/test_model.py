"""The deep linear model (docs/deep-linear.md, *The model*): its checks of the shapes and the start, and the layers' velocities
(the balance they conserve, the gradient they are)."""

import numpy as np
import pytest
from deep_linear_common import aligned, whitened
from hypothesis import given, settings
from hypothesis import strategies as st

import gradflow
from gradflow._deep_linear._model import layer_velocities, product


def test_model_checks_its_shapes_and_start():
    with pytest.raises(ValueError, match="depth must be one of"):
        whitened(7)
    with pytest.raises(ValueError, match="widths must give the L − 1 = 2 hidden widths"):
        gradflow.DeepLinearModel(lambda x, W: W @ x, np.eye(3), np.eye(3), shape=(3, 3), depth=3, widths=(3,))
    with pytest.raises(ValueError, match=r"returns shape \(3,\)"):
        gradflow.DeepLinearModel(lambda x, W: W @ x, np.eye(3), np.eye(3)[:, :2], shape=(3, 3), depth=3)
    model = gradflow.DeepLinearModel(
        lambda x, W: W @ x, np.eye(3), np.eye(3)[:, :2], shape=(2, 3), depth=3, widths=(4, 5)
    )
    assert model.layer_shapes == ((4, 3), (5, 4), (2, 5)) and model.rank == 2
    with pytest.raises(ValueError, match=r"u0\[1\] \(the layer W_2\) must have shape \(5, 4\)"):
        gradflow.simulate_flow(model, u0=(np.ones((4, 3)),) * 3, ts=[0.0, 1.0], alpha=0.1)
    with pytest.raises(ValueError, match="v0 is not taken"):
        gradflow.simulate_flow(model, u0=aligned(3), v0=aligned(3), ts=[0.0, 1.0], alpha=0.1)
    zeros = (np.zeros((4, 3)), np.zeros((5, 4)), np.ones((2, 5)))
    with pytest.raises(ValueError, match="2 zero layers"):
        gradflow.simulate_flow(model, u0=zeros, ts=[0.0, 1.0], alpha=0.1)


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 6), st.integers(0, 2**32 - 1))
def test_the_layer_flow_conserves_the_balance(depth, seed):
    """``d/dt (W_{l+1}ᵀW_{l+1} − W_l W_lᵀ) = 0`` along ``dW_l/dt = W_{>l}ᵀ G W_{<l}ᵀ`` for any layers and any G
    (Arora, Cohen & Hazan 2018), and the velocities are ``−∂L/∂W_l`` of ``L = −⟨G, W_L ⋯ W_1⟩``."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 5, size=depth + 1)
    layers = [rng.standard_normal((sizes[l + 1], sizes[l])) for l in range(depth)]
    G = rng.standard_normal((sizes[-1], sizes[0]))
    v = layer_velocities(layers, G)
    for l in range(depth - 1):
        W, Wn, dW, dWn = layers[l], layers[l + 1], v[l], v[l + 1]
        drift = dWn.T @ Wn + Wn.T @ dWn - dW @ W.T - W @ dW.T
        np.testing.assert_allclose(drift, 0.0, atol=1e-10 * (1 + np.abs(Wn.T @ Wn).max() ** 2 + np.abs(G).max() ** 2))
    for l in range(depth):  # a directional derivative of ⟨G, W_L ⋯ W_1⟩ along a random E_l
        E = rng.standard_normal(layers[l].shape)
        moved = [w + 1e-6 * E if k == l else w for k, w in enumerate(layers)]
        fd = (np.sum(G * product(moved)) - np.sum(G * product(layers))) / 1e-6
        assert np.sum(v[l] * E) == pytest.approx(fd, rel=1e-4, abs=1e-6)

"""The whitened task of Saxe et al. and its aligned balanced start, shared by the deep linear family's tests
(tests/deep_linear/)."""

import numpy as np

import gradflow

S = np.array([3.0, 2.0, 1.0])
A0 = np.array([1.0, 0.8, 1.2])  # the aligned balanced start's per-mode layer scales


def whitened(depth, s=S):
    """``L(W) = ½ ‖W − diag(s)‖²`` (Saxe's whitened regression: ``x_j = √n e_j``, ``y_j = √n s_j e_j``)."""
    n = len(s)
    X, Y = np.sqrt(n) * np.eye(n), np.sqrt(n) * np.diag(s)
    return gradflow.DeepLinearModel(lambda x, W: W @ x, X, Y, shape=(n, n), depth=depth)


def aligned(depth, a0=A0):
    """The balanced start aligned with ``M = diag(s)``: every layer ``diag(a0)``, so mode ``r`` starts at
    ``σ_r(0) = (α a0_r)^L``."""
    return tuple(np.diag(a0) for _ in range(depth))

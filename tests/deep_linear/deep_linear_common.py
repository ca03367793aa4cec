"""The whitened task of Saxe et al. and its aligned balanced start, shared by the deep linear family's tests
(tests/deep_linear/)."""

import math

import jax
import numpy as np

import gradflow
from gradflow._deep_linear import _small, _split

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


def labels_task(depth=3, seed=0, n=60):
    """Three classes of Gaussian points in R³, labelled by a noisy linear teacher (not separable: the cross-entropy has
    a finite minimiser on every rank), ``h(x, W) = W x`` the logits."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    y = np.argmax(X @ (2.0 * rng.standard_normal((3, 3))).T + rng.standard_normal((n, 3)), axis=1)
    return gradflow.DeepLinearModel(lambda x, W: W @ x, X, y, shape=(3, 3), depth=depth, loss="cross_entropy")


def rotated(depth, seed=1):
    """The whitened task with its teacher in random singular bases (a Gaussian start then mixes every mode)."""
    rng = np.random.default_rng(seed)
    U, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    V, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    M = U @ np.diag(S) @ V.T
    X = math.sqrt(3) * np.eye(3)
    return gradflow.DeepLinearModel(lambda x, W: W @ x, X, math.sqrt(3) * M.T, shape=(3, 3), depth=depth)


def gaussian(depth, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((3, 3)) / math.sqrt(3) for _ in range(depth))


def learned_chain(rng, k, width, depth):
    """Layers whose learned ``k×k`` blocks are a balanced rank-``k`` chain (diagonal, entries in [1, 2)) and whose other
    entries are zero."""
    A = []
    for _ in range(depth):
        a = np.zeros((width, width))
        a[:k, :k] = np.diag(1.0 + rng.random(k))
        A.append(a)
    return A


def split_flow(model, W0, ts, alpha, **options):
    """The split flow (gradflow/_deep_linear/_split.py) at one α, called directly, at atol = 1e-8 unless given, by Radau
    with the dense Jacobian unless ``free=True``."""
    with jax.enable_x64(True):  # as simulate_flow runs it
        return _split.flow(
            model,
            W0,
            np.asarray(ts),
            math.log(alpha),
            **dict(dict(rtol=0.0, atol=1e-8, max_steps=None, free=False), **options),
            progress=False,
        )


def gap_to_the_limit(depth, alpha, ts, atol=1e-8):
    """The split flow on the rotated task from the Gaussian start, and the largest ``|Δ log σ|`` at each output between
    it and the small-α path (gradflow/_deep_linear/_small.py) at the same α, both at ``atol``."""
    model, W0 = rotated(depth), gaussian(depth)
    split = split_flow(model, W0, ts, alpha, atol=atol)
    with jax.enable_x64(True):
        limit = _small.flow(model, W0, ts, math.log(alpha), rtol=0.0, atol=atol, max_steps=None, progress=False)
    return split, np.abs(split.log_singular_values - limit.log_singular_values).max(axis=1)

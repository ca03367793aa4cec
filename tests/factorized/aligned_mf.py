"""Matrix factorisation of a 4×3 matrix from a balanced, aligned start, and its closed form: the oracle that the leap
and split integrators' tests share (tests/factorized/test_leap.py, test_split.py; one compilation for both)."""

import numpy as np

from gradflow._factorized._explicit import LeapTolerances

SIG = np.array([3.0, 1.5, 0.0])
TS = np.linspace(0.0, 1.0, 21)
TOL = LeapTolerances(rtol=0.0, atol=1e-8)


def aligned():
    """``M = A diag(σ) Bᵀ`` and the balanced, aligned start ``Ū = A diag(s̄)^{1/2}``, ``V̄ = B diag(s̄)^{1/2}``."""
    rng = np.random.default_rng(0)
    A, _ = np.linalg.qr(rng.standard_normal((4, 3)))
    B, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    sbar = np.array([0.5, 2.0, 1.0])
    return (A * SIG) @ B.T, (A * np.sqrt(sbar),), (B * np.sqrt(sbar),), sbar


def logistic(t, log_alpha, sbar):
    """``log s_r(t)``, sorted, of the modes ``s' = 2 s (σ − s)`` from ``s(0) = α² s̄`` (docs/math.md, *Full weights:
    the exact flow*), in log space: ``log s = log σ + log s(0) + 2σt − log(σ − s(0) + s(0) e^{2σt})``."""
    t = np.asarray(t, float)[..., None]
    ls0 = 2.0 * log_alpha + np.log(sbar)
    sig = np.where(SIG > 0, SIG, 1.0)
    grow = np.log(sig) + ls0 + 2 * SIG * t - np.logaddexp(np.log(sig - np.exp(ls0)), ls0 + 2 * SIG * t)
    return -np.sort(-np.where(SIG > 0, grow, ls0 + 0 * t), axis=-1)

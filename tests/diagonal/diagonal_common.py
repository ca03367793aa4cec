"""The diagonal family's shared test helpers: linear regression with an exact design covariance, and the greedy limit
with its assumption warnings as errors (tests/diagonal/test_greedy.py, test_path.py, test_phase_b.py)."""

import warnings

import numpy as np

from gradflow import AssumptionWarning, GreedyPath, greedy_limit, models

N, P = 40, 4


def linear(beta_star, *, cov=None, seed=0):
    """Diagonal linear regression with ``XᵀX/n = cov`` exactly (identity by default) and ``y = X β*``."""
    beta_star = np.asarray(beta_star, dtype=float)
    p = beta_star.size
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((N, p)))
    root = np.eye(p) if cov is None else np.linalg.cholesky(cov)
    X = np.sqrt(N) * q @ root.T
    return models.diagonal_linear_model(X, X @ beta_star)


def quiet(model, **kwargs) -> GreedyPath:
    with warnings.catch_warnings():
        warnings.simplefilter("error", AssumptionWarning)
        return greedy_limit(model, **kwargs)

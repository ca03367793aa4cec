"""Diagonal linear regression (gradflow/_diagonal/_linear.py): the orthonormal design makes g = β* − β."""

import numpy as np

from gradflow import evaluate_g, models


def test_orthonormal_design_gives_g_equal_beta_star_minus_beta():
    task = models.diagonal_linear(n=30, p=6, orthonormal=True, seed=3)
    X = task.model.X
    np.testing.assert_allclose(X.T @ X / X.shape[0], np.eye(X.shape[1]), atol=1e-12)
    beta = np.linspace(-1, 1, 6)
    np.testing.assert_allclose(evaluate_g(task.model, beta), task.teacher_beta - beta, atol=1e-12)

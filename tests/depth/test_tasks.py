"""The depth family's built-in tasks (gradflow/_depth/_tasks.py): their shapes, losses and checks."""

import jax
import numpy as np
import pytest

from gradflow import models


def test_builtin_tasks_saxe_modes_and_depth_linear():
    saxe = models.saxe_modes(n=5, depth=4, singular_values=(2.0, 0.5))
    beta = np.array([0.3, -1.0])
    assert saxe.model.depth == 4 and saxe.u0.shape == (4, 2) and saxe.v0 is None
    with jax.enable_x64(True):
        loss = float(saxe.model.loss_of_beta(beta))
    assert loss == pytest.approx(0.5 * np.sum((beta - [2.0, 0.5]) ** 2), rel=1e-12)
    with pytest.raises(ValueError, match="positive numbers"):
        models.saxe_modes(singular_values=(1.0, -1.0))
    with pytest.raises(ValueError, match="depth must be one of"):
        models.saxe_modes(depth=7)
    lin = models.depth_linear(n=20, p=6, depth=2, nonzero=2, seed=3)
    assert lin.u0.shape == (2, 6) and np.count_nonzero(lin.teacher_beta) == 2
    np.testing.assert_allclose(lin.model.Y, lin.model.X @ lin.teacher_beta)
    assert models.TASKS["saxe_modes"].family == "depth" and models.TASKS["depth_linear"].sizes == ("n", "p", "depth")

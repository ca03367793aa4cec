"""The diagonal family's hooks (gradflow/_diagonal/_family.py): its words for the model, its time unit and first
stage speed, and its check that a greedy path is this model's (its losses at its stages)."""

from types import SimpleNamespace

import numpy as np
import pytest

from gradflow import DiagonalModel, evaluate_loss, models
from gradflow._diagonal._family import DIAGONAL


def test_describe_model_says_what_p_and_n_count():
    from gradflow._registry import family_of

    X, Y = np.ones((3, 2)), np.ones(3)
    model = DiagonalModel(lambda x, b: x @ b, X, Y, p=2)
    assert family_of(model).describe_model(model) == "p = 2 coordinates, n = 3 samples"


def test_speed_time_unit_and_the_paths_losses():
    """On the orthonormal design ``g(0) = β*``; a path must record this model's loss at its stages."""
    task = models.diagonal_linear(n=30, p=6, orthonormal=True, seed=3)
    model, beta_star = task.model, task.teacher_beta
    assert DIAGONAL.first_stage_speed(model) == pytest.approx(np.max(np.abs(beta_star)), rel=1e-12)
    assert DIAGONAL.time_unit(model, np.log(1e-2)) == pytest.approx(1 / np.log(1e2))  # τ = t / log(1/α)
    beta = np.stack([np.zeros(6), np.where(np.arange(6) == np.argmax(np.abs(beta_star)), beta_star, 0.0)])
    loss = evaluate_loss(model, beta)
    DIAGONAL.check_path(model, SimpleNamespace(times=np.array([0.0, 1.0]), beta=beta, b=0, loss=loss, b_at=0))
    other = SimpleNamespace(times=np.array([0.0, 1.0]), beta=beta, b=0, loss=loss * 1.01, b_at=0)
    with pytest.raises(ValueError, match=r"path \(at its stages\) records the loss .* another model's"):
        DIAGONAL.check_path(model, other)
    with pytest.raises(ValueError, match="p = 5 coordinates, but this DiagonalModel has p = 6"):
        DIAGONAL.check_path(model, SimpleNamespace(times=0, beta=np.zeros((1, 5)), b=0, loss=0, b_at=0))

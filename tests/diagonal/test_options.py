"""The diagonal flow's options (gradflow/_diagonal/_options.py): ``DiagonalSolver`` checks ``jacobian_rank`` when it
is made, and the flow checks it against the model's ``p``."""

import numpy as np
import pytest

import gradflow
from gradflow import models


@pytest.mark.parametrize("rank", [0, -3, 2.5, True, "4"])
def test_a_bad_jacobian_rank_is_refused_when_made(rank):
    with pytest.raises((TypeError, ValueError), match="jacobian_rank must be a positive integer"):
        gradflow.DiagonalSolver(jacobian_rank=rank)


def test_jacobian_rank_is_kept_and_checked_against_p():
    assert gradflow.DiagonalSolver(jacobian_rank=np.int64(3)).jacobian_rank == 3
    assert gradflow.DiagonalSolver() == gradflow.DiagonalSolver(jacobian_rank=None)  # one compilation
    task = models.diagonal_linear(n=12, p=4, seed=0)
    with pytest.raises(ValueError, match=r"jacobian_rank must lie in \[1, p=4\]"):
        gradflow.simulate_flow(
            task.model, u0=task.u0, v0=task.v0, ts=[0.0, 1.0], alpha=1e-2, solver=gradflow.DiagonalSolver(5)
        )

"""The factorised family's hooks (gradflow/_factorized/_family.py): the leaps' range of α that it refuses beyond, its
words for the model, its first stage speed, and its check that a greedy path is this model's."""

import re
from types import SimpleNamespace

import numpy as np
import pytest

from gradflow import models
from gradflow._factorized._family import FACTORIZED, figure2_order

EPS = np.finfo(np.float64).eps


def test_the_range_of_alpha_is_where_float64_rounds_2_log_alpha_within_the_tolerance():
    limit = 1e-8 / (2 * EPS)  # |log α| ≤ atol / (2 eps) at rtol = 0: 2.25e7
    FACTORIZED.check_resolved(-0.99 * limit, None, rtol=0.0, atol=1e-8)
    with pytest.raises(
        ValueError, match=rf"log_alpha = -2\.27.*these tolerances: \|log α\| ≤ {re.escape(f'{limit:.4g}')}"
    ):
        FACTORIZED.check_resolved([-1.0, -1.01 * limit], None, rtol=0.0, atol=1e-8)
    FACTORIZED.check_resolved(-1e12, None, rtol=EPS, atol=1e-8)  # a relative tolerance covers any α
    with pytest.raises(ValueError, match="ts reaches τ = 2, too long"):
        FACTORIZED.check_resolved(-1e15, [0.0, 2.0], rtol=EPS, atol=1e-8)


def test_words_speed_and_the_paths_losses():
    task = models.matrix_factorization(m=4, n=3, singular_values=(3.0, 1.5), seed=1)
    model = task.model
    assert FACTORIZED.describe_model(model) == "weights W_W (4×3), n = 1 sample"  # the matrix, one sample
    assert FACTORIZED.first_stage_speed(model) == pytest.approx(3.0, rel=1e-9)  # ‖G(0)‖₂ = ‖M‖₂ = σ_1
    W = (np.zeros((2, 4, 3)),)
    fields = dict(times=np.array([0.0, 1 / 3]), W=W, ranks=0, activated=0, stage_at=0, sleeping_at=0)
    path = SimpleNamespace(**fields, loss=np.full(2, 0.5 * (9 + 2.25)))
    FACTORIZED.check_path(model, path)  # L(0) = ½ ‖M‖² at both (stand-in) stages
    path.loss = np.array([0.5 * (9 + 2.25), 0.0])
    with pytest.raises(ValueError, match=r"path \(at its stages\) records the loss 0 where this model's loss is"):
        FACTORIZED.check_path(model, path)
    assert figure2_order(("KQ", "VO")) == [1, 0] and figure2_order(("VO", "W")) == [0, 1]

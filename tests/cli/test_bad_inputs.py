"""Bad model arguments, one row each: a ``ValueError`` that names the argument."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gradflow import models


@pytest.mark.parametrize(
    "build, names",
    [
        (lambda: models.diagonal_attention(n=4, dim=3, teacher_nonzero=(1, 2, 3)), "teacher_nonzero must be a number"),
        (lambda: models.diagonal_attention(n=4, dim=3, teacher_nonzero=(4, 1)), "teacher_nonzero[0]: the teacher's"),
        (lambda: models.diagonal_attention(n=4, dim=3, teacher_nonzero=-1), "teacher_nonzero[0]: the teacher's"),
        (lambda: models.diagonal_transformer(n=4, dim=2, teacher_nonzero=3), "teacher_nonzero: the teacher's"),
        (lambda: models.diagonal_linear(n=4, p=3, nonzero=2.5), "nonzero: the teacher's number of nonzero entries"),
        (lambda: models.diagonal_linear(n=4, p=3, seed=-1), "seed must be a non-negative integer"),
        (lambda: models.attention_full(n=4, dim=3, d_head=0), "d_head must be an integer in [1, dim = 3]"),
        (lambda: models.attention_full(n=4, dim=3, d_head=4), "d_head must be an integer in [1, dim = 3]"),
        (lambda: models.attention_full(n=4, dim=3, teacher_kq=()), "teacher_kq must be 1 to dim = 3 positive"),
        (lambda: models.matrix_factorization(singular_values=()), "singular_values must be 1 to min(m, n) = 5"),
        (lambda: models.matrix_factorization(m=3, n=2, singular_values=(3, 2, 1)), "singular_values must be 1 to"),
        (lambda: models.matrix_sensing(singular_values=(1.0, math.nan)), "singular_values must be 1 to"),
        (lambda: models.matrix_sensing(singular_values="abc"), "singular_values must be 1 to"),
        (lambda: models.matrix_factorization(width=0), "width must be an integer in [1, min(m, n) = 5]"),
        (lambda: models.matrix_factorization_model(np.eye(3), width=2.5), "width must be an integer in [1, min(m, n)"),
    ],
)
def test_bad_model_arguments(build, names):
    with pytest.raises(ValueError) as err:
        build()
    assert names in str(err.value)


def test_default_teachers_fit_the_sizes():
    """A single number sets both parts of the diagonal head's teacher; the full-weight teachers' default singular
    values are cut to the rank the sizes allow."""
    task = models.diagonal_attention(n=4, dim=5, teacher_nonzero=3)
    assert np.count_nonzero(task.teacher_beta[:5]) == np.count_nonzero(task.teacher_beta[5:]) == 3
    (M,) = models.matrix_factorization(m=3, n=2).teacher_beta
    np.testing.assert_allclose(np.linalg.svd(M, compute_uv=False), [3.0, 2.0], rtol=1e-12)
    kq, vo = models.attention_full(n=4, dim=2).teacher_beta
    np.testing.assert_allclose(np.linalg.svd(kq, compute_uv=False), [1.0, 0.6], rtol=1e-12)

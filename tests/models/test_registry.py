"""gradflow.models' table of every family's built-in tasks: each builds from its size options into a model of its
family, a bad argument to a builder is a ``ValueError`` naming it, the default teachers fit the sizes, and the old
per-family names keep working one release with a DeprecationWarning."""

import inspect
import math

import numpy as np
import pytest

import gradflow
from gradflow import models
from gradflow._registry import FAMILIES, family_of


@pytest.mark.parametrize("name", list(models.TASKS))
def test_each_task_builds_from_its_size_options_into_its_family(name):
    """Every size option the table lists is a keyword of the builder and reaches the task it builds, whose model is
    of the family the entry names; every sweep option is a keyword of the builder too."""
    entry = models.TASKS[name]
    task = entry.build(**{k: 4 for k in entry.sizes})  # 4 ≥ the default teachers' nonzero entries and ranks
    assert task.name == name and task.config["seed"] == 0
    assert all(task.config[k] == 4 for k in entry.sizes)
    assert family_of(task.model).name == entry.family
    assert set(entry.sweep) <= set(inspect.signature(entry.build).parameters)
    family = next(f for f in FAMILIES if f.name == entry.family)
    assert set(entry.sizes) <= set(family.size_options) and set(entry.teacher) <= set(family.teacher_options)


def test_builtin_finds_a_task_of_any_family_or_of_one():
    assert models.builtin("matrix_sensing") is models.TASKS["matrix_sensing"]
    assert models.builtin("diagonal_linear", family="diagonal").family == "diagonal"
    with pytest.raises(ValueError, match="unknown model 'mlp'; choose one of"):
        models.builtin("mlp")
    with pytest.raises(ValueError, match="unknown model 'diagonal_linear'; choose one of \\['attention_full'"):
        models.builtin("diagonal_linear", family="factorized")


def test_old_names_warn_and_still_work():
    with pytest.warns(DeprecationWarning, match="gradflow.models.BUILTIN is deprecated; use gradflow.models.TASKS"):
        diagonal = models.BUILTIN
    with pytest.warns(DeprecationWarning, match="gradflow.models.FACTORIZED is deprecated"):
        factorized = gradflow.models.FACTORIZED
    assert list(diagonal) == ["diagonal_linear", "diagonal_attention", "diagonal_transformer"]
    assert list(factorized) == ["matrix_factorization", "matrix_sensing", "attention_full"]
    with pytest.warns(DeprecationWarning, match="pass family='factorized' instead") as record:
        assert models.builtin("attention_full", factorized=True) is models.TASKS["attention_full"]
    assert {w.filename for w in record} == {__file__}
    with pytest.raises(AttributeError, match="has no attribute 'MISSING'"):
        models.MISSING  # noqa: B018


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
def test_bad_arguments_from_python(build, names):
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

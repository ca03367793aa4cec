"""gradflow.models' table of every family's built-in tasks: each builds from its size options into a model of its
family, and the old per-family names keep working one release with a DeprecationWarning."""

import inspect

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

"""The factorised flow's options (gradflow/_factorized/_options.py): ``FactorizedSolver`` takes the integrators by
name and refuses others when it is made."""

import numpy as np
import pytest

import gradflow
from gradflow._factorized._flow import METHODS


def test_the_methods_by_name():
    assert gradflow.FactorizedSolver().method == "auto" and set(METHODS) >= {"auto", "leap", "tsit5", "kvaerno5"}
    assert gradflow.FactorizedSolver("leap") == gradflow.FactorizedSolver(method="leap")  # one compilation
    with pytest.raises(ValueError, match=r"method must be one of .*'kvaerno5'.*; got 'dopri5'"):
        gradflow.FactorizedSolver(method="dopri5")


def test_dense_output_is_on_by_default_and_a_bool():
    assert gradflow.FactorizedSolver().dense_output is True
    assert gradflow.FactorizedSolver(dense_output=False) != gradflow.FactorizedSolver()
    with pytest.raises(ValueError, match="dense_output must be True or False; got 'yes'"):
        gradflow.FactorizedSolver(dense_output="yes")


def test_auto_takes_the_split_integrator_on_large_factors():
    """``"auto"``: the leaps where every factor has ``m + n < 64`` (the d = 6 and d = 20 heads, matrix factorisation
    in the tests), the split integrator from there (the d = 50 heads, the paper's size), but for a batch solved as
    one vectorised program."""
    from gradflow import models
    from gradflow._factorized._flow import SPLIT_FROM, auto_method

    head = lambda d: models.attention_full(n=8, tokens=3, dim=d, teacher_kq=(1.0,), teacher_vo=(1.0,)).model  # noqa: E731
    assert auto_method(head(6)) == auto_method(head(20)) == "leap" and auto_method(head(50)) == "split"
    assert auto_method(head(50), vmapped=True) == "leap"  # under vmap every branch of a step runs
    assert auto_method(models.matrix_factorization_model(np.zeros((SPLIT_FROM - 31, 30)))) == "leap"
    assert auto_method(models.matrix_factorization_model(np.zeros((SPLIT_FROM - 30, 30)))) == "split"

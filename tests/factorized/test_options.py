"""The factorised flow's options (gradflow/_factorized/_options.py): ``FactorizedSolver`` takes the integrators by
name and refuses others when it is made."""

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

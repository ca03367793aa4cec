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

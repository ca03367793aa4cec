"""The deep linear flow's options (gradflow/_deep_linear/_options.py): ``simulate_flow`` takes a ``DeepLinearSolver``
for a ``DeepLinearModel`` and refuses another family's, before it solves anything."""

import pytest
from deep_linear_common import aligned, whitened

import gradflow


def test_the_flow_takes_its_solver_and_refuses_another_familys():
    assert gradflow.DeepLinearSolver() == gradflow.DeepLinearSolver()  # options compare equal: one compilation
    with pytest.raises(TypeError, match="solver must be a gradflow.DeepLinearSolver for a DeepLinearModel; got Depth"):
        gradflow.simulate_flow(whitened(3), u0=aligned(3), ts=[0.0, 1.0], alpha=0.1, solver=gradflow.DepthSolver())


def test_newton_is_checked():
    assert gradflow.DeepLinearSolver().newton == "auto"
    with pytest.raises(ValueError, match=r"newton must be one of \('auto', 'dense', 'matrix_free'\); got 'lu'"):
        gradflow.DeepLinearSolver(newton="lu")

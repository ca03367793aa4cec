"""The depth flow's options (gradflow/_depth/_options.py): ``simulate_flow`` takes a ``DepthSolver`` for a
``DepthModel`` and refuses another family's, before it solves anything."""

import pytest
from depth_common import MODEL3, W_BALANCED

import gradflow


def test_the_flow_takes_its_solver_and_refuses_another_familys():
    assert gradflow.DepthSolver() == gradflow.DepthSolver()  # options compare equal: one compilation
    with pytest.raises(TypeError, match="DepthSolver"):
        gradflow.simulate_flow(MODEL3, u0=W_BALANCED, ts=[0.0, 1.0], alpha=1e-2, solver=gradflow.DiagonalSolver())

"""The public entry points as one layer over the families: the family from the model's type, the options that
apply to one family only, ``throw`` handled once, and warnings at the caller's line for both families."""

import numpy as np
import pytest

import gradflow
from gradflow import AssumptionWarning, models
from gradflow._results import RESULTS, Interrupted, failures, finish


def _near_degenerate(task):
    u0 = task.u0.copy()
    u0[0] = task.v0[0] * (1 + 1e-9)
    return u0


@pytest.fixture(scope="module")
def linear():
    return models.diagonal_linear(n=20, p=3, orthonormal=True, seed=0)


@pytest.fixture(scope="module")
def square():
    """Matrix factorisation whose two singular values tie: the escape direction of its first stage is not unique."""
    return models.matrix_factorization(m=2, n=2, singular_values=(1.0, 1.0), seed=0)


# two recorded times (as in test_solver_options_are_the_familys_object: one flow program for the file, compiled once):
# compare_limits also says that its time errors are the grid's, at the caller's line too
@pytest.mark.filterwarnings("ignore:the detected stage times:UserWarning")
def test_warnings_point_at_the_callers_line_diagonal(linear):
    u0 = _near_degenerate(linear)
    ts = [0.0, 4.0]  # past T_K = 3.04
    for call in (
        lambda: gradflow.simulate_flow(linear.model, u0=u0, v0=linear.v0, ts=ts, alpha=1e-3),
        lambda: gradflow.greedy_limit(linear.model, u0=u0, v0=linear.v0, max_stages=1),
        lambda: gradflow.compare_limits(linear.model, alpha=[1e-3, 1e-6], u0=u0, v0=linear.v0, ts=ts),
        lambda: gradflow.simulate_gd(linear.model, u0=u0, v0=linear.v0, alpha=1e-2, lr=0.1, steps=2),
    ):
        with pytest.warns(AssumptionWarning) as record:
            call()
        assert {w.filename for w in record} == {__file__}, [(w.filename, w.lineno) for w in record]


@pytest.mark.slow  # the mechanism's fast test is the diagonal one; this compiles the full-weight flow and greedy
def test_warnings_point_at_the_callers_line_factorized(square):
    with pytest.warns(AssumptionWarning, match="not unique") as record:
        path = gradflow.greedy_limit(square.model, u0=square.u0, v0=square.v0, max_stages=1, check_assumptions=False)
    assert {w.filename for w in record} == {__file__}
    with pytest.warns(AssumptionWarning, match="not unique") as record:  # compare_limits computes the path itself
        gradflow.compare_limits(square.model, alpha=[1e-2, 1e-3], u0=square.u0, v0=square.v0, ts=np.linspace(0, 1.2, 7))
    assert {w.filename for w in record} == {__file__}
    assert path.result == "max_stages"


@pytest.mark.slow  # compiles a flow of each family; the fast twins: test_dispatch_follows_the_models_type and below
def test_the_family_comes_from_the_models_type(linear, square):
    flow = gradflow.simulate_flow(linear.model, u0=linear.u0, v0=linear.v0, ts=[0.0, 0.5], alpha=1e-2)
    assert isinstance(flow, gradflow.FlowResult)
    flow = gradflow.simulate_flow(square.model, u0=square.u0, v0=square.v0, ts=[0.0, 0.5], alpha=1e-2)
    assert isinstance(flow, gradflow.FactorizedFlowResult)


def test_a_model_of_no_family_and_another_familys_options_are_refused(linear):
    """Refused before anything is compiled."""
    with pytest.raises(TypeError, match="model must be a gradflow.DiagonalModel or a gradflow.FactorizedModel"):
        gradflow.greedy_limit(object())
    with pytest.raises(ValueError, match="solver applies to factorized models only; a DiagonalModel"):
        gradflow.simulate_flow(linear.model, u0=linear.u0, v0=linear.v0, ts=[0.0, 0.5], alpha=1e-2, solver="tsit5")


def test_dispatch_follows_the_models_type(linear, square):
    """The family of the model's type, else of its nearest registered base (a subclass with its own ``g``); a type
    no family registers is a TypeError naming those that are."""
    from gradflow import _registry

    class Mine(gradflow.DiagonalModel):
        pass

    mine = Mine(linear.model.h, linear.model.X, linear.model.Y, p=linear.model.p, loss="square")
    assert _registry.family_of(mine) is _registry.family_of(linear.model) is _registry.family_named("diagonal")
    assert _registry.family_of(square.model).name == "factorized"

    class Other:
        pass

    with pytest.raises(
        TypeError,
        match="model must be a gradflow.DiagonalModel or a gradflow.FactorizedModel or a gradflow.DepthModel or a gradflow.DeepLinearModel; got Other",
    ):
        _registry.family_of(Other())
    with pytest.raises(ValueError, match="unknown model family 'recurrent'; choose one of"):
        _registry.family_named("recurrent")


def test_solver_options_are_the_familys_object(linear):
    """The solver options travel in the family's object; the old keywords give the same flow with a
    DeprecationWarning at the caller's line, and a wrong object is a TypeError."""
    kw = dict(u0=linear.u0, v0=linear.v0, ts=[0.0, 0.5], alpha=1e-2)
    # jacobian_rank = p = 3, the default: one program for both calls
    flow = gradflow.simulate_flow(linear.model, **kw, solver=gradflow.DiagonalSolver(jacobian_rank=3))
    with pytest.warns(DeprecationWarning, match=r"solver=gradflow.DiagonalSolver\(jacobian_rank=3\)") as record:
        old = gradflow.simulate_flow(linear.model, **kw, jacobian_rank=3)
    assert {w.filename for w in record} == {__file__}
    np.testing.assert_array_equal(np.asarray(old.beta), np.asarray(flow.beta))
    with pytest.raises(TypeError, match="solver must be a gradflow.DiagonalSolver for a DiagonalModel; got Factor"):
        gradflow.simulate_flow(linear.model, **kw, solver=gradflow.FactorizedSolver())
    with pytest.raises(ValueError, match="jacobian_rank must be a positive integer"):
        gradflow.DiagonalSolver(jacobian_rank=0)
    with pytest.raises(ValueError, match="method must be one of"):
        gradflow.FactorizedSolver(method="euler")


def test_results_enumeration_and_finish():
    assert [r.value for r in RESULTS if r.failed] == [
        "max_steps_reached",
        "solver_failed",
        "phase_b_failed",
        "no_minimiser",
        "non_finite",
        "run_failed",
        "interrupted",
    ]
    assert not RESULTS.single_scale.failed and all(r.meaning for r in RESULTS)
    assert str(RESULTS.successful) == "successful" and RESULTS("max_stages") is RESULTS.max_stages
    assert failures(np.array(["successful", "max_steps_reached", "max_stages"])).tolist() == [1]
    out = type("Out", (), dict(result=np.array(["successful", "solver_failed"]), message=np.array(["", "it broke"])))
    assert finish(out, throw=False) is out
    with pytest.raises(RuntimeError, match="^who: it broke. Try again.$"):
        finish(out, throw=True, prefix="who: ", hint=". Try again.")
    stopped = type("Out", (), dict(result=np.array(["successful", "interrupted"]), message=np.array(["", "Ctrl-C"])))
    with pytest.raises(Interrupted, match="^who: Ctrl-C$") as stop:  # whatever throw says
        finish(stopped, throw=False, prefix="who: ")
    assert stop.value.result is stopped and isinstance(stop.value, KeyboardInterrupt)

"""Bad inputs to the theory engine, one per row: each either raises an error whose message names the argument (and
says what to pass instead), or returns a result whose ``result`` is not ``"successful"``, with a message that says
what went wrong and where. Tiny models, no long solve."""

import re
import types

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradflow
from gradflow import models

X = np.eye(3)
Y = np.array([2.0, 0.0, 0.0])


def _linear(x, beta):
    return x @ beta


def _norm_at_zero(x, beta):
    """Not differentiable at β = 0 (``jnp.linalg.norm``), smooth elsewhere."""
    return x @ beta + 0.1 * jnp.linalg.norm(beta)


def _sqrt_to_half(x, beta):
    """Linear, but NaN where ``β_0 > 0.5`` (a square root of a negative number reached mid-run)."""
    return x @ beta + 0.0 * jnp.sqrt(0.5 - beta[0])


_XS = np.stack([np.eye(2), np.array([[0.0, 1.0], [0.0, 0.0]])])
_XS_11 = np.stack([np.diag([0.0, 1.0]), np.array([[0.0, 1.0], [0.0, 0.0]])])  # the teacher's W_11 = 4


def _sqrt_past_half(x, Ws):
    """⟨x, W⟩, but NaN where ``W_11 > 0.5``."""
    return jnp.sum(x * Ws[0]) + 0.0 * jnp.sqrt(0.5 - Ws[0][1, 1])


def _logits(x, beta):
    return jnp.stack([0.0, x @ beta])


@pytest.fixture(scope="module")
def t():
    """The models, paths and runs the rows use."""
    lin = models.diagonal_linear(n=8, p=3, orthonormal=True, seed=0)
    mf = models.matrix_factorization(m=2, n=2, singular_values=(2.0, 1.0), seed=0)
    path = gradflow.greedy_limit(lin.model, max_stages=1, check_assumptions=False)
    other = models.diagonal_linear(n=8, p=2, orthonormal=True, seed=0)
    return types.SimpleNamespace(
        lin=lin,
        mf=mf,
        path=path,
        path_p2=gradflow.greedy_limit(other.model, max_stages=0),
        path_mf=gradflow.greedy_limit(mf.model, max_stages=0),
        path_mf_other=gradflow.greedy_limit(
            models.matrix_factorization(m=2, n=2, singular_values=(3.0, 1.0), seed=0).model, max_stages=0
        ),
        path_other=gradflow.greedy_limit(
            models.diagonal_linear(n=8, p=3, orthonormal=True, seed=1).model, max_stages=1, check_assumptions=False
        ),
        runs=lambda loss=None: _runs(path, [-5.0, -10.0], loss),
    )


def _runs(path, log_alphas, loss_tail=None, loss_head=None):
    """Runs that jump onto the path's stages at its times (a Trajectory each), recording the model's loss there, or
    ``loss_tail`` after ``T_1`` (and ``loss_head`` before it): the loss of another model of the same shape."""
    ts = np.linspace(0.0, 1.25 * path.times[-1], 50)
    after = ts >= path.times[1]
    loss = np.where(after, path.loss[1] if loss_tail is None else loss_tail, path.loss[0])
    loss = loss if loss_head is None else np.where(after, loss, loss_head)
    beta = np.where(after[:, None], path.beta[1], path.beta[0])
    return [types.SimpleNamespace(ts=ts, beta=beta, b=np.ones_like(beta), loss=loss, log_alpha=la) for la in log_alphas]


def _narrow(runs):
    """The runs with their first two coordinates only: runs of a model with p = 2."""
    return [types.SimpleNamespace(**dict(vars(r), beta=r.beta[:, :2], b=r.b[:, :2])) for r in runs]


def _compare(t, **options):
    return gradflow.compare_limits(t.lin.model, u0=t.lin.u0, v0=t.lin.v0, **options)


def _flow(t, **options):
    return gradflow.simulate_flow(t.lin.model, u0=t.lin.u0, v0=t.lin.v0, ts=[0.0, 1.0], **options)


def _gd(t, task="lin", **options):
    task = getattr(t, task)
    options = dict(dict(u0=task.u0, v0=task.v0, alpha=1e-2, steps=8), **options)
    return gradflow.simulate_gd(task.model, **options)


def _zeros(shapes, width):
    return tuple(np.zeros((m, width)) for m in shapes)


RAISES = {
    # data (gradflow._data.check_data)
    "complex X": (lambda t: gradflow.DiagonalModel(_linear, X + 1j, Y, p=3), ValueError, r"^X is complex"),
    "complex Y": (lambda t: gradflow.DiagonalModel(_linear, X, Y + 1j, p=3), ValueError, r"^Y is complex"),
    "complex Y, factorised": (
        lambda t: gradflow.FactorizedModel(
            lambda x, Ws: Ws[0], np.zeros((1, 1)), np.ones((1, 2, 2)) * 1j, shapes=[(2, 2)]
        ),
        ValueError,
        r"^Y is complex",
    ),
    "samples of X not on axis 0": (
        lambda t: gradflow.DiagonalModel(_linear, np.ones((1, 3, 3)), Y, p=3),
        ValueError,
        r"^X and Y .* X\.shape = \(1, 3, 3\) holds 1 .* X has 3 along axis 1",
    ),
    "cross-entropy, float labels": (
        lambda t: gradflow.DiagonalModel(_logits, X, [0, 0.5, 1], p=3, loss="cross_entropy"),
        ValueError,
        r"integer class labels in Y; Y\[1\] = 0\.5 is not an integer",
    ),
    "cross-entropy, one-hot labels": (
        lambda t: gradflow.DiagonalModel(_logits, X, np.eye(3, 2), p=3, loss="cross_entropy"),
        ValueError,
        r"Y\.shape == \(n,\); got Y\.shape=\(3, 2\)",
    ),
    # h and loss that are not real scalars (gradflow._data.check_output)
    "complex h": (
        lambda t: gradflow.DiagonalModel(lambda x, beta: (x @ beta) * (1 + 1j), X, Y, p=3),
        ValueError,
        r"^h\(x, beta\) returns complex values \(dtype complex128\); gradflow's models are real",
    ),
    "complex h, factorised": (
        lambda t: gradflow.FactorizedModel(
            lambda x, Ws: Ws[0] * 1j, np.zeros((1, 1)), np.ones((1, 2, 2)), shapes=[(2, 2)]
        ),
        ValueError,
        r"^h\(x, Ws\) returns complex values",
    ),
    "a loss that returns a vector": (
        lambda t: gradflow.DiagonalModel(_linear, X, Y, p=3, loss=lambda y, y_hat: jnp.stack([y - y_hat] * 2) ** 2),
        ValueError,
        r"^loss\(y, y_hat\) must return one real number per sample \(shape \(\)\); got shape \(2,\)",
    ),
    "a complex loss": (
        lambda t: gradflow.DiagonalModel(_linear, X, Y, p=3, loss=lambda y, y_hat: (y - y_hat) ** 2 * 1j),
        ValueError,
        r"^loss\(y, y_hat\) must return one real number per sample .*dtype complex",
    ),
    # half an initialisation (each family's check; a depth model's start is u0 alone)
    "greedy_limit with u0 alone": (
        lambda t: gradflow.greedy_limit(t.lin.model, u0=t.lin.u0),
        ValueError,
        r"^give both u0 and v0, or neither\.",
    ),
    "greedy_limit with v0 alone, factorised": (
        lambda t: gradflow.greedy_limit(t.mf.model, v0=t.mf.v0),
        ValueError,
        r"^give both u0 and v0, or neither\.",
    ),
    "compare_limits without v0": (
        lambda t: gradflow.compare_limits(t.lin.model, u0=t.lin.u0, log_alpha=[-5.0, -10.0]),
        ValueError,
        r"^give v0, an array of shape \(3,\) \(the model's p = 3\)",
    ),
    # the flow's tolerances (gradflow._kit._checks.check_tolerances)
    "atol = 1e3": (lambda t: _flow(t, log_alpha=-10.0, atol=1e3), ValueError, r"^atol must lie in \[0, 0\.01\]"),
    "rtol = 0.5": (lambda t: _flow(t, log_alpha=-10.0, rtol=0.5), ValueError, r"^rtol must lie in \[0, 0\.01\]"),
    "rtol = atol = 0": (lambda t: _flow(t, log_alpha=-10.0, atol=0.0), ValueError, r"^rtol and atol must not both"),
    "atol = -1e-8": (lambda t: _flow(t, log_alpha=-10.0, atol=-1e-8), ValueError, r"^atol must lie in"),
    "compare_limits, atol = 1": (
        lambda t: _compare(t, log_alpha=[-5.0, -10.0], flow_options=dict(atol=1.0)),
        ValueError,
        r"^atol must lie in \[0, 0\.01\]",
    ),
    "factorised, atol = 1": (
        lambda t: gradflow.simulate_flow(t.mf.model, u0=t.mf.u0, v0=t.mf.v0, ts=[0.0, 1.0], alpha=0.1, atol=1.0),
        ValueError,
        r"^atol must lie in",
    ),
    # entry points inside JAX transformations (gradflow._config.float64)
    "simulate_flow inside jax.jit": (
        lambda t: jax.jit(lambda la: _flow(t, log_alpha=la))(-10.0),
        TypeError,
        r"^gradflow\.simulate_flow takes concrete arrays .* cannot be called inside jax\.jit, jax\.vmap or jax\.grad",
    ),
    "evaluate_loss inside jax.grad": (
        lambda t: jax.grad(lambda beta: gradflow.evaluate_loss(t.lin.model, beta))(jnp.zeros(3)),
        TypeError,
        r"^gradflow\.evaluate_loss takes concrete arrays .*use model\.loss_of_beta and model\.g",
    ),
    "compare_limits inside jax.vmap": (
        lambda t: jax.vmap(lambda la: gradflow.compare_limits(t.lin.model, log_alpha=la, u0=t.lin.u0, v0=t.lin.v0))(
            jnp.array([[-5.0, -10.0]])
        ),
        TypeError,
        r"^gradflow\.compare_limits takes concrete arrays",
    ),
    # scales that float64 cannot resolve (gradflow._kit._checks.check_scales)
    "log_alpha = -1e-300": (
        lambda t: _flow(t, log_alpha=-1e-300),
        ValueError,
        r"^log_alpha is too close to 0.*log α ≤ -1\.49e-08",
    ),
    "alpha = 1 - 1e-12": (
        lambda t: _flow(t, alpha=1 - 1e-12),
        ValueError,
        r"^alpha is too close to 1.*α ≤ 1 − 1\.49e-08",
    ),
    "simulate_gd, log_alpha = -1e-10": (
        lambda t: _gd(t, alpha=None, log_alpha=-1e-10, lr=0.1),
        ValueError,
        r"^log_alpha is too close to 0",
    ),
    "log_alpha = -1e9": (
        lambda t: _flow(t, log_alpha=-1e9),
        ValueError,
        r"^log_alpha = -1e\+09 is below what float64 resolves at atol = 1e-08.*gradflow takes log α ≥ -2\.25e\+06",
    ),
    "ts too long for log α": (
        lambda t: gradflow.simulate_flow(t.lin.model, u0=t.lin.u0, v0=t.lin.v0, ts=[0.0, 1e300], log_alpha=-10.0),
        ValueError,
        r"^ts reaches τ = 1e\+300, too long at log α = -10.*gradflow takes τ ≤ 4\.5e\+11",
    ),
    "compare_limits, log_alpha = -1e9": (
        lambda t: _compare(t, log_alpha=[-5.0, -1e9]),
        ValueError,
        r"^log_alpha = -1e\+09 is below what float64 resolves",
    ),
    "compare_limits, log_alpha near 0": (
        lambda t: _compare(t, log_alpha=[-5.0, -1e-9]),
        ValueError,
        r"^log_alpha is too close to 0",
    ),
    # initial factors
    "all-zero factors": (
        lambda t: gradflow.greedy_limit(t.mf.model, u0=_zeros([2], 2), v0=_zeros([2], 2)),
        ValueError,
        r"\[u0\[0\]; v0\[0\]\] is zero: .*Give nonzero factors",
    ),
    # a gradient that is NaN at zero weights
    "greedy_limit, h not differentiable at 0": (
        lambda t: gradflow.greedy_limit(gradflow.DiagonalModel(_norm_at_zero, X, Y, p=3), throw=False),
        ValueError,
        r"cannot start: at θ⁰ = 0 .*g = −∇L is NaN or infinite in β\[0\], β\[1\], β\[2\]\. The model's h",
    ),
    "greedy_limit, factorised h not differentiable at 0": (
        lambda t: gradflow.greedy_limit(
            gradflow.FactorizedModel(
                lambda x, Ws: Ws[0] + jnp.linalg.norm(Ws[0]), np.zeros((1, 1)), np.ones((1, 2, 2)), shapes=[(2, 2)]
            )
        ),
        ValueError,
        r"cannot start: at θ⁰ = 0 .*G = −∇L is NaN or infinite in W\[0\]\. The model's h",
    ),
    # diverging gradient descent, with throw=True
    "simulate_gd, lr = 1e6": (
        lambda t: _gd(t, lr=1e6),
        RuntimeError,
        r"^simulate_gd: .*\(lr = 1e\+06\) became non-finite at step \d+.*lower lr",
    ),
    # comparisons that cannot work, refused before any run
    "compare_limits, alpha twice": (
        lambda t: _compare(t, alpha=[1e-3, 1e-3], path=t.path),
        ValueError,
        r"^alpha must be distinct",
    ),
    "compare_limits, log_alpha twice": (
        lambda t: _compare(t, log_alpha=[-5.0, -5.0], path=t.path),
        ValueError,
        r"^log_alpha must be distinct",
    ),
    "compare_limits, delta = 100": (
        lambda t: _compare(t, alpha=[1e-3, 1e-6], path=t.path, delta=100.0),
        ValueError,
        r"^delta = 100 leaves none of ts .* Pass a smaller delta",
    ),
    "compare_limits, ts end before T_1": (
        lambda t: _compare(t, alpha=[1e-3, 1e-6], path=t.path, ts=np.linspace(0.0, 0.5, 5)),
        ValueError,
        r"^ts end at τ = 0\.5, before the first stage time T_1 = 1\.085.*\(ts=None records up to 1\.25·T_K",
    ),
    "compare_limits, gd steps that end before T_1": (
        lambda t: _compare(t, alpha=[1e-3, 1e-6], path=t.path, gd=dict(lr=0.01, steps=10)),
        ValueError,
        r"^gd's times \(steps = 10, lr = 0\.01 at log α = -6\.9\d+\) end at τ = 0\.01\d+, before .* more steps",
    ),
    "compare_limits, a factorised path": (
        lambda t: _compare(t, alpha=[1e-3, 1e-6], path=t.path_mf),
        TypeError,
        r"^path must be the greedy limit of this DiagonalModel, a GreedyPath .*; got a FactorizedGreedyPath without",
    ),
    "compare_limits, the path of a smaller model": (
        lambda t: _compare(t, alpha=[1e-3, 1e-6], path=t.path_p2),
        ValueError,
        r"^path is the greedy limit of a model with p = 2 coordinates, but this DiagonalModel has p = 3",
    ),
    "compare_limits, the path of another model of the same shape": (
        lambda t: _compare(t, alpha=[1e-3, 1e-6], path=t.path_other),
        ValueError,
        r"^path \(at its stages\) records the loss .* where this model's loss is .*: they are another model's",
    ),
    "compare_limits, flows of another model of the same shape": (
        lambda t: _compare(t, log_alpha=[-5.0, -10.0], path=t.path, flows=_runs(t.path, [-5.0, -10.0], 0.0, 7.0)),
        ValueError,
        r"^the flow runs \(at their recorded times\) records the loss 7 where this model's loss is",
    ),
    "compare_limits, flows of another model of the same shape and the same loss at θ(0)": (
        lambda t: _compare(t, log_alpha=[-5.0, -10.0], path=t.path, flows=t.runs(0.0)),
        ValueError,
        r"^the flow runs \(at their recorded times\) records the loss 0 where this model's loss is .* another model's",
    ),
    "compare_limits, the flows of a model with another p": (
        lambda t: _compare(t, log_alpha=[-5.0, -10.0], path=t.path, flows=_narrow(_runs(t.path, [-5.0, -10.0]))),
        ValueError,
        r"^a run records p = 2 coordinates, but this DiagonalModel has p = 3: it is another model's run",
    ),
    "compare_limits, the full-weight path of another model of the same shapes": (
        lambda t: gradflow.compare_limits(t.mf.model, alpha=[1e-3, 1e-6], u0=t.mf.u0, v0=t.mf.v0, path=t.path_mf_other),
        ValueError,
        r"^path \(at its stages\) records the loss .* they are another model's",
    ),
    "compare_limits, a diagonal path for a factorised model": (
        lambda t: gradflow.compare_limits(t.mf.model, alpha=[1e-3, 1e-6], u0=t.mf.u0, v0=t.mf.v0, path=t.path),
        TypeError,
        r"^path must be the greedy limit of this FactorizedModel, a FactorizedGreedyPath .*; got a GreedyPath without W",
    ),
    "compare_limits, failed runs": (
        lambda t: _compare(t, log_alpha=[-5.0, -10.0], path=t.path, flows=t.runs(np.nan)),
        RuntimeError,
        r"^compare_limits: the flow runs are not finite at log α = -5 from τ = 1\.1\d* on; log α = -10 from",
    ),
}


@pytest.mark.parametrize("call, error, match", list(RAISES.values()), ids=list(RAISES))
def test_a_bad_input_raises_naming_it(t, call, error, match):
    with pytest.raises(error, match=match):
        call(t)


RETURNS = {
    "simulate_gd, lr = 1e6": (
        lambda t: _gd(t, lr=1e6, throw=False),
        "non_finite",
        r"\(lr = 1e\+06\) became non-finite at step \d+",
    ),
    "simulate_gd, u0 × 1e200": (
        lambda t: _gd(t, lr=0.1, u0=t.lin.u0 * 1e200, throw=False),
        "non_finite",
        r"became non-finite at the start, θ\(0\) = α \(u0, v0\).*smaller u0, v0 or α",
    ),
    "simulate_gd, h NaN past β_0 = 0.5 (not an overshoot)": (
        lambda t: gradflow.simulate_gd(
            gradflow.DiagonalModel(_sqrt_to_half, X, Y, p=3),
            u0=t.lin.u0,
            v0=t.lin.v0,
            alpha=1e-2,
            lr=0.1,
            steps=400,
            throw=False,
        ),
        "non_finite",
        r"became non-finite at step \d+: at finite weights \(β\[0\] = 0\.5\d*, .*max \|entry\| = 0\.5\d*\) the loss is "
        r"nan and g = −∇L is not finite in coordinates \[0, 1, 2\].*so the model's h or loss is not finite there",
    ),
    "greedy_limit, h NaN past β_0 = 0.5 (not max_steps)": (
        lambda t: gradflow.greedy_limit(
            gradflow.DiagonalModel(_sqrt_to_half, X, Y, p=3), check_assumptions=False, throw=False
        ),
        "phase_b_failed",
        r"^phase \(B\) of stage 0 \(activating β\[0\]\) did not reach a stationary point: from ε = 0\.001, its flow "
        r"stopped near a point where the model is not finite: at finite weights \(β\[0\] = 0\.5, .* not finite in "
        r"coordinates \[0, 1, 2\] .*; check h's domain",
    ),
    "simulate_gd, factorised, h NaN past W_11 = 0.5 (not an overshoot)": (
        lambda t: gradflow.simulate_gd(
            gradflow.FactorizedModel(_sqrt_past_half, _XS, np.array([4.0, 0.0]), shapes=[(2, 2)]),
            u0=(np.array([[0.3, -1.2], [0.9, 0.4]]),),
            v0=(np.array([[-0.5, 0.8], [1.1, 0.2]]),),
            alpha=1e-2,
            lr=0.1,
            steps=400,
            throw=False,
        ),  # fmt: skip
        "non_finite",
        r"became non-finite at step \d+: at finite weights \(‖W\[0\]‖₂ = .*\) the loss is nan and g = −∇L is not finite "
        r"in W\[0\], so the model's h or loss is not finite there",
    ),
    "simulate_gd, factorised, lr = 10": (
        lambda t: _gd(t, "mf", lr=10.0, throw=False),
        "non_finite",
        r"\(lr = 10\) became non-finite at step \d+",
    ),
    "compare_limits, failed runs": (
        lambda t: _compare(t, log_alpha=[-5.0, -10.0], path=t.path, flows=t.runs(np.nan), throw=False),
        "run_failed",
        r"^the flow runs are not finite at log α = -5 from τ = 1\.1",
    ),
    "greedy_limit, g(0) = 0 (a ReLU h)": (
        lambda t: gradflow.greedy_limit(
            gradflow.DiagonalModel(lambda x, beta: jax.nn.relu(x @ beta), X, Y, p=3), check_assumptions=False
        ),
        "successful",
        r"^g\(0\) = 0: the gradient of the loss vanishes at zero weights .*the path has no stage",
    ),
    "compare_limits, one alpha": (
        lambda t: _compare(t, log_alpha=[-5.0], path=t.path, flows=t.runs()[:1]),
        "single_scale",
        r"^one scale, log α = -5: .*the rates .* are NaN; give more alphas",
    ),
}


@pytest.mark.parametrize("call, result, match", list(RETURNS.values()), ids=list(RETURNS))
@pytest.mark.filterwarnings("ignore:g\\(0\\) = 0:UserWarning")
def test_a_bad_input_returns_a_result_that_says_so(t, call, result, match):
    out = call(t)
    assert np.all(np.asarray(out.result) == result)
    assert re.search(match, str(np.ravel(out.message)[0])), out.message


def test_the_comparison_json_says_what_the_comparison_says(t):
    """``gradflow compare --alpha 1e-3`` wrote ``"result": "successful"`` (the greedy path's) where the comparison is
    ``single_scale``: the JSON's result is the comparison's, the path's is ``greedy_result``."""
    from gradflow._diagonal._report import comparison_json

    comparison = _compare(t, log_alpha=[-5.0], path=t.path, flows=t.runs()[:1])
    data = comparison_json(comparison, t.path, t.lin.model.names)
    assert (data["result"], data["greedy_result"]) == ("single_scale", t.path.result)
    assert data["message"].startswith("one scale") and data["fit_range"]["log_alpha"] == [-5.0, -5.0]


def test_a_flow_stopped_by_a_nan_of_h_names_it():
    """A flow whose solver stopped where h is NaN just ahead (here β_0 → 0.5, past which √(0.5 − β_0) is NaN) says
    so, with the weights and coordinates, not "its step size fell below the float64 resolution of t"."""
    from gradflow._diagonal._flow import _not_finite_ahead
    from gradflow._solver._solve import solve_status

    model = gradflow.DiagonalModel(_sqrt_to_half, X, Y, p=3)
    beta = np.array([0.5 - 1e-13, 1e-3, 0.0])  # the state log w (in the frame u > |v|): β = ¼ (w² − w̄²)
    log_wwbar = np.log(np.array([1e-6, 1e-6, 1e-6]))
    y = 0.5 * np.log(2 * beta + np.sqrt(4 * beta**2 + np.exp(2 * log_wwbar)))  # w² = 2β + √(4β² + (w w̄)²)
    note = _not_finite_ahead(model, y, log_wwbar)
    assert re.match(r"at finite weights \(β\[0\] = 0\.5, .*the loss is nan .* just ahead of where it stopped$", note)
    assert _not_finite_ahead(models.diagonal_linear(n=4, p=3, seed=0).model, y, log_wwbar) == ""
    result, message = solve_status(
        np.array([dfx.RESULTS.dt_min_reached]), np.array([[True, False]]), np.array([0.0, 1.0]), np.array([-10.0]),
        None, np.array([False]), what="simulate_flow", advice="", ahead=lambda k: note,
    )  # fmt: skip
    assert message[0].startswith("simulate_flow cannot go on at log α = -10: the flow stopped after τ = 0 (ts[-1] = 1)")
    assert note in message[0] and "so the model's h or loss is not finite there" in message[0]


@pytest.mark.slow
def test_simulate_flow_into_a_nan_of_h_names_it(t):
    flow = gradflow.simulate_flow(
        gradflow.DiagonalModel(_sqrt_to_half, X, Y, p=3), u0=t.lin.u0, v0=t.lin.v0, ts=[0.0, 3.0], log_alpha=-10.0,
        throw=False, progress=False,
    )  # fmt: skip
    message = str(flow.message)
    assert flow.result != "successful" and "(β[0] = 0.5, " in message and "the loss is nan" in message


def test_a_factorised_flow_stopped_by_a_nan_of_h_names_it():
    """The factorised flow's diagnosis of where it stopped: W_11 just below 0.5, with G pushing it up into the NaN of
    √(0.5 − W_11); nothing for a model that is finite there."""
    from gradflow._factorized._flow import _not_finite_ahead
    from gradflow._factorized._qr import initial_state

    d = np.diag([0.1, np.sqrt(0.5 - 1e-13)])
    state = initial_state((d + np.array([[0.0, 1e-3], [0.0, 0.0]]),), (d,))  # W = U Vᵀ at α = 1
    model = gradflow.FactorizedModel(_sqrt_past_half, _XS, np.array([4.0, 0.0]), shapes=[(2, 2)])
    with jax.enable_x64(True):
        note = _not_finite_ahead(model, state)
        other = _not_finite_ahead(models.matrix_factorization(m=2, n=2, singular_values=(2.0,)).model, state)
    assert re.match(r"at finite weights \(‖W\[0\]‖₂ = 0\.5.*the loss is nan .* in W\[0\], just ahead of where", note)
    assert other == ""


@pytest.mark.slow
def test_a_factorised_simulate_flow_into_a_nan_of_h_names_it():
    flow = gradflow.simulate_flow(
        gradflow.FactorizedModel(_sqrt_past_half, _XS, np.array([4.0, 0.0]), shapes=[(2, 2)]),
        u0=(np.array([[0.3, -1.2], [0.9, 0.4]]),), v0=(np.array([[-0.5, 0.8], [1.1, 0.2]]),),
        ts=np.linspace(0, 3, 31), log_alpha=-10.0, throw=False, progress=False,
    )  # fmt: skip
    message = str(flow.message)
    assert flow.result != "successful" and "the loss is nan" in message and "just ahead of where" in message


def test_a_factorised_phase_b_stopped_by_a_nan_of_h_names_it():
    """The factorised greedy's diagnosis of a failed phase (B): from W̄^k = 0 to W_11 just below 0.5, with G pushing
    W_11 up into the NaN of √(0.5 − W_11) (it read "took max_steps")."""
    from gradflow._factorized._greedy import _not_finite_on_the_way

    model = gradflow.FactorizedModel(_sqrt_past_half, _XS_11, np.array([4.0, 0.0]), shapes=[(2, 2)])
    with jax.enable_x64(True):
        note = _not_finite_on_the_way(model, (np.zeros((2, 2)),), (np.diag([0.0, 0.5 - 1e-13]),))
        fine = _not_finite_on_the_way(model, (np.zeros((2, 2)),), (np.diag([0.0, 0.25]),))
    assert re.match(r"at finite weights \(‖W\[0\]‖₂ = 0\.5; .*\) the loss is nan .* not finite in W\[0\]$", note)
    assert fine == ""


@pytest.mark.slow
def test_a_factorised_greedy_limit_into_a_nan_of_h_names_it():
    path = gradflow.greedy_limit(
        gradflow.FactorizedModel(_sqrt_past_half, _XS_11, np.array([4.0, 0.0]), shapes=[(2, 2)]),
        check_assumptions=False, throw=False,
    )  # fmt: skip
    assert path.result == "phase_b_failed" and "its flow stopped near a point where the model is not finite" in str(
        path.message
    )

"""simulate_flow: exactness against the closed forms of `theory`, conservation, robustness, errors."""

import numpy as np
import pytest
import scipy.integrate
from hypothesis import given, settings
from hypothesis import strategies as st

import gradflow
import theory
from gradflow import FlowResult, FlowState, models, simulate_flow
from gradflow._diagonal._frame import apply_frame, frame_of
from gradflow._solver import vmap_batches

# One orthonormal diagonal linear task for the exactness tests: its stages are at τ = 1/|β*_i|
# (0.34, 0.87, 0.91, 1.32, 2.60, 3.11, 6.3, 18.7), so τ ∈ [0, 4] crosses six of them.
LIN = models.diagonal_linear(n=50, p=8, orthonormal=True, seed=0)
TS = np.linspace(0.0, 4.0, 41)
ALPHAS = (1e-2, 1e-8, 1e-32, 1e-100, 1e-300)
LOG_ALPHAS = np.array([np.log(a) for a in ALPHAS] + [-1e4])


@pytest.fixture(scope="module")
def batched():
    """All scales in one vmapped call (one compilation): the accelerators' default."""
    return simulate_flow(LIN.model, u0=LIN.u0, v0=LIN.v0, ts=TS, log_alpha=LOG_ALPHAS, batching="vmap")


def test_result_fields_and_shapes(batched):
    A, m, p = len(LOG_ALPHAS), len(TS), LIN.model.p
    assert isinstance(batched, FlowResult)
    for name in ("u", "v", "beta", "b", "log_w"):
        arr = getattr(batched, name)
        assert arr.shape == (A, m, p) and arr.dtype == np.float64, name
    assert batched.loss.shape == (A, m)
    for name in ("log_alpha", "alpha", "result", "message"):
        assert getattr(batched, name).shape == (A,), name
    for name in ("num_steps", "num_accepted_steps", "num_rejected_steps"):
        assert batched.stats[name].shape == (A,), name
    np.testing.assert_array_equal(
        batched.stats["num_steps"], batched.stats["num_accepted_steps"] + batched.stats["num_rejected_steps"]
    )
    assert batched.stats["max_steps"] is None  # no cap by default
    assert np.all(batched.result == "successful") and np.all(batched.message == "")
    np.testing.assert_array_equal(batched.ts, TS)
    np.testing.assert_allclose(batched.log_alpha, LOG_ALPHAS)
    assert batched.alpha[-1] == 0.0  # e^{-10000} is below the float64 range
    np.testing.assert_allclose(batched.alpha[:-1], ALPHAS, rtol=1e-12)


@pytest.mark.parametrize("k", range(len(LOG_ALPHAS)))
def test_matches_closed_form(batched, k):
    """β against `theory.diagonal_linear_beta_rescaled` (the Riccati closed form) at default tolerances."""
    la = LOG_ALPHAS[k]
    ref = theory.diagonal_linear_beta_rescaled(TS[:, None], LIN.teacher_beta, LIN.u0, LIN.v0, log_alpha=la)
    tol = 1e-6 if la >= np.log(1e-32) else 1e-4
    assert np.all(np.isfinite(batched.beta[k]))
    np.testing.assert_allclose(batched.beta[k], ref, rtol=0, atol=tol)


@pytest.mark.slow  # its own compilation (401 output times); the fast twins: test_separate_batch_is_each_single_run
# (single runs are the batch's runs, which follow the closed form) and tests/factorized/test_leap.py's dense output
@pytest.mark.parametrize("k", [1, len(LOG_ALPHAS) - 1])
def test_single_run_reads_the_dense_output_to_the_closed_form(batched, k):
    """A single run (Dopri8 inside the jumps, Kvaerno5 on the plateaus) read off its dense output at 401 times,
    most of them inside steps, against the closed form: the output times cost no steps, and on the 41 times of the
    batch it takes fewer steps than the batch's Kvaerno5 stepping onto every time."""
    la = LOG_ALPHAS[k]
    ts = np.linspace(0.0, 4.0, 401)
    one = simulate_flow(LIN.model, u0=LIN.u0, v0=LIN.v0, ts=ts, log_alpha=la)
    ref = theory.diagonal_linear_beta_rescaled(ts[:, None], LIN.teacher_beta, LIN.u0, LIN.v0, log_alpha=la)
    np.testing.assert_allclose(one.beta, ref, rtol=0, atol=1e-6 if la >= np.log(1e-32) else 1e-4)
    coarse = simulate_flow(LIN.model, u0=LIN.u0, v0=LIN.v0, ts=TS, log_alpha=la)
    assert one.stats["num_steps"] <= 1.1 * coarse.stats["num_steps"]
    assert coarse.stats["num_steps"] < batched.stats["num_steps"][k]


def test_initial_state_and_sign_mapping(batched):
    """At τ = 0 the weights are α (u0, v0) to rounding, whatever the sign normalisation did."""
    for k in range(3):
        a = batched.alpha[k]
        scale = a * np.maximum(np.abs(LIN.u0), np.abs(LIN.v0))  # u, v = (w ± w̄)/2 round relative to this
        assert np.all(np.abs(batched.u[k, 0] - a * LIN.u0) <= 1e-14 * scale)
        assert np.all(np.abs(batched.v[k, 0] - a * LIN.v0) <= 1e-14 * scale)
    sign = np.where(np.abs(LIN.u0) > np.abs(LIN.v0), np.sign(LIN.u0), np.sign(LIN.v0))
    w0 = sign * (LIN.u0 + LIN.v0)  # w(0) / α after the normalisation u0_i > |v0_i|
    np.testing.assert_allclose(batched.b[:, 0], 1 + np.log(w0)[None] / LOG_ALPHAS[:, None], rtol=0, atol=1e-13)


def test_cost_barely_grows_with_log_alpha(batched):
    """Steps at log α = −1e4 are within a small factor of those at α = 1e-8."""
    steps = batched.stats["num_steps"]
    assert steps[-1] <= 3 * steps[1], steps


def test_far_below_float64_matches_staircase(batched):
    """log α = −1e4: finite, β on the α → 0 staircase, b on its piecewise-linear limit clip(1 − β* τ, 0, 2)."""
    beta, b = batched.beta[-1], batched.b[-1]
    assert np.all(np.isfinite(b)) and np.all(np.isfinite(beta))
    stair = theory.diagonal_linear_staircase(TS[:, None], LIN.teacher_beta)
    away = np.abs(TS[:, None] * np.abs(LIN.teacher_beta) - 1) > 0.02
    np.testing.assert_allclose(np.where(away, beta, stair), stair, atol=1e-8)
    # Normalised coordinates have d(log w)/dτ = log(1/α) g = log(1/α)(β* − β): b falls at rate β*.
    np.testing.assert_allclose(b, np.clip(1 - LIN.teacher_beta * TS[:, None], 0, 2), atol=2e-3)
    # Sleeping weights (w, w̄ both ≈ α^b, 0 < b < 2) are below the float64 range: 0 in u, v, but b
    # keeps their scale. (b = 2 is awake: w ≈ α², but w̄ = O(1), so u ≈ −v = O(1).)
    sleeping = (b[-1] > 0.05) & (b[-1] < 1.95)
    assert sleeping.any() and np.all(batched.u[-1, -1, sleeping] == 0)


@pytest.mark.slow  # fast twins: test_separate_batch_is_each_single_run; the sweep's vmapped batches
def test_batched_equals_separate(batched):
    """Each run of a batch is the run solved alone in a batch of one (the same solver, to rounding). A single run
    (not a batch) switches to Dopri8 inside the jumps, a batch keeps Kvaerno5: the same flow to the solvers'
    accuracy (the local error per step is 1e-8 in log w)."""
    for k in (1, 4):
        alone = simulate_flow(LIN.model, u0=LIN.u0, v0=LIN.v0, ts=TS, log_alpha=[float(LOG_ALPHAS[k])], batching="vmap")
        np.testing.assert_allclose(alone.beta[0], batched.beta[k], rtol=0, atol=1e-7)
        np.testing.assert_allclose(alone.b[0], batched.b[k], rtol=0, atol=1e-9)
        one = simulate_flow(LIN.model, u0=LIN.u0, v0=LIN.v0, ts=TS, log_alpha=float(LOG_ALPHAS[k]))
        assert one.beta.shape == (len(TS), LIN.model.p) and one.loss.shape == (len(TS),)
        np.testing.assert_allclose(one.beta, batched.beta[k], rtol=0, atol=1e-6)
        np.testing.assert_allclose(one.b, batched.b[k], rtol=0, atol=1e-8)
    # alpha= and log_alpha= are the same scale.
    by_alpha = simulate_flow(LIN.model, u0=LIN.u0, v0=LIN.v0, ts=TS, alpha=1e-8)
    np.testing.assert_array_equal(
        by_alpha.beta, simulate_flow(LIN.model, u0=LIN.u0, v0=LIN.v0, ts=TS, log_alpha=np.log(1e-8)).beta
    )


def test_separate_batch_is_each_single_run(batched):
    """``batching="separate"`` (the CPU's default) solves each run alone, on several threads: each run of the batch
    is the single run bit for bit, in float64 (each thread enters gradflow's x64 scope), with its own step count."""
    assert not vmap_batches("auto")  # this suite runs on the CPU
    las = LOG_ALPHAS[[1, 4, 5]]
    apart = simulate_flow(LIN.model, u0=LIN.u0, v0=LIN.v0, ts=TS, log_alpha=las)  # "auto": "separate" here
    assert apart.log_w.dtype == np.float64 and apart.stats["num_steps"].shape == (3,)
    for k, la in enumerate(las):
        one = simulate_flow(LIN.model, u0=LIN.u0, v0=LIN.v0, ts=TS, log_alpha=float(la))
        np.testing.assert_array_equal(apart.log_w[k], one.log_w)
        np.testing.assert_array_equal(apart.loss[k], one.loss)
        assert apart.stats["num_steps"][k] == one.stats["num_steps"]
    assert len(set(apart.stats["num_steps"].tolist())) > 1  # not in lock-step
    # Dopri8 inside the jumps, Kvaerno5 on the plateaus, read off the dense output: fewer steps than the vmapped
    # batch's Kvaerno5 stepping onto every output time
    assert np.all(apart.stats["num_steps"][[0, 2]] < batched.stats["num_steps"][[1, 5]])
    state = apart.state_at(10)  # a batch of start states, likewise (on TS again: the runs' program, compiled once)
    rest = simulate_flow(LIN.model, start=state, log_alpha=las, ts=TS)
    for k, la in enumerate(las):
        start = FlowState(log_w=state.log_w[k], log_wbar=state.log_wbar[k], swap=state.swap[k], sign=state.sign[k])
        np.testing.assert_array_equal(rest.log_w[k], simulate_flow(LIN.model, start=start, log_alpha=la, ts=TS).log_w)
    cap = int(apart.stats["num_steps"][0])  # each run's failure recorded on its own
    capped = simulate_flow(LIN.model, u0=LIN.u0, v0=LIN.v0, ts=TS, log_alpha=las, max_steps=cap, throw=False)
    np.testing.assert_array_equal(capped.result, ["successful", "max_steps_reached", "max_steps_reached"])
    np.testing.assert_array_equal(capped.log_w[0], apart.log_w[0])
    assert capped.message[1].startswith(f"simulate_flow hit max_steps={cap}")
    with pytest.raises(ValueError, match="batching must be one of"):
        simulate_flow(LIN.model, u0=LIN.u0, v0=LIN.v0, ts=TS, log_alpha=-5.0, batching="threads")


# ---------------------------------------------------------------------------------------------
# Restarts from an exact state.


def test_restart_from_state_continues_the_flow(batched):
    """All scales (α = 1e-2 ... 1e-300, log α = −1e4) restarted at τ = 1.2 from ``state_at`` (one batched
    call, one scale per state): the same log w as the uninterrupted flow, to solver tolerance. The restart records
    the 41 times of ``TS`` (to τ = 5.2), the fixture's program: its first 29 are the fixture's from τ = 1.2."""
    k = 12
    state = batched.state_at(k)
    assert isinstance(state, FlowState) and state.log_w.shape == (len(LOG_ALPHAS), LIN.model.p)
    rest = simulate_flow(LIN.model, start=state, log_alpha=LOG_ALPHAS, ts=TS, batching="vmap")
    np.testing.assert_allclose(TS[: len(TS) - k], TS[k:] - TS[k], rtol=0, atol=1e-15)  # the same times
    rest = {name: getattr(rest, name)[:, : len(TS) - k] for name in ("log_w", "log_wbar", "beta", "b")}
    np.testing.assert_allclose(rest["log_w"], batched.log_w[:, k:], rtol=0, atol=1e-6)
    np.testing.assert_allclose(rest["log_wbar"], batched.log_wbar[:, k:], rtol=0, atol=1e-6)
    np.testing.assert_allclose(rest["beta"], batched.beta[:, k:], rtol=0, atol=1e-7)
    np.testing.assert_array_equal(rest["log_w"][:, 0], batched.log_w[:, k])  # the start itself, bit for bit
    np.testing.assert_allclose(rest["b"], batched.b[:, k:], rtol=0, atol=1e-6 / 18)  # b = log w / log α, α unchanged


def test_state_holds_the_weights(batched):
    state = batched.state_at(-1)
    np.testing.assert_array_equal(state.log_w, batched.log_w[:, -1])
    # w w̄ = u² − v² is conserved: log w + log w̄ = 2 log α + log(u0n² − v0n²) at every time
    un, vn = apply_frame(LIN.u0, LIN.v0, *frame_of(LIN.u0, LIN.v0))
    log_c = np.log(un**2 - vn**2)
    conserved = np.broadcast_to((2 * LOG_ALPHAS[:, None] + log_c)[:, None], batched.log_w.shape)
    np.testing.assert_allclose(batched.log_w + batched.log_wbar, conserved, rtol=1e-15)
    for k in range(3):  # representable scales: the state's weights are the flow's
        one = FlowState(log_w=state.log_w[k], log_wbar=state.log_wbar[k], swap=state.swap[k], sign=state.sign[k])
        np.testing.assert_allclose(one.u, batched.u[k, -1], rtol=1e-13, atol=1e-300)
        np.testing.assert_allclose(one.v, batched.v[k, -1], rtol=1e-13, atol=1e-300)
    with pytest.raises(IndexError, match="41 recorded times"):
        batched.state_at(41)


_START = FlowState(log_w=np.zeros(8), log_wbar=np.full(8, -3.0), swap=np.zeros(8, bool), sign=np.ones(8))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(u0=LIN.u0), "either u0 and v0 .* or start"),
        (dict(start=None), "give the initialisation directions"),
        (
            dict(start=FlowState(np.zeros(3), np.zeros(3), np.zeros(3, bool), np.ones(3))),
            r"shape \(p,\) or \(B, p\) with p = 8",
        ),
        (
            dict(start=FlowState(np.zeros(8), np.zeros(7), np.zeros(8, bool), np.ones(8))),
            "log_wbar must have the shape",
        ),
        (
            dict(start=FlowState(np.r_[np.nan, np.zeros(7)], np.zeros(8), np.zeros(8, bool), np.ones(8))),
            "log_w contains NaN",
        ),
        (
            dict(start=FlowState(np.zeros(8), np.r_[np.zeros(5), -np.inf, 0, 0], np.zeros(8, bool), np.ones(8))),
            r"log_wbar is -inf .* at coordinates \[5\].*Assumption 4.2",
        ),
        (dict(start=FlowState(np.zeros(8), np.zeros(8), np.zeros(8), np.ones(8))), "swap must be a boolean"),
        (
            dict(start=FlowState(np.zeros(8), np.zeros(8), np.zeros(8, bool), np.full(8, 0.5))),
            r"sign must hold only \+1.0",
        ),
        (
            dict(
                start=FlowState(np.zeros((3, 8)), np.zeros((3, 8)), np.zeros(8, bool), np.ones(8)), alpha=[1e-3, 1e-4]
            ),
            "batch of 3 start states and 2 scales",
        ),
    ],
)
def test_bad_start_raises(kwargs, match):
    base = dict(start=_START, ts=TS, alpha=1e-4)
    with pytest.raises(ValueError, match=match):
        simulate_flow(LIN.model, **{**base, **kwargs})


def test_start_type_checked():
    with pytest.raises(TypeError, match="FlowState"):
        simulate_flow(LIN.model, start=(np.zeros(8), np.zeros(8)), ts=TS, alpha=1e-4)


# ---------------------------------------------------------------------------------------------
# Properties over random small models.

_SMALL_LINEAR = lambda seed: models.diagonal_linear(n=12, p=4, seed=seed).model
_SMALL_ATTENTION = lambda seed: models.diagonal_attention(n=6, tokens=3, dim=2, teacher_nonzero=(1, 1), seed=seed).model
_PROP_TS = np.linspace(0.0, 3.0, 7)


@settings(max_examples=4, deadline=None)
@given(
    kind=st.sampled_from([_SMALL_LINEAR, _SMALL_ATTENTION]),
    seed=st.integers(0, 10_000),
    alpha=st.floats(1e-3, 0.3),
    init=st.lists(st.floats(-2, 2).filter(lambda x: abs(x) > 0.05), min_size=8, max_size=8),
)
def test_conservation_and_monotone_loss(kind, seed, alpha, init):
    """u_i² − v_i² = α²(u0_i² − v0_i²) along the flow, and the loss never increases."""
    model = kind(seed)
    u0, v0 = np.array(init[:4]), np.array(init[4:])
    v0 = np.where(np.abs(np.abs(u0) - np.abs(v0)) < 1e-3, v0 * 0.5, v0)
    res = simulate_flow(model, u0=u0, v0=v0, ts=_PROP_TS, alpha=alpha)
    c0 = alpha**2 * (u0**2 - v0**2)
    drift = np.abs(res.u**2 - res.v**2 - c0)
    assert np.all(drift <= 1e-9 * np.abs(c0) + 1e-14 * (res.u**2 + res.v**2)), drift.max()
    assert np.all(np.diff(res.loss) <= 1e-12 * (1 + res.loss[:-1]))
    # The conservation above holds by construction of the log-coordinate state (u² − v² = w w̄), so the
    # trajectory itself is checked against an independent solve of the plain equations du/dt = v g, dv/dt = u g.
    np.testing.assert_allclose(
        res.beta, _plain_uv_beta(model, alpha * u0, alpha * v0, _PROP_TS * np.log(1 / alpha)), rtol=0, atol=1e-6
    )


def _plain_uv_beta(model, u_start, v_start, t_eval):
    """β(t) from SciPy's DOP853 on the unnormalised (u, v) system (not stiff for α ≥ 1e-3)."""
    p = model.p

    def rhs(_, y):
        u, v = y[:p], y[p:]
        g = gradflow.evaluate_g(model, u * v)
        return np.concatenate([v * g, u * g])

    sol = scipy.integrate.solve_ivp(
        rhs,
        (0.0, t_eval[-1]),
        np.concatenate([u_start, v_start]),
        method="DOP853",
        t_eval=t_eval,
        rtol=1e-11,
        atol=1e-14,
    )
    assert sol.success, sol.message
    return (sol.y[:p] * sol.y[p:]).T


# ---------------------------------------------------------------------------------------------
# Robustness: failures raise (the solver rejecting an overshooting step: test_solvers.py).


def test_max_steps_raises_with_where_it_stopped():
    with pytest.raises(RuntimeError, match=r"max_steps=20 .*stopped after τ = .*Raise max_steps"):
        simulate_flow(LIN.model, u0=LIN.u0, v0=LIN.v0, ts=TS, alpha=1e-8, max_steps=20)


def test_a_run_that_cannot_go_on_says_so():
    """With no step cap (the default), a flow that blows up in finite time stops when its step size underflows.

    ``L(β) = −β⁴``: ``dβ/dt ≈ 2|β| g = 8β⁴`` from ``β(0) = α² u0 v0 = 0.75`` blows up at ``t ≈ 1/(24 β(0)³) ≈ 0.1``.
    """
    model = gradflow.DiagonalModel(lambda x, b: x @ b, np.ones((1, 1)), np.zeros(1), p=1, loss=lambda y, yh: -(yh**4))
    kw = dict(u0=np.array([2.0]), v0=np.array([1.5]), ts=np.linspace(0.0, 2.0, 5), alpha=0.5)
    with pytest.raises(RuntimeError, match=r"cannot go on at log α = -0.693147: the flow stopped after τ = 0 .*"):
        simulate_flow(model, **kw)
    res = simulate_flow(model, **kw, throw=False)
    assert res.result == "solver_failed" and "step size fell below the float64 resolution" in str(res.message)
    assert res.stats["max_steps"] is None and np.all(res.log_w[1:] == np.inf)


def test_throw_false_records_the_failure_per_run(batched):
    """α = 1e-2 finishes in fewer steps than log α = −1e4: with max_steps in between and throw=False, the first
    run is the full flow and the last stops, its failure recorded, its state +inf after the stop; each run between
    them fails or not by its own step count. All the fixture's scales: its program, compiled once."""
    steps = batched.stats["num_steps"]
    cap = int(steps[0]) + 5
    kw = dict(max_steps=cap, throw=False, batching="vmap")
    res = simulate_flow(LIN.model, u0=LIN.u0, v0=LIN.v0, ts=TS, log_alpha=LOG_ALPHAS, **kw)
    assert res.result[0] == "successful" and res.result[-1] == "max_steps_reached"
    np.testing.assert_array_equal(res.result, np.where(steps <= cap, "successful", "max_steps_reached"))
    assert res.message[0] == "" and res.message[-1].startswith(f"simulate_flow hit max_steps={cap}")
    np.testing.assert_array_equal(res.log_w[0], batched.log_w[0])
    done = np.all(np.isfinite(res.log_w[-1]), axis=-1)
    stop = int(np.argmin(done))
    assert 0 < stop < len(TS) and not done[stop:].any() and np.all(res.log_w[-1, stop:] == np.inf)
    assert f"stopped after τ = {TS[stop - 1]:.6g}" in res.message[-1]
    np.testing.assert_array_equal(res.log_w[-1, :stop], batched.log_w[-1, :stop])


def test_result_is_the_exact_state_and_survives_saving(batched, tmp_path):
    """u, v, β, b, α are computed from the stored state; a saved result holds only that state and gives them back."""
    from gradflow._io import load_result, save_result

    np.testing.assert_array_equal(batched.beta, batched.u * batched.v)
    np.testing.assert_array_equal(batched.b, batched.log_w / LOG_ALPHAS[:, None, None])
    k = 20
    state = batched.state_at(k)
    np.testing.assert_array_equal(state.u, batched.u[:, k])
    back = load_result(save_result(tmp_path / "flow.npz", batched))
    assert isinstance(back, FlowResult) and back.stats["max_steps"] is None
    for name in ("u", "v", "beta", "b", "alpha", "loss", "result"):
        np.testing.assert_array_equal(getattr(back, name), getattr(batched, name), err_msg=name)
    assert isinstance(batched, gradflow.Trajectory)


def test_near_degenerate_initialisation_warns_with_the_log_alpha_it_needs():
    """A relative gap ||u0_i| − |v0_i|| of 1e-9 is solved exactly, but the α → 0 limit then needs
    log(1/α) ≫ log(1e9) = 20.7: an AssumptionWarning naming the coordinate and that number."""
    u0 = LIN.u0.copy()
    u0[3] = -LIN.v0[3] * (1 + 1e-9)
    with pytest.warns(
        gradflow.AssumptionWarning, match=r"near-degenerate.*coordinates \[3\] \(β\[3\]\).*= 20\.7"
    ) as rec:
        res = simulate_flow(LIN.model, u0=u0, v0=LIN.v0, ts=TS, alpha=1e-2)  # the shapes compiled above
    assert len(rec) == 1 and rec[0].filename == __file__  # points at the caller
    np.testing.assert_allclose(res.u[:, 3] ** 2 - res.v[:, 3] ** 2, 1e-4 * (u0[3] ** 2 - LIN.v0[3] ** 2), rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# Validation.


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(u0=np.ones(3)), r"u0 must have shape \(8,\)"),
        (dict(v0=np.ones((8, 1))), r"v0 must have shape \(8,\)"),
        (dict(u0=np.r_[np.nan, np.ones(7)]), "u0 contains NaN"),
        (dict(v0=np.r_[np.ones(7), np.inf]), "v0 contains NaN or inf"),
        (dict(alpha=0.0), r"alpha must lie in \(0, 1\)"),
        (dict(alpha=1.0), r"alpha must lie in \(0, 1\)"),
        (dict(alpha=[1e-3, 2.0]), r"alpha must lie in \(0, 1\)"),
        (dict(alpha=None, log_alpha=0.5), "log_alpha must be finite and negative"),
        (dict(alpha=None, log_alpha=np.nan), "log_alpha must be finite and negative"),
        (dict(log_alpha=-3.0), "exactly one of alpha"),
        (dict(alpha=None), "exactly one of alpha"),
        (dict(ts=[0.0, 2.0, 1.0]), r"strictly increasing; got ts\[1\]"),
        (dict(ts=[-0.5, 1.0]), "must start at τ >= 0"),
        (dict(ts=np.ones((2, 2))), "1-D"),
        (dict(max_steps=0), "max_steps must be a positive integer"),
        (dict(solver=gradflow.DiagonalSolver(jacobian_rank=9)), r"jacobian_rank must lie in \[1, p=8\]"),
    ],
)
def test_bad_input_raises(kwargs, match):
    base = dict(u0=LIN.u0, v0=LIN.v0, ts=TS, alpha=1e-4)
    with pytest.raises(ValueError, match=match):
        simulate_flow(LIN.model, **{**base, **kwargs})


def test_degenerate_initialisation_names_coordinates():
    u0 = LIN.u0.copy()
    u0[[2, 5]] = -LIN.v0[[2, 5]]
    with pytest.raises(ValueError, match=r"coordinates \[2, 5\] \(β\[2\], β\[5\]\).*Assumption 4.2.*w̄ = 0.*Perturb"):
        simulate_flow(LIN.model, u0=u0, v0=LIN.v0, ts=TS, alpha=1e-4)


def test_model_type_checked():
    with pytest.raises(TypeError, match="DiagonalModel"):
        simulate_flow(object(), u0=LIN.u0, v0=LIN.v0, ts=TS, alpha=1e-4)

"""Tests for the `theory` package: every SymPy derivation checks, and every numerical oracle agrees
with an independent high-accuracy ODE solve and with its own SymPy expression at high precision."""

import functools
import math
import warnings

import mpmath
import numpy as np
import pytest
import sympy
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy.integrate import solve_ivp

import theory
from theory._greedy import _time_until_active_expr

# --- derivations -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def report():
    return theory.verify_all()


def test_every_derivation_is_checked(report):
    for derivation in report:
        assert derivation.checked is True, derivation
        assert derivation.detail.startswith("verified: ")
        assert derivation.statement
    assert report.all_checked


def test_verify_all_covers_every_derivation(report):
    public_derivations = {getattr(theory, name) for name in theory.__all__ if name.startswith("derive_")}
    assert set(theory.DERIVATIONS) == public_derivations
    assert len(report) == len(theory.DERIVATIONS)
    assert len({d.name for d in report}) == len(report)


def test_report_prints_one_tick_per_derivation(report):
    lines = str(report).splitlines()
    assert len(lines) == len(report)
    assert all(line.startswith("✓ ") for line in lines)


def test_check_claims_reports_false_identities():
    x = sympy.Symbol("x", positive=True)
    derivation = theory.check_claims(
        "mixed", "x", {"true": sympy.exp(sympy.log(x)) - x, "false": sympy.exp(x) - 1 - x, "bad sign": x < 0}
    )
    assert derivation.checked is False
    assert derivation.detail == "FAILED: false; bad sign"
    report = theory.VerificationReport((derivation,))
    assert str(report).startswith("✗ mixed") and not report.all_checked


def test_derivations_are_frozen(report):
    with pytest.raises(AttributeError):
        report[0].checked = False


# --- diagonal linear model -------------------------------------------------------------------------

BETA_STAR = np.array([1.5, -0.7, 0.0, 2.0, 0.3, -2.5])
U0 = np.array([1.0, 0.2, 1.0, 0.5, -1.0, 0.3])
V0 = np.array([0.3, -0.9, 0.5, 0.0, 0.2, 1.1])


def solve_uv(beta_star, u0, v0, alpha, t_eval):
    """β(t) from du/dt = v(β* − uv), dv/dt = u(β* − uv), (u, v)(0) = α(u0, v0), by DOP853 at rtol 1e-12."""
    beta_star, u0, v0 = (np.atleast_1d(np.asarray(x, dtype=float)) for x in (beta_star, u0, v0))
    p = beta_star.size

    def rhs(_, y):
        u, v = y[:p], y[p:]
        g = beta_star - u * v
        return np.concatenate([v * g, u * g])

    y0 = np.concatenate([alpha * u0, alpha * v0])
    sol = solve_ivp(rhs, (0.0, t_eval[-1]), y0, method="DOP853", rtol=1e-12, atol=1e-14 * alpha, t_eval=t_eval)
    assert sol.success
    return sol.y[:p] * sol.y[p:]


@functools.cache
def mpmath_function(expression_builder):
    expr, symbols = expression_builder()
    return sympy.lambdify(symbols, expr, modules="mpmath")


def mp_beta(t, beta_star, u0, v0, log_alpha, dps=60):
    """The SymPy closed form evaluated with mpmath at `dps` digits (α = e^{log_alpha} exactly)."""
    closed_form = mpmath_function(theory.diagonal_linear_beta_expression)
    with mpmath.workdps(dps):
        alpha = mpmath.exp(mpmath.mpf(log_alpha))
        return float(closed_form(*map(mpmath.mpf, (t, beta_star, u0, v0)), alpha))


@pytest.mark.parametrize("alpha", [1e-2, 1e-4])
def test_diagonal_linear_matches_ode_solve(alpha):
    t_eval = np.linspace(0.0, 3.0 * np.log(1 / alpha) / 0.3, 40)
    from_ode = solve_uv(BETA_STAR, U0, V0, alpha, t_eval)
    oracle = theory.diagonal_linear_beta(t_eval, BETA_STAR[:, None], U0[:, None], V0[:, None], alpha)
    np.testing.assert_allclose(oracle, from_ode, rtol=1e-8, atol=1e-10 * alpha**2)
    np.testing.assert_allclose(oracle[:, -1], BETA_STAR, atol=alpha**2)  # every nonzero coordinate activated


@pytest.mark.parametrize("log_alpha", [-0.3, -np.log(1e4), -np.log(1e300), -1e4])
def test_diagonal_linear_matches_sympy_expression(log_alpha):
    ell = -log_alpha
    for beta_star, u0, v0 in zip(BETA_STAR, U0, V0):
        jump = 1.0 / max(abs(beta_star), 0.1)
        for tau in (0.0, 0.4 * jump, 0.97 * jump, 1.03 * jump, 2.5 * jump):
            expected = mp_beta(tau * ell, beta_star, u0, v0, log_alpha)
            got = theory.diagonal_linear_beta(tau * ell, beta_star, u0, v0, log_alpha=log_alpha)
            assert got == pytest.approx(expected, rel=1e-10, abs=1e-300), (beta_star, u0, v0, tau)


def test_alpha_and_log_alpha_and_rescaled_time_agree():
    tau = np.linspace(0.0, 4.0, 9)
    alpha = 1e-3
    by_alpha = theory.diagonal_linear_beta(tau * np.log(1 / alpha), 0.8, 1.0, -0.4, alpha)
    by_log = theory.diagonal_linear_beta(tau * np.log(1 / alpha), 0.8, 1.0, -0.4, log_alpha=np.log(alpha))
    rescaled = theory.diagonal_linear_beta_rescaled(tau, 0.8, 1.0, -0.4, alpha=alpha)
    rescaled_log = theory.diagonal_linear_beta_rescaled(tau, 0.8, 1.0, -0.4, log_alpha=np.log(alpha))
    np.testing.assert_allclose(by_log, by_alpha, rtol=1e-14)
    np.testing.assert_allclose(rescaled, by_alpha, rtol=1e-14)
    np.testing.assert_allclose(rescaled_log, by_alpha, rtol=1e-14)


def test_scalar_inputs_give_a_scalar():
    assert isinstance(theory.diagonal_linear_beta(1.0, 1.0, 1.0, 0.5, 0.1), float)
    assert theory.diagonal_linear_beta(0.0, 1.0, 1.0, 0.5, 0.1) == pytest.approx(0.1**2 * 0.5, rel=1e-14)


@pytest.mark.parametrize("alpha_kwargs", [{"alpha": 1e-300}, {"log_alpha": -1e4}])
def test_staircase_limit_at_tiny_alpha(alpha_kwargs):
    tau = np.linspace(0.0, 5.0, 1001)[:, None]
    oracle = theory.diagonal_linear_beta_rescaled(tau, BETA_STAR, U0, V0, **alpha_kwargs)
    staircase = theory.diagonal_linear_staircase(tau, BETA_STAR)
    away_from_jumps = np.abs(tau * np.abs(BETA_STAR) - 1.0) > 0.05
    np.testing.assert_allclose(oracle[away_from_jumps], staircase[away_from_jumps], rtol=0, atol=1e-12)
    # Near a jump the oracle is strictly between the plateaus, and the staircase is right-continuous.
    assert 0.0 < theory.diagonal_linear_beta_rescaled(1.0, 1.0, 1.0, 0.5, **alpha_kwargs) < 1.0
    assert theory.diagonal_linear_staircase(1.0, 1.0) == 1.0
    assert theory.diagonal_linear_staircase(0.999, 1.0) == 0.0


def test_staircase_is_approached_as_alpha_decreases():
    tau = np.array([0.9, 1.1])
    limit = theory.diagonal_linear_staircase(tau, 1.0)
    errors = [
        np.abs(theory.diagonal_linear_beta_rescaled(tau, 1.0, 1.0, 0.5, alpha=alpha) - limit)
        for alpha in (1e-2, 1e-4, 1e-8, 1e-16)
    ]
    assert all(np.all(later < earlier) for earlier, later in zip(errors, errors[1:]))


def test_stable_at_alpha_1e_300():
    t = np.concatenate([np.linspace(0.0, 3000.0, 301), [np.inf]])[:, None]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        beta = theory.diagonal_linear_beta(t, BETA_STAR, U0, V0, 1e-300)
    assert np.all(np.isfinite(beta))
    assert np.all(beta[0] == 0.0)  # α² u0 v0 = O(1e-600) underflows to exactly 0
    np.testing.assert_allclose(beta[-1], BETA_STAR, rtol=1e-14)
    np.testing.assert_allclose(beta[-2], BETA_STAR, rtol=1e-12)
    # log_alpha far below float64 range: the plateau value is still α² u0 v0, seen on the log scale.
    tiny = theory.diagonal_linear_beta(0.0, 1.0, 1.0, 0.5, log_alpha=-300.0)
    assert math.log(tiny) == pytest.approx(-600.0 + math.log(0.5), abs=1e-9)


def test_symmetries_of_the_closed_form():
    t = np.linspace(0.0, 30.0, 31)
    beta = theory.diagonal_linear_beta(t, 0.9, 1.2, -0.3, 1e-3)
    np.testing.assert_array_equal(theory.diagonal_linear_beta(t, 0.9, -0.3, 1.2, 1e-3), beta)  # swap u, v
    np.testing.assert_array_equal(theory.diagonal_linear_beta(t, 0.9, -1.2, 0.3, 1e-3), beta)  # flip both
    np.testing.assert_allclose(theory.diagonal_linear_beta(t, -0.9, 1.2, 0.3, 1e-3), -beta, rtol=1e-13)  # mirror


def test_zero_target_never_activates():
    t = np.linspace(0.0, 1e3, 11)
    beta = theory.diagonal_linear_beta(t, 0.0, 1.0, 0.4, 0.1)
    assert np.all(np.abs(beta) <= 0.1**2 * 0.4 * (1 + 1e-14))
    assert np.all(np.diff(beta) <= 0)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"u0": 0.5, "v0": -0.5, "alpha": 0.1}, "degenerate"),
        ({"u0": 0.0, "v0": 0.0, "alpha": 0.1}, "degenerate"),
        ({"u0": 1.0, "v0": 0.5}, "exactly one"),
        ({"u0": 1.0, "v0": 0.5, "alpha": 0.1, "log_alpha": -1.0}, "exactly one"),
        ({"u0": 1.0, "v0": 0.5, "alpha": 0.0}, "positive"),
        ({"u0": 1.0, "v0": 0.5, "log_alpha": -np.inf}, "finite"),
    ],
)
def test_invalid_inputs_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        theory.diagonal_linear_beta(1.0, 1.0, **kwargs)


def test_negative_time_and_alpha_above_one_raise():
    with pytest.raises(ValueError, match="t must be"):
        theory.diagonal_linear_beta(-1.0, 1.0, 1.0, 0.5, 0.1)
    with pytest.raises(ValueError, match="alpha < 1"):
        theory.diagonal_linear_beta_rescaled(1.0, 1.0, 1.0, 0.5, alpha=2.0)


nonzero_target = st.floats(0.2, 3.0).flatmap(lambda m: st.sampled_from([m, -m]))
direction = st.floats(-2.0, 2.0)


@settings(max_examples=25, deadline=None)
@given(beta_star=nonzero_target, u0=direction, v0=direction, log10_alpha=st.floats(-6.0, -0.5))
def test_property_oracle_matches_ode_solve(beta_star, u0, v0, log10_alpha):
    assume(abs(abs(u0) - abs(v0)) > 0.05)
    alpha = 10.0**log10_alpha
    t_eval = np.linspace(0.0, 2.0 * np.log(1 / alpha) / abs(beta_star), 7)
    from_ode = solve_uv(beta_star, u0, v0, alpha, t_eval)[0]
    oracle = theory.diagonal_linear_beta(t_eval, beta_star, u0, v0, alpha)
    np.testing.assert_allclose(oracle, from_ode, rtol=1e-7, atol=1e-9 * alpha**2)


@settings(max_examples=25, deadline=None)
@given(
    beta_star=st.floats(-3.0, 3.0),
    u0=direction,
    v0=direction,
    log_alpha=st.floats(-5000.0, 1.0),
    tau=st.floats(0.0, 3.0),
)
def test_property_oracle_matches_high_precision_sympy(beta_star, u0, v0, log_alpha, tau):
    assume(abs(abs(u0) - abs(v0)) > 1e-3)
    t = tau * max(abs(log_alpha), 1.0)
    got = theory.diagonal_linear_beta(t, beta_star, u0, v0, log_alpha=log_alpha)
    expected = mp_beta(t, beta_star, u0, v0, log_alpha, dps=80)
    # Absolute floor: rounding of log ζ near 0 costs ~1e-13 of C = α²|u0² − v0²| (see the docstring).
    floor = 1e-12 * math.exp(min(2 * log_alpha + math.log(abs(u0 * u0 - v0 * v0)), 0.0)) + 1e-300
    assert abs(got - expected) <= 1e-9 * abs(expected) + floor


@settings(max_examples=25, deadline=None)
@given(beta_star=st.floats(-3.0, 3.0), u0=direction, v0=direction, log_alpha=st.floats(-50.0, -0.1))
def test_property_symmetries_and_limits(beta_star, u0, v0, log_alpha):
    assume(abs(abs(u0) - abs(v0)) > 1e-3)
    t = np.array([0.0, 1.0, 10.0, np.inf])
    beta = theory.diagonal_linear_beta(t, beta_star, u0, v0, log_alpha=log_alpha)
    floor = 1e-13 * math.exp(2 * log_alpha) * abs(u0 * u0 - v0 * v0)  # absolute error where β crosses 0
    assert np.array_equal(theory.diagonal_linear_beta(t, beta_star, v0, u0, log_alpha=log_alpha), beta)
    mirrored = theory.diagonal_linear_beta(t, -beta_star, u0, -v0, log_alpha=log_alpha)
    np.testing.assert_allclose(mirrored, -beta, rtol=1e-12, atol=floor)
    assert beta[0] == pytest.approx(math.exp(2 * log_alpha) * u0 * v0, rel=1e-12, abs=floor)
    assert beta[-1] == pytest.approx(beta_star, rel=1e-12, abs=1e-300)


# --- Algorithm 1: time until active and greedy stages ----------------------------------------------


def test_time_until_active_values():
    b, g = [1.0, 1.0, 0.5, 1.5, 0.7], [2.0, -4.0, 0.0, 0.5, -0.1]
    delta = theory.time_until_active(b, g)
    np.testing.assert_allclose(delta, [0.5, 0.25, np.inf, 3.0, 13.0])
    b_sym, g_sym = sympy.symbols("b g", real=True)
    from_sympy = sympy.lambdify((b_sym, g_sym), _time_until_active_expr(b_sym, g_sym))
    for b_i, g_i, delta_i in zip(b, g, delta):
        if g_i != 0:
            assert delta_i == pytest.approx(from_sympy(b_i, g_i), rel=1e-15)
    assert theory.time_until_active(np.ones((2, 1)), np.ones(3)).shape == (2, 3)


@settings(max_examples=25, deadline=None)
@given(b=st.floats(0.0, 2.0), g=st.floats(-5.0, 5.0).filter(lambda g: abs(g) > 1e-3))
def test_property_time_until_active_lands_on_0_or_2(b, g):
    delta = theory.time_until_active(b, g)
    assert delta >= 0
    landing = b - g * delta
    assert landing == pytest.approx(0.0 if g > 0 else 2.0, abs=1e-12)
    # On the way there the log-scale weight stays inside [0, 2].
    assert 0.0 <= b - g * delta / 2 <= 2.0


def test_greedy_orthonormal_stages():
    beta_star = np.array([0.5, -2.0, 0.0, 1.0, -0.25])
    stages = theory.greedy_orthonormal_stages(beta_star)
    np.testing.assert_allclose(stages.times, [0.5, 1.0, 2.0, 4.0], rtol=1e-14)
    np.testing.assert_array_equal(stages.order, [1, 3, 0, 4])
    times, order = stages
    assert times is stages.times and order is stages.order
    assert theory.greedy_orthonormal_stages(np.zeros(3)).times.size == 0
    with pytest.raises(ValueError, match="1-D"):
        theory.greedy_orthonormal_stages(np.ones((2, 2)))


@settings(max_examples=25, deadline=None)
@given(beta_star=st.lists(st.floats(-4.0, 4.0).filter(lambda x: abs(x) > 1e-2), min_size=1, max_size=8))
def test_property_greedy_stages_are_sorted_inverse_targets(beta_star):
    stages = theory.greedy_orthonormal_stages(beta_star)
    inverse = 1.0 / np.abs(beta_star)
    np.testing.assert_allclose(stages.times, np.sort(inverse), rtol=1e-12)
    np.testing.assert_allclose(inverse[stages.order], stages.times, rtol=1e-12)
    assert sorted(stages.order) == list(range(len(beta_star)))


def test_greedy_stage_times_match_the_flow_at_tiny_alpha():
    """Where |β_i(τ)| first reaches |β*_i|/2 on the exact flow → T_k, with error O(1/log(1/α))."""
    stages = theory.greedy_orthonormal_stages(BETA_STAR)
    tau = np.linspace(0.0, 1.2 * stages.times[-1], 60001)[:, None]
    beta = theory.diagonal_linear_beta_rescaled(tau, BETA_STAR, U0, V0, log_alpha=-1e4)
    active = BETA_STAR != 0
    assert np.all(np.abs(beta[:, ~active]) < 1e-100)
    crossed = np.abs(beta[:, active]) >= np.abs(BETA_STAR[active]) / 2
    assert crossed[-1].all()
    first_crossing = tau[np.argmax(crossed, axis=0), 0]
    np.testing.assert_allclose(np.sort(first_crossing), stages.times, rtol=1e-3)
    np.testing.assert_array_equal(np.flatnonzero(active)[np.argsort(first_crossing)], stages.order)


# --- two-layer linear network (Saxe et al.) ---------------------------------------------------------


def mp_saxe(t, s, u0):
    with mpmath.workdps(50):
        return float(mpmath_function(theory.saxe_mode_expression)(*map(mpmath.mpf, (t, s, u0))))


@pytest.mark.parametrize("s, u0", [(1.0, 1e-3), (2.5, 0.1), (0.5, 2.0), (3.0, 3.0)])
def test_saxe_mode_matches_two_layer_ode(s, u0):
    t_eval = np.linspace(0.0, 10.0, 41)

    def rhs(_, y):  # da/dt = b(s − ab), db/dt = a(s − ab), paper 004 eq. 11
        a, b = y
        return [b * (s - a * b), a * (s - a * b)]

    sol = solve_ivp(rhs, (0.0, 10.0), [math.sqrt(u0)] * 2, method="DOP853", rtol=1e-12, atol=1e-14, t_eval=t_eval)
    np.testing.assert_allclose(theory.saxe_mode(t_eval, s, u0), sol.y[0] * sol.y[1], rtol=1e-9)


@settings(max_examples=25, deadline=None)
@given(s=st.floats(0.05, 5.0), u0=st.floats(1e-8, 10.0), t=st.floats(0.0, 50.0))
def test_property_saxe_mode_matches_sympy(s, u0, t):
    assert theory.saxe_mode(t, s, u0) == pytest.approx(mp_saxe(t, s, u0), rel=1e-12)


def test_saxe_mode_extremes_and_validation():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        values = theory.saxe_mode(np.array([0.0, 1e4, np.inf]), 2.0, 1e-300)
    np.testing.assert_allclose(values, [1e-300, 2.0, 2.0], rtol=1e-12)
    assert theory.saxe_mode(5.0, 1.0, 1.0) == 1.0
    for bad in [(1.0, 0.0, 0.1), (1.0, 1.0, -0.1), (-1.0, 1.0, 0.1)]:
        with pytest.raises(ValueError):
            theory.saxe_mode(*bad)


# --- factorised weights: the greedy low-rank limit ------------------------------------------------


def _mf_flow(M, U0, V0, log_alpha, t_eval):
    """W(t) = U Vᵀ of dU/dt = (M − UVᵀ)V, dV/dt = (M − UVᵀ)ᵀU from α(U0, V0), by DOP853 at rtol 1e-11."""
    m, k = U0.shape
    n = V0.shape[0]

    def rhs(_, z):
        U, V = z[: m * k].reshape(m, k), z[m * k :].reshape(n, k)
        G = M - U @ V.T
        return np.concatenate([(G @ V).ravel(), (G.T @ U).ravel()])

    z0 = np.exp(log_alpha) * np.concatenate([U0.ravel(), V0.ravel()])
    sol = solve_ivp(rhs, (0.0, t_eval[-1]), z0, method="DOP853", rtol=1e-11, atol=1e-300, t_eval=t_eval)
    assert sol.success
    U, V = sol.y[: m * k].T.reshape(-1, m, k), sol.y[m * k :].T.reshape(-1, n, k)
    return U @ np.swapaxes(V, 1, 2)


MF_M = np.array([[2.0, 0.3, -0.4], [0.1, 1.0, 0.5], [-0.2, 0.4, 0.9], [0.3, -0.1, 0.2]])


def test_matrix_factorization_stages_closed_form():
    stages = theory.matrix_factorization_stages(MF_M)
    left, sigma, right = np.linalg.svd(MF_M)
    np.testing.assert_allclose(stages.times, np.concatenate([[0.0], 1.0 / sigma]), rtol=1e-15)
    assert stages.saddles.shape == (4, 4, 3)
    np.testing.assert_array_equal(stages.saddles[0], 0.0)
    np.testing.assert_allclose(stages.saddles[-1], MF_M, atol=1e-14)
    for r in range(1, 4):
        assert np.linalg.matrix_rank(stages.saddles[r], tol=1e-10) == r
        # Eckart–Young: the residual M − W̄_r has the discarded singular values, and is orthogonal to W̄_r.
        np.testing.assert_allclose(np.linalg.svd(MF_M - stages.saddles[r], compute_uv=False)[: 3 - r], sigma[r:])
        np.testing.assert_allclose((MF_M - stages.saddles[r]) @ stages.saddles[r].T, 0.0, atol=1e-13)
    narrow = theory.matrix_factorization_stages(MF_M, width=2)
    np.testing.assert_array_equal(narrow.times, stages.times[:3])
    rank_two = theory.matrix_factorization_stages(stages.saddles[2])
    np.testing.assert_allclose(rank_two.times, stages.times[:3], rtol=1e-12)
    with pytest.raises(ValueError, match="matrix"):
        theory.matrix_factorization_stages(np.ones(3))
    with pytest.raises(ValueError, match="distinct"):
        theory.matrix_factorization_stages(np.eye(2))
    with pytest.raises(ValueError, match="width"):
        theory.matrix_factorization_stages(MF_M, width=0)


def test_matrix_factorization_aligned_start_is_the_diagonal_linear_model():
    """U, V aligned with M's singular vectors: the singular values of W(t) follow the diagonal closed form."""
    left, sigma, right = np.linalg.svd(MF_M, full_matrices=False)
    u0, v0 = np.array([1.0, 0.6, -0.8]), np.array([0.4, -0.3, 0.5])
    t = np.linspace(0.0, 6.0 / sigma[-1], 30)
    W = _mf_flow(MF_M, left * u0, right.T * v0, np.log(1e-3), t)
    modes = np.einsum("im,tij,jm->tm", left, W, right.T)  # aᵢᵀ W bᵢ
    expected = theory.diagonal_linear_beta(t[:, None], sigma, u0, v0, 1e-3)
    np.testing.assert_allclose(modes, expected, rtol=1e-7, atol=1e-12)


def test_matrix_factorization_stage_times_match_the_flow():
    """A generic start: the loss falls through the midpoints between saddles at T_r + O(1/log(1/α))."""
    stages = theory.matrix_factorization_stages(MF_M)
    rng = np.random.default_rng(0)
    U0, V0 = rng.standard_normal((4, 3)), rng.standard_normal((3, 3))
    losses = 0.5 * np.sum((MF_M - stages.saddles) ** 2, axis=(1, 2))
    errors = []
    for ell in (15.0, 30.0):
        t = np.linspace(0.0, 1.2 * stages.times[-1] * ell, 4001)
        loss = 0.5 * np.sum((MF_M - _mf_flow(MF_M, U0, V0, -ell, t)) ** 2, axis=(1, 2))
        crossing = [t[np.argmax(loss < (a + b) / 2)] / ell for a, b in zip(losses[:-1], losses[1:])]
        errors.append(np.abs(np.array(crossing) - stages.times[1:]))
    assert np.all(errors[1] < 0.6 * errors[0] + 1e-3)  # O(1/ℓ): halving 1/ℓ halves the error
    assert np.all(errors[1] < 0.1)

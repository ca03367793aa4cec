"""The greedy low-rank limit right on every window: the log-scale bookkeeping of the sleeping directions, with their
orientation ``sign det W`` (docs/math.md, *Full weights: the greedy low-rank limit*, (b)–(d)), against the exact
linear flow of a sleeping block (theory.linear_sleeping_log_scales), against Algorithm 1 for 1×1 weights, and
against exact flows of attention heads and matrix sensing at log α = −100 and −1000."""

import warnings

import numpy as np
import pytest

import gradflow
import theory
from gradflow import AssumptionWarning, models
from gradflow._factorized._pipeline import FIGURE2_TASK
from gradflow._factorized._sleeping import fold, move, saddle_orientation, signed_rates
from gradflow._kit._comparison import default_times

# ----------------------------------------------------------------------------------------------
# The rule on the linear flow of a sleeping block, dZ/dt = A_k Z with G_k constant on each interval.


def _rule(gradients, durations, taus, width):
    """The bookkeeping of ``_run`` without saddles or escapes: every exponent starts at 1, the orientation is
    undefined until all have moved; returns the exponents at ``taus`` (ascending) and the signed rates per stage."""
    exponents, orientation = np.ones(width), 0
    starts = np.concatenate([[0.0], np.cumsum(durations)])
    stages = []
    for k, g in enumerate(gradients):
        speeds = np.linalg.svd(g, compute_uv=False)[:width]
        saddle = saddle_orientation(np.zeros_like(g), g, speeds) if g.shape == (width, width) else 0
        rates = signed_rates(exponents, speeds, orientation, saddle, 0)
        stages.append((starts[k], exponents, rates))
        if k < len(durations):
            exponents, orientation = move(exponents, rates, durations[k], orientation, saddle)
            exponents = np.sort(exponents)
    k = np.searchsorted(starts[: len(gradients)], taus, side="right") - 1
    predicted = np.array([np.sort(fold(stages[i][1] - (t - stages[i][0]) * stages[i][2])) for i, t in zip(k, taus)])
    return predicted, [rates for _, _, rates in stages]


def _gradients(seed, shape, flips):
    """Three random G_k; with ``flips`` each has ``sign det`` opposite to the one before."""
    rng = np.random.default_rng(seed)
    gradients = [0.5 * rng.standard_normal(shape) for _ in range(3)]
    for before, g in zip(gradients, gradients[1:]):
        if flips and np.sign(np.linalg.det(g)) == np.sign(np.linalg.det(before)):
            g[:, 0] *= -1
    return gradients


@pytest.mark.parametrize(
    "shape, width, shrinks",
    [((3, 3), 3, True), ((2, 2), 2, True), ((3, 3), 2, False), ((3, 2), 2, False)],
    ids=["3x3", "2x2", "3x3-width-2", "3x2"],
)
def test_the_rule_follows_the_exact_linear_flow(shape, width, shrinks):
    """Square factors of full width whose ``sign det G_k`` alternates: on every stage after the first the last
    exponent shrinks at ``σ_s`` and turns back at 1 (orientation). Narrower or rectangular factors have no
    orientation: every exponent moves at ``σ_i``. The exact log scales approach the rule like ``1/log(1/α)``."""
    gradients = _gradients(3, shape, flips=shrinks)
    durations = [0.5, 1.0]
    taus = np.array([0.25, 0.5, 0.9, 1.2, 1.5, 1.8, 2.2])
    rng = np.random.default_rng(4)
    u0, v0 = rng.standard_normal((shape[0], width)), rng.standard_normal((shape[1], width))
    predicted, rates = _rule(gradients, durations, taus, width)
    assert any(np.any(r < 0) for r in rates) == shrinks
    errors = [
        np.max(np.abs(theory.linear_sleeping_log_scales(gradients, durations, u0, v0, la, taus) - predicted))
        for la in (-150.0, -450.0)
    ]
    assert errors[0] < 0.05
    assert errors[1] < errors[0] / 2  # 1/log(1/α): a third


# ----------------------------------------------------------------------------------------------
# 1×1 weights: the factorised limit is Algorithm 1 (the diagonal greedy limit).

N = 40


def _regression(beta_star, cov):
    """Diagonal linear regression with ``XᵀX/n = cov`` exactly and ``y = X β*``."""
    q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((N, beta_star.size)))
    X = np.sqrt(N) * q @ np.linalg.cholesky(cov).T
    return X, X @ beta_star


def _scalar_weights(x, Ws):
    return sum(x[i] * w[0, 0] for i, w in enumerate(Ws))


@pytest.mark.parametrize(
    "beta_star, cov",
    [
        # x2 helps at first (g_2 = ρ β*_1 + β*_2 > 0), hurts once x1 is learned: it shrinks back through 1 and
        # is learned negative at b = 2.
        pytest.param(np.array([1.0, -0.3]), np.array([[1.0, 0.6], [0.6, 1.0]]), id="sign-change"),
        # x3 is learned first, leaves the support once x1, x2 are in, and comes back negative (paper Lemma D.4).
        pytest.param(
            np.array([1.0, 0.95, -0.7]),
            np.array([[1, 0, 0.65], [0, 1, 0.65], [0.65, 0.65, 1.0]]),
            marks=pytest.mark.slow,
            id="leaves-and-returns",
        ),
    ],
)
def test_one_by_one_weights_are_algorithm_1(beta_star, cov):
    """A 1×1 weight ``W = u v`` is a diagonal coordinate: its orientation is ``sign β``, a shrinking direction
    is ``b > 1`` in Algorithm 1 and ``min(b, 2 − b)`` is the log scale of ``|β|``. The factorised limit has the
    stage times, order and log scales of the diagonal one."""
    X, y = _regression(beta_star, cov)
    diagonal = gradflow.greedy_limit(models.diagonal_linear_model(X, y), check_assumptions=False)
    model = gradflow.FactorizedModel(_scalar_weights, X, y, shapes=[(1, 1)] * beta_star.size)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AssumptionWarning)  # the leaving coordinate is reported
        path = gradflow.greedy_limit(model, check_assumptions=False)
    np.testing.assert_allclose(path.times, diagonal.times, rtol=1e-8)
    np.testing.assert_array_equal(path.activated, diagonal.activated)
    taus = np.linspace(0.0, 1.2 * diagonal.times[-1], 200)
    b = np.nan_to_num(path.sleeping_at(taus)[..., 0], nan=0.0)  # a learned weight has no sleeping direction: 0
    np.testing.assert_allclose(b, fold(diagonal.b_at(taus)), atol=1e-9)


# ----------------------------------------------------------------------------------------------
# Against exact flows.

LOG_ALPHAS = (-100.0, -1000.0)


def _check_every_window(task, num_times, *, shrinking):
    """Every window's log-scale distance (and jump time) shrinks like 1/log(1/α) from −100 to −1000; on the way
    some sleeping direction shrinks (``rates < 0``) iff ``shrinking``."""
    path = gradflow.greedy_limit(task.model, u0=task.u0, v0=task.v0, check_assumptions=False)
    assert path.result == "successful"
    assert bool(np.any(path.rates < 0)) == shrinking
    ts = default_times(path.times, num=num_times)
    comparison = gradflow.compare_limits(task.model, log_alpha=LOG_ALPHAS, u0=task.u0, v0=task.v0, path=path, ts=ts)
    b = comparison.b_distance
    assert np.all(np.isfinite(b))
    assert np.all(b[1] < 10.0 / 1000.0), b  # O(1/log(1/α)) with an O(1) constant
    assert np.all(b[1] < b[0] / 4), b  # a tenfold log(1/α): a tenfold smaller distance, up to pre-asymptotics
    assert np.all(comparison.time_error[1] < 0.02), comparison.time_error
    return path


@pytest.mark.slow  # fast twin: the shrinking cases of test_the_rule_follows_the_exact_linear_flow
def test_sensing_2x2_turns_back_and_is_learned_late():
    """2×2 matrix sensing whose second stage grows the other orientation: the last sleeping direction shrinks
    back to the scale of the start, turns and is learned at ``T_1 + (2 − e)/σ``, not ``T_1 + e/σ``."""
    task = models.matrix_sensing(m=2, n=2, measurements=8, singular_values=(2.0, 1.0), seed=15)
    path = _check_every_window(task, 300, shrinking=True)
    e, rate = path.b[1, 0, 0], -path.rates[1, 0, 0]
    assert rate > 0
    assert path.times[2] == pytest.approx(path.times[1] + (2.0 - e) / rate, rel=1e-12)


HEADS = {
    # The demo's head: jumps VO, VO, KQ, KQ; W_KQ's last direction shrinks after the third.
    "figure-2": dict(FIGURE2_TASK),
    # More heads whose jumps come in the order VO, VO, KQ, KQ, with a shrinking direction that turns back at 1.
    "vo-vo-kq-kq-5": dict(FIGURE2_TASK, seed=5),
    "vo-vo-kq-kq-7": dict(FIGURE2_TASK, seed=7),
}


@pytest.mark.slow
@pytest.mark.parametrize("options", HEADS.values(), ids=HEADS.keys())
def test_attention_heads_on_every_window(options):
    task = models.attention_full(**options)
    path = _check_every_window(task, 400, shrinking=True)
    assert [task.model.names[j] for j in path.activated] == ["VO", "VO", "KQ", "KQ"]


@pytest.mark.slow
def test_sensing_3x3_stage_time_moved_by_the_orientation():
    """3×3 matrix sensing: the last stage's direction shrinks on the way and is learned later than the
    orientation-blind rule says."""
    task = models.matrix_sensing(m=3, n=3, measurements=20, singular_values=(2.0, 1.0, 0.5), seed=7)
    _check_every_window(task, 400, shrinking=True)


@pytest.mark.slow
def test_rectangular_and_narrow_factors_have_no_orientation():
    """A rectangular W and a head of width 2 < d: no sleeping direction shrinks, and the limit holds."""
    for task in (
        models.matrix_sensing(m=4, n=3, measurements=30, singular_values=(2.0, 1.0, 0.5), seed=1),
        models.attention_full(**dict(FIGURE2_TASK, d_head=2)),
    ):
        path = _check_every_window(task, 400, shrinking=False)
        assert np.all(path.orientation == 0) and np.all(path.saddle_orientation == 0)

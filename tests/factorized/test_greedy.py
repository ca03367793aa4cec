"""Tests for the greedy low-rank limit of factorised models (gradflow/_factorized/_greedy.py) against the matrix
factorisation closed form (theory.matrix_factorization_stages) and, for matrix sensing, the exact flow; the path's
views are in test_path.py."""

import jax
import numpy as np
import pytest
from two_mf import M1, M2, SIGMA_1, SIGMA_2, two_mf_model

import gradflow
import theory
from gradflow import models


def test_matrix_factorization_closed_form(mf_path):
    one, two = theory.matrix_factorization_stages(M1), theory.matrix_factorization_stages(M2, width=2)
    events = sorted(
        [(t, 0, r) for r, t in enumerate(one.times[1:], 1)] + [(t, 1, r) for r, t in enumerate(two.times[1:], 1)]
    )
    path = mf_path
    assert path.result == "successful" and "T = ∞" in path.message
    assert path.num_stages == 5
    np.testing.assert_allclose(path.times, [0.0] + [t for t, _, _ in events], rtol=1e-12, atol=0)
    np.testing.assert_array_equal(path.activated, [j for _, j, _ in events])
    np.testing.assert_array_equal(path.ranks, [[0, 0], [1, 0], [1, 1], [2, 1], [2, 2], [3, 2]])
    for k, (r1, r2) in enumerate(path.ranks):
        np.testing.assert_allclose(path.W[0][k], one.saddles[r1], atol=1e-9)
        np.testing.assert_allclose(path.W[1][k], two.saddles[r2], atol=1e-9)
        residual = 0.5 * (np.sum(SIGMA_1[r1:] ** 2) + np.sum(SIGMA_2[r2:] ** 2))
        assert path.loss[k] == pytest.approx(residual, rel=1e-9, abs=1e-20)
    assert path.W[0].shape == (6, 4, 3) and path.W[1].shape == (6, 3, 3)


def test_log_scale_bookkeeping(mf_path):
    """Mode i of M_j has exponent 1 − σ_i τ at every stage, and moves at σ_i (theory.derive_matrix_factorization_stages)."""
    path = mf_path
    for k, (tau, ranks) in enumerate(zip(path.times, path.ranks)):
        for j, (sigma, width) in enumerate(((SIGMA_1, 3), (SIGMA_2, 2))):
            sleeping = sigma[ranks[j] : width]
            np.testing.assert_allclose(path.b[k, j, : sleeping.size], 1.0 - sleeping * tau, atol=1e-12)
            np.testing.assert_allclose(path.rates[k, j, : sleeping.size], sleeping, rtol=1e-9)
            assert np.all(np.isnan(path.b[k, j, sleeping.size :]))
    np.testing.assert_allclose(
        path.sigma[:-1].max(axis=1), 1.0 / np.diff(path.times) * path.b[:-1][np.arange(5), path.activated, 0], rtol=1e-9
    )
    # The leading exponent of the factor that escapes reaches 0 at the next stage time.
    for k in range(path.num_stages):
        just_before = path.sleeping_at(np.nextafter(path.times[k + 1], 0))
        assert just_before[path.activated[k], 0] == pytest.approx(0.0, abs=1e-9)
    assert np.all(np.isinf(path.final_delta))
    assert np.all(np.isfinite(path.delta[np.arange(5), path.activated]))
    np.testing.assert_array_equal(path.runner_up, [1, 0, 1, 0, -1])  # W2 is full at width 2 after stage 4


def test_assumption_diagnostics(mf_path):
    """Hessian off the gauge at the truncated SVD: smallest eigenvalue σ_r − σ_{r+1} (or σ_r at the full rank)."""
    path = mf_path
    assert path.assumptions_ok.all() and path.warnings == ()
    assert path.hessian_min_eig[0] == np.inf
    for k, (r1, r2) in enumerate(path.ranks[1:], 1):
        gaps = [s[r - 1] - (s[r] if r < s.size else 0.0) for s, r in ((SIGMA_1, r1), (SIGMA_2, r2)) if r]
        assert path.hessian_min_eig[k] == pytest.approx(min(gaps), rel=1e-6)
    assert np.all(path.stationarity <= 1e-10)
    assert np.all(path.epsilon_discrepancy <= 1e-6) and np.all(path.perturbation_spread <= 1e-6)
    expected_gap = [1 - 1.5 / 3, 1 - 1 / 2, 1 - 0.4 / 1.5, 1 - 0.25 / 1, 1.0]
    np.testing.assert_allclose(path.singular_gap, expected_gap, rtol=1e-9)


def test_max_stages_and_failures():
    model = two_mf_model()
    path = gradflow.greedy_limit(model, max_stages=2)
    assert path.result == "max_stages" and path.num_stages == 2
    assert path.final_delta[0] == pytest.approx(1 / 1.5 - 1 / 2, rel=1e-9)  # W1's second mode is next
    never = gradflow.GreedyTolerances(stationary=1e-300)  # Newton's method cannot reach it: phase (B) fails
    with pytest.raises(RuntimeError, match="phase \\(B\\) of stage 0.*throw=False"):
        gradflow.greedy_limit(model, tolerances=never)
    failed = gradflow.greedy_limit(model, tolerances=never, throw=False)
    assert failed.result == "phase_b_failed" and failed.num_stages == 0
    assert "did not reach a critical point" in failed.message and not failed.assumptions_ok[0, 2]
    # in the factors' words (not the diagonal family's "a coordinate … out of its sign orthant"), with what to try
    assert "trust-region Newton polish of the factor columns (U, V)" in failed.message
    assert "stationary = 1e-300" in failed.message and "newton_steps = 300" in failed.message
    assert "orthant" not in failed.message and "coordinate" not in failed.message


def _valley(x, Ws):
    return Ws[0][0]


def _valley_loss(y, w):
    """``softplus(−w₁) + ½ (w₂ − ½ w₁²)² + ½ λ w₁²`` with ``λ = y[0]``: for λ = 0 its infimum, 0, is reached only as
    w₁ → ∞ along the parabola ``w₂ = ½ w₁²`` (the loss is positive everywhere), so there is no minimiser; along the
    ray ``s·w`` the loss rises (the parabola curves away from it), so this is no run-off :func:`check_minimiser`'s
    ray could see. For λ > 0 the minimiser is ``w₂ = ½ w₁²``, ``σ(−w₁) = λ w₁``."""
    return jax.nn.softplus(-w[0]) + 0.5 * (w[1] - 0.5 * w[0] ** 2) ** 2 + 0.5 * y[0] * w[0] ** 2


def _valley_model(lam):
    """One 1×2 weight of rank ≤ 1 (so phase (B) of stage 0 runs on all of it); λ is data, so both λ share one
    compiled phase (B)."""
    return gradflow.FactorizedModel(
        _valley, np.zeros((1, 1)), np.array([[lam, 0.0]]), shapes=[(1, 2)], loss=_valley_loss
    )


def test_phase_b_without_minimiser_ends_no_minimiser():
    """Phase (B) of stage 0 goes down the valley (w₁ ∝ log t, ‖(U, V)‖ too) until its Newton polish fails; the path
    ends ``"no_minimiser"`` (not ``"phase_b_failed"``) with the evidence; with λ > 0 the same program reaches the
    minimiser and the path ends successful at it."""
    path = gradflow.greedy_limit(_valley_model(0.0), throw=False, check_assumptions=False)
    assert path.result == "no_minimiser" and path.num_stages == 0
    assert path.message.startswith("no minimiser at stage 0: phase (B) (a rank for W[0], from ε = 0.001)")
    assert "the loss falling while the factors grew without slowing (t = " in path.message

    path = gradflow.greedy_limit(_valley_model(0.05), check_assumptions=False)
    assert path.result == "successful" and path.num_stages == 1
    w1, w2 = path.W[0][1, 0]
    assert w2 == pytest.approx(0.5 * w1**2, rel=1e-9)
    assert 1 / (1 + np.exp(w1)) == pytest.approx(0.05 * w1, rel=1e-9)


def test_bad_input():
    model = two_mf_model()
    with pytest.raises(TypeError, match="GreedyTolerances"):
        gradflow.greedy_limit(model, tolerances={"tie": 1e-3})
    with pytest.raises(ValueError, match="max_stages"):
        gradflow.greedy_limit(model, max_stages=-1)
    with pytest.raises(ValueError, match="both u0 and v0"):
        gradflow.greedy_limit(model, u0=(np.ones((4, 3)), np.ones((3, 2))))
    with pytest.raises(ValueError, match="shape"):
        gradflow.greedy_limit(model, u0=(np.ones((4, 3)),) * 2, v0=(np.ones((3, 3)), np.ones((3, 2))))
    task = models.matrix_factorization(m=4, n=3, seed=0)
    with pytest.raises(ValueError, match=r"is zero: θ\(0\) = 0 is a stationary point.*Give nonzero factors"):
        gradflow.greedy_limit(task.model, u0=(np.zeros((4, 3)),), v0=(np.zeros((3, 3)),))
    with pytest.raises(ValueError, match=r"has rank 1 < width 3.*widths\[0\] = 1"):
        gradflow.greedy_limit(task.model, u0=(np.ones((4, 3)),), v0=(np.ones((3, 3)),))


@pytest.mark.slow
def test_matrix_sensing_matches_the_exact_flow():
    """The bookkeeping beyond T_1 is a conjecture for models other than matrix factorisation: on matrix sensing the
    exact flow at log α = −1e4 falls through the loss midpoints at the greedy stage times (to 1e-3) and sits on the
    greedy saddles mid-plateau."""
    task = models.matrix_sensing(m=5, n=4, measurements=40, singular_values=(3.0, 2.0, 1.0), seed=0)
    path = gradflow.greedy_limit(task.model, u0=task.u0, v0=task.v0)
    assert path.result == "successful" and path.assumptions_ok.all()
    np.testing.assert_array_equal(path.ranks[:, 0], [0, 1, 2, 3])
    T = path.times[1:]
    # The exponents carried over matter: restarting them at 1 would put T_2 at T_1 + 1/σ_1(G(W̄^1)).
    assert T[1] < T[0] + 1 / path.sigma[1, 0] - 0.1
    middle = (path.times[:-1] + path.times[1:]) / 2
    ts = np.unique(
        np.concatenate([middle, np.linspace(0, 1.2 * T[-1], 40)] + [t + np.linspace(-1e-2, 1e-2, 201) for t in T])
    )
    flow = gradflow.simulate_flow(task.model, u0=task.u0, v0=task.v0, ts=ts, log_alpha=-1e4, max_steps=50_000)
    assert flow.result == "successful"
    midpoints = (path.loss[:-1] + path.loss[1:]) / 2
    crossings = np.array([ts[np.argmax(flow.loss < m)] for m in midpoints])
    np.testing.assert_allclose(crossings, T, atol=1e-3)
    for k, tau in enumerate(middle):
        np.testing.assert_allclose(flow.W[0][np.searchsorted(ts, tau)], path.W[0][k], atol=1e-6)


@pytest.mark.slow
def test_attention_toy_learns_the_teacher_ranks():
    task = models.attention_full(seed=0)  # teacher W_KQ, W_VO of rank 3 each
    path = gradflow.greedy_limit(task.model, u0=task.u0, v0=task.v0)
    assert path.result == "successful" and path.assumptions_ok.all()
    np.testing.assert_array_equal(path.ranks[-1], [3, 3])
    assert np.all(np.diff(path.loss) < 0) and path.loss[-1] < 1e-20
    for w, teacher in zip(path.W, task.teacher_beta):
        np.testing.assert_allclose(w[-1], teacher, atol=1e-8)


def test_phase_b_runs_one_per_core_give_the_path_of_one_after_the_other(monkeypatch):
    """On two cores the two ε of a phase (B) run at once (each waits for the other), then the two perturbed starts;
    the path is the one the runs give one after the other (one core: never two at once), to the last digit."""
    import threading

    from gradflow import _config
    from gradflow._factorized import _phase_b

    task = models.matrix_factorization(m=3, n=3, singular_values=(3.0, 2.0, 1.0), seed=0)
    compiled, lock, both = _phase_b._compiled_phase_b, threading.Lock(), threading.Barrier(2, timeout=60)
    active, most = [0], [0]

    def recorded(*args):
        with lock:
            active[0] += 1
            most[0] = max(most[0], active[0])
        try:
            if together_run:
                both.wait()  # breaks (BrokenBarrierError) unless the other run of the pair runs at the same time
            return compiled(args[1])(*args)  # phase_b(model, layout, ...)
        finally:
            with lock:
                active[0] -= 1

    monkeypatch.setattr(_phase_b, "_compiled_phase_b", lambda layout: recorded)
    monkeypatch.setattr(_config.os, "cpu_count", lambda: 2)
    together_run = True
    together = gradflow.greedy_limit(task.model, u0=task.u0, v0=task.v0, max_stages=1)
    assert most[0] == 2
    together_run, most[0] = False, 0
    token = _config._CORES.set(1)
    try:
        alone = gradflow.greedy_limit(task.model, u0=task.u0, v0=task.v0, max_stages=1)
    finally:
        _config._CORES.reset(token)
    assert most[0] == 1
    np.testing.assert_array_equal(together.times, alone.times)
    np.testing.assert_array_equal(together.W[0], alone.W[0])
    np.testing.assert_array_equal(together.perturbation_spread, alone.perturbation_spread)


def test_ctrl_c_between_phase_b_runs_keeps_the_stages_finished(monkeypatch, ctrl_c_at_call):
    """Ctrl-C (a ``KeyboardInterrupt`` as the third phase-(B) run starts: one of stage 2's two, one per ε, which run
    side by side) ends the path ``"interrupted"`` with stage 1 kept."""
    from gradflow._factorized import _phase_b

    task = models.matrix_factorization(m=3, n=3, singular_values=(3.0, 2.0, 1.0), seed=0)
    compiled = _phase_b._compiled_phase_b
    stopping = ctrl_c_at_call(lambda *args: compiled(args[1])(*args), 3)  # phase_b(model, layout, ...)
    monkeypatch.setattr(_phase_b, "_compiled_phase_b", lambda layout: stopping)
    with pytest.raises(gradflow.Interrupted, match="interrupted .Ctrl-C. during stage 2") as stop:
        gradflow.greedy_limit(task.model, check_assumptions=False)
    path = stop.value.result
    assert path.result == "interrupted" and path.num_stages == 1
    np.testing.assert_allclose(path.times[1], 1 / 3.0, rtol=1e-6)

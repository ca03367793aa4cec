"""Tests of ``gradflow.greedy_limit`` (Algorithm 1, docs/math.md) against closed forms and the exact flow.

Most tests share one shape (linear models with n = 40, p = 4) so that phase (B) compiles once; phase (B)'s own
tests are in test_phase_b.py, the path's views in test_path.py.
"""

from __future__ import annotations

import warnings

import jax.numpy as jnp
import numpy as np
import pytest
from diagonal_common import N, P, linear, quiet
from hypothesis import given, settings
from hypothesis import strategies as st

import theory
from gradflow import (
    AssumptionWarning,
    DiagonalModel,
    GreedyPath,
    GreedyTolerances,
    Interrupted,
    greedy_limit,
    models,
    simulate_flow,
)


def _check_invariants(path: GreedyPath) -> None:
    """Properties every path has (docs/math.md, *The stages*; paper Lemma D.4)."""
    K = path.num_stages
    assert path.times[0] == 0 and np.all(np.diff(path.times) >= 0)
    assert np.all(np.diff(path.loss) <= 1e-12 * max(1.0, path.loss[0]))
    np.testing.assert_array_equal(path.b[0], 1.0)
    np.testing.assert_array_equal(path.beta[0], 0.0)
    np.testing.assert_allclose(path.beta, path.u * path.v, rtol=0, atol=1e-15)
    np.testing.assert_allclose(np.abs(path.u), np.abs(path.v))
    np.testing.assert_array_equal(path.support, path.u != 0)
    assert np.all((path.b >= 0) & (path.b <= 2))
    for k in range(K):
        i = path.activated[k]
        new = path.support[k + 1] & ~path.support[k]
        assert new.sum() <= 1 and (not new.any() or new[i])
        assert path.b[k + 1, i] in (0.0, 2.0)
        assert path.sign[k] == (path.b[k + 1, i] == 0.0)
        np.testing.assert_array_equal(path.delta[k][path.support[k]], np.inf)
        assert path.times[k + 1] == pytest.approx(path.times[k] + path.delta[k, i], rel=1e-12)
        np.testing.assert_allclose(path.b[k + 1], np.clip(path.b[k] - path.g[k] * path.delta[k, i], 0, 2), atol=1e-12)
    for k in range(K + 1):
        s = path.support[k]
        # On the support b = 1 − s (v took u's sign ⇔ b = 0), and g = 0 (stationary).
        np.testing.assert_array_equal(path.b[k][s], 1.0 - np.sign(path.u[k][s] * path.v[k][s]))
        np.testing.assert_array_equal(path.g[k][s], 0.0)
    # The piecewise views agree with the stage arrays (on stages of positive length: a tie makes one empty).
    mid = np.append(0.5 * (path.times[:-1] + path.times[1:]), path.times[-1] + 1.0)
    held = np.append(np.diff(path.times) > 0, True)
    np.testing.assert_array_equal(path.stage_at(mid)[held], np.arange(K + 1)[held])
    np.testing.assert_array_equal(path.weights_at(mid)[held], path.beta[held])
    np.testing.assert_array_equal(path.loss_at(mid)[held], path.loss[held])
    np.testing.assert_allclose(path.b_at(path.times), path.b, atol=1e-15)


# ----------------------------------------------------------------------------------------------
# Closed form: orthonormal design.


def test_orthonormal_design_matches_closed_form():
    beta_star = np.array([0.5, -3.0, 0.0, 1.25])
    task = models.diagonal_linear(n=N, p=P, orthonormal=True, beta_star=beta_star, seed=3)
    path = quiet(task.model, u0=task.u0, v0=task.v0)
    oracle = theory.greedy_orthonormal_stages(beta_star)
    np.testing.assert_allclose(path.times[1:], oracle.times, rtol=1e-12)
    np.testing.assert_array_equal(path.activated, oracle.order)
    np.testing.assert_allclose(path.times[1:], 1 / np.abs(beta_star[oracle.order]), rtol=1e-12)
    for k, _ in enumerate(path.activated, start=1):
        on = path.support[k]
        np.testing.assert_array_equal(np.flatnonzero(on), np.sort(path.activated[:k]))
        np.testing.assert_allclose(path.beta[k][on], beta_star[on], rtol=1e-9)
        # Δ of eq. (8) is the theory module's time until active, on every candidate.
        off = ~path.support[k - 1]
        np.testing.assert_allclose(path.delta[k - 1][off], theory.time_until_active(path.b[k - 1], path.g[k - 1])[off])
    assert path.result == "successful" and np.all(np.isinf(path.final_delta))
    assert path.loss[-1] < 1e-20
    assert path.assumptions_ok.all() and path.warnings == ()
    assert np.all(path.epsilon_discrepancy <= 1e-9) and np.all(path.perturbation_spread <= 1e-9)
    # 4.3: the Hessian of ũ ↦ L(s ⊙ ũ²) is 4 diag(ũ²) here, so its smallest eigenvalue is 4 min |β_i|.
    expected = [np.inf] + [4 * np.min(np.abs(beta_star[np.sort(path.activated[:k])])) for k in range(1, 4)]
    np.testing.assert_allclose(path.hessian_min_eig, expected, rtol=1e-9)
    # The signs of u, v follow the flow from α(u0, v0): the larger of |u0_i|, |v0_i| keeps its sign.
    major = np.where(np.abs(task.u0) >= np.abs(task.v0), task.u0, task.v0)
    major_final = np.where(np.abs(task.u0) >= np.abs(task.v0), path.u[-1], path.v[-1])
    on = path.support[-1]
    np.testing.assert_array_equal(np.sign(major_final[on]), np.sign(major[on]))
    _check_invariants(path)


def test_ctrl_c_during_a_stage_keeps_the_stages_finished(monkeypatch, ctrl_c_at_call):
    """A ``KeyboardInterrupt`` in stage 3's phase (B) (as Ctrl-C raises it) ends the path ``"interrupted"``:
    ``greedy_limit`` raises ``Interrupted``, whatever ``throw``, carrying the stages 0–2 it had finished."""
    from gradflow._diagonal import _greedy

    task = models.diagonal_linear(n=N, p=P, orthonormal=True, beta_star=np.array([0.5, -3.0, 0.0, 1.25]), seed=3)
    monkeypatch.setattr(_greedy, "_phase_b_ends", ctrl_c_at_call(_greedy._phase_b_ends, 3))  # stage 3's phase (B)
    with pytest.raises(Interrupted, match="interrupted .Ctrl-C. during stage 3") as stop:
        quiet(task.model, u0=task.u0, v0=task.v0, throw=False)
    path = stop.value.result
    assert path.result == "interrupted" and path.num_stages == 2
    np.testing.assert_allclose(path.times[1:], [1 / 3.0, 1 / 1.25], rtol=1e-12)


def test_sigint_during_a_stage_finishes_it_and_stops_before_the_next(monkeypatch):
    """A real Ctrl-C (SIGINT) in stage 2's phase (B) is deferred (it never lands inside JAX): the stage under way
    is finished and kept, and the path stops before stage 3, ``"interrupted"``."""
    import os
    import signal

    from gradflow._diagonal import _greedy

    task = models.diagonal_linear(n=N, p=P, orthonormal=True, beta_star=np.array([0.5, -3.0, 0.0, 1.25]), seed=3)
    calls, phase_b_ends = [], _greedy._phase_b_ends

    def ctrl_c_in_stage_2(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return phase_b_ends(*args, **kwargs)

    monkeypatch.setattr(_greedy, "_phase_b_ends", ctrl_c_in_stage_2)
    with pytest.raises(Interrupted, match="interrupted .Ctrl-C. during stage 3") as stop:
        quiet(task.model, u0=task.u0, v0=task.v0)
    path = stop.value.result
    assert path.result == "interrupted" and path.num_stages == 2 and len(calls) == 2


def test_an_interrupted_path_resumes_from_its_checkpoint_as_if_never_stopped(tmp_path, monkeypatch, ctrl_c_at_call):
    """``gradflow greedy`` said "re-run to resume" and started again from stage 1 (issue 26). With a checkpoint the
    stages finished before Ctrl-C are kept, and the re-run computes only the others: the same path, bit for bit
    (the perturbations of Assumption 4.4 continue their random stream). Another model's checkpoint is refused."""
    from gradflow._diagonal import _greedy

    task = models.diagonal_linear(n=N, p=P, orthonormal=True, beta_star=np.array([0.5, -3.0, 0.0, 1.25]), seed=3)
    whole = quiet(task.model, u0=task.u0, v0=task.v0)
    kept = tmp_path / "stages.npz"
    phase_b_ends = _greedy._phase_b_ends
    monkeypatch.setattr(_greedy, "_phase_b_ends", ctrl_c_at_call(phase_b_ends, 3))
    with pytest.raises(Interrupted):
        quiet(task.model, u0=task.u0, v0=task.v0, checkpoint=kept)
    calls = []
    monkeypatch.setattr(_greedy, "_phase_b_ends", lambda *a, **k: calls.append(1) or phase_b_ends(*a, **k))
    resumed = quiet(task.model, u0=task.u0, v0=task.v0, checkpoint=kept)
    assert len(calls) == 1  # stage 3 alone
    for field in ("times", "u", "v", "b", "loss", "perturbation_spread", "hessian_min_eig", "coordinate"):
        np.testing.assert_array_equal(getattr(resumed, field), getattr(whole, field), err_msg=field)
    assert resumed.result == whole.result and resumed.warnings == whole.warnings
    other = models.diagonal_linear(n=N, p=P, orthonormal=True, beta_star=np.array([0.5, -3.0, 0.1, 1.25]), seed=3)
    with pytest.raises(ValueError, match="keeps the stages of another greedy path"):
        quiet(other.model, u0=other.u0, v0=other.v0, checkpoint=kept)


def test_checks_off_gives_the_same_path_without_4_3_and_4_4_numbers():
    model = linear(np.array([0.5, -3.0, 0.0, 1.25]))
    checked = quiet(model)
    unchecked = quiet(model, check_assumptions=False)
    np.testing.assert_array_equal(unchecked.activated, checked.activated)
    np.testing.assert_allclose(unchecked.beta, checked.beta, atol=1e-12)
    assert np.all(np.isnan(unchecked.hessian_min_eig)) and np.all(np.isnan(unchecked.perturbation_spread))
    assert np.all(np.isfinite(checked.hessian_min_eig[1:])) and np.all(checked.perturbation_spread < 1e-9)
    # The ε → 0 check is part of the algorithm and always runs.
    assert np.all(unchecked.epsilon_discrepancy < 1e-9)


# ----------------------------------------------------------------------------------------------
# A coordinate that leaves the support (Lemma D.4).

RHO = 0.65
CORRELATED_BETA = np.array([1.0, 0.95, -0.7, 0.0])
CORRELATED_COV = np.array([[1, 0, RHO, 0], [0, 1, RHO, 0], [RHO, RHO, 1.0, 0], [0, 0, 0, 1.0]])


def test_correlated_design_drops_a_coordinate():
    """x3 = ρ(x1 + x2) + noise is the best single feature, so it is activated first with β_3 > 0; once x1
    and x2 are in, the sign-constrained optimum has β_3 = 0 with g_3 = β*_3 (1 − 2ρ²) < 0, so x3 leaves
    (b_3 = 0, g_3 ≠ 0: Assumption 4.2's last clause) and comes back negative after Δ = 2/|g_3|."""
    model = linear(CORRELATED_BETA, cov=CORRELATED_COV)
    path = quiet(model)
    np.testing.assert_array_equal(path.activated, [2, 0, 1, 2])
    np.testing.assert_array_equal(path.sign, [True, True, True, False])
    np.testing.assert_array_equal(path.support[3], [True, True, False, False])
    g3 = CORRELATED_BETA[2] * (1 - 2 * RHO**2)
    assert path.g[3, 2] == pytest.approx(g3, rel=1e-8)
    assert path.b[3, 2] == 0.0
    assert path.delta[3, 2] == pytest.approx(2 / abs(g3), rel=1e-8)
    # Stage 3 is the least-squares fit on {x1, x2}; the last stage recovers β* with zero loss.
    g0 = CORRELATED_COV @ CORRELATED_BETA
    np.testing.assert_allclose(path.beta[3], [g0[0], g0[1], 0.0, 0.0], rtol=1e-8)
    np.testing.assert_allclose(path.beta[-1], CORRELATED_BETA, rtol=1e-8)
    assert path.assumptions_ok.all()
    _check_invariants(path)


def test_correlated_design_matches_flow_at_small_alpha():
    model = linear(CORRELATED_BETA, cov=CORRELATED_COV)
    u0 = np.array([1.0, 0.7, -0.9, 0.3])
    v0 = np.array([0.2, -0.3, 0.4, -1.1])
    path = quiet(model, u0=u0, v0=v0)
    taus, stages = _window_times(path, margin=0.15, b_margin=0.02)
    flow = simulate_flow(model, u0=u0, v0=v0, ts=taus, log_alpha=-2000.0)
    # There the flow sits on θ^k up to the sleeping weights, ≤ α^{0.02} = e^{−40}, and the tail of the
    # previous relaxation, exp(−λ · 0.15 width · 2000).
    np.testing.assert_allclose(flow.beta, path.beta[stages], atol=1e-6)
    np.testing.assert_allclose(flow.u, path.u[stages], atol=1e-6)
    # b = log w / log α: O(1) weights give |b − b_limit| ≈ |log|u|| / log(1/α) ≈ 1e-3 at log α = −2000.
    np.testing.assert_allclose(flow.b, path.b_at(taus), atol=5e-3)


def test_leaving_with_zero_gradient_is_reported_and_the_path_goes_on():
    """With β*_3 = 0 the design above ends at zero loss: once x1 and x2 are in, x3 leaves with g_3 = 0, so it
    decays only like t^{−1/2} and is still above the support threshold when the flow is steady. Newton's
    method then puts β_3 on the boundary 0 (it is dropped, not a failure), every ε and perturbed start
    agrees, and only Assumption 4.2's last clause (g ≠ 0 for a leaving coordinate) is reported."""
    beta_star = np.array([1.0, 0.95, 0.0, 0.0])
    with pytest.warns(AssumptionWarning, match=r"4.2 fails at stage 3: β\[2\] left the support") as record:
        path = greedy_limit(linear(beta_star, cov=CORRELATED_COV))
    assert len(record) == 1 and path.result == "successful"
    np.testing.assert_array_equal(path.activated, [2, 0, 1])
    np.testing.assert_array_equal(path.support[3], [True, True, False, False])
    np.testing.assert_allclose(path.beta[-1], beta_star, rtol=1e-9, atol=1e-12)
    assert abs(path.g[3, 2]) == 0.0 and path.loss[-1] < 1e-20
    np.testing.assert_array_equal(path.assumptions_ok, [[True] * 3] * 3 + [[False, True, True]])
    assert np.all(path.epsilon_discrepancy <= 1e-9) and np.all(path.perturbation_spread <= 1e-9)
    _check_invariants(path)


def _window_times(path: GreedyPath, *, margin: float, b_margin: float, per_window: int = 3):
    """Rescaled times inside every window [T_k + δ, T_{k+1} − δ], δ = margin · (T_{k+1} − T_k), where also
    every coordinate off the support has b at least ``b_margin`` away from {0, 2}: there the sleeping
    weights are at most α^{b_margin} (docs/math.md, *Rescaled time and log coordinates*: w ≈ α^b, w̄ ≈ α^{2−b})."""
    ends = np.append(path.times, path.times[-1] + max(1.0, path.times[-1]))
    taus, stages = [], []
    for k in range(path.num_stages + 1):
        width = ends[k + 1] - ends[k]
        grid = np.linspace(ends[k] + margin * width, ends[k + 1] - margin * width, 64)
        b = path.b_at(grid)[:, ~path.support[k]]
        keep = grid[np.all((b >= b_margin) & (b <= 2 - b_margin), axis=1)]
        assert keep.size, f"stage {k} has no time with every sleeping b inside [{b_margin}, {2 - b_margin}]"
        taus.append(keep[np.linspace(0, keep.size - 1, per_window).astype(int)])
        stages.append(np.full(per_window, k))
    return np.concatenate(taus), np.concatenate(stages)


# ----------------------------------------------------------------------------------------------
# A small attention head against the exact flow.


@pytest.mark.slow  # fast twin: test_correlated_design_matches_flow_at_small_alpha
def test_attention_head_matches_flow():
    task = models.diagonal_attention(n=200, tokens=4, dim=3, teacher_nonzero=(2, 2), seed=1)
    path = quiet(task.model, u0=task.u0, v0=task.v0)
    assert path.num_stages >= 2 and path.result == "successful"
    _check_invariants(path)
    _compare_with_flow(task, path)


@pytest.mark.slow
def test_attention_head_matches_flow_larger():
    task = models.diagonal_attention(n=200, tokens=4, dim=6, seed=0)
    path = quiet(task.model, u0=task.u0, v0=task.v0)
    assert path.num_stages >= 3
    _check_invariants(path)
    _compare_with_flow(task, path)


def _compare_with_flow(task, path, log_alpha=np.log(1e-100)):
    """At α = 1e-100 (log(1/α) ≈ 230) the flow on [T_k + δ, T_{k+1} − δ] differs from θ^k by the sleeping
    coordinates, ≤ α^{b_margin} = e^{−11.5} ≈ 1e-5 with b_margin = 0.05, and by the tail of the previous
    relaxation, exp(−λ δ log(1/α)) with δ = 15 % of each window: both below the tolerance 1e-4 on β
    (relative to max |β|). The stage times of the flow (first τ with |β_i| above half its limit) are
    within O(1 / log(1/α)) of T_k: the O(1) unscaled duration of phase (B) divided by log(1/α)."""
    taus, stages = _window_times(path, margin=0.15, b_margin=0.05)
    flow = simulate_flow(task.model, u0=task.u0, v0=task.v0, ts=taus, log_alpha=log_alpha)
    np.testing.assert_allclose(flow.beta, path.beta[stages], atol=1e-4 * np.abs(path.beta).max())
    np.testing.assert_allclose(flow.loss, path.loss[stages], rtol=1e-4, atol=1e-10)
    # Stage times: scan each transition on a fine grid (the grids of all transitions in one flow).
    grids = [np.linspace(0.95 * T, 1.05 * T, 201) for T in path.times[1 : path.num_stages + 1]]
    scan, where = np.unique(np.concatenate(grids), return_inverse=True)  # neighbouring grids may overlap
    fine = simulate_flow(task.model, u0=task.u0, v0=task.v0, ts=scan, log_alpha=log_alpha)
    for k, grid in enumerate(grids):
        i, T = path.activated[k], path.times[k + 1]
        beta = fine.beta[where[201 * k : 201 * (k + 1)]]
        crossed = np.abs(beta[:, i]) >= 0.5 * np.abs(path.beta[k + 1, i])
        assert crossed.any(), f"stage {k + 1} ({task.model.names[i]}) not seen near T = {T}"
        assert grid[np.argmax(crossed)] == pytest.approx(T, rel=0.02)


# ----------------------------------------------------------------------------------------------
# Degenerate cases.


def test_ties_are_reported_and_broken_by_index():
    beta_star = np.array([0.5, -2.0, 2.0, 0.0])
    with pytest.warns(AssumptionWarning, match=r"tied between β\[1\] and β\[2\]") as record:
        path = greedy_limit(linear(beta_star))
    assert record[0].filename == __file__  # the warning points at the caller
    np.testing.assert_array_equal(path.activated, [1, 2, 0])
    np.testing.assert_allclose(path.times[1:], [0.5, 0.5, 2.0])
    assert not path.assumptions_ok[0, 0] and path.assumptions_ok[1:, 0].all()
    assert path.delta_gap[0] <= 1e-12 and path.runner_up[0] == 2
    assert any("tied" in w for w in path.warnings)
    np.testing.assert_allclose(path.beta[-1], beta_star, atol=1e-9)
    _check_invariants(path)


def test_duplicated_feature_is_a_permanent_tie():
    """Two identical columns have equal Δ at every stage: Assumption 4.2 fails with both named; the
    tie-break activates the lower index, after which the twin's gradient is exactly that of the
    active coordinate, 0, so it never activates."""
    X = np.random.default_rng(0).standard_normal((N, P))
    X[:, 1] = X[:, 0]
    model = models.diagonal_linear_model(X, X @ np.array([1.0, 1.0, 0.3, 0.0]))
    with pytest.warns(AssumptionWarning, match=r"4.2 fails at stage 0: Δ is tied between β\[0\] and β\[1\]"):
        path = greedy_limit(model)
    assert path.activated[0] == 0 and 1 not in path.activated
    assert not path.assumptions_ok[0, 0]
    assert path.beta[-1, 0] == pytest.approx(2.0, rel=1e-8)
    _check_invariants(path)


def _quartic_h(x, beta):
    """``h = x_0 (1 − (1 − β_0)²) + x_1 β_1``: L has a degenerate minimum at β_0 = 1 (zero curvature)."""
    return x[0] * (1 - (1 - beta[0]) ** 2) + x[1] * beta[1]


def test_degenerate_minimum_fails_4_3():
    """β_0 settles on a minimum with zero curvature (L ∝ (1 − β_0)⁴): its restricted Hessian eigenvalue is ≈ 0,
    while the β_1 direction has 4|β_1| = 1.2 = 0.6 G (G = |g_0(0)| = 2); ``hessian = 1e-2`` separates them."""
    q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((N, 2)))
    X = np.sqrt(N) * q
    model = DiagonalModel(_quartic_h, X, X @ np.array([1.0, 0.3]), p=2)
    with pytest.warns(AssumptionWarning, match="Assumption 4.3 fails at stage 1") as record:
        path = greedy_limit(model, tolerances=GreedyTolerances(hessian=1e-2))
    np.testing.assert_array_equal(path.activated, [0, 1])
    np.testing.assert_array_equal(path.assumptions_ok[:, 1], [True, False, False])
    assert path.hessian_min_eig[0] == np.inf and 0 <= path.hessian_min_eig[1] < 1e-3
    assert set(path.warnings) == {str(w.message) for w in record}


def test_zero_gradient_at_start_gives_empty_path():
    path = quiet(linear(np.zeros(P)))
    assert path.num_stages == 0 and path.result == "successful"
    np.testing.assert_array_equal(path.times, [0.0])
    np.testing.assert_array_equal(path.beta, np.zeros((1, P)))
    np.testing.assert_array_equal(path.final_delta, np.inf)
    np.testing.assert_array_equal(path.weights_at([0.0, 1e9]), np.zeros((2, P)))


def test_max_stages_stops_with_the_next_delta():
    beta_star = np.array([0.5, -3.0, 0.0, 1.25])
    path = quiet(linear(beta_star), max_stages=1)
    assert path.num_stages == 1 and path.result == "max_stages"
    assert path.final_delta[3] == pytest.approx(1 / 1.25 - 1 / 3)
    assert quiet(linear(beta_star), max_stages=0).times.shape == (1,)


def test_degenerate_initialisation_is_an_error():
    model = linear(np.array([1.0, 0.5, 0.0, 0.0]))
    u0 = np.array([1.0, 0.3, -0.5, 0.2])
    v0 = np.array([0.1, 0.2, 0.5, 0.1])
    with pytest.raises(ValueError, match=r"\|u0_i\| = \|v0_i\| at coordinates \[2\] \(β\[2\]\).*Assumption 4.2"):
        greedy_limit(model, u0=u0, v0=v0)
    with pytest.raises(ValueError, match="both"):
        greedy_limit(model, u0=u0)


def test_near_degenerate_initialisation_warns_and_the_path_is_unchanged():
    """A relative gap ||u0_i| − |v0_i|| of 1e-13 is not degenerate (only an exact tie is): the path is the same,
    with a warning that the flow reaches it only for log(1/α) ≫ log(1e13) = 29.9."""
    model = linear(np.array([1.0, 0.5, 0.0, 0.0]))
    u0 = np.array([1.0, 0.3, -0.5, 0.2])
    v0 = np.array([0.1, 0.2, 0.5 * (1 + 1e-13), 0.1])
    with pytest.warns(AssumptionWarning, match=r"near-degenerate.*coordinates \[2\] \(β\[2\]\).*= 29\.9"):
        path = greedy_limit(model, u0=u0, v0=v0, check_assumptions=False)
    plain = quiet(model, check_assumptions=False)
    np.testing.assert_array_equal(path.activated, plain.activated)
    np.testing.assert_array_equal(path.beta, plain.beta)
    assert path.warnings == ()  # the initialisation is not an assumption of a stage


def test_phase_b_failure_raises_or_is_recorded():
    """A phase (B) that cannot become steady (here: one solver step allowed) ends the path: with throw=True
    an error saying where and why, with throw=False the path up to there, the failure in result and message."""
    model = linear(np.array([0.5, -3.0, 0.0, 1.25]))
    tight = GreedyTolerances(max_steps=1)
    with pytest.raises(RuntimeError, match=r"phase \(B\) of stage 0 \(activating β\[1\]\).*max_steps = 1.*throw=False"):
        greedy_limit(model, tolerances=tight)
    path = quiet(model, tolerances=tight, throw=False)
    assert path.result == "phase_b_failed" and path.num_stages == 0
    assert path.message.startswith("phase (B) of stage 0 (activating β[1]) did not reach a stationary point")
    np.testing.assert_array_equal(path.assumptions_ok, [[True, True, False]])
    assert path.final_delta[1] == pytest.approx(1 / 3) and path.warnings == ()


def _kinked(x, beta):
    """Linear, plus ``sqrt|β_1|`` where ``β_0 > 1``: smooth at 0, but ``g_1`` is NaN where ``β_0 > 1, β_1 = 0``."""
    on = beta[0] > 1.0
    return x @ beta + jnp.where(on, jnp.sqrt(jnp.abs(jnp.where(on, beta[1], 1.0))), 0.0)


def test_a_non_finite_gradient_ends_the_path_at_its_stage():
    """g is finite at θ⁰ = 0 but NaN in β[1] at θ¹ = (2, 0, 0): the path ends before stage 1 with result non_finite,
    saying where, instead of reading the NaN as a zero gradient (T = ∞, "successful")."""
    model = DiagonalModel(_kinked, np.eye(3), np.array([2.0, 0.0, 0.0]), p=3)
    path = greedy_limit(model, check_assumptions=False, throw=False)
    assert path.result == "non_finite" and path.num_stages == 0
    assert path.message == (
        "stage 1: at θ^1, where phase (B) ended, g = −∇L is NaN or infinite in β[1]: h or the loss is not finite, or "
        "not differentiable, there"
    )
    with pytest.raises(RuntimeError, match=r"^greedy_limit: stage 1: .*Pass throw=False to get the path up to stage 0"):
        greedy_limit(model, check_assumptions=False)


def test_separable_cross_entropy_has_no_minimiser():
    """Logistic regression on data that β[0] and β[1] together separate: on that support the loss tends to 0 only as
    ‖β‖ → ∞, so phase (B) of stage 1 runs off to infinity. The path says so, instead of reporting the point where
    Newton's tolerance stopped (loss 7e-10) as a stationary point; stage 1 (β[0] alone) is a genuine minimum."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((20, 2))
    Y = (X @ np.array([1.0, -0.5]) > 0).astype(int)
    model = DiagonalModel(lambda x, beta: jnp.stack([0.0, x @ beta]), X, Y, p=2, loss="cross_entropy")
    path = quiet(model, check_assumptions=False, throw=False)
    assert path.result == "no_minimiser" and path.num_stages == 1 and path.loss[1] > 0.2
    assert path.message.startswith(
        "no minimiser at stage 2: on the support {β[0], β[1]} the loss falls along the ray β ↦ s·β (L = 7.19e-10, "
    )


def test_tolerances_are_validated():
    with pytest.raises(ValueError, match="stationary"):
        GreedyTolerances(stationary=1e-3, g_zero=1e-6)
    with pytest.raises(ValueError, match="epsilons"):
        GreedyTolerances(epsilons=(1e-3,))
    with pytest.raises(ValueError, match="perturbation"):
        GreedyTolerances(perturbation=0.5)
    with pytest.raises(ValueError, match="max_steps must be a positive integer"):
        GreedyTolerances(max_steps=True)
    assert GreedyTolerances(epsilons=(1e-5, 1e-3)).epsilons == (1e-3, 1e-5)
    with pytest.raises(TypeError, match="GreedyTolerances"):
        greedy_limit(linear(np.ones(P)), tolerances={"g_zero": 1e-3})


def test_g_zero_threshold_ends_the_path():
    """A coordinate whose gradient is below g_zero · ‖g(0)‖_∞ never activates (its Δ counts as ∞)."""
    beta_star = np.array([1.0, 5e-7, 0.0, 0.0])
    path = quiet(linear(beta_star))
    np.testing.assert_array_equal(path.activated, [0])
    assert path.result == "successful"
    loose = quiet(linear(beta_star), tolerances=GreedyTolerances(g_zero=1e-8, stationary=1e-12))
    np.testing.assert_array_equal(loose.activated, [0, 1])


# ----------------------------------------------------------------------------------------------
# Property tests on random linear problems (Gaussian designs: coordinates may leave the support).


@settings(max_examples=6, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    beta_star=st.lists(st.floats(-2, 2).filter(lambda x: abs(x) > 0.05), min_size=P, max_size=P),
)
def test_random_linear_paths_satisfy_the_invariants(seed, beta_star):
    X = np.random.default_rng(seed).standard_normal((N, P))
    model = models.diagonal_linear_model(
        X, X @ np.asarray(beta_star) + 0.1 * np.random.default_rng(seed + 1).standard_normal(N)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AssumptionWarning)
        path = greedy_limit(model)
    assert path.result == "successful"
    _check_invariants(path)
    # The last stage is stationary for the whole problem up to sign constraints: no coordinate has g ≠ 0.
    np.testing.assert_array_equal(path.g[-1], 0.0)

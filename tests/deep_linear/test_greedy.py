"""The deep linear family's greedy low-rank limit (docs/deep-linear.md, *The greedy limit*): the stages of the aligned
whitened task against Saxe's times, every stage from a Gaussian start against the exact flow (fast at one α; slow:
the rate as α → 0), and the assumption checks (the perturbed phase-(B) runs, the checks on the aligned task, and both
failing at a stage that holds a saddle). The escape and the rest: test_sleeping.py; the Hessian: test_gauge.py."""

import jax
import numpy as np
import pytest
from deep_linear_common import A0, S, aligned, gaussian, rotated, whitened
from scipy.integrate import solve_ivp

import gradflow
from gradflow._deep_linear import _small
from gradflow._deep_linear._greedy import balanced_layers, perturbed_layers
from gradflow._deep_linear._model import _pack, _unpack, layer_velocities, product
from gradflow._kit._assumptions import AssumptionWarning


def saxe_stage_times(depth, s=S, a0=A0):
    """``T_r = (a⁰_r)^{−(L−2)} / ((L−2) s_r)``, sorted, and the modes in the order they are learned."""
    times = a0 ** -(depth - 2) / ((depth - 2) * s)
    order = np.argsort(times)
    return times[order], order


@pytest.fixture(scope="module")
def aligned_path():
    """The greedy limit of the whitened task from the aligned start at L = 3, with its checks (the default)."""
    return gradflow.greedy_limit(whitened(3), u0=aligned(3))


def test_greedy_stages_of_the_aligned_whitened_task(aligned_path):
    """Balanced start aligned with ``M = diag(s)`` (L = 3): ``T_r = 1/(a⁰_r s_r)`` in the clocks' order, ``W^k`` the
    learned modes of M; stopped after one stage, ``final_delta`` is the next stage's Δ. The times to 1e-6 relative: the later stages' come from the α-free flow of the sleeping layers,
    whose rest is read at a growth of 1e7 (measured: ≤ 4e-8 here, 6e-7 at L = 4)."""
    depth = 3
    path = aligned_path
    times, order = saxe_stage_times(depth)
    np.testing.assert_allclose(path.times, np.concatenate([[0.0], times]), rtol=1e-6)
    for k in range(4):
        learned = np.zeros(3)
        learned[order[:k]] = S[order[:k]]
        np.testing.assert_allclose(path.W[k], np.diag(learned), atol=1e-8)
        assert path.loss[k] == pytest.approx(0.5 * np.sum((S - learned) ** 2), abs=1e-12)
    assert path.result == "successful" and path.final_delta.tolist() == [np.inf]  # nothing is left to learn
    first = gradflow.greedy_limit(whitened(depth), u0=aligned(depth), max_stages=1, check_assumptions=False)
    assert first.result == "max_stages" and "final_delta holds the next Δ" in first.message
    assert first.final_delta[0] == pytest.approx(times[1] - times[0], rel=1e-6)
    np.testing.assert_array_equal(path.b[2], [0.0, 0.0, 1.0])
    np.testing.assert_allclose(path.weights_at(np.array([0.1, 0.7])), path.W[[0, 2]])


def test_perturbed_layers_move_the_held_coordinates_only():
    """Each of the first ``rank`` hidden coordinates' rows (columns of ``W_L``) moves by about ``size`` of its norm,
    the new mode's as much relative to its own small scale, and the sleeping coordinates stay zero."""
    W = np.diag([3.0, 2.0, 0.0, 0.0])
    shapes = [(4, 4)] * 4
    layers = balanced_layers(W, 2, shapes, (np.eye(4)[2], 1e-12, np.eye(4)[2]))
    moved = perturbed_layers(layers, 3, 1e-2, np.random.default_rng(0))
    for l, (before, after) in enumerate(zip(layers, moved)):
        np.testing.assert_array_equal(after[3:] if l < 3 else after[:, 3:], 0.0)
        if l in (1, 2):
            np.testing.assert_array_equal(after[:, 3:], 0.0)
        rows = (before[:3], after[:3]) if l < 3 else (before[:, :3].T, after[:, :3].T)
        change = np.linalg.norm(rows[1] - rows[0], axis=1) / np.linalg.norm(rows[0], axis=1)
        assert np.all((change > 1e-3) & (change < 5e-2)), change


def test_greedy_checks_on_the_aligned_whitened_task(aligned_path):
    """At the truncations the Hessian's smallest eigenvalue is ``s_k^{1/3}(s_k − s_{k+1})`` (``3 s_3^{4/3}`` at full
    rank), the perturbed phase-(B) runs end where the unperturbed one does, and every check holds."""
    path, depth = aligned_path, 3
    s = np.sort(S)[::-1]
    expected = [s[k - 1] ** ((depth - 2) / depth) * (s[k - 1] - (s[k] if k < 3 else 0.0)) for k in (1, 2)]
    expected += [depth * s[2] ** (2 * (depth - 1) / depth)]
    assert path.hessian_min_eig[0] == np.inf
    np.testing.assert_allclose(path.hessian_min_eig[1:], expected, rtol=1e-7)
    assert path.perturbation_spread.shape == (3,) and np.all(path.perturbation_spread <= 1e-8)
    assert path.assumptions_ok.all() and path.warnings == ()


def test_greedy_checks_flag_a_stage_at_a_saddle():
    """An aligned start with mode 2 larger than mode 1 (``a⁰ = (0.5, 1, 1)``, L = 3) learns ``s_2`` first: ``W^1 =
    s_2 e_2 e_2ᵀ`` is a stationary point but not a minimum on the rank-1 matrices (the Hessian's smallest eigenvalue
    ``s_2^{1/3}(s_2 − s_1) < 0``, Assumption 4.3), and phase (B) from perturbed starts leaves it for ``s_1 e_1 e_1ᵀ``
    (spread ``‖s_1 e_1e_1ᵀ − s_2 e_2e_2ᵀ‖ / s_2``, Assumption 4.4): both warned and flagged. Without the checks,
    neither runs."""
    model, W0 = whitened(3), aligned(3, np.array([0.5, 1.0, 1.0]))
    with pytest.warns(AssumptionWarning) as caught:
        path = gradflow.greedy_limit(model, u0=W0, max_stages=1)
    np.testing.assert_allclose(path.W[1], np.diag([0.0, S[1], 0.0]), atol=1e-8)
    assert path.hessian_min_eig[1] == pytest.approx(S[1] ** (1 / 3) * (S[1] - S[0]), rel=1e-7)
    assert path.perturbation_spread[0] == pytest.approx(np.hypot(S[0], S[1]) / S[1], rel=1e-6)
    assert path.assumptions_ok.tolist() == [[True, True, False], [True, False, True]]
    texts = [str(w.message) for w in caught if w.category is AssumptionWarning]
    assert any("Assumption 4.4 fails" in t for t in texts) and any(
        "W^1 is not a strict local minimum" in t for t in texts
    )
    assert path.warnings == tuple(texts)
    unchecked = gradflow.greedy_limit(model, u0=W0, max_stages=1, check_assumptions=False)
    assert np.isnan(unchecked.hessian_min_eig[1]) and np.isnan(unchecked.perturbation_spread).all()
    assert unchecked.assumptions_ok.all() and unchecked.warnings == ()


def test_greedy_refuses_depth_two_and_a_missing_start():
    with pytest.raises(ValueError, match="FactorizedModel"):
        gradflow.greedy_limit(whitened(2), u0=aligned(2))
    with pytest.raises(ValueError, match="give the layers' initial directions u0"):
        gradflow.greedy_limit(whitened(3))


@pytest.mark.slow
def test_greedy_stages_at_depth_four():
    """At L = 4 the aligned start (``a⁰ = 1, 0.8, 1.2``) learns ``s_3`` before ``s_2``: ``W^2`` holds the triples 1
    and 3, not a minimum on the rank-2 matrices (``s_3^{1/2}(s_3 − s_2) = −1``), and the checks say so (fast twin:
    test_greedy_checks_flag_a_stage_at_a_saddle)."""
    with pytest.warns(AssumptionWarning, match="W\\^2 is not a strict local minimum"):
        path = gradflow.greedy_limit(whitened(4), u0=aligned(4))
    np.testing.assert_allclose(path.times[1:], saxe_stage_times(4)[0], rtol=1e-6)
    np.testing.assert_allclose(path.hessian_min_eig[1:], [np.sqrt(3), -1.0, 4.0], rtol=1e-7)
    assert path.assumptions_ok[:, 1].tolist() == [True, True, False, True]
    assert path.perturbation_spread[1] > 0.1 and path.perturbation_spread[[0, 2]].max() <= 1e-8


def gaussian_start(depth, seed=0):
    """The whitened task of ``depth`` layers and an i.i.d. N(0, 1) start (unbalanced, unaligned)."""
    model = whitened(depth)
    rng = np.random.default_rng(seed)
    return model, tuple(rng.standard_normal(s) for s in model.layer_shapes)


def stage_crossings(model, W0, path, alpha, atol=1e-8, width=0.02, points=201):
    """The flow's stage times: where its loss has covered half the drop ``L(W^{k−1}) → L(W^k)``, interpolated on a
    grid of ``points`` in ``[T_k − width, T_k + width/2]`` around every greedy ``T_k``, then again on a grid 20 times
    finer around that estimate (a jump is ``O(α^{L−2})`` wide: a grid coarser than it limits the interpolation)."""
    centres, spans = path.times[1:], np.array([-width, width / 2])
    for _ in range(2):
        ts = np.concatenate([[0.0], *[c + np.linspace(*spans, points) for c in centres]])
        flow = gradflow.simulate_flow(model, u0=W0, ts=ts, alpha=alpha, atol=atol)
        out = []
        for k in range(1, centres.size + 1):
            level = 0.5 * (path.loss[k - 1] + path.loss[k])
            window = slice(1 + (k - 1) * points, 1 + k * points)
            t, y = ts[window], flow.loss[window]
            j = int(np.argmax(y <= level))
            assert 0 < j, f"stage {k}: the flow's loss is below the level on the whole window"
            out.append(t[j - 1] + (level - y[j - 1]) * (t[j] - t[j - 1]) / (y[j] - y[j - 1]))
        centres, spans = np.array(out), spans / 20
    return centres


def test_every_stage_time_is_the_flows_from_a_gaussian_start():
    """From a Gaussian start (L = 3, whitened 3×3 task) every greedy ``T_k`` is where the layers' own flow (SciPy's
    LSODA on ``dW_l/dt = W_{>l}ᵀ (diag(s) − W) W_{<l}ᵀ`` from ``α W0``: no gradflow) covers half of the stage's loss
    drop, at α = 1e-3 to ``O(α)`` (measured: 2.9e-4, 5.0e-4, 1.25e-3, as on gradflow's flow; fast twin of
    test_every_stage_time_approaches_the_flows_as_alpha_goes_to_zero). The per-mode clock rule this replaced put
    ``T_2`` at 0.308 and ``T_3`` at 1.21 on a 3×3 task where the flow has 0.494 and 1.003."""
    model, W0 = gaussian_start(3)
    path = gradflow.greedy_limit(model, u0=W0, check_assumptions=False)
    assert path.result == "successful" and path.times.size == 4
    alpha, shapes, M = 1e-3, [w.shape for w in W0], np.diag(S)

    def rhs(_, y):
        layers = _unpack(y, shapes)
        return _pack(layer_velocities(layers, M - product(layers)))

    def crossing(k):  # the loss at half the drop L(W^{k−1}) → L(W^k)
        def event(_, y):
            return 0.5 * np.sum((product(_unpack(y, shapes)) - M) ** 2) - 0.5 * (path.loss[k - 1] + path.loss[k])

        return event

    events = [crossing(k) for k in (1, 2, 3)]
    t_end = 1.2 * path.times[-1] / alpha  # τ = t α
    sol = solve_ivp(rhs, (0.0, t_end), alpha * _pack(W0), method="LSODA", rtol=1e-10, atol=1e-14, events=events)
    detected = np.array([times[0] * alpha for times in sol.t_events])
    np.testing.assert_array_less(np.abs(detected - path.times[1:]), 2e-3)


@pytest.mark.slow
@pytest.mark.parametrize("depth, alphas, atol", [(3, (1e-2, 1e-3, 1e-4), 1e-8), (4, (1e-2, 5.5e-3, 3e-3), 1e-9)])
def test_every_stage_time_approaches_the_flows_as_alpha_goes_to_zero(depth, alphas, atol):
    """A Gaussian start: the flow's stage times, detected half-way on a fine grid around every ``T_k``, approach the
    greedy ``T_k`` about like α (measured: tenfold per tenfold α at L = 3; 2.0–2.3-fold per 1.8-fold α at L = 4, the
    later stages; fast twin: test_every_stage_time_is_the_flows_from_a_gaussian_start). At L = 4 the flow's own error
    at late stages needs atol = 1e-9, and with it α ≥ 3e-3 (its range); there ``T_1``'s error, ``O(α²)``, is at the
    detection's floor (≈ 3e-6) and is only bounded."""
    model, W0 = gaussian_start(depth)
    path = gradflow.greedy_limit(model, u0=W0, check_assumptions=False)
    errors = np.array([np.abs(stage_crossings(model, W0, path, a, atol) - path.times[1:]) for a in alphas])
    if depth == 3:
        assert np.all(errors[1:] < errors[:-1] / 5.0), errors
    else:
        assert np.all(errors[1:, 1:] < errors[:-1, 1:] / 1.6) and np.all(errors[:, 0] < 2e-5), errors


def test_the_greedy_limit_carries_its_rest_as_the_small_alpha_path_does():
    """The rotated task at L = 3 from a Gaussian start: the greedy limit's stage times equal the small-α path's to 3e-7
    relative (both carry the rest through each jump; projecting it, the third was 1.1e-6 off). The carrying itself
    against the flow's derivative: test_sleeping.py (slow)."""
    model, W0 = rotated(3), gaussian(3)
    path = gradflow.greedy_limit(model, u0=W0, check_assumptions=False)
    with jax.enable_x64(True):
        stages = _small.path(model, W0, 7.0, rtol=0.0, atol=1e-8, max_steps=None, progress=False)[0]
    np.testing.assert_allclose(path.times[1:], [s.end for s in stages[:-1]], rtol=3e-7)


def test_a_failed_carry_is_reported_not_passed_over(monkeypatch):
    """The carry's DOP853 failing to carry the sleeping layers through a jump: the small-α path ends
    ``solver_failed`` at that jump, saying why, and the greedy limit projects the rest instead, with a warning saying
    so."""
    from scipy.integrate import DOP853

    from gradflow._deep_linear import _jump

    class Failing(DOP853):
        def _step_impl(self):
            return False, "Required step size is less than spacing between numbers."

    monkeypatch.setattr(_jump, "DOP853", Failing)
    T = saxe_stage_times(3)[0]
    flow = gradflow.simulate_flow(
        whitened(3), u0=aligned(3), ts=[0.0, 0.5 * T[0], T[-1] + 1.0], log_alpha=-1000.0, throw=False
    )
    assert flow.result == "solver_failed" and np.all(np.isfinite(flow.W[:2])) and np.all(np.isinf(flow.W[2:]))
    assert "could not be carried through the jump out of stage 0" in str(flow.message)
    assert "Required step size" in str(flow.message)
    with pytest.warns(UserWarning, match="could not be carried through the jump .* projected instead"):
        path = gradflow.greedy_limit(whitened(3), u0=aligned(3), check_assumptions=False)
    assert path.result == "successful"
    np.testing.assert_allclose(path.times[1:], T, rtol=1e-6)

"""The depth-L greedy limit (docs/depth.md, *The greedy limit*): its stages against Saxe's learning times, the
clocks of sleeping coordinates, its checkpoint, and from unbalanced starts (*The clock*;
`theory.derive_unbalanced_clock`) the clocks against the quadrature oracle and against independent DOP853 solves of
the raw layers, and the greedy limit of a start that crosses zero against the exact flow."""

import numpy as np
import pytest
from depth_common import MODEL3, W_BALANCED, S, whitened
from scipy.integrate import solve_ivp

import gradflow
import theory
from gradflow._depth._greedy import initial_clocks

STARTS = {  # (L, W0 of one coordinate): the smallest layer first or not, equal or different C_l
    "L3-equal": np.array([0.3, 1.0, -1.0]),
    "L3": np.array([1.1, -0.25, 0.7]),
    "L4": np.array([0.9, 0.4, -1.3, 0.6]),
}


@pytest.mark.parametrize("w0", STARTS.values(), ids=STARTS.keys())
def test_clocks_are_the_quadrature(w0):
    L = w0.size
    c0, cmax, s = initial_clocks(w0[:, None])
    m = np.argmin(np.abs(w0))
    C = np.delete(w0, m) ** 2 - w0[m] ** 2
    assert c0[0] == pytest.approx((L - 2) * theory.unbalanced_clock(w0[m], C), rel=1e-10)
    assert cmax[0] == pytest.approx((L - 2) * theory.crossing_clock(C), rel=1e-10)
    assert s[0] == np.sign(np.prod(w0))


def test_equal_layers_have_the_closed_form():
    """L = 3, C_2 = C_3 = C: c(ρ) = atan(√C/ρ)/√C and c^max = π/√C."""
    c0, cmax, _ = initial_clocks(STARTS["L3-equal"][:, None])
    C = 1.0 - 0.3**2
    assert c0[0] == pytest.approx(np.arctan(np.sqrt(C) / 0.3) / np.sqrt(C), rel=1e-12)
    assert cmax[0] == pytest.approx(np.pi / np.sqrt(C), rel=1e-12)


@pytest.mark.parametrize("w0", STARTS.values(), ids=STARTS.keys())
@pytest.mark.parametrize("along", [True, False], ids=["along", "against"])
def test_the_raw_layers_wake_when_the_clock_runs_out(w0, along):
    """``dw_l/dt = g Π_{k≠l} w_k`` with g frozen at α = 1 (so τ = t), solved by DOP853 on the L layers: the
    smallest layer reaches ``±R`` at ``(c⁰ − c(R))/((L−2)|g|)`` along the gradient (``s g > 0``) and, against it,
    crosses 0 and reaches ``∓R`` at ``(c^max − c⁰ − c(R))/((L−2)|g|)``, β then of the opposite sign."""
    L, R = w0.size, 30.0
    c0, cmax, s = initial_clocks(w0[:, None])
    g = 0.7 * s[0] * (1.0 if along else -1.0)
    m = np.argmin(np.abs(w0))
    C = np.delete(w0, m) ** 2 - w0[m] ** 2
    c_R = (L - 2) * theory.unbalanced_clock(R, C)
    expected = ((c0[0] if along else cmax[0] - c0[0]) - c_R) / ((L - 2) * abs(g))

    def field(t, w):
        return [g * np.prod(np.delete(w, l)) for l in range(L)]

    def reached(t, w):
        return abs(w[m]) - R

    reached.terminal = True
    sol = solve_ivp(field, (0.0, 10 * expected), w0, method="DOP853", rtol=1e-12, atol=1e-12, events=reached)
    assert sol.status == 1
    assert sol.t_events[0][0] == pytest.approx(expected, rel=1e-8)
    beta = np.prod(sol.y_events[0][0])
    assert np.sign(beta) == (s[0] if along else -s[0])


@pytest.mark.slow  # compiles a depth-3 flow; the fast twins: the two tests above
def test_a_start_that_crosses_zero_is_learned_with_the_other_sign_as_the_flow_learns_it():
    """Whitened square loss ``½‖β − (2, 1)‖²`` at L = 3; coordinate 1 starts with β < 0, against its gradient: the
    greedy limit wakes it positive at ``T_2 = (c^max − c⁰)/(L−2)``, and the exact flow at ``log α = −40`` holds the
    limit's β on every window."""
    target = np.array([2.0, 1.0])
    X, Y = np.sqrt(2.0) * np.eye(2), np.sqrt(2.0) * target
    model = gradflow.DepthModel(lambda x, beta: x @ beta, X, Y, p=2, depth=3)
    W0 = np.array([[1.0, 0.3], [1.0, 1.0], [1.0, -1.0]])
    path = gradflow.greedy_limit(model, u0=W0)
    c0, cmax, _ = initial_clocks(W0)
    np.testing.assert_allclose(path.times[1:], [c0[0] / 2.0, (cmax[1] - c0[1]) / 1.0], rtol=1e-9)
    np.testing.assert_allclose(path.beta[-1], target, atol=1e-9)
    T = path.times[1:]
    ts = np.array([0.5 * T[0], T[0] + 0.02, 0.5 * (T[0] + T[1]), T[1] - 0.02, T[1] + 0.02, 1.5 * T[1]])
    flow = gradflow.simulate_flow(model, u0=W0, ts=ts, log_alpha=-40.0)
    assert flow.result == "successful"
    np.testing.assert_allclose(flow.beta, path.weights_at(ts), atol=1e-6)


@pytest.mark.parametrize("depth", [3, pytest.param(4, marks=pytest.mark.slow)])
def test_greedy_limit_gives_saxe_learning_times(depth):
    """Whitened modes from balanced starts W0 = a0: T_k = a0^{-(L-2)} / ((L-2) s_k), β^k the staircase of s."""
    a0 = np.array([1.0, 0.8, 1.3])
    W0 = np.broadcast_to(a0, (depth, 3)).copy()
    path = gradflow.greedy_limit(MODEL3 if depth == 3 else whitened(depth), u0=W0)
    order = np.argsort(a0 ** -(depth - 2) / S)
    np.testing.assert_allclose(path.times[1:], np.sort(a0 ** -(depth - 2) / ((depth - 2) * S)), rtol=1e-9)
    np.testing.assert_array_equal(path.activated, order)
    for k in range(1, 4):
        expected = np.where(np.isin(np.arange(3), order[:k]), S, 0.0)
        np.testing.assert_allclose(path.beta[k], expected, atol=1e-7)
    assert path.result == "successful" and np.all(path.hessian_min_eig[1:] > 0)


def test_greedy_limit_clock_moves_linearly_and_depends_on_the_start():
    """A coordinate with s g < 0 never wakes from a balanced start; its clock grows as (L − 2)|g| τ."""
    W0 = np.ones((3, 3))
    W0[0, 1] = -1.0  # β_1 < 0 from the start, g_1 = 2 wants it positive: it cannot change sign
    path = gradflow.greedy_limit(MODEL3, u0=W0)
    np.testing.assert_array_equal(path.activated, [0, 2])
    np.testing.assert_allclose(path.times[1:], [1 / 3, 1.0])
    assert path.b_at(2.0)[1] == pytest.approx(1.0 + 2.0 * 2.0)  # c = 1 + (L−2)|g| τ
    with pytest.raises(ValueError, match="DiagonalModel"):
        gradflow.greedy_limit(whitened(2), u0=np.ones((2, 3)))


def test_greedy_checkpoint_resumes_and_refuses_another_start(balanced_path, tmp_path):
    full = balanced_path
    file = tmp_path / "path.npz"
    first = gradflow.greedy_limit(MODEL3, u0=W_BALANCED, max_stages=1, checkpoint=file)
    assert first.num_stages == 1
    resumed = gradflow.greedy_limit(MODEL3, u0=W_BALANCED, checkpoint=file)
    np.testing.assert_array_equal(resumed.times, full.times)
    np.testing.assert_array_equal(resumed.beta, full.beta)
    with pytest.raises(ValueError, match="another greedy path"):
        gradflow.greedy_limit(MODEL3, u0=2 * W_BALANCED, checkpoint=file)

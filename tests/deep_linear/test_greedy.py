"""The deep linear family's greedy low-rank limit (docs/deep-linear.md, *The greedy limit*): the first escape time
against a direct solve of the α-free flow, the stages of the aligned whitened task against Saxe's times, and
(slow: compiles flows) the first escape against the exact flow as α → 0."""

import numpy as np
import pytest
from deep_linear_common import A0, S, aligned, whitened
from scipy.integrate import solve_ivp

import gradflow
from gradflow._deep_linear._greedy import _pack, _unpack, first_escape
from gradflow._deep_linear._model import layer_velocities


def saxe_stage_times(depth, s=S, a0=A0):
    """``T_r = (a⁰_r)^{−(L−2)} / ((L−2) s_r)``, sorted, and the modes in the order they are learned."""
    times = a0 ** -(depth - 2) / ((depth - 2) * s)
    order = np.argsort(times)
    return times[order], order


@pytest.mark.parametrize("depth", [3, 4])
def test_first_escape_is_the_blow_up_of_the_alpha_free_flow(depth):
    """``T_1`` (the bounded variables' integral) against DOP853 on ``dŴ_l/dτ = Ŵ_{>l}ᵀ G_0 Ŵ_{<l}ᵀ`` until
    ``‖Ŵ‖ = R``: ``T_1 − τ(R) = O(R^{−(L−2)})``; and the direction is a singular pair of ``G_0``."""
    rng = np.random.default_rng(3)
    shapes = [(4, 3), (4, 4), (2, 4)][:depth] if depth == 3 else [(4, 3), (4, 4), (3, 4), (2, 3)]
    W0 = [rng.standard_normal(s) for s in shapes]
    G0 = rng.standard_normal((2, 3))
    T, u, v = first_escape(G0, [w.copy() for w in W0], depth)
    R = 1e8 if depth == 3 else 1e5

    def rhs(_, y):
        return _pack(layer_velocities(_unpack(y, shapes), G0))

    def big(_, y):
        return np.linalg.norm(y) - R

    big.terminal = True
    sol = solve_ivp(rhs, (0.0, 10.0), _pack(W0), method="DOP853", rtol=1e-13, atol=1e-13, events=big)
    assert sol.status == 1
    assert T - sol.t[-1] == pytest.approx(0.0, abs=10 * R ** -(depth - 2))
    Us, sv, Vts = np.linalg.svd(G0)
    k = int(np.argmax(np.abs(Us.T @ u)))
    assert abs(Us[:, k] @ u) == pytest.approx(1.0, abs=1e-6) and abs(Vts[k] @ v) == pytest.approx(1.0, abs=1e-6)
    assert u @ G0 @ v == pytest.approx(sv[k], rel=1e-6)


def test_greedy_stages_of_the_aligned_whitened_task():
    """Balanced start aligned with ``M = diag(s)`` (L = 3): ``T_r = 1/(a⁰_r s_r)`` in the clocks' order, ``W^k`` the
    learned modes of M, ``T_1`` exact and the others flagged conjectures."""
    depth = 3
    path = gradflow.greedy_limit(whitened(depth), u0=aligned(depth))
    times, order = saxe_stage_times(depth)
    np.testing.assert_allclose(path.times, np.concatenate([[0.0], times]), rtol=1e-9)
    for k in range(4):
        learned = np.zeros(3)
        learned[order[:k]] = S[order[:k]]
        np.testing.assert_allclose(path.W[k], np.diag(learned), atol=1e-8)
        assert path.loss[k] == pytest.approx(0.5 * np.sum((S - learned) ** 2), abs=1e-12)
    assert path.result == "successful" and path.conjectured.tolist() == [False, False, True, True]
    np.testing.assert_array_equal(path.b[2], [0.0, 0.0, 1.0])
    np.testing.assert_allclose(path.weights_at(np.array([0.1, 0.7])), path.W[[0, 2]])


def test_greedy_refuses_depth_two_and_a_missing_start():
    with pytest.raises(ValueError, match="FactorizedModel"):
        gradflow.greedy_limit(whitened(2), u0=aligned(2))
    with pytest.raises(ValueError, match="give the layers' initial directions u0"):
        gradflow.greedy_limit(whitened(3))


@pytest.mark.slow
def test_greedy_stages_at_depth_four():
    path = gradflow.greedy_limit(whitened(4), u0=aligned(4))
    np.testing.assert_allclose(path.times[1:], saxe_stage_times(4)[0], rtol=1e-9)


@pytest.mark.slow
def test_first_escape_is_the_flows_as_alpha_goes_to_zero():
    """A Gaussian (unbalanced, unaligned) start, L = 3: the flow's first loss drop, detected half-way on a fine grid
    around ``T_1``, approaches the greedy ``T_1`` like ``α^{L−2}``."""
    depth = 3
    model = whitened(depth)
    rng = np.random.default_rng(0)
    W0 = tuple(rng.standard_normal(s) for s in model.layer_shapes)
    path = gradflow.greedy_limit(model, u0=W0)
    T1 = path.times[1]
    ts = np.concatenate([[0.0], T1 + np.linspace(-0.02, 0.01, 601)])
    level = 0.5 * (path.loss[0] + path.loss[1])
    errors = []
    for alpha in (1e-2, 1e-3, 1e-4):
        flow = gradflow.simulate_flow(model, u0=W0, ts=ts, alpha=alpha)
        k = int(np.argmax(flow.loss <= level))
        t0, t1, y0, y1 = ts[k - 1], ts[k], flow.loss[k - 1], flow.loss[k]
        errors.append(abs(t0 + (level - y0) * (t1 - t0) / (y1 - y0) - T1))
    assert errors[2] < 2e-3 * 1e-2 * 10 and errors[2] < errors[1] / 3 < errors[0] / 9, errors

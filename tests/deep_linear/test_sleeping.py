"""The sleeping layers of the deep linear greedy limit (gradflow/_deep_linear/_sleeping.py): the escape's time,
direction and rest against a direct solve of the α-free flow, the projection off learned subspaces, and the rest
carried through a jump."""

import jax
import numpy as np
import pytest
from deep_linear_common import labels_task
from scipy.integrate import solve_ivp

from gradflow._deep_linear import _sleeping, _small
from gradflow._deep_linear._model import _pack, _unpack, flat_jacobian, flat_velocities, layer_velocities, product
from gradflow._deep_linear._sleeping import carried, escape, learned_frames, off_frames
from gradflow._kit._greedy import GreedyTolerances


@pytest.mark.parametrize("depth", [3, 4])
def test_escape_is_the_blow_up_of_the_alpha_free_flow(depth):
    """``Δ`` (the bounded variables' integral) against DOP853 on ``dŴ_l/dτ = Ŵ_{>l}ᵀ G_0 Ŵ_{<l}ᵀ`` until
    ``‖Ŵ‖ = R``: ``Δ − τ(R) = O(R^{−(L−2)})``; the direction is a singular pair of ``G_0``, held by unit balanced
    layers ``b_{l+1} b_lᵀ``, and the rest is off it: the direct solution at ``‖Ŵ‖ = R`` off the ``b_h`` is the rest,
    to the ``O(1/R)`` it still lacks."""
    rng = np.random.default_rng(3)
    shapes = [(4, 3), (4, 4), (2, 4)][:depth] if depth == 3 else [(4, 3), (4, 4), (3, 4), (2, 3)]
    W0 = [rng.standard_normal(s) for s in shapes]
    G0 = rng.standard_normal((2, 3))
    out = escape(G0, [w.copy() for w in W0], depth)
    T, u, v = out.delta, out.u, out.v
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
    d = out.direction
    np.testing.assert_allclose(product(list(d)), np.outer(u, v), atol=1e-12)
    near = _unpack(sol.y[:, -1], shapes)
    for l in range(depth):
        np.testing.assert_allclose(np.linalg.norm(d[l]), 1.0, rtol=1e-12)
        np.testing.assert_allclose(d[l].T @ out.rest[l], 0.0, atol=1e-9)  # off b_{l+1} ...
        np.testing.assert_allclose(out.rest[l] @ d[l].T, 0.0, atol=1e-9)  # ... and off b_l
        Pout, Pin = np.eye(shapes[l][0]) - d[l] @ d[l].T, np.eye(shapes[l][1]) - d[l].T @ d[l]
        np.testing.assert_allclose(Pout @ near[l] @ Pin, out.rest[l], atol=1e-4 * np.abs(out.rest[l]).max())


def test_frames_are_the_learned_subspaces_and_off_frames_projects_off_them():
    """Layers holding a rank-2 ``W``: the frames span ``W_1``'s rows and every ``W_l``'s columns; a sleeping layer
    projected off them has no component on either side, and one already off them is unchanged."""
    rng = np.random.default_rng(2)
    layers = [rng.standard_normal((4, 2)) @ rng.standard_normal((2, n)) for n in (5, 4, 4)]
    frames = learned_frames(layers, 2)
    assert [q.shape for q in frames] == [(5, 2), (4, 2), (4, 2), (4, 2)]
    np.testing.assert_allclose(layers[0] @ (np.eye(5) - frames[0] @ frames[0].T), 0.0, atol=1e-12)
    for l, w in enumerate(layers):
        np.testing.assert_allclose((np.eye(4) - frames[l + 1] @ frames[l + 1].T) @ w, 0.0, atol=1e-12)
    S = [rng.standard_normal(w.shape) for w in layers]
    off = off_frames(S, frames)
    for l, w in enumerate(off):
        np.testing.assert_allclose(frames[l + 1].T @ w, 0.0, atol=1e-12)
        np.testing.assert_allclose(w @ frames[l], 0.0, atol=1e-12)
    for a, b in zip(off_frames(off, frames), off):
        np.testing.assert_allclose(a, b, atol=1e-12)


def test_the_rest_is_read_at_its_growth_whatever_the_cut(monkeypatch):
    """At L = 5 the blow-up's cut, ``(L−2)ρ = 36``, comes at a growth of ``e^{12} = 1.6e5``, before the growth of
    1e7 where the rest is read: the escape runs on to the read. Moving the cut to ``(L−2)ρ = 100`` then changes the
    rest only by what the later cut adds to the direction it is projected off (1.6e-4 relative; 1.3e-3 when the
    rest was read at the cut)."""
    rng = np.random.default_rng(1)
    U, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    V, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    G = U @ np.diag([3.0, 2.0, 1.0]) @ V.T
    rng = np.random.default_rng(0)
    S = [rng.standard_normal((3, 3)) / np.sqrt(3) for _ in range(5)]
    rests = []
    for cut in (36.0, 100.0):
        monkeypatch.setattr(_sleeping, "_ESCAPED", cut)
        rests.append(_pack(escape(G, S, 5).rest))
    assert np.linalg.norm(rests[0] - rests[1]) < 5e-4 * np.linalg.norm(rests[1])


@pytest.mark.slow
def test_the_rest_is_carried_through_a_jump_by_the_linearised_flow():
    """:func:`carried` is the derivative of the layers' flow along phase (B) in its start: on the cross-entropy task
    (L = 3, whose jump turns the learned subspaces), the rest carried from a random ``S`` equals the central difference
    of the flows started at ``A(0) ± εS`` (ε = 1e-5, a 200th of the new mode's start), to 1e-4 relative; the rest
    merely projected off the new learned subspaces (as before 2026-11-30) is 1e-2 away from it."""
    model = labels_task(3)
    rng = np.random.default_rng(1)
    W0 = tuple(rng.standard_normal(s) / np.sqrt(3) for s in model.layer_shapes)
    shapes, eps = tuple(model.layer_shapes), 1e-5
    rest = tuple(np.random.default_rng(2).standard_normal(s) for s in shapes)

    def flow(start, t_end):
        return solve_ivp(
            lambda _, y: np.asarray(flat_velocities(model, y, shapes)),
            (0.0, t_end),
            start,
            method="LSODA",
            jac=lambda _, y: np.asarray(flat_jacobian(model, y, shapes)),
            rtol=1e-10,
            atol=1e-12,
            dense_output=True,
        )

    with jax.enable_x64(True):
        stages = _small.path(model, W0, 4.0, rtol=0.0, atol=1e-8, max_steps=None, progress=False)[0]
        assert stages[0].jump and len(stages) == 2
        start, t_end = stages[0].jump[0](0.0), stages[0].jump[-1].t_max
        jump = [flow(start, t_end).sol]  # phase (B) at the tolerance of the differences
        end = carried(model, jump, rest, GreedyTolerances(ode_rtol=1e-9, ode_atol=1e-11))[1]
        difference = flow(start + eps * _pack(rest), t_end).y[:, -1] - flow(start - eps * _pack(rest), t_end).y[:, -1]
    difference /= 2 * eps
    np.testing.assert_allclose(_pack(end), difference, atol=1e-4 * np.abs(difference).max())
    frames = learned_frames(stages[1].layers, 1)
    projected, exact = (_pack(off_frames(_unpack(y, shapes), frames)) for y in (_pack(rest), difference))
    assert np.abs(projected - exact).max() > 1e-2 * np.abs(exact).max()

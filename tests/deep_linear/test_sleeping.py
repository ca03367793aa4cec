"""The sleeping layers of the deep linear greedy limit (gradflow/_deep_linear/_sleeping.py): the escape's time,
direction and rest against a direct solve of the α-free flow, the projection off learned subspaces, and the rest
carried through a jump."""

import jax
import numpy as np
import pytest
from deep_linear_common import labels_task
from scipy.integrate import solve_ivp

from gradflow._deep_linear import _sleeping, _small
from gradflow._deep_linear._jump import Jump, carry
from gradflow._deep_linear._model import _pack, _unpack, flat_jacobian, flat_velocities, layer_velocities, product
from gradflow._deep_linear._sleeping import escape, learned_frames, off_frames
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


def test_velocity_difference_is_the_difference_without_cancellation():
    """``F(W + X) − F(W)`` against a 40-digit difference, for ``X`` of order one and ``1e-12`` of ``W``: within 1e-14
    relative (measured 2e-16; each term has a factor of ``X``); the float64 difference itself is off by 2e-4 at the small ``X``, so
    the test can tell."""
    mpmath = pytest.importorskip("mpmath")
    rng = np.random.default_rng(4)
    shapes = [(3, 2), (4, 3), (3, 4), (2, 3)]
    W = [rng.standard_normal(s) for s in shapes]
    G = rng.standard_normal((2, 2))
    mpmath.mp.dps = 40

    def exact(X):  # W + X summed in 40 digits
        layers = [mpmath.matrix(w.tolist()) + mpmath.matrix(x.tolist()) for w, x in zip(W, X)]
        return layer_velocities(layers, mpmath.matrix(G.tolist()))

    for size in (1.0, 1e-12):
        X = [size * rng.standard_normal(s) for s in shapes]
        here = _sleeping.velocity_difference(W, X, G)
        far, near = exact(X), exact([0 * x for x in X])
        truth = [np.array((f - n).tolist(), dtype=float) for f, n in zip(far, near)]
        scale = max(np.abs(t).max() for t in truth)
        assert max(np.abs(h - t).max() for h, t in zip(here, truth)) < 1e-14 * scale
        if size < 1:
            naive = [a - b for a, b in zip(layer_velocities([w + x for w, x in zip(W, X)], G), layer_velocities(W, G))]
            assert max(np.abs(n - t).max() for n, t in zip(naive, truth)) > 1e-6 * scale


def _rotated_escape(depth):
    rng = np.random.default_rng(1)
    U, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    V, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    rng = np.random.default_rng(0)
    return U @ np.diag([3.0, 2.0, 1.0]) @ V.T, [rng.standard_normal((3, 3)) / np.sqrt(3) for _ in range(depth)]


@pytest.mark.parametrize("depth", [3, 4, 5])
def test_the_rest_is_followed_beside_the_chain_to_where_it_has_settled(depth, monkeypatch):
    """The rest is split from the chain where ``S`` has grown 100-fold and followed with their coupling until the
    chain has grown ``1e8``-fold (:func:`_sleeping._follow`): splitting it at 1e3 instead changes it by less than
    1e-7 (measured 1e-9, 5e-8, 4e-10 at L = 3, 4, 5), following it to 1e9 by less than 1e-7 (1.7e-9, 6.7e-8, 2.7e-9),
    while stopping at 1e4 leaves it 4e-7 … 7e-5 off: the blow-up's pull on the rest falls with the growth, and it
    is followed until it has."""
    G, S = _rotated_escape(depth)

    def rest(read, followed):
        monkeypatch.setattr(_sleeping, "_READ", read)
        monkeypatch.setattr(_sleeping, "_FOLLOWED", followed)
        return escape(G, S, depth)

    base = rest(1e2, 1e8)
    frames = [base.v[:, None]] + [np.linalg.svd(d)[0][:, :1] for d in base.direction]
    size = np.linalg.norm(_pack(base.rest))

    def distance(out):  # read in the base's frames (the direction still turns by 1e-7 from 1e8 to 1e9)
        return np.linalg.norm(_pack(off_frames(out.rest, frames)) - _pack(base.rest)) / size

    assert distance(rest(1e3, 1e8)) < 1e-7
    assert distance(rest(1e2, 1e9)) < 1e-7
    assert distance(rest(1e2, 1e4)) > 3e-7


@pytest.mark.slow
def test_the_rest_is_carried_through_a_jump_by_the_linearised_flow():
    """:func:`carry` (in the jump's hidden frames, by the blocks with one index off them) is the derivative of the
    layers' flow along phase (B) in its start: on the cross-entropy task (L = 3, whose jump turns the learned
    subspaces), the rest carried from a random ``S`` off the hidden frames (as an escape leaves it) equals the central
    difference of the flows of the whole layers started at ``A(0) ± εS`` (ε = 1e-5, a 200th of the new mode's start),
    to 1e-4 relative; the rest merely projected off the new learned subspaces (as before 2026-11-30) is 1e-2 away
    from it."""
    model = labels_task(3)
    rng = np.random.default_rng(1)
    W0 = tuple(rng.standard_normal(s) / np.sqrt(3) for s in model.layer_shapes)
    shapes, eps = tuple(model.layer_shapes), 1e-5

    def flow(start, t_end, shapes):
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
        assert stages[0].jump is not None and len(stages) == 2
        jump, (m, n) = stages[0].jump, model.shape
        hidden = (np.zeros((n, 0)), *jump.frames[1:-1], np.zeros((m, 0)))
        rest = off_frames(tuple(np.random.default_rng(2).standard_normal(s) for s in shapes), hidden)
        narrow = flow(_pack(jump.narrow_at(0.0)), jump.t_end, jump.shapes)  # at the tolerance of the differences
        end = carry(model, Jump(jump.frames, (narrow.sol,)), rest, GreedyTolerances(ode_rtol=1e-9, ode_atol=1e-11))[1]
        start = _pack(jump.layers_at(0.0))
        difference = (
            flow(start + eps * _pack(rest), jump.t_end, shapes).y[:, -1]
            - flow(start - eps * _pack(rest), jump.t_end, shapes).y[:, -1]
        )
    difference /= 2 * eps
    np.testing.assert_allclose(_pack(end), difference, atol=1e-4 * np.abs(difference).max())
    frames = learned_frames(stages[1].layers, 1)
    projected, exact = (_pack(off_frames(_unpack(y, shapes), frames)) for y in (_pack(rest), difference))
    assert np.abs(projected - exact).max() > 1e-2 * np.abs(exact).max()

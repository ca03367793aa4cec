"""A jump of the deep linear small-α path and greedy limit in hidden frames (gradflow/_deep_linear/_jump.py): phase
(B) as the flow of a narrow network against the flow of the whole layers, and the linearised flow's split by the
indices off the frames against its dense Jacobian."""

import jax
import numpy as np
import pytest
from deep_linear_common import labels_task

import gradflow
from gradflow._deep_linear import _jump
from gradflow._deep_linear._model import _pack, _unpack, flat_jacobian
from gradflow._deep_linear._sleeping import Escape
from gradflow._kit._greedy import GreedyTolerances


def _orthonormal(rng, d, r):
    return np.linalg.qr(rng.standard_normal((d, r)))[0]


@pytest.mark.parametrize("depth", [3, 4])
def test_the_jump_in_frames_is_the_flow_of_the_whole_layers(depth):
    """Phase (B) from ``e b_l b_{l−1}ᵀ`` (``G``'s top singular pair, random unit hidden ``b_l``, hidden width 6) solved in the frames ends where the same
    flow of the whole layers ends, to the tolerance; its dense output is that flow's, and its layers stay in the frames
    (rank one in every hidden space)."""
    rng = np.random.default_rng(3)
    model = gradflow.DeepLinearModel(
        lambda x, W: W @ x,
        rng.standard_normal((40, 4)),
        rng.standard_normal((40, 5)),
        shape=(5, 4),
        depth=depth,
        widths=6,
    )
    shapes = model.layer_shapes
    with jax.enable_x64(True):
        G = np.asarray(model.G(np.zeros((5, 4))))
    U, _, Vt = np.linalg.svd(G)
    b = [Vt[0]] + [_orthonormal(rng, s[0], 1)[:, 0] for s in shapes[:-1]] + [U[:, 0]]  # u, v: G's top pair
    direction = tuple(np.outer(b[l + 1], b[l]) for l in range(depth))
    out = Escape(1.0, direction, b[-1], b[0], tuple(np.zeros(s) for s in shapes))
    tol = GreedyTolerances(ode_rtol=1e-10, ode_atol=1e-12)
    with jax.enable_x64(True):
        scale = float(np.linalg.norm(G, 2))
        A = [np.zeros(s) for s in shapes]
        layers, _, ok, jump = _jump.jump_from(model, A, 0, out, G, 1e-3, scale, tol, dense=True)
        e, window = _jump.start_scale(depth, 1e-3, G, out.u, out.v)
        whole, _, whole_ok = _jump.phase_b(model, [e * d for d in direction], scale, tol, window)
    assert ok and whole_ok and jump.shapes == _jump.narrow_shapes(shapes, 1)
    for w, v in zip(layers, whole):
        np.testing.assert_allclose(w, v, atol=1e-8 * np.abs(v).max())
    assert np.linalg.svd(layers[1], compute_uv=False)[1] < 1e-12 * np.abs(layers[1]).max()
    np.testing.assert_allclose(_pack(jump.layers_at(jump.t_end)), _pack(layers), atol=1e-14)
    np.testing.assert_allclose(_pack(jump.layers_at(0.0)), _pack([e * d for d in direction]), atol=1e-15)


@pytest.mark.parametrize("depth", [3, 4])
def test_the_linearised_flow_splits_by_the_indices_off_the_frames(depth):
    """At layers held in random frames (hidden width 5, rank 2, not stationary; cross-entropy, so ``G`` is not affine)
    the dense Jacobian of the whole layers' velocities maps the blocks with one index in ``P_l`` to themselves by
    ``B_l = [[0, E_lᵀ], [E_l, 0]]`` (each row: ``Y ↦ Y B_lᵀ``) and the blocks with two to zero (the three parts of
    the module)."""
    base = labels_task(depth)
    model = gradflow.DeepLinearModel(base.h, base.X, base.Y, shape=(3, 3), depth=depth, widths=5, loss="cross_entropy")
    rng = np.random.default_rng(4)
    shapes, r = model.layer_shapes, 2
    H = [np.eye(3)] + [_orthonormal(rng, 5, r) for _ in range(depth - 1)] + [np.eye(3)]
    P = [None] + [_jump._complement(h) for h in H[1:-1]] + [None]
    narrow = [rng.standard_normal(s) for s in _jump.narrow_shapes(shapes, r)]
    with jax.enable_x64(True):
        J = np.asarray(flat_jacobian(model, _pack(_jump.wide(narrow, H)), tuple(shapes)))
        E = [np.asarray(e) for e in _jump._couplings(model, _pack(narrow), _jump.narrow_shapes(shapes, r))]
    B = [np.block([[np.zeros((e.shape[1], e.shape[1])), e.T], [e, np.zeros((e.shape[0], e.shape[0]))]]) for e in E]

    def moved(S):
        return _unpack(J @ _pack(S), shapes)

    for l in range(1, depth):  # one index in P_l: rows of P_lᵀ S_l H_{l−1} and columns of H_{l+1}ᵀ S_{l+1} P_l
        Y = rng.standard_normal((3, H[l - 1].shape[1] + H[l + 1].shape[1]))
        S = [np.zeros(s) for s in shapes]
        S[l - 1] = P[l] @ Y[:, : H[l - 1].shape[1]] @ H[l - 1].T
        S[l] = H[l + 1] @ Y[:, H[l - 1].shape[1] :].T @ P[l].T
        V = moved(S)
        expected = Y @ B[l - 1].T
        scale = np.abs(expected).max()
        np.testing.assert_allclose(P[l].T @ V[l - 1] @ H[l - 1], expected[:, : H[l - 1].shape[1]], atol=1e-12 * scale)
        np.testing.assert_allclose((H[l + 1].T @ V[l] @ P[l]).T, expected[:, H[l - 1].shape[1] :], atol=1e-12 * scale)
        rest = [v.copy() for v in V]
        rest[l - 1] -= P[l] @ P[l].T @ V[l - 1] @ H[l - 1] @ H[l - 1].T
        rest[l] -= H[l + 1] @ H[l + 1].T @ V[l] @ P[l] @ P[l].T
        assert np.abs(_pack(rest)).max() < 1e-12 * scale
    for l in range(2, depth):  # two indices off the frames: they do not move
        S = [np.zeros(s) for s in shapes]
        S[l - 1] = P[l] @ rng.standard_normal((3, 3)) @ P[l - 1].T
        assert np.abs(_pack(moved(S))).max() < 1e-13

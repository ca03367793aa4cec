"""The Hessian of the deep linear greedy limit's stages on the rank-k stratum off the gauge
(gradflow/_deep_linear/_gauge.py): the full spectrum against its closed form for matrix factorisation."""

import jax
import numpy as np
import pytest
import scipy.linalg
from deep_linear_common import S

import gradflow
from gradflow._deep_linear._gauge import active_mask, gauge_directions
from gradflow._deep_linear._greedy import balanced_layers, stage_hessian
from gradflow._deep_linear._model import _pack, _unpack, flat_jacobian, layer_velocities


def hessian_spectrum(held, sleeping, m, n, depth):
    """The eigenvalues of the Hessian of ``½‖W − M‖²`` in the layers at the balanced layers of the stationary point
    holding the singular values ``held`` of ``M`` (``sleeping``: the others of its ``min(m, n)``), on the rank-k
    stratum and off the gauge (gradflow/_deep_linear/_gauge.py): the blocks' own, the sleeping row-column pairs, the
    unpaired sleeping rows or columns."""
    L = depth
    own = [
        (a**2 - b**2) / (a ** (2 / L) - b ** (2 / L)) if a != b else L * a ** (2 * (L - 1) / L)
        for a in held
        for b in held
    ]
    pairs = [a ** ((L - 2) / L) * (a + sign * b) for a in held for b in sleeping for sign in (1, -1)]
    unpaired = [a ** (2 * (L - 1) / L) for a in held for _ in range(abs(m - n))]
    return np.sort(own + pairs + unpaired)


@pytest.mark.parametrize("depth", [3, 4])
def test_hessian_on_the_rank_k_stratum_of_matrix_factorisation(depth):
    """``½‖W − M‖²``, M 4×3 with singular values 3, 2, 1: the Hessian of the loss as a function of the blocks
    ``A_1 ∈ R^{k×n}, A_l ∈ R^{k×k}, A_L ∈ R^{m×k}`` (dense, by complex steps of its gradient), in an orthonormal basis of the row space of
    ``D(A_L ⋯ A_1)`` (the complement of the gauge, which is that map's kernel), has the closed-form spectrum of
    :func:`hessian_spectrum` at the truncations (k = 1, 2, 3: smallest ``s_k^{(L−2)/L}(s_k − s_{k+1})``) and at the
    rank-1 point holding the SECOND triple (smallest ``s_2^{(L−2)/L}(s_2 − s_1) < 0``: not a minimum); the family's
    ``stage_hessian`` is its smallest, ``gauge_directions`` span that kernel, and the layers' full Hessian vanishes on
    the sleeping hidden coordinates' entries."""
    m, n, L = 4, 3, depth
    rng = np.random.default_rng(5)
    U, V = np.linalg.qr(rng.standard_normal((m, 3)))[0], np.linalg.qr(rng.standard_normal((n, 3)))[0]
    M = (U * S) @ V.T
    model = gradflow.models.deep_matrix_factorization_model(M, depth=L)
    for held in ([0], [0, 1], [0, 1, 2], [1]):
        k = len(held)
        sleeping = [i for i in range(3) if i not in held]
        W = (U[:, held] * S[held]) @ V[:, held].T
        layers = balanced_layers(W, k, model.layer_shapes)
        y = _pack(layers)[active_mask(model.layer_shapes, k)]  # the blocks A_1, …, A_L, packed
        shapes = [(k, n)] + [(k, k)] * (L - 2) + [(m, k)]

        def product(z, shapes=shapes):
            blocks = _unpack(z, shapes)
            out = blocks[0]
            for a in blocks[1:]:
                out = a @ out
            return out

        def gradient(z, shapes=shapes):  # ∂L/∂A_l = −A_{>l}ᵀ (M − W) A_{<l}ᵀ
            return -_pack(layer_velocities(_unpack(z, shapes), M - product(z)))

        steps = 1e-30j * np.eye(y.size)  # complex steps: derivatives of polynomials to rounding
        hessian = np.stack([gradient(y + step).imag for step in steps], axis=1) / 1e-30
        jacobian = np.stack([product(y + step).imag.ravel() for step in steps], axis=1) / 1e-30
        with jax.enable_x64(True):
            smallest = stage_hessian(model, W, k)
            full = np.asarray(flat_jacobian(model, _pack(layers), model.layer_shapes))
        asleep = ~active_mask(model.layer_shapes, k)  # flat at a stationary point (L ≥ 3): rows and columns 0
        np.testing.assert_allclose(full[asleep], 0.0, atol=1e-12)
        basis = scipy.linalg.orth(jacobian.T)
        assert basis.shape[1] == k * (m + n - k)
        eigs = np.linalg.eigvalsh(basis.T @ hessian @ basis)
        expected = hessian_spectrum(S[held], S[sleeping], m, n, L)
        np.testing.assert_allclose(eigs, expected, rtol=1e-10, atol=1e-12)
        assert smallest == pytest.approx(expected[0], rel=1e-10)
        gauge = gauge_directions(layers, k)
        assert np.linalg.matrix_rank(gauge) == (L - 1) * k * k == y.size - basis.shape[1]
        np.testing.assert_allclose(jacobian @ gauge, 0.0, atol=1e-12)
    assert smallest == pytest.approx(S[1] ** ((L - 2) / L) * (S[1] - S[0]), rel=1e-10) and smallest < 0

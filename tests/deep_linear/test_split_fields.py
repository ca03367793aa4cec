"""The deep linear split's equations (gradflow/_deep_linear/_split_fields.py): ``G`` and its change in frames for any
loss of linear outputs, the same fields from the affine and the general form, and the sleeping part of ``G(W_A)``
that a held plateau keeps."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from deep_linear_common import labels_task

import gradflow
from gradflow._deep_linear import _split_fields


def test_linear_outputs_give_the_gradient_and_its_change_in_frames():
    """:class:`LinearOutputs` of the cross-entropy: ``G̃(W̃) = Q_Lᵀ G(Q_L W̃ Q_0ᵀ) Q_0`` in random frames, and
    ``(G(W + αD) − G(W))/α`` within 1e-13 of a 40-digit difference, by quadrature where the logits move little (where
    the difference in float64 loses ``eps/α``) and by the difference itself where they move by more than 1/2."""
    mpmath = pytest.importorskip("mpmath")
    model = labels_task(n=8)
    rng = np.random.default_rng(3)
    W, D, W_frames = (rng.standard_normal((3, 3)) for _ in range(3))
    Q_in, Q_out = (np.linalg.qr(rng.standard_normal((3, 3)))[0] for _ in range(2))
    with jax.enable_x64(True):
        gradient = jax.tree_util.tree_map(np.asarray, _split_fields.split_gradient(model))
        rotated_G = Q_out.T @ np.asarray(model.G(Q_out @ W_frames @ Q_in.T)) @ Q_in
        np.testing.assert_allclose(gradient.in_frames([Q_in, None, Q_out]).at(W_frames), rotated_G, atol=1e-15)
        changes = {alpha: np.asarray(gradient.change(W, D, alpha)) for alpha in (1e-9, 1e-2, 1.0)}
    mpmath.mp.dps = 40
    X, y = (np.asarray(a) for a in (model.X, model.Y))

    def G(W):  # −∇ of the mean cross-entropy, in 40 digits
        out = mpmath.zeros(3, 3)
        for x, label in zip(X, y):
            z = [mpmath.fsum(W[a, b] * mpmath.mpf(float(x[b])) for b in range(3)) for a in range(3)]
            e = [mpmath.exp(v) for v in z]
            for a in range(3):
                r = e[a] / mpmath.fsum(e) - (a == label)
                for b in range(3):
                    out[a, b] -= r * mpmath.mpf(float(x[b])) / len(y)
        return out

    exact_W = mpmath.matrix(W.tolist())
    for alpha, change in changes.items():
        exact = (G(exact_W + mpmath.mpf(alpha) * mpmath.matrix(D.tolist())) - G(exact_W)) / mpmath.mpf(alpha)
        exact = np.array(exact.tolist(), dtype=float)
        assert np.abs(change - exact).max() < 1e-13 * np.abs(exact).max(), alpha


def test_linear_outputs_give_the_affine_fields_for_the_square_loss():
    """The split's equations with :class:`LinearOutputs` (the square loss given as a function, so not recognised
    as affine) equal those with :class:`AffineGradient` (``loss="square"``), at a random state in random frames,
    at α = 1e-8 and at α = 0.3 (where the outputs move by more than 1/2 and the difference itself is taken)."""
    X, Y = np.random.default_rng(5).standard_normal((2, 7, 3))
    square = lambda y, y_hat: 0.5 * jnp.sum((y - y_hat) ** 2)  # noqa: E731
    models = [
        gradflow.DeepLinearModel(lambda x, W: W @ x, X, Y, shape=(3, 3), depth=3, loss=loss)
        for loss in ("square", square)
    ]
    rng = np.random.default_rng(6)
    frames = [np.linalg.qr(rng.standard_normal((3, 3)))[0] for _ in range(4)]
    shapes = tuple(models[0].layer_shapes)
    y = rng.standard_normal(2 * sum(a * b for a, b in shapes))
    with jax.enable_x64(True):
        forms = [jax.tree_util.tree_map(np.asarray, _split_fields.split_gradient(m)).in_frames(frames) for m in models]
        assert [type(f).__name__ for f in forms] == ["AffineGradient", "LinearOutputs"]
        for alpha in (1e-8, 0.3):
            affine, linear = (
                np.asarray(_split_fields.velocity(y, f, jnp.asarray(math.log(alpha)), shapes)) for f in forms
            )
            np.testing.assert_allclose(linear, affine, rtol=1e-12, atol=1e-12 * np.abs(affine).max())


def test_the_sleeping_part_keeps_the_sleeping_block_of_G_and_the_change():
    """:class:`SleepingPart` zeroes ``G(W_A)`` on the rows and columns of the ``k`` learned directions, keeps the
    sleeping block and ``ΔG`` as they are."""
    X, Y = np.random.default_rng(7).standard_normal((2, 7, 3))
    model = gradflow.DeepLinearModel(lambda x, W: W @ x, X, Y, shape=(3, 3), depth=3)
    rng = np.random.default_rng(8)
    W, D = rng.standard_normal((2, 3, 3))
    with jax.enable_x64(True):
        gradient = _split_fields.split_gradient(model)
        part = _split_fields.SleepingPart(gradient, 1)
        G, kept = np.asarray(gradient.at(W)), np.asarray(part.at(W))
        np.testing.assert_array_equal(kept[1:, 1:], G[1:, 1:])
        assert not kept[0].any() and not kept[:, 0].any()
        np.testing.assert_array_equal(np.asarray(part.change(W, D, 1e-3)), np.asarray(gradient.change(W, D, 1e-3)))


@pytest.mark.parametrize("task", ["regression", "factorisation"])
def test_the_right_gradient_is_the_affine_gradient(task):
    """:class:`RightGradient` (``G0 − W C``, with ``n²`` coefficients: the matrix-free split's) against
    :class:`AffineGradient` (``(mn)²``) in random frames, for deep linear regression (``C`` the inputs' second moment)
    and matrix factorisation (``C = I``): ``G̃`` and its change at α = 1e-9 and 1."""
    rng = np.random.default_rng(8)
    if task == "regression":
        X, Y = rng.standard_normal((2, 9, 3))
        model = gradflow.DeepLinearModel(lambda x, W: W @ x, X, Y, shape=(3, 3), depth=3)
    else:
        model = gradflow.models.deep_matrix_factorization_model(rng.standard_normal((3, 3)), depth=3)
    frames = [np.linalg.qr(rng.standard_normal((3, 3)))[0] for _ in range(4)]
    W, D = rng.standard_normal((2, 3, 3))
    with jax.enable_x64(True):
        affine = _split_fields.split_gradient(model).in_frames(frames)
        right = _split_fields.split_gradient(model, free=True).in_frames(frames)
        assert type(right).__name__ == "RightGradient"
        scale = np.abs(np.asarray(affine.at(W))).max()
        np.testing.assert_allclose(np.asarray(right.at(W)), np.asarray(affine.at(W)), atol=1e-14 * scale)
        for alpha in (1e-9, 1.0):
            change = np.asarray(affine.change(W, D, alpha))
            np.testing.assert_allclose(np.asarray(right.change(W, D, alpha)), change, atol=1e-14 * np.abs(change).max())


def test_only_a_right_acting_square_loss_has_a_right_gradient():
    """Matrix sensing (``K`` mixes rows and columns) and the cross-entropy have no :class:`RightGradient`: the split
    holds their coefficients."""
    rng = np.random.default_rng(9)
    sensors = rng.standard_normal((12, 3, 3))
    sensing = gradflow.DeepLinearModel(
        lambda x, W: jnp.sum(x * W), sensors, rng.standard_normal(12), shape=(3, 3), depth=3
    )
    with jax.enable_x64(True):
        assert _split_fields.right_gradient(sensing) is None
        assert _split_fields.right_gradient(labels_task(n=8)) is None
        assert type(_split_fields.split_gradient(sensing, free=True)).__name__ == "AffineGradient"


def test_outputs_of_the_inputs_are_held_as_the_inputs():
    """The logits ``W x_j`` of the cross-entropy: :class:`TimesInputs` (the inputs and ``Q``, no ``M``) against the
    outputs' Jacobian ``M`` (:class:`DenseJacobian`) in random frames: ``G̃`` and its change at α = 1e-9 and 1. The
    inputs are read from ``h`` (``2 W x`` gives ``2x``); outputs ``Wᵀ x`` and sensing's ``⟨x, W⟩`` are not of that
    form."""
    model = labels_task(n=8)
    rng = np.random.default_rng(10)
    frames = [np.linalg.qr(rng.standard_normal((3, 3)))[0] for _ in range(4)]
    W, D = rng.standard_normal((2, 3, 3))
    with jax.enable_x64(True):
        held = _split_fields.split_gradient(model, free=True)
        assert type(held.M).__name__ == "TimesInputs"
        np.testing.assert_array_equal(held.M.X, model.X)
        dense = _split_fields.LinearOutputs(held.z0, _split_fields._jacobian(model), held.Y, held.loss)
        held, dense = (jax.tree_util.tree_map(np.asarray, g).in_frames(frames) for g in (held, dense))
        scale = np.abs(np.asarray(dense.at(W))).max()
        np.testing.assert_allclose(np.asarray(held.at(W)), np.asarray(dense.at(W)), atol=1e-14 * scale)
        for alpha in (1e-9, 1.0):
            change = np.asarray(dense.change(W, D, alpha))
            np.testing.assert_allclose(np.asarray(held.change(W, D, alpha)), change, atol=1e-14 * np.abs(change).max())
        doubled = gradflow.DeepLinearModel(
            lambda x, W: 2.0 * W @ x, model.X, model.Y, shape=(3, 3), depth=3, loss="cross_entropy"
        )
        np.testing.assert_array_equal(_split_fields.times_inputs(doubled), 2.0 * np.asarray(model.X))
        transposed = gradflow.DeepLinearModel(
            lambda x, W: W.T @ x, model.X, model.Y, shape=(3, 3), depth=3, loss="cross_entropy"
        )
        assert _split_fields.times_inputs(transposed) is None
        assert type(_split_fields.split_gradient(transposed).M).__name__ == "DenseJacobian"
        sensors = rng.standard_normal((12, 3, 3))
        sensing = gradflow.DeepLinearModel(
            lambda x, W: jnp.sum(x * W), sensors, rng.standard_normal(12), shape=(3, 3), depth=3
        )
        assert _split_fields.times_inputs(sensing) is None

"""The flat layout of a factorised model's factors (gradflow/_factorized/_layout.py): the split and its inverse, the
products, the columns and masks of the padded widths, and the balanced factors of truncated SVDs."""

import numpy as np

from gradflow._factorized._layout import Layout

LAYOUT = Layout(shapes=((4, 3), (2, 2)), widths=(3, 2))


def test_split_and_flat_are_inverse_and_the_products_are_the_weights():
    rng = np.random.default_rng(0)
    y = rng.standard_normal(LAYOUT.size)
    assert LAYOUT.size == (4 + 3) * 3 + (2 + 2) * 2
    (U1, V1), (U2, V2) = LAYOUT.split(y)
    assert U1.shape == (4, 3) and V1.shape == (3, 3) and U2.shape == (2, 2) and V2.shape == (2, 2)
    np.testing.assert_array_equal(LAYOUT.flat(LAYOUT.split(y)), y)
    W1, W2 = LAYOUT.products(y)
    np.testing.assert_allclose(W1, U1 @ V1.T, rtol=1e-14)
    np.testing.assert_allclose(W2, U2 @ V2.T, rtol=1e-14)


def test_columns_and_masks_number_the_factor_columns():
    cols = LAYOUT.split(LAYOUT.columns)
    np.testing.assert_array_equal(cols[0][0], np.broadcast_to([0, 1, 2], (4, 3)))
    np.testing.assert_array_equal(cols[1][1], np.broadcast_to([3, 4], (2, 2)))
    (mu1, mv1), (mu2, mv2) = LAYOUT.split(LAYOUT.mask((2, 0)))
    assert mu1[:, :2].all() and not mu1[:, 2].any() and mv1[:, :2].all() and not (mu2.any() or mv2.any())


def test_balanced_factors_are_the_truncated_svd():
    rng = np.random.default_rng(1)
    Ws = (rng.standard_normal((4, 3)), rng.standard_normal((2, 2)))
    y = LAYOUT.balanced(Ws, (2, 1))
    for W, (U, V), r in zip(Ws, LAYOUT.split(y), (2, 1)):
        p, s, qt = np.linalg.svd(W)
        np.testing.assert_allclose(U @ V.T, (p[:, :r] * s[:r]) @ qt[:r], atol=1e-12)
        np.testing.assert_allclose(U.T @ U, V.T @ V, atol=1e-12)  # balanced
        np.testing.assert_array_equal(U[:, r:], 0.0)
        np.testing.assert_array_equal(V[:, r:], 0.0)

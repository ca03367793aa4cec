"""The greedy low-rank path (gradflow/_factorized/_path.py): its views at any τ (the stage, loss, saddles and sleeping
exponents) and the log scales laid out as a flow's, on the path of two matrix factorisations."""

import numpy as np
import pytest


def test_path_evaluation(mf_path):
    path = mf_path
    tau = np.array([0.0, 0.4, 0.6, 10.0])
    np.testing.assert_array_equal(path.stage_at(tau), [0, 1, 2, 5])
    np.testing.assert_array_equal(path.loss_at(tau), path.loss[[0, 1, 2, 5]])
    W1, W2 = path.weights_at(tau)
    assert W1.shape == (4, 4, 3) and W2.shape == (4, 3, 3)
    np.testing.assert_array_equal(W2[2], path.W[1][2])
    assert path.sleeping_at(tau).shape == (4, 2, 3)
    with pytest.raises(ValueError, match="non-negative"):
        path.stage_at(-1.0)


def test_limit_b_laid_out_as_the_flows(mf_path):
    """``b_at`` gives, per weight matrix, the log scales of its singular values in descending σ, as a flow's ``b``:
    0 for the learned directions, then the sleeping exponents ascending (``sleeping_at``, NaN-padded per matrix)."""
    path = mf_path
    tau = np.array([0.0, 0.4, 0.6, 10.0])
    b = path.b_at(tau)
    assert [x.shape for x in b] == [(4, 3), (4, 2)]  # the widths k_j
    np.testing.assert_array_equal(b[0][0], 1.0)
    for j, width in enumerate((3, 2)):
        ranks = path.ranks[path.stage_at(tau), j]
        sleeping = np.sort(path.sleeping_at(tau)[:, j], axis=-1)
        for t, r in enumerate(ranks):
            np.testing.assert_array_equal(b[j][t, :r], 0.0)
            np.testing.assert_allclose(b[j][t, r:], sleeping[t, : width - r])
        assert np.all(np.diff(b[j], axis=-1) >= 0)  # ascending b: descending σ


def test_old_names_warn_and_work(mf_path):
    with pytest.warns(DeprecationWarning, match=r"FactorizedGreedyPath.W_at\(\) is deprecated"):
        old = mf_path.W_at([0.5])
    np.testing.assert_array_equal(old[1], mf_path.weights_at([0.5])[1])
    with pytest.warns(DeprecationWarning, match="FactorizedGreedyPath.factor is deprecated"):
        np.testing.assert_array_equal(mf_path.factor, mf_path.activated)

"""The factorisation's gauge and the Hessian off it (gradflow/_factorized/_gauge.py): at the saddles of matrix
factorisation, the balanced rank-r truncated SVDs, the smallest eigenvalue of the Hessian off the gauge is
``σ_r − σ_{r+1}`` (``σ_r`` at full rank; docs/math.md, *Full weights: the greedy low-rank limit*), and the projection
removes exactly the gauge directions ``(U X, −V Xᵀ)``."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradflow import models
from gradflow._factorized import _gauge
from gradflow._factorized._layout import Layout

SIGMA = np.array([3.0, 1.5, 0.4])


@pytest.fixture(autouse=True)
def float64():
    with jax.enable_x64(True):
        yield


def setup():
    rng = np.random.default_rng(7)  # not min_eig_off_gauge's seed: its start vector must not lie in A's span
    A, B = np.linalg.qr(rng.standard_normal((4, 3)))[0], np.linalg.qr(rng.standard_normal((3, 3)))[0]
    M = (A * SIGMA) @ B.T
    model = models.matrix_factorization_model(M)
    model = jax.tree_util.tree_map(lambda x: jnp.asarray(x) if eqx.is_array(x) else x, model)
    return model, M, Layout(model.shapes, model.widths)


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_min_eig_off_the_gauge_at_the_saddles_is_the_singular_gap(rank):
    model, M, layout = setup()
    y = layout.balanced([M], (rank,))
    gap = SIGMA[rank - 1] - (SIGMA[rank] if rank < SIGMA.size else 0.0)
    assert _gauge.min_eig_off_gauge(model, layout, y, (rank,)) == pytest.approx(gap, rel=1e-8)


def test_the_projection_removes_the_gauge_directions_only():
    model, M, layout = setup()
    y = layout.balanced([M], (3,))
    blocks = _gauge.gauge_blocks(layout, jnp.asarray(y))
    ((u, v),) = layout.split(y)
    X = np.random.default_rng(1).standard_normal((3, 3))
    gauge = layout.flat([(u @ X, -v @ X.T)])
    np.testing.assert_allclose(_gauge.project_off_gauge(layout, blocks, jnp.asarray(gauge)), 0.0, atol=1e-12)
    x = np.random.default_rng(2).standard_normal(layout.size)
    once = np.asarray(_gauge.project_off_gauge(layout, blocks, jnp.asarray(x)))
    np.testing.assert_allclose(_gauge.project_off_gauge(layout, blocks, jnp.asarray(once)), once, atol=1e-12)
    assert abs(once @ gauge) < 1e-10 * np.linalg.norm(gauge) * np.linalg.norm(x)  # orthogonal to the gauge

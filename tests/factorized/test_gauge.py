"""The factorisation's gauge and the Hessian off it (gradflow/_factorized/_gauge.py): at the saddles of matrix
factorisation, the balanced rank-r truncated SVDs, the smallest eigenvalue of the Hessian off the gauge is
``σ_r − σ_{r+1}`` (``σ_r`` at full rank; docs/math.md, *Full weights: the greedy low-rank limit*), and the projection
removes exactly the gauge directions ``(U X, −V Xᵀ)``."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dense_reference import dense_min_eig_off_gauge

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


def test_min_eig_does_not_find_the_gauge_zeros_on_a_long_run():
    """At the minimum of a 40×40 matrix of rank 10 with spread singular values (100 gauge directions, a long Lanczos
    run), the eigenvalue off the gauge is the singular gap σ_10, not one of ``P H P``'s zeros on the gauge: without
    the re-projection of every Lanczos vector, rounding grew there and the check returned −4e-16 (as at three stages
    of the paper-size head, where a dense eigendecomposition gives 0.34 and more)."""
    rng = np.random.default_rng(1)
    sigma = np.linspace(3.0, 0.05, 40)[:10]
    A, B = (np.linalg.qr(rng.standard_normal((40, 40)))[0][:, :10] for _ in range(2))
    model = models.matrix_factorization_model((A * sigma) @ B.T)
    layout = Layout(model.shapes, model.widths)
    y = layout.balanced([(A * sigma) @ B.T], (10,))
    assert _gauge.min_eig_off_gauge(model, layout, y, (10,)) == pytest.approx(sigma[-1], rel=1e-8)


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


def test_gauge_projection_and_min_eig():
    """The projection removes exactly the gauge directions (U X, −V Xᵀ) and is orthogonal; the Lanczos eigenvalue off
    them is the dense one, at a stage of a head with two active factors of ranks 2 and 1."""
    task = models.attention_full(n=20, tokens=3, dim=4, teacher_kq=(1, 0.5), teacher_vo=(1, 0.5))
    model = jax.tree_util.tree_map(lambda x: jnp.asarray(x) if eqx.is_array(x) else x, task.model)
    layout = Layout(model.shapes, model.widths)
    rng = np.random.default_rng(1)
    ranks = (2, 1)
    y = layout.balanced([rng.standard_normal((4, 4)) for _ in range(2)], ranks)
    active = np.flatnonzero(layout.mask(ranks))
    blocks = _gauge.gauge_blocks(layout, jnp.asarray(y))

    def project(x):
        full = np.zeros(layout.size)
        full[active] = x
        return np.asarray(_gauge.project_off_gauge(layout, blocks, jnp.asarray(full)))[active]

    basis = np.stack([project(e) for e in np.eye(active.size)], axis=1)
    np.testing.assert_allclose(basis, basis.T, atol=1e-12)
    np.testing.assert_allclose(basis @ basis, basis, atol=1e-12)
    assert round(np.trace(basis)) == active.size - (4 + 1)  # r_j² gauge directions per factor
    (u, v), _ = layout.split(y)
    x = rng.standard_normal((4, 4))
    x[2:], x[:, 2:] = 0, 0
    factors = [(u @ x, -v @ x.T), (np.zeros((4, 4)), np.zeros((4, 4)))]
    np.testing.assert_allclose(project(layout.flat(factors)[active]), 0, atol=1e-12)
    eig = _gauge.min_eig_off_gauge(model, layout, y, ranks)
    assert eig == pytest.approx(dense_min_eig_off_gauge(model, layout, y, ranks), rel=1e-10, abs=1e-12)

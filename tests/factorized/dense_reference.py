"""Dense references for the factorised phase (B): the loss of the flat factor entries and the smallest eigenvalue of
its dense Hessian off the gauge, against which the matrix-free methods are tested (tests/factorized/test_phase_b.py,
test_gauge.py)."""

import jax
import jax.numpy as jnp
import numpy as np


def dense_loss(model, layout, y):
    return model.loss_of_weights(layout.products(y))


def dense_min_eig_off_gauge(model, layout, y, ranks):
    """The smallest eigenvalue of the dense Hessian of the active entries on an orthonormal basis off the gauge."""
    active = np.flatnonzero(layout.mask(ranks))
    hess = np.asarray(jax.jit(jax.hessian(lambda z: dense_loss(model, layout, z)))(jnp.asarray(y)))[
        np.ix_(active, active)
    ]
    gauge = []
    for j, ((u, v), r) in enumerate(zip(layout.split(y), ranks)):
        for a in range(r):
            for c in range(r):
                x = np.zeros((u.shape[1], u.shape[1]))
                x[a, c] = 1.0
                factors = [(np.zeros_like(uu), np.zeros_like(vv)) for uu, vv in layout.split(y)]
                factors[j] = (u @ x, -v @ x.T)
                gauge.append(layout.flat(factors)[active])
    basis, _, _ = np.linalg.svd(np.array(gauge).T, full_matrices=True)
    off = basis[:, len(gauge) :]
    return float(np.linalg.eigvalsh(off.T @ (0.5 * (hess + hess.T)) @ off)[0])

"""Two independent matrix factorisations, ``L = ½‖W_1 − M_1‖² + ½‖W_2 − M_2‖²``, whose greedy low-rank limit is known
stage by stage: the task that the greedy limit's, the path's and the report's tests share (tests/factorized/; the limit
itself is a session fixture of conftest.py, computed once)."""

import jax.numpy as jnp
import numpy as np

import gradflow

# Two independent matrix factorisations, L = ½‖W_1 − M_1‖² + ½‖W_2 − M_2‖²: every stage is a closed form,
# and the two weight matrices take turns. W_2 has width 2, so M_2's third mode is never learned.
SIGMA_1, SIGMA_2 = np.array([3.0, 1.5, 0.4]), np.array([2.0, 1.0, 0.25])


def _low_rank(seed, m, n, sigma):
    rng = np.random.default_rng(seed)
    a, _ = np.linalg.qr(rng.standard_normal((m, sigma.size)))
    b, _ = np.linalg.qr(rng.standard_normal((n, sigma.size)))
    return (a * sigma) @ b.T


M1, M2 = _low_rank(1, 4, 3, SIGMA_1), _low_rank(2, 3, 3, SIGMA_2)


def _two_factorizations(x, Ws):
    del x
    return jnp.concatenate([Ws[0].ravel(), Ws[1].ravel()])


def two_mf_model():
    Y = np.concatenate([M1.ravel(), M2.ravel()])[None]
    return gradflow.FactorizedModel(
        _two_factorizations, np.zeros((1, 1)), Y, shapes=[(4, 3), (3, 3)], widths=[3, 2], names=("W1", "W2")
    )

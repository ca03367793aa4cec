"""The kit's discrete training loop (gradflow/_kit/_descent.py) on a quadratic whose gradient descent is known in
closed form, and its optimizer checks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradflow._kit._descent import check_optimizer, descend


def _loss(model, theta, batch):
    """``½ Σ (θ − 1)²``, whatever the batch."""
    del model, batch
    return 0.5 * jnp.sum((theta - 1.0) ** 2)


def _record(model, theta):
    return theta, _loss(model, theta, None)


@pytest.mark.parametrize("batched", [False, True])
def test_gradient_descent_is_the_closed_form(batched):
    """``θ_{k+1} = θ_k − lr (θ_k − 1)`` from ``θ_0 = α θ⁰``: ``θ_k = 1 − (1 − α θ⁰)(1 − lr)^k``, recorded every 3
    steps of 200 (more than one block of records), each α of a batch as if alone."""
    theta0, lr, steps, every = np.array([1.0, -2.0]), 0.05, 200, 3
    alphas = np.array([1e-3, 0.5]) if batched else 1e-3
    with jax.enable_x64(True):
        rec, (theta, loss), bad = descend(
            None, jnp.asarray(theta0), alphas, loss=_loss, record=_record, batched=batched, lr=lr, steps=steps,
            record_every=every, optimizer="gd", batch_size=None, seed=0,
        )  # fmt: skip
    np.testing.assert_array_equal(rec, np.arange(steps // every + 1) * every)
    a = np.atleast_1d(alphas)[:, None, None]
    want = 1.0 - (1.0 - a * theta0) * (1.0 - lr) ** rec[None, :, None]
    got = theta if batched else theta[None]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(
        loss if batched else loss[None], 0.5 * np.sum((want - 1.0) ** 2, axis=-1), rtol=1e-9, atol=1e-18
    )
    assert np.all(np.asarray(bad) == -1)


def test_optimizer_checks():
    assert check_optimizer("gd", None, 3, n=10) == 3
    with pytest.raises(ValueError, match="optimizer must be one of"):
        check_optimizer("lbfgs", None, 0, n=10)
    with pytest.raises(ValueError, match="optimizer='sgd' needs a batch_size"):
        check_optimizer("sgd", None, 0, n=10)
    with pytest.raises(ValueError, match="optimizer='gd' is full-batch"):
        check_optimizer("gd", 4, 0, n=10)
    with pytest.raises(ValueError, match="batch_size must be at most the number of samples, n=10"):
        check_optimizer("sgd", 11, 0, n=10)

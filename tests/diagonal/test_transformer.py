"""The diagonal transformer of the paper's Example 3.2 (gradflow/_diagonal/_transformer.py): its JAX forward pass
against the NumPy one that makes the teacher's targets, at a student β, and its coordinates' labels and checks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradflow import models
from gradflow._diagonal._transformer import _teacher_outputs, diagonal_transformer_model, transformer_names


def test_the_forward_pass_is_the_numpy_one_at_any_beta():
    task = models.diagonal_transformer(n=3, tokens=3, dim=2, layers=2, heads=2, mlp=4, seed=1)
    h, X = task.model.h, task.model.X
    beta = 0.8 * np.random.default_rng(0).standard_normal(task.model.p)  # not the teacher's
    with jax.enable_x64(True):
        got = np.stack([np.asarray(h(jnp.asarray(x), jnp.asarray(beta))) for x in X])
    np.testing.assert_allclose(got, _teacher_outputs(X, beta, h.w_in, h.w_out, 2, 2), rtol=1e-12, atol=1e-13)
    assert not np.allclose(got, task.model.Y)  # a student β moves the outputs off the teacher's


def test_names_run_over_layers_heads_and_dims_kq_first():
    names = transformer_names(2, 2, 2)
    assert len(names) == 2 * 2 * 2 * 2 and names[:3] == ("L0H0.KQ[0]", "L0H0.KQ[1]", "L0H1.KQ[0]")
    assert names[8] == "L0H0.VO[0]" and names[-1] == "L1H1.VO[1]"
    with pytest.raises(ValueError, match="X of shape \\(n, tokens, dim\\)"):
        diagonal_transformer_model(
            np.ones((4, 2)), np.ones((4, 2)), w_in=np.ones((1, 2, 3)), w_out=np.ones((1, 2, 3)), heads=1
        )
    with pytest.raises(ValueError, match="w_in and w_out must both have shape \\(layers, 2, m\\)"):
        diagonal_transformer_model(
            np.ones((4, 3, 2)), np.ones((4, 3, 2)), w_in=np.ones((1, 2, 3)), w_out=np.ones((1, 2, 4)), heads=1
        )

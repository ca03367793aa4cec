"""The ViT: logits per image, per-head attention weights, its input checked."""

import jax
import jax.numpy as jnp
import pytest
from nets_common import KEY, jit_call, jit_vcall, tiny_vit

from gradflow.nets import attention_weights

pytestmark = pytest.mark.usefixtures("unoptimised_xla")  # conftest.py: compile fast


def test_shapes():
    vit = tiny_vit()
    c = vit.config
    images = jax.random.normal(KEY, (3, c.image_size, c.image_size, c.channels), jnp.float32)
    assert jit_vcall(vit, images).shape == (3, c.n_classes)
    assert jit_call(tiny_vit(pool="mean"), images[0]).shape == (c.n_classes,)
    w = attention_weights(vit)
    assert set(w) == {"Q", "K", "V", "O"}
    for a in w.values():
        assert a.shape == (c.n_layers, c.n_heads, c.d_emb, c.d_head) and a.dtype == jnp.float32


def test_bad_input():
    vit = tiny_vit()
    with pytest.raises(ValueError, match=r"expects one image of shape \(8, 8, 1\)"):
        vit(jnp.ones((16, 16, 1), jnp.float32))

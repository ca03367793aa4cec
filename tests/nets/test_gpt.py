"""The GPT: next-token logits, per-head attention weights, the stacked MLP InRank replaces, its input checked."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from nets_common import jit_call, jit_vcall, tiny_gpt

from gradflow.nets import attention_weights
from gradflow.nets._layers import Linear

pytestmark = pytest.mark.usefixtures("unoptimised_xla")  # conftest.py: compile fast


def test_shapes():
    gpt = tiny_gpt()
    g = gpt.config
    tokens = jnp.arange(2 * g.context, dtype=jnp.int32).reshape(2, -1) % g.vocab_size
    assert jit_vcall(gpt, tokens).shape == (2, g.context, g.vocab_size)
    w = attention_weights(gpt)
    assert set(w) == {"Q", "K", "V", "O"}
    for a in w.values():
        assert a.shape == (g.n_layers, g.n_heads, g.d_emb, g.d_head) and a.dtype == jnp.float32
    # the InRank contract: GPT MLP layers are stacked Linear modules
    assert isinstance(gpt.blocks.mlp.fc_in, Linear)
    assert gpt.blocks.mlp.fc_in.weight.shape == (g.n_layers, g.d_emb, g.d_mlp)
    assert gpt.blocks.mlp.fc_out.weight.shape == (g.n_layers, g.d_mlp, g.d_emb)


def test_gpt_mlp_replaceable_with_tree_at():
    """InRank replaces ``fc_in`` by W0 + U V; a stacked replacement runs through the scan."""

    class LowRank(eqx.Module):
        w0: jax.Array
        u: jax.Array
        v: jax.Array
        bias: jax.Array

        def __call__(self, x):
            return x @ (self.w0 + self.u @ self.v).astype(x.dtype) + self.bias.astype(x.dtype)

    gpt = tiny_gpt()
    fc = gpt.blocks.mlp.fc_in
    n_layers, d_in, d_out = fc.weight.shape
    rank = 2
    lr_module = LowRank(
        fc.weight,
        jnp.zeros((n_layers, d_in, rank), jnp.float32),
        jnp.zeros((n_layers, rank, d_out), jnp.float32),
        fc.bias,
    )
    replaced = eqx.tree_at(lambda m: m.blocks.mlp.fc_in, gpt, lr_module)
    tokens = jnp.arange(9, dtype=jnp.int32)
    np.testing.assert_allclose(jit_call(replaced, tokens), jit_call(gpt, tokens), rtol=1e-5, atol=1e-5)


def test_bad_input():
    with pytest.raises(ValueError, match="T <= 32"):
        tiny_gpt()(jnp.zeros((33,), jnp.int32))

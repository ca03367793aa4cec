"""GPT-2 style causal language model with per-head attention weights and stacked, scanned layers."""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp

from ._configs import GPTConfig, check_init_scale
from ._layers import INIT_STD, Block, LayerNorm, apply_stacked, numpy_rng, stacked_blocks, to_device, trunc_normal


class GPT(eqx.Module):
    """GPT-2: token + position embedding → pre-LN blocks → LayerNorm → logits with the tied token embedding.

    Unit scale follows GPT-2: weights ~ N(0, 0.02²) (truncated), the residual output projections (``attn.wo``,
    ``mlp.fc_out``) ~ N(0, (0.02/√(2·n_layers))²), position embedding std 0.01. ``init_scale`` multiplies the
    attention and MLP weights of every block; the token and position embeddings (and so the tied output
    head) and the LayerNorm parameters are not scaled.

    The MLP of the stacked blocks is ``blocks.mlp.fc_in`` / ``blocks.mlp.fc_out``: ``Linear`` modules whose
    ``weight`` (layers, d_in, d_out) and ``bias`` (layers, d_out) carry a leading layer axis; a replacement
    installed with ``eqx.tree_at`` must carry the same leading axis (the blocks are applied with ``lax.scan``).
    """

    wte: jax.Array
    wpe: jax.Array
    blocks: Block
    ln_f: LayerNorm
    config: GPTConfig = eqx.field(static=True)

    def __init__(self, config: GPTConfig, *, key, init_scale: float = 1.0):
        c, rng = config, numpy_rng(key)
        check_init_scale(init_scale)
        self.wte = to_device(trunc_normal(rng, (c.vocab_size, c.d_emb)))
        self.wpe = to_device(trunc_normal(rng, (c.context, c.d_emb), 0.01))
        out_std = INIT_STD / math.sqrt(2 * c.n_layers)
        self.blocks = to_device(stacked_blocks(c, rng=rng, causal=True, scale=init_scale, out_std=out_std, ln_eps=1e-5))
        self.ln_f = to_device(LayerNorm(c.d_emb, eps=1e-5))
        self.config = c

    def __call__(self, tokens: jax.Array) -> jax.Array:
        """Next-token logits (T, vocab) in float32 for one int sequence (T,), T ≤ context."""
        c = self.config
        if tokens.ndim != 1 or tokens.shape[0] > c.context:
            raise ValueError(f"GPT expects one token sequence of shape (T,) with T <= {c.context}, got {tokens.shape}")
        dt = self.wte.dtype
        x = self.wte[tokens] + self.wpe[: tokens.shape[0]].astype(dt)
        x = self.ln_f(apply_stacked(self.blocks, x, remat=c.remat))
        return (x @ self.wte.T).astype(jnp.float32)

"""Vision transformer (ViT) with per-head attention weights and stacked, scanned layers."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from ._configs import ViTConfig, check_init_scale
from ._layers import Block, LayerNorm, Linear, apply_stacked, numpy_rng, stacked_blocks, to_device, trunc_normal


class ViT(eqx.Module):
    """ViT classifier: patches → linear embedding (+ class token, + learned positions) → blocks → LayerNorm → head.

    ``init_scale`` multiplies the initial weights of every layer except the token mapper: the attention
    (Q, K, V, O) and MLP weights of every block and the classification head are scaled; the patch embedding,
    the class token, the position embedding and all LayerNorm parameters keep their unit-scale initialisation
    (paper §5: "we fix the scale of the initial token mapper"). Biases start at 0.
    """

    patch_embed: Linear
    cls_token: jax.Array
    pos_embed: jax.Array
    blocks: Block
    ln_f: LayerNorm
    head: Linear
    config: ViTConfig = eqx.field(static=True)

    def __init__(self, config: ViTConfig, *, key, init_scale: float = 1.0):
        c, rng = config, numpy_rng(key)
        check_init_scale(init_scale)
        n_tokens = c.n_patches + (c.pool == "cls")
        self.patch_embed = to_device(Linear(c.patch * c.patch * c.channels, c.d_emb, rng=rng))
        self.cls_token = to_device(trunc_normal(rng, (c.d_emb,)))
        self.pos_embed = to_device(trunc_normal(rng, (n_tokens, c.d_emb)))
        self.blocks = to_device(stacked_blocks(c, rng=rng, causal=False, scale=init_scale))
        self.ln_f = to_device(LayerNorm(c.d_emb))
        self.head = to_device(Linear(c.d_emb, c.n_classes, rng=rng, scale=init_scale))
        self.config = c

    def __call__(self, image: jax.Array) -> jax.Array:
        """Logits (n_classes,) of one image (H, W, C), computed in ``image.dtype``."""
        c = self.config
        expected = (c.image_size, c.image_size, c.channels)
        if image.shape != expected:
            raise ValueError(f"ViT config expects one image of shape {expected} (H, W, C), got {image.shape}")
        g = c.image_size // c.patch
        patches = image.reshape(g, c.patch, g, c.patch, c.channels).transpose(0, 2, 1, 3, 4)
        x = self.patch_embed(patches.reshape(g * g, -1))
        if c.pool == "cls":
            x = jnp.concatenate([self.cls_token.astype(x.dtype)[None], x], axis=0)
        x = x + self.pos_embed.astype(x.dtype)
        x = self.ln_f(apply_stacked(self.blocks, x, remat=c.remat))
        pooled = x[0] if c.pool == "cls" else x.mean(0)
        return self.head(pooled)

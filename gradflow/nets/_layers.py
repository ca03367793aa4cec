"""Transformer building blocks with explicit dtypes and per-head attention weights.

Every parameter is created as float32 whatever the global ``jax_enable_x64`` flag says.
The forward pass runs in the dtype of the (possibly cast) parameters; LayerNorm statistics
and the attention softmax are always taken in float32.

Initialisation (unit scale): weight matrices ~ truncated normal with std 0.02, biases 0,
LayerNorm gain 1 and bias 0. A block built with ``scale=s`` has its attention weights
(``wq, wk, wv, wo``) and MLP weights (``fc_in.weight``, ``fc_out.weight``) multiplied by ``s``; its biases
start at 0 (so scaling them changes nothing) and its LayerNorm parameters are not scaled.

Initial values are drawn with NumPy from a generator seeded by the model's JAX key (no compilation, the
same numbers on every backend); the building blocks hold NumPy float32 arrays until ``ViT`` / ``GPT``
move the whole tree to the device.
"""

from __future__ import annotations

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._configs import check_attention

INIT_STD = 0.02


def _attention_xla(q: jax.Array, k: jax.Array, v: jax.Array, causal: bool) -> jax.Array:
    """``softmax(q kᵀ / sqrt(d_head) [+ causal mask]) v`` per head, q, k, v of shape (T, heads, d_head); the
    scores and softmax in float32."""
    scores = jnp.einsum("shk,thk->hst", q, k).astype(jnp.float32) / jnp.float32(math.sqrt(q.shape[-1]))
    if causal:
        t = q.shape[0]
        scores = jnp.where(jnp.tril(jnp.ones((t, t), dtype=bool)), scores, jnp.float32(-1e30))
    probs = jax.nn.softmax(scores, axis=-1).astype(q.dtype)
    return jnp.einsum("hst,thk->shk", probs, v)


def _fused(q, k, v, causal: bool) -> jax.Array:
    return jax.nn.dot_product_attention(q, k, v, is_causal=causal, implementation="cudnn")


@functools.lru_cache(maxsize=64)
def _cudnn_accepts(q: jax.ShapeDtypeStruct, k: jax.ShapeDtypeStruct, v: jax.ShapeDtypeStruct, causal: bool) -> bool:
    """Whether cuDNN's fused attention takes these shapes forward and backward. cuDNN checks them when the
    computation is traced, the backward's conditions only under differentiation (on an H200 it runs the ViT's 65
    tokens forward and refuses them in training), so both are traced here, abstractly."""

    def forward_backward(q, k, v):
        out, back = jax.vjp(lambda q, k, v: _fused(q, k, v, causal), q, k, v)
        return back(out)

    try:
        jax.eval_shape(forward_backward, q, k, v)
    except (NotImplementedError, ValueError, RuntimeError):
        return False
    return True


def attend(q: jax.Array, k: jax.Array, v: jax.Array, *, causal: bool, implementation: str = "auto") -> jax.Array:
    """Scaled dot-product attention of (T, heads, d_head) arrays. ``implementation``: ``"xla"``
    (``_attention_xla``), ``"cudnn"`` (cuDNN's fused flash attention, its softmax in float32 too; an error where
    cuDNN refuses the shapes, dtype or GPU) or ``"auto"``: cuDNN on a GPU in bf16/fp16 where it accepts them forward
    and backward (``_cudnn_accepts``), else XLA."""
    if implementation == "cudnn":
        return _fused(q, k, v, causal)
    if implementation == "auto" and q.dtype in (jnp.bfloat16, jnp.float16) and jax.default_backend() == "gpu":
        specs = tuple(jax.ShapeDtypeStruct(x.shape, x.dtype) for x in (q, k, v))
        if _cudnn_accepts(*specs, causal):
            return _fused(q, k, v, causal)
    return _attention_xla(q, k, v, causal)


def numpy_rng(key) -> np.random.Generator:
    """A NumPy generator seeded by a JAX PRNG key (typed or raw uint32)."""
    data = jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key
    return np.random.default_rng(np.asarray(data, np.uint32).ravel().tolist())


def trunc_normal(rng: np.random.Generator, shape, std: float = INIT_STD) -> np.ndarray:
    """Normal(0, std²) truncated at ±2 std (resampled), float32."""
    z = rng.standard_normal(shape)
    while (bad := np.abs(z) > 2).any():
        z[bad] = rng.standard_normal(int(bad.sum()))
    return (std * z).astype(np.float32)


def _zeros(*shape) -> np.ndarray:
    return np.zeros(shape, np.float32)


def to_device(tree):
    """Move the NumPy leaves of ``tree`` to the default device as JAX arrays (dtype kept)."""
    return jax.tree_util.tree_map(lambda a: jnp.asarray(a) if isinstance(a, np.ndarray) else a, tree)


class Linear(eqx.Module):
    """``y = x @ weight + bias`` with ``weight`` of shape (d_in, d_out)."""

    weight: jax.Array
    bias: jax.Array

    def __init__(self, d_in: int, d_out: int, *, rng: np.random.Generator, scale: float = 1.0, std: float = INIT_STD):
        self.weight = np.float32(scale) * trunc_normal(rng, (d_in, d_out), std)
        self.bias = _zeros(d_out)

    def __call__(self, x: jax.Array) -> jax.Array:
        return x @ self.weight.astype(x.dtype) + self.bias.astype(x.dtype)


class LayerNorm(eqx.Module):
    """LayerNorm over the last axis; statistics in float32, output in the input dtype."""

    weight: jax.Array
    bias: jax.Array
    eps: float = eqx.field(static=True)

    def __init__(self, d: int, *, eps: float = 1e-6):
        self.weight = np.ones((d,), np.float32)
        self.bias = _zeros(d)
        self.eps = eps

    def __call__(self, x: jax.Array) -> jax.Array:
        x32 = x.astype(jnp.float32)
        mean = x32.mean(-1, keepdims=True)
        var = jnp.square(x32 - mean).mean(-1, keepdims=True)
        y = (x32 - mean) * jax.lax.rsqrt(var + jnp.float32(self.eps))
        return (y * self.weight.astype(jnp.float32) + self.bias.astype(jnp.float32)).astype(x.dtype)


class MultiHeadAttention(eqx.Module):
    """Multi-head self-attention with per-head weights.

    ``wq, wk, wv, wo`` have shape (d_emb, n_heads, d_head); head ``h`` uses the slices
    ``W_Q = wq[:, h]`` etc. (each d_emb × d_head). For a sequence ``X`` (T × d_emb)::

        head_h = softmax((X W_Q + b_Q)(X W_K + b_K)ᵀ / sqrt(d_head) [+ causal mask]) (X W_V + b_V)
        out    = Σ_h head_h W_Oᵀ + b_O

    so ``wo`` stores the output projection transposed, head by head.
    """

    wq: jax.Array
    wk: jax.Array
    wv: jax.Array
    wo: jax.Array
    bq: jax.Array
    bk: jax.Array
    bv: jax.Array
    bo: jax.Array
    causal: bool = eqx.field(static=True)
    implementation: str = eqx.field(static=True)

    def __init__(
        self,
        d_emb: int,
        n_heads: int,
        d_head: int,
        *,
        rng: np.random.Generator,
        causal: bool,
        scale: float = 1.0,
        out_std: float = INIT_STD,
        implementation: str = "auto",
    ):
        check_attention(implementation)
        shape, scale = (d_emb, n_heads, d_head), np.float32(scale)
        self.wq = scale * trunc_normal(rng, shape)
        self.wk = scale * trunc_normal(rng, shape)
        self.wv = scale * trunc_normal(rng, shape)
        self.wo = scale * trunc_normal(rng, shape, out_std)
        self.bq, self.bk, self.bv = _zeros(n_heads, d_head), _zeros(n_heads, d_head), _zeros(n_heads, d_head)
        self.bo = _zeros(d_emb)
        self.causal = causal
        self.implementation = implementation

    def __call__(self, x: jax.Array) -> jax.Array:
        dt = x.dtype
        q = jnp.einsum("td,dhk->thk", x, self.wq.astype(dt)) + self.bq.astype(dt)
        k = jnp.einsum("td,dhk->thk", x, self.wk.astype(dt)) + self.bk.astype(dt)
        v = jnp.einsum("td,dhk->thk", x, self.wv.astype(dt)) + self.bv.astype(dt)
        heads = attend(q, k, v, causal=self.causal, implementation=self.implementation)
        return jnp.einsum("thk,dhk->td", heads, self.wo.astype(dt)) + self.bo.astype(dt)


class MLP(eqx.Module):
    """``fc_out(gelu(fc_in(x)))``."""

    fc_in: Linear
    fc_out: Linear

    def __init__(
        self, d_emb: int, d_mlp: int, *, rng: np.random.Generator, scale: float = 1.0, out_std: float = INIT_STD
    ):
        self.fc_in = Linear(d_emb, d_mlp, rng=rng, scale=scale)
        self.fc_out = Linear(d_mlp, d_emb, rng=rng, scale=scale, std=out_std)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.fc_out(jax.nn.gelu(self.fc_in(x)))


class Block(eqx.Module):
    """Pre-LayerNorm transformer block: ``x + attn(ln1(x))``, then ``x + mlp(ln2(x))``."""

    ln1: LayerNorm
    attn: MultiHeadAttention
    ln2: LayerNorm
    mlp: MLP

    def __init__(
        self,
        d_emb: int,
        n_heads: int,
        d_head: int,
        d_mlp: int,
        *,
        rng: np.random.Generator,
        causal: bool,
        scale: float = 1.0,
        out_std: float = INIT_STD,
        ln_eps: float = 1e-6,
        attention: str = "auto",
    ):
        self.ln1 = LayerNorm(d_emb, eps=ln_eps)
        self.attn = MultiHeadAttention(
            d_emb, n_heads, d_head, rng=rng, causal=causal, scale=scale, out_std=out_std, implementation=attention
        )
        self.ln2 = LayerNorm(d_emb, eps=ln_eps)
        self.mlp = MLP(d_emb, d_mlp, rng=rng, scale=scale, out_std=out_std)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def stacked_blocks(config, *, rng: np.random.Generator, **kwargs) -> Block:
    """The ``config.n_layers`` blocks of a ViT or GPT ``config`` (its ``d_emb, n_heads, d_head, d_mlp, attention``;
    the other ``Block`` arguments in ``kwargs``), initialised in order from ``rng``, as one ``Block`` whose arrays
    carry a leading layer axis."""
    c = config
    blocks = [
        Block(c.d_emb, c.n_heads, c.d_head, c.d_mlp, rng=rng, attention=c.attention, **kwargs)
        for _ in range(c.n_layers)
    ]
    return jax.tree_util.tree_map(lambda *a: np.stack(a), *blocks)


def apply_stacked(blocks: Block, x: jax.Array, *, remat: bool = False) -> jax.Array:
    """Apply stacked blocks in order with ``jax.lax.scan`` (one compiled block body).

    Works for any module whose array leaves carry a leading layer axis (e.g. after
    ``eqx.tree_at`` replaced ``blocks.mlp.fc_in`` by another stacked module).

    ``remat=True`` wraps the block in ``jax.checkpoint``: the backward pass keeps, per layer, only the block's
    input and the outputs of its weight matmuls (policy ``dots_with_no_batch_dims_saveable``) and recomputes
    the rest, notably the (heads, T, T) attention scores and probabilities: the same loss and gradients (up to
    rounding), much less memory, a little more compute.
    """
    dynamic, static = eqx.partition(blocks, eqx.is_array)

    def body(h, layer):
        return eqx.combine(layer, static)(h), None

    if remat:  # prevent_cse=False is safe (and faster) under scan
        body = jax.checkpoint(body, prevent_cse=False, policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable)
    x, _ = jax.lax.scan(body, x, dynamic)
    return x


def cast_floating(tree, dtype):
    """Cast the floating-point array leaves of ``tree`` to ``dtype`` (mixed precision compute copy)."""
    return jax.tree_util.tree_map(
        lambda a: a.astype(dtype) if eqx.is_array(a) and jnp.issubdtype(a.dtype, jnp.floating) else a, tree
    )


def attention_weights(model) -> dict[str, jax.Array]:
    """Per-head attention slices of a model with stacked ``blocks``.

    Returns ``{"Q", "K", "V", "O"}`` → arrays of shape (layers, heads, d_emb, d_head), so that
    ``attention_weights(m)["K"][l, h] @ attention_weights(m)["Q"][l, h].T`` is head ``h``'s ``W_K W_Qᵀ`` in layer ``l``.
    """
    attn = model.blocks.attn
    return {
        name: jnp.transpose(w, (0, 2, 1, 3))
        for name, w in (("Q", attn.wq), ("K", attn.wk), ("V", attn.wv), ("O", attn.wo))
    }

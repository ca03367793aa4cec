"""ViT / GPT models: shapes, per-head slices against the forward pass, init scale, dtypes, errors."""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from gradflow.nets import GPT, ViT, attention_weights, gpt_config, train_config, vit_config
from gradflow.nets._layers import Linear, apply_stacked, cast_floating

pytestmark = pytest.mark.usefixtures("unoptimised_xla")  # conftest.py: compile fast

KEY = jax.random.key(0)


@eqx.filter_jit
def _call(model, x):
    """Jitted forward (eager dispatch of every op is slow on a shared CPU)."""
    return model(x)


@eqx.filter_jit
def _vcall(model, x):
    return jax.vmap(model)(x)


def _vit(scale=1.0, **kw):
    return ViT(dataclasses.replace(vit_config("tiny"), **kw), key=KEY, init_scale=scale)


def _gpt(scale=1.0):
    return GPT(gpt_config("gpt2-tiny"), key=KEY, init_scale=scale)


def test_shapes():
    vit, gpt = _vit(), _gpt()
    c, g = vit.config, gpt.config
    images = jax.random.normal(KEY, (3, c.image_size, c.image_size, c.channels), jnp.float32)
    assert _vcall(vit, images).shape == (3, c.n_classes)
    assert _call(_vit(pool="mean"), images[0]).shape == (c.n_classes,)
    tokens = jnp.arange(2 * g.context, dtype=jnp.int32).reshape(2, -1) % g.vocab_size
    assert _vcall(gpt, tokens).shape == (2, g.context, g.vocab_size)
    for model, cfg in ((vit, c), (gpt, g)):
        w = attention_weights(model)
        assert set(w) == {"Q", "K", "V", "O"}
        for a in w.values():
            assert a.shape == (cfg.n_layers, cfg.n_heads, cfg.d_emb, cfg.d_head) and a.dtype == jnp.float32
    # the InRank contract: GPT MLP layers are stacked Linear modules
    assert isinstance(gpt.blocks.mlp.fc_in, Linear)
    assert gpt.blocks.mlp.fc_in.weight.shape == (g.n_layers, g.d_emb, g.d_mlp)
    assert gpt.blocks.mlp.fc_out.weight.shape == (g.n_layers, g.d_mlp, g.d_emb)


def _attention_from_slices(w, biases, layer, x, causal):
    """Multi-head attention recomputed in numpy from the exposed (layer, head) slices."""
    bq, bk, bv, bo = (np.asarray(b[layer], np.float64) for b in biases)
    x = np.asarray(x, np.float64)
    t = x.shape[0]
    out = np.zeros_like(x)
    for h in range(w["Q"].shape[1]):
        wq, wk, wv, wo = (np.asarray(w[n][layer, h], np.float64) for n in "QKVO")
        q, k, v = x @ wq + bq[h], x @ wk + bk[h], x @ wv + bv[h]
        scores = q @ k.T / np.sqrt(wq.shape[1])
        if causal:
            scores = np.where(np.tril(np.ones((t, t), bool)), scores, -np.inf)
        p = np.exp(scores - scores.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        out += p @ v @ wo.T
    return out + bo


@pytest.mark.parametrize("which", ["vit", "gpt"])
def test_head_slices_match_forward(which):
    model = _vit() if which == "vit" else _gpt()
    attn = model.blocks.attn
    # non-zero biases so that they are exercised too
    rng = np.random.default_rng(1)
    biases = [
        jnp.asarray(0.1 * rng.standard_normal(b.shape), jnp.float32) for b in (attn.bq, attn.bk, attn.bv, attn.bo)
    ]
    model = eqx.tree_at(
        lambda m: (m.blocks.attn.bq, m.blocks.attn.bk, m.blocks.attn.bv, m.blocks.attn.bo), model, tuple(biases)
    )
    w = attention_weights(model)
    x = jnp.asarray(np.random.default_rng(2).standard_normal((7, model.config.d_emb)), jnp.float32)
    for layer in range(model.config.n_layers):
        attn_l = jax.tree_util.tree_map(lambda a: a[layer], model.blocks.attn)
        expected = _attention_from_slices(w, biases, layer, x, causal=(which == "gpt"))
        np.testing.assert_allclose(np.asarray(_call(attn_l, x)), expected, rtol=1e-4, atol=1e-5)


def test_scan_equals_loop():
    model = _vit()
    x = jax.random.normal(KEY, (5, model.config.d_emb), jnp.float32)
    y = x
    for layer in range(model.config.n_layers):
        y = _call(jax.tree_util.tree_map(lambda a: a[layer], model.blocks), y)
    np.testing.assert_allclose(eqx.filter_jit(apply_stacked)(model.blocks, x), y, rtol=1e-5, atol=1e-6)


def _leaves_by_path(model):
    return {jax.tree_util.keystr(p): np.asarray(v) for p, v in jax.tree_util.tree_leaves_with_path(model)}


@pytest.mark.parametrize("which", ["vit", "gpt"])
def test_init_scale_scales_exactly_the_documented_tensors(which):
    build = _vit if which == "vit" else _gpt
    unit, small = _leaves_by_path(build(1.0)), _leaves_by_path(build(0.03))
    scaled = {
        ".blocks.attn.wq",
        ".blocks.attn.wk",
        ".blocks.attn.wv",
        ".blocks.attn.wo",
        ".blocks.mlp.fc_in.weight",
        ".blocks.mlp.fc_out.weight",
    }
    if which == "vit":
        scaled.add(".head.weight")
    for path, a in unit.items():
        if path in scaled:
            np.testing.assert_allclose(small[path], 0.03 * a, rtol=1e-6)
            assert np.abs(a).max() > 0
        else:  # embeddings, class token, positions, LayerNorm, biases (all biases start at 0)
            np.testing.assert_array_equal(small[path], a)
    assert scaled <= set(unit)


def test_gpt_mlp_replaceable_with_tree_at():
    """InRank replaces ``fc_in`` by W0 + U V; a stacked replacement runs through the scan."""

    class LowRank(eqx.Module):
        w0: jax.Array
        u: jax.Array
        v: jax.Array
        bias: jax.Array

        def __call__(self, x):
            return x @ (self.w0 + self.u @ self.v).astype(x.dtype) + self.bias.astype(x.dtype)

    gpt = _gpt()
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
    np.testing.assert_allclose(_call(replaced, tokens), _call(gpt, tokens), rtol=1e-5, atol=1e-5)


def test_dtypes_independent_of_x64():
    with jax.enable_x64(True):
        vit = _vit()
        gpt = _gpt()
        for model in (vit, gpt):
            for leaf in jax.tree_util.tree_leaves(model):
                assert leaf.dtype == jnp.float32
        c = vit.config
        image = jnp.ones((c.image_size, c.image_size, c.channels), jnp.float32)
        assert _call(vit, image).dtype == jnp.float32
        assert _call(gpt, jnp.arange(5)).dtype == jnp.float32  # int64 tokens under x64
        assert all(a.dtype == jnp.float32 for a in attention_weights(vit).values())


def test_bf16_compute():
    vit = cast_floating(_vit(), jnp.bfloat16)
    c = vit.config
    logits = _call(vit, jnp.ones((c.image_size, c.image_size, c.channels), jnp.bfloat16))
    assert logits.dtype == jnp.bfloat16 and bool(jnp.all(jnp.isfinite(logits)))
    gpt = cast_floating(_gpt(), jnp.bfloat16)
    assert bool(jnp.all(jnp.isfinite(_call(gpt, jnp.arange(5, dtype=jnp.int32)))))


def test_bad_input():
    vit = _vit()
    with pytest.raises(ValueError, match=r"expects one image of shape \(8, 8, 1\)"):
        vit(jnp.ones((16, 16, 1), jnp.float32))
    with pytest.raises(ValueError, match="T <= 32"):
        _gpt()(jnp.zeros((33,), jnp.int32))
    for lookup in (vit_config, gpt_config, train_config):
        with pytest.raises(ValueError, match="unknown .* config 'nope'; choose one of"):
            lookup("nope")
    with pytest.raises(ValueError, match="not a multiple of patch"):
        dataclasses.replace(vit_config("tiny"), image_size=9)


@pytest.mark.slow
@pytest.mark.parametrize(
    "build, published",
    [
        (lambda: GPT(gpt_config("gpt2-small"), key=KEY), 124_439_808),  # Hugging Face GPT2LMHeadModel (tied head)
        (lambda: ViT(vit_config("vit-base-16"), key=KEY), 86_567_656),  # timm vit_base_patch16_224
    ],
    ids=["gpt2-small", "vit-base-16"],
)
def test_named_models_have_the_published_sizes(build, published):
    """The named paper-scale models have the parameter counts of the reference implementations."""
    model = build()
    assert sum(a.size for a in jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_inexact_array))) == published


def _loss_and_grads(model, inputs, labels):
    """Loss, gradients and the temporary memory of the compiled gradient (XLA's buffer assignment)."""
    params, static = eqx.partition(model, eqx.is_inexact_array)

    def value_and_grad(params):
        def loss(p):
            logits = jax.vmap(eqx.combine(p, static))(inputs)
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

        return jax.value_and_grad(loss)(params)

    compiled = jax.jit(value_and_grad).lower(params).compile()
    return *compiled(params), compiled.memory_analysis().temp_size_in_bytes


@pytest.mark.parametrize("which", ["vit", pytest.param("gpt-inrank", marks=pytest.mark.slow)])  # fast twin: vit
def test_remat_changes_nothing_but_memory(which):
    """``remat`` recomputes the block activations in the backward pass: the same loss and gradients (up to the
    last bits, where XLA fuses the recomputation differently), for the ViT and for a GPT whose scanned stack
    holds InRank's masked MLP factors; and the compiled gradient needs less memory."""
    from gradflow.nets import InRankConfig, to_inrank

    results = []
    for remat in (False, True):
        if which == "vit":
            c = dataclasses.replace(vit_config("tiny"), remat=remat)
            model = ViT(c, key=KEY)
            inputs = jax.random.normal(KEY, (4, c.image_size, c.image_size, c.channels), jnp.float32)
            labels = jnp.arange(4) % c.n_classes
        else:
            c = dataclasses.replace(gpt_config("gpt2-tiny"), remat=remat)
            model = GPT(c, key=KEY)
            tokens = jax.random.randint(jax.random.key(1), (4, c.context + 1), 0, c.vocab_size)
            inputs, labels = tokens[:, :-1], tokens[:, 1:]
            grads = {
                n: jax.random.normal(jax.random.key(i), getattr(model.blocks.mlp, n).weight.shape)
                for i, n in enumerate(("fc_in", "fc_out"))
            }
            model = to_inrank(model, grads, config=InRankConfig(init_rank=2, buffer=3, eps=0.1))
        results.append(_loss_and_grads(model, inputs, labels))
    (loss, grads, memory), (loss_remat, grads_remat, memory_remat) = results
    assert memory_remat < memory
    np.testing.assert_allclose(loss_remat, loss, rtol=1e-6)
    leaves, leaves_remat = jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(grads_remat)
    assert len(leaves) == len(leaves_remat)
    scale = max(float(jnp.abs(g).max()) for g in leaves)
    for a, b in zip(leaves, leaves_remat):  # measured: at most 1.5e-8 apart (ViT), bit for bit (GPT)
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-6 * scale)

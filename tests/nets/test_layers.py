"""The transformer blocks of ViT and GPT: per-head slices against the forward pass, the layer scan, init scale,
dtypes, mixed precision and rematerialisation."""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from nets_common import KEY, jit_call, tiny_gpt, tiny_vit

from gradflow.nets import GPT, ViT, attention_weights, gpt_config, vit_config
from gradflow.nets._layers import apply_stacked, cast_floating

pytestmark = pytest.mark.usefixtures("unoptimised_xla")  # conftest.py: compile fast


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
    model = tiny_vit() if which == "vit" else tiny_gpt()
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
        np.testing.assert_allclose(np.asarray(jit_call(attn_l, x)), expected, rtol=1e-4, atol=1e-5)


def test_scan_equals_loop():
    model = tiny_vit()
    x = jax.random.normal(KEY, (5, model.config.d_emb), jnp.float32)
    y = x
    for layer in range(model.config.n_layers):
        y = jit_call(jax.tree_util.tree_map(lambda a: a[layer], model.blocks), y)
    np.testing.assert_allclose(eqx.filter_jit(apply_stacked)(model.blocks, x), y, rtol=1e-5, atol=1e-6)


def _leaves_by_path(model):
    return {jax.tree_util.keystr(p): np.asarray(v) for p, v in jax.tree_util.tree_leaves_with_path(model)}


@pytest.mark.parametrize("which", ["vit", "gpt"])
def test_init_scale_scales_exactly_the_documented_tensors(which):
    build = tiny_vit if which == "vit" else tiny_gpt
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


def test_dtypes_independent_of_x64():
    with jax.enable_x64(True):
        vit = tiny_vit()
        gpt = tiny_gpt()
        for model in (vit, gpt):
            for leaf in jax.tree_util.tree_leaves(model):
                assert leaf.dtype == jnp.float32
        c = vit.config
        image = jnp.ones((c.image_size, c.image_size, c.channels), jnp.float32)
        assert jit_call(vit, image).dtype == jnp.float32
        assert jit_call(gpt, jnp.arange(5)).dtype == jnp.float32  # int64 tokens under x64
        assert all(a.dtype == jnp.float32 for a in attention_weights(vit).values())


def test_bf16_compute():
    vit = cast_floating(tiny_vit(), jnp.bfloat16)
    c = vit.config
    logits = jit_call(vit, jnp.ones((c.image_size, c.image_size, c.channels), jnp.bfloat16))
    assert logits.dtype == jnp.bfloat16 and bool(jnp.all(jnp.isfinite(logits)))
    gpt = cast_floating(tiny_gpt(), jnp.bfloat16)
    assert bool(jnp.all(jnp.isfinite(jit_call(gpt, jnp.arange(5, dtype=jnp.int32)))))


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


def test_auto_attention_falls_back_where_the_fused_backward_refuses(monkeypatch):
    """``"auto"`` asks the fused kernel about the forward and the backward before using it: a stand-in for cuDNN that
    runs odd sequence lengths forward but refuses them in the backward (as cuDNN did with the ViT's 65 tokens on an
    H200, which crashed training) is used at 8 tokens and replaced by XLA's attention at 7, under ``jax.grad``."""
    from gradflow.nets import _layers

    @jax.custom_vjp
    def fake(q, k, v):
        return _layers._attention_xla(q, k, v, False)

    def fake_fwd(q, k, v):
        if q.shape[0] % 2:
            raise NotImplementedError(f"Unsupported sequence length Q {q.shape[0]}")
        return fake(q, k, v), (q, k, v)

    def fake_bwd(res, g):
        return jax.vjp(lambda *a: _layers._attention_xla(*a, False), *res)[1](g)

    fake.defvjp(fake_fwd, fake_bwd)
    used = []
    monkeypatch.setattr(_layers, "_fused", lambda q, k, v, causal: used.append(q.shape) or fake(q, k, v))
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    _layers._cudnn_accepts.cache_clear()
    try:
        for tokens, fused in ((8, True), (7, False)):
            x = jax.random.normal(KEY, (tokens, 2, 8), jnp.bfloat16)
            used.clear()
            loss = lambda x: jnp.sum(_layers.attend(x, x, x, causal=False, implementation="auto").astype(jnp.float32))
            g = jax.grad(loss)(x)
            expected = jax.grad(lambda x: jnp.sum(_layers._attention_xla(x, x, x, False).astype(jnp.float32)))(x)
            g, expected = np.asarray(g, np.float32), np.asarray(expected, np.float32)
            if fused:  # the stand-in's own backward: the same math, rounded to bf16 in another order
                np.testing.assert_allclose(g, expected, rtol=0.02, atol=0.02)
            else:  # XLA's attention itself
                np.testing.assert_array_equal(g, expected)
            assert (len(used) > 1) == fused  # the probe's trace, then the computation's own
    finally:
        _layers._cudnn_accepts.cache_clear()


def test_attention_option():
    """``attention`` picks a kernel, not a function: "auto" is XLA's on a CPU (bit for bit), "cudnn" is refused
    where cuDNN is absent, a bad name is refused by the config, and a run description leaves it out (resumable
    under another kernel)."""
    from gradflow.nets._layers import attend
    from gradflow.nets._train import model_description

    base = tiny_gpt().config
    with pytest.raises(ValueError, match="attention must be 'auto', 'xla' or 'cudnn'"):
        dataclasses.replace(base, attention="flash")
    x = jax.random.normal(KEY, (2, 7, 3, 8), jnp.bfloat16)
    auto, xla = (jax.vmap(lambda a, i=i: attend(a, a, a, causal=True, implementation=i))(x) for i in ("auto", "xla"))
    if jax.default_backend() == "cpu":
        np.testing.assert_array_equal(np.asarray(auto, np.float32), np.asarray(xla, np.float32))
        with pytest.raises(RuntimeError, match="cuDNN"):
            attend(x[0], x[0], x[0], causal=True, implementation="cudnn")
    else:  # a GPU: the fused kernel against XLA's, to bf16 rounding
        np.testing.assert_allclose(np.asarray(auto, np.float32), np.asarray(xla, np.float32), rtol=0.05, atol=0.02)
    described = model_description(dataclasses.replace(base, attention="xla"))
    assert "attention" not in described and described == model_description(base)

"""InRank (paper 004): explained ratio, rank-growth rule, reparametrisations (its runs: test_inrank_train.py)."""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nets_common import TINY_GPT

from gradflow.nets._gpt import GPT
from gradflow.nets._inrank import (
    InRankConfig,
    InRankLinear,
    LowRankLinear,
    explained_ratio,
    explained_ratios,
    grow_rank,
    mlp_ranks,
    parameter_count,
    to_inrank,
    to_low_rank,
    update_ranks,
)

pytestmark = pytest.mark.usefixtures("unoptimised_xla")  # conftest.py: compile fast

_apply = eqx.filter_jit(lambda model, tokens: model(tokens))


def _direct(s, r, b):
    s = np.sort(np.asarray(s, np.float64))[::-1]
    s = np.concatenate([s, np.zeros(max(0, r + b - s.size))])
    return 1 - np.var(s[r : r + b]) / np.var(s[: r + b])


@settings(max_examples=60)
@given(st.lists(st.floats(0.01, 100.0), min_size=6, max_size=40), st.integers(1, 5), st.data())
def test_explained_ratio_matches_numpy(values, b, data):
    s = np.array(values)
    r = data.draw(st.integers(0, s.size - b))
    g = explained_ratio(s, r, b)
    if np.var(np.sort(s)[::-1][: r + b]) > 1e-9:
        np.testing.assert_allclose(g, _direct(s, r, b), rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(explained_ratios(s, b)[r], g, rtol=1e-6, atol=1e-6)


def test_explained_ratio_edge_cases():
    assert explained_ratio(np.zeros(10), 2, 3) == 1.0  # nothing to explain
    assert explained_ratio(np.ones(10), 2, 3) == 1.0
    assert explained_ratios(np.ones(10), 3).tolist() == [1.0] * 8
    # padding: a rank-2 spectrum read with r + b beyond its length
    np.testing.assert_allclose(explained_ratio([3.0, 1.0], 1, 3), _direct([3.0, 1.0, 0, 0], 1, 3))


def test_growth_rule_on_synthetic_spectra():
    b = 5
    s = np.concatenate([np.full(6, 10.0), np.zeros(30)])  # six equal modes, then nothing
    assert grow_rank(s, 2, buffer=b, threshold=0.9) == 6
    assert grow_rank(s, 6, buffer=b, threshold=0.9) == 6
    assert grow_rank(s, 8, buffer=b, threshold=0.9) == 8  # the rank never decreases
    # a slowly decaying spectrum: the first r with g >= α, checked by brute force
    s = 10.0 * 0.8 ** np.arange(40)
    expected = next(r for r in range(2, 36) if _direct(s, r, b) >= 0.9)
    assert grow_rank(s, 2, buffer=b, threshold=0.9) == expected
    assert grow_rank(s, 2, buffer=b, threshold=0.99) > expected
    # a threshold the spectrum never reaches: capped at len(s) − b
    assert grow_rank(s, 2, buffer=b, threshold=1 - 1e-12) == 35


def _model_and_grads(eps=1e-2):
    model = GPT(TINY_GPT, key=jax.random.PRNGKey(0))
    k1, k2 = jax.random.split(jax.random.PRNGKey(1))
    grads = {
        "fc_in": jax.random.normal(k1, model.blocks.mlp.fc_in.weight.shape),
        "fc_out": jax.random.normal(k2, model.blocks.mlp.fc_out.weight.shape),
    }
    return model, grads, InRankConfig(init_rank=2, buffer=3, eps=eps)


def test_inrank_start_is_the_gradient_direction():
    model, grads, cfg = _model_and_grads(eps=0.0)
    tokens = jnp.arange(16) % 257
    inr = to_inrank(model, grads, config=cfg)
    assert isinstance(inr.blocks.mlp.fc_in, InRankLinear)
    np.testing.assert_array_equal(
        np.asarray(_apply(inr, tokens)), np.asarray(_apply(model, tokens))
    )  # eps = 0: same function

    model, grads, cfg = _model_and_grads(eps=1e-2)
    lin = to_inrank(model, grads, config=cfg).blocks.mlp.fc_in
    assert lin.u.shape == (2, 16, 8) and mlp_ranks(to_inrank(model, grads, config=cfg))["fc_in"] == [2, 2]
    a, _, ct = np.linalg.svd(np.asarray(grads["fc_in"][0], np.float64), full_matrices=False)
    expected = -1e-4 * a[:, :5] @ ct[:5]
    np.testing.assert_allclose(np.asarray(lin.u[0] @ lin.v[0]), expected, atol=1e-9)
    np.testing.assert_array_equal(np.asarray(lin.u[:, :, 5:]), 0.0)  # modes beyond r0 + b not allocated yet


def test_update_ranks_activates_new_modes():
    model, grads, cfg = _model_and_grads()
    inr = to_inrank(model, grads, config=cfg)
    # give layer 0 of fc_in a spectrum with 4 strong modes: the rank must grow to 4
    lin = inr.blocks.mlp.fc_in
    rng = np.random.default_rng(0)
    q1, _ = np.linalg.qr(rng.normal(size=(16, 8)))
    q2, _ = np.linalg.qr(rng.normal(size=(32, 8)))
    u = lin.u.at[0].set(jnp.asarray(q1 * np.array([5, 5, 5, 5, 0, 0, 0, 0]), jnp.float32))
    v = lin.v.at[0].set(jnp.asarray(q2.T, jnp.float32))
    inr = eqx_tree_at(inr, dataclasses.replace(lin, u=u, v=v))
    new, info = update_ranks(inr, jax.random.PRNGKey(2), config=cfg)
    assert info["fc_in"]["rank"][0] == 4 and mlp_ranks(new)["fc_in"][0] == 4
    nl = new.blocks.mlp.fc_in
    np.testing.assert_array_equal(np.asarray(nl.u[0, :, :5]), np.asarray(u[0, :, :5]))  # old modes kept
    fresh = np.asarray(nl.u[0, :, 5:7])
    assert np.all(fresh != 0) and np.abs(fresh).max() < 0.05  # two new small random modes
    np.testing.assert_array_equal(np.asarray(nl.u[0, :, 7:]), 0.0)
    assert info["fc_in"]["explained_ratio"][0] >= 0.9


def eqx_tree_at(model, layer):
    return eqx.tree_at(lambda m: m.blocks.mlp.fc_in, model, layer)


def test_reparametrisation_to_fixed_rank():
    model, grads, cfg = _model_and_grads()
    inr = to_inrank(model, grads, config=cfg)
    tokens = jnp.arange(16) % 257
    full = {"fc_in": [16, 16], "fc_out": [16, 16]}
    low = to_low_rank(inr, ranks=full)  # keeping every mode: the function is preserved
    assert isinstance(low.blocks.mlp.fc_out, LowRankLinear)
    np.testing.assert_allclose(np.asarray(_apply(low, tokens)), np.asarray(_apply(inr, tokens)), rtol=1e-4, atol=1e-5)
    # truncation to rank r is Eckart–Young: the error is the tail of the spectrum
    low = to_low_rank(inr)
    lin, ll = inr.blocks.mlp.fc_in, low.blocks.mlp.fc_in
    w = np.asarray(lin.w0[1] + lin.u[1] @ lin.v[1], np.float64)
    s = np.linalg.svd(w, compute_uv=False)
    err = np.linalg.norm(w - np.asarray(ll.u[1] @ ll.v[1], np.float64))
    np.testing.assert_allclose(err, np.sqrt(np.sum(s[2:] ** 2)), rtol=1e-4)
    assert mlp_ranks(low) == {"fc_in": [2, 2], "fc_out": [2, 2]}
    # a W_0 + U V of rank <= r is reproduced exactly
    rng = np.random.default_rng(3)
    w_low = jnp.asarray(rng.normal(size=(2, 16, 2)) @ rng.normal(size=(2, 2, 32)), jnp.float32)
    exact = eqx_tree_at(inr, dataclasses.replace(lin, w0=w_low, u=jnp.zeros_like(lin.u)))
    ll = to_low_rank(exact).blocks.mlp.fc_in
    np.testing.assert_allclose(np.asarray(ll.u @ ll.v), np.asarray(w_low), atol=1e-5)
    counts = parameter_count(low)
    assert counts["frozen"] == 0 and counts["trainable"] < parameter_count(model)["trainable"]


def test_config_validation():
    with pytest.raises(ValueError, match="max_rank"):
        InRankConfig(buffer=100).allocation(16, 32)
    with pytest.raises(ValueError, match="threshold"):
        InRankConfig(threshold=1.5)

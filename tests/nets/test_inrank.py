"""InRank (paper 004): explained ratio, rank-growth rule, reparametrisations, a tiny run end to end."""

import argparse
import dataclasses
import json

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nets_common import params_equal, text, tiny_recipe, without_timing

from gradflow.nets._cli import add_subcommands
from gradflow.nets._configs import GPTConfig
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
from gradflow.nets._inrank_train import compare_inrank

pytestmark = pytest.mark.usefixtures("unoptimised_xla")  # conftest.py: compile fast

_apply = eqx.filter_jit(lambda model, tokens: model(tokens))

TINY = GPTConfig(vocab_size=257, context=16, d_emb=16, n_layers=2, n_heads=2, d_head=8, d_mlp=32)


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
    model = GPT(TINY, key=jax.random.PRNGKey(0))
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


@pytest.mark.slow
def test_tiny_run_end_to_end(tmp_path):
    recipe = tiny_recipe(24, batch_size=8, eval_every=24, log_every=4, eval_batch_size=64)
    inrank = InRankConfig(init_rank=2, buffer=3, check_every=4, efficient_after=12)
    rows = compare_inrank(
        lambda: GPT(TINY, key=jax.random.PRNGKey(0)),
        recipe,
        text(),
        modes=("full", "inrank-efficient"),
        inrank=inrank,
        out=tmp_path,
    )
    full, eff = rows["full"], rows["inrank-efficient"]
    assert full["mean_mlp_rank"] == 16 and eff["mean_mlp_rank"] < 16
    assert eff["trainable_parameters"] < full["trainable_parameters"]
    assert eff["n_traces"] == 2 and full["n_traces"] == 1  # rank growth never recompiles the step
    assert np.isfinite(eff["eval_perplexity"]) and eff["eval_perplexity"] < 257
    ranks = [json.loads(line) for line in (tmp_path / "inrank-efficient" / "ranks.jsonl").read_text().splitlines()]
    assert [r["step"] for r in ranks] == [4, 8, 12, 12]
    assert ranks[-1]["phase"] == "fixed-rank" and ranks[-1]["fc_in"]["rank"] == ranks[-2]["fc_in"]["rank"]
    metrics = [json.loads(line) for line in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]
    losses = [m["loss"] for m in metrics if "loss" in m]
    assert losses[-1] < losses[0]
    table = (tmp_path / "comparison.md").read_text()
    assert "not comparable" in table and "inrank-efficient" in table


@pytest.mark.slow  # fast twins: tests/nets/test_train.py (resume), test_reparametrisation_to_fixed_rank
def test_resume_reproduces_uninterrupted_run(tmp_path, monkeypatch):
    """A run killed in the InRank phase, resumed, stopped after the switch to fixed rank and resumed again ends
    exactly as the uninterrupted run: parameters, ranks, metrics and logs."""
    from gradflow.nets import _inrank, _inrank_train, read_metrics

    adamw = dict(optimizer="adamw", weight_decay=0.1)
    recipe = tiny_recipe(16, batch_size=8, eval_batch_size=64, log_every=2, eval_every=4, checkpoint_every=4, **adamw)
    inrank = InRankConfig(init_rank=2, buffer=3, check_every=2, efficient_after=8)

    def run(folder, **kw):
        return _inrank_train.train_inrank(
            GPT(TINY, key=jax.random.PRNGKey(0)), recipe, text(), inrank=inrank, seed=1, out=tmp_path / folder, **kw
        )

    full = run("full")
    # kill during the rank check of step 8: the checkpoint is at step 4, the logs reach step 6
    checks, update_ranks = [], _inrank.update_ranks

    def killed_at_step_8(*args, **kw):
        checks.append(None)
        if len(checks) == 4:
            raise KeyboardInterrupt
        return update_ranks(*args, **kw)

    monkeypatch.setattr(_inrank, "update_ranks", killed_at_step_8)
    with pytest.raises(KeyboardInterrupt):
        run("split")
    monkeypatch.undo()
    assert json.loads((tmp_path / "split" / "checkpoint" / "meta.json").read_text())["step"] == 4
    assert read_metrics(tmp_path / "split" / "metrics.jsonl")[-1]["step"] == 6
    # resumed in the InRank phase, stopped in the fixed-rank phase (step 11, mid log window)
    part = run("split", resume=True, stop_after=11)
    meta = json.loads((tmp_path / "split" / "checkpoint" / "meta.json").read_text())
    assert (part.steps, meta["step"], meta["phase"]) == (11, 11, "fixed-rank") and meta["log_window"]
    assert meta["ranks"] == mlp_ranks(part.model) and part.evaluation["step"] == 8
    resumed = run("split", resume=True)
    assert params_equal(full.model, resumed.model)
    assert mlp_ranks(resumed.model) == mlp_ranks(full.model)
    assert resumed.ranks == full.ranks and resumed.steps == 16
    assert without_timing(resumed.metrics) == without_timing(full.metrics)
    for name in ("metrics.jsonl", "ranks.jsonl"):
        split, whole = (without_timing(read_metrics(tmp_path / f / name)) for f in ("split", "full"))
        assert split == whole
    assert [r["phase"] for r in resumed.ranks] == ["inrank"] * 4 + ["fixed-rank"]
    # a finished run resumes to itself; a different run refuses the checkpoint
    again = run("split", resume=True)
    assert params_equal(again.model, full.model) and again.n_traces == 0
    assert without_timing(again.metrics) == without_timing(full.metrics)
    with pytest.raises(
        ValueError, match="cannot resume .*: mode is 'inrank-efficient' in the checkpoint, 'inrank' in this run"
    ):
        run("split", resume=True, mode="inrank")
    with pytest.raises(ValueError, match="needs the run folder"):
        _inrank_train.train_inrank(GPT(TINY, key=jax.random.PRNGKey(0)), recipe, text(), resume=True)


def _rank_records(n_layers=3):
    records = [
        {
            "step": s,
            "phase": "inrank",
            **{
                n: {"rank": [2 + s // 4 + l for l in range(n_layers)], "explained_ratio": [0.95] * n_layers}
                for n in ("fc_in", "fc_out")
            },
        }
        for s in (4, 8, 12)
    ]
    switch = {"step": 12, "phase": "fixed-rank", **{n: {"rank": records[-1][n]["rank"]} for n in ("fc_in", "fc_out")}}
    return records + [switch]


def test_rank_figure(tmp_path, monkeypatch):
    """One panel per matrix; per layer a step line through its ranks (drawn on to ``until``), their mean, and a
    dotted line at the switch to fixed rank; read from ``ranks.jsonl``."""
    from gradflow.nets import _plots, plot_inrank_ranks
    from gradflow.nets._runs import MetricsLog

    figures, save = [], _plots._save
    monkeypatch.setattr(_plots, "_save", lambda fig, path: figures.append(fig) or save(fig, path))
    log = MetricsLog(tmp_path / "ranks.jsonl")
    for record in _rank_records():
        log.append(record)
    path = plot_inrank_ranks(log.path, tmp_path / "figures" / "ranks.png", until=20, title="inrank-efficient")
    assert path.exists()
    axes = figures[0].axes
    assert [ax.get_title() for ax in axes] == ["fc_in", "fc_out"]
    for ax in axes:
        *layers, mean, switch = ax.get_lines()
        assert len(layers) == 3
        for l, line in enumerate(layers):  # records at steps 4, 8, 12 (and the switch at 12), then on to 20
            np.testing.assert_array_equal(line.get_xdata(), [4, 8, 12, 12, 20])
            np.testing.assert_array_equal(line.get_ydata(), [3 + l, 4 + l, 5 + l, 5 + l, 5 + l])
        np.testing.assert_array_equal(mean.get_ydata(), [4, 5, 6, 6, 6])
        assert list(switch.get_xdata()) == [12, 12]
    many = plot_inrank_ranks(_rank_records(n_layers=36), tmp_path / "many.png")  # GPT-2 large: 36 layers
    assert len(figures[1].axes[0].get_lines()) == 36 + 2 and many.exists()
    with pytest.raises(ValueError, match="no rank records"):
        plot_inrank_ranks([], tmp_path / "empty.png")


@pytest.mark.slow
def test_cli_inrank_resume_and_rank_figure(tmp_path):
    """``gradflow inrank`` checkpoints, draws the rank figure of each InRank mode, and with --resume reloads the
    finished runs instead of retraining them."""
    parser = argparse.ArgumentParser()
    add_subcommands(parser.add_subparsers())
    size = "--steps 6 --batch-size 8 --buffer 4 --check-every 2 --efficient-after 4"
    argv = f"inrank --modes full inrank-efficient {size} --remat --out {tmp_path}".split()
    args = parser.parse_args(argv)
    args.func(args)
    assert (tmp_path / "figures" / "ranks_inrank-efficient.png").exists()
    assert not (tmp_path / "figures" / "ranks_full.png").exists()
    for mode, phase in (("full", "full"), ("inrank-efficient", "fixed-rank")):
        meta = json.loads((tmp_path / mode / "checkpoint" / "meta.json").read_text())
        assert (meta["step"], meta["phase"]) == (6, phase)
    first = json.loads((tmp_path / "comparison.json").read_text())
    args = parser.parse_args(argv + ["--resume"])
    args.func(args)
    again = json.loads((tmp_path / "comparison.json").read_text())
    timing = ("seconds_per_step", "seconds_per_rank_check", "n_traces", "peak_memory_bytes")
    for mode in first:
        assert again[mode]["seconds_per_step"] == first[mode]["seconds_per_step"]  # from the checkpoint: no step run
        assert {k: v for k, v in again[mode].items() if k not in timing} == {
            k: v for k, v in first[mode].items() if k not in timing
        }


def test_cli_inrank_defaults_fit_the_default_gpt():
    """A bare ``gradflow inrank`` runs: its buffer fits gpt2-tiny's MLP matrices (32 × 128: R = 16 columns beside
    r₀ = 2, so b = 14, not the paper's 100, which a larger GPT keeps); ``--no-progress`` as the other commands."""
    from gradflow.nets._cli import _inrank_config

    parser = argparse.ArgumentParser()
    add_subcommands(parser.add_subparsers())
    args = parser.parse_args(["inrank", "--no-progress"])
    tiny = _inrank_config(args)
    assert args.no_progress and (tiny.init_rank, tiny.buffer, tiny.allocation(32, 128)) == (2, 14, 16)
    assert _inrank_config(parser.parse_args(["inrank", "--config", "gpt2-small"])).buffer == 100
    assert _inrank_config(parser.parse_args(["inrank", "--buffer", "5"])).buffer == 5

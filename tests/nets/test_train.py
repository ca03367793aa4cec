"""Training: loss decreases, exact resume, metrics/checkpoints/spectra on disk, dtypes, errors."""

import dataclasses
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from nets_common import DIGITS, params_equal, text, tiny_recipe, vit, without_timing

from gradflow.nets import (
    GPT,
    NonFiniteLossError,
    default_compute_dtype,
    gpt_config,
    load_images,
    load_spectra,
    read_metrics,
    train,
)

pytestmark = pytest.mark.usefixtures("unoptimised_xla")  # conftest.py: compile fast

# one recipe for most tests, so that they share the compiled step
RECIPE = tiny_recipe(30, checkpoint_every=10, eval_every=10, n_spectra=6)


def _losses(metrics):
    return [m["loss"] for m in metrics if "loss" in m]


def test_training_reduces_loss_and_writes_run(tmp_path):
    result = train(vit(), RECIPE, DIGITS, seed=0, out=tmp_path, progress=False)
    losses = _losses(result.metrics)
    assert losses[-1] < losses[0] - 0.08  # measured: 2.315 -> 2.169
    assert result.steps == 30 and set(result.evaluation) == {"step", "eval_loss", "eval_accuracy"}
    on_disk = read_metrics(tmp_path / "metrics.jsonl")
    assert on_disk == json.loads(json.dumps(result.metrics))
    assert all(math.isfinite(v) for m in on_disk for v in m.values())
    meta = json.loads((tmp_path / "checkpoint" / "meta.json").read_text())
    assert meta["step"] == 30 and meta["seed"] == 0
    history = load_spectra(tmp_path / "spectra")
    assert history.steps.tolist() == [1, 2, 4, 8, 15, 30]
    assert history.delta.kq.shape == (6, 2, 4, 16) and history.init.kq.shape == (2, 4, 8)
    # the model given to train() is the untouched initialisation
    assert jnp.array_equal(result.init_model.blocks.attn.wq, vit().blocks.attn.wq)


def test_resume_reproduces_uninterrupted_run(tmp_path):
    full = train(vit(), RECIPE, DIGITS, seed=3, out=tmp_path / "full", progress=False)
    part = train(vit(), RECIPE, DIGITS, seed=3, out=tmp_path / "split", progress=False, stop_after=13)
    assert part.steps == 13
    # the checkpoint is at step 10: steps 11-13 are redone after the resume
    resumed = train(vit(), RECIPE, DIGITS, seed=3, out=tmp_path / "split", progress=False, resume=True)
    assert params_equal(full.model, resumed.model)
    assert without_timing(read_metrics(tmp_path / "full" / "metrics.jsonl")) == without_timing(
        read_metrics(tmp_path / "split" / "metrics.jsonl")
    )
    a, b = load_spectra(tmp_path / "full" / "spectra"), load_spectra(tmp_path / "split" / "spectra")
    assert np.array_equal(a.steps, b.steps)
    np.testing.assert_array_equal(a.delta.kq, b.delta.kq)
    np.testing.assert_array_equal(a.delta.vo_stable_rank, b.delta.vo_stable_rank)


def test_non_finite_loss_stops_with_message(tmp_path):
    recipe = dataclasses.replace(RECIPE, lr=1e30, warmup=0)
    with pytest.raises(NonFiniteLossError, match=r"(at|after) step \d+.*lower learning rate"):
        train(vit(), recipe, DIGITS, seed=0, out=tmp_path, progress=False)
    for record in read_metrics(tmp_path / "metrics.jsonl") if (tmp_path / "metrics.jsonl").exists() else []:
        assert all(math.isfinite(v) for v in record.values())


def test_gpu_default_bf16_compute_keeps_float32_master_weights_under_x64(monkeypatch):
    """The GPU default path, forced on the CPU, inside a scoped x64 context: ``default_compute_dtype`` is bf16, one
    step runs the forward and backward pass in bf16 (its loss differs from float32's by rounding, and is finite)
    and the parameters stay float32: nothing turns float64."""
    recipe = tiny_recipe(1, log_every=1, n_spectra=0)
    f32 = train(vit(), recipe, DIGITS, seed=0, progress=False)
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert default_compute_dtype() == jnp.bfloat16
    with jax.enable_x64(True):
        bf16 = train(vit(), recipe, DIGITS, seed=0, progress=False)  # compute_dtype=None: the default
        assert {l.dtype for l in jax.tree_util.tree_leaves(bf16.model)} == {jnp.dtype(jnp.float32)}
    loss32, loss16 = _losses(f32.metrics)[0], _losses(bf16.metrics)[0]
    assert math.isfinite(loss16) and loss16 != loss32 and abs(loss16 - loss32) < 0.05
    assert not params_equal(f32.model, bf16.model)


def test_resume_refuses_a_different_run(tmp_path):
    train(vit(), RECIPE, DIGITS, seed=3, out=tmp_path, progress=False, stop_after=10)
    with pytest.raises(
        ValueError,
        match=r"cannot resume from .*: .*config\.lr is 0\.003 in the checkpoint, 0\.001 "
        r"in this run.*another output folder \(--out\)",
    ):
        train(vit(), dataclasses.replace(RECIPE, lr=1e-3), DIGITS, seed=3, out=tmp_path, progress=False, resume=True)
    with pytest.raises(ValueError, match=r"seed is 3 in the checkpoint, 4 in this run"):
        train(vit(), RECIPE, DIGITS, seed=4, out=tmp_path, progress=False, resume=True)
    with pytest.raises(ValueError, match=r"init_weights is '\w+' in the checkpoint, '\w+' in this run"):
        train(vit(0.5), RECIPE, DIGITS, seed=3, out=tmp_path, progress=False, resume=True)
    with pytest.raises(ValueError, match=r"data\.train is 1438 in the checkpoint, 1000 in this run"):
        fewer = dataclasses.replace(DIGITS, train_x=DIGITS.train_x[:1000], train_y=DIGITS.train_y[:1000])
        train(vit(), RECIPE, fewer, seed=3, out=tmp_path, progress=False, resume=True)


def test_gpt_trains_with_accumulation():
    cfg = dataclasses.replace(gpt_config("gpt2-tiny"), vocab_size=text().vocab_size)
    recipe = tiny_recipe(12, batch_size=16, micro_batch=8, lr=1e-2, n_spectra=0, log_every=4)
    result = train(GPT(cfg, key=jax.random.key(0)), recipe, text(), seed=0, progress=False)
    losses = _losses(result.metrics)
    assert losses[-1] < losses[0] - 0.5
    assert result.evaluation["eval_perplexity"] == pytest.approx(math.exp(result.evaluation["eval_loss"]))


def test_bad_input():
    wrong = load_images(None, image_size=16, seed=0)
    with pytest.raises(ValueError, match=r"expects images of shape \(8, 8, 1\)"):
        train(vit(), RECIPE, wrong, progress=False)
    with pytest.raises(ValueError, match="exceeds"):
        train(vit(), dataclasses.replace(RECIPE, batch_size=10**6), DIGITS, progress=False)
    with pytest.raises(TypeError, match="ViT on an ImageDataset"):
        train(vit(), RECIPE, text(), progress=False)
    with pytest.raises(ValueError, match="multiple of micro_batch"):
        dataclasses.replace(RECIPE, batch_size=64, micro_batch=10)

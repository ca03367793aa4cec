"""The optimiser and the schedule of a recipe: warm-up then cosine decay, the weight-decay mask, the run's length
in steps, and what a resumed run must match."""

import dataclasses

import equinox as eqx
import numpy as np
import pytest
from nets_common import tiny_recipe, vit

from gradflow.nets import learning_rate_schedule
from gradflow.nets._optim import _decay_mask, optimizer_key, recipe_description, step_counts

RECIPE = tiny_recipe(30, checkpoint_every=10, eval_every=10, n_spectra=6)  # tests/nets/test_train.py's recipe


def test_learning_rate_schedule():
    recipe = dataclasses.replace(RECIPE, lr=1.0)
    lr = learning_rate_schedule(recipe, 100, 10)
    np.testing.assert_allclose([float(lr(s)) for s in (0, 5, 10, 55, 100)], [0.0, 0.5, 1.0, 0.5, 0.0], atol=1e-6)


def test_weight_decay_mask():
    mask = _decay_mask(eqx.filter(vit(), eqx.is_array))
    assert mask.blocks.attn.wq and mask.blocks.mlp.fc_in.weight and mask.head.weight
    assert not (mask.blocks.attn.bq or mask.blocks.ln1.weight or mask.ln_f.weight or mask.head.bias or mask.cls_token)


def test_constant_schedule_after_the_warm_up():
    recipe = dataclasses.replace(RECIPE, lr=2.0, schedule="constant")
    lr = learning_rate_schedule(recipe, 100, 4)
    assert [lr(s) for s in (0, 1, 4, 50, 100)] == [0.0, 0.5, 2.0, 2.0, 2.0]


def test_step_counts_in_epochs_and_steps():
    """``(steps per epoch, total, warm-up, last step)``: 1000 examples in batches of 64 are 15 steps an epoch."""
    epochs = dataclasses.replace(RECIPE, batch_size=64, total=3, warmup=1, unit="epochs")
    assert step_counts(epochs, 1000, None) == (15, 45, 15, 45)
    assert step_counts(epochs, 1000, 20) == (15, 45, 15, 20)
    steps = dataclasses.replace(epochs, total=30, warmup=3, unit="steps")
    assert step_counts(steps, 1000, 100) == (15, 30, 3, 30)
    with pytest.raises(ValueError, match="batch_size 64 exceeds the 50 training examples"):
        step_counts(steps, 50, None)


def test_a_resumed_run_may_change_its_length_not_its_optimiser():
    """The run description leaves out the fields a resumed run may change; the optimiser's key has its fields."""
    described = recipe_description(RECIPE)
    assert not {"total", "warmup", "unit", "checkpoint_every", "sharding"} & set(described)
    assert described["lr"] == RECIPE.lr and described["batch_size"] == RECIPE.batch_size
    assert recipe_description(dataclasses.replace(RECIPE, total=99, checkpoint_every=3)) == described
    key = dict(optimizer_key(dataclasses.replace(RECIPE, weight_decay=0.5)))
    assert list(key) == ["optimizer", "b1", "b2", "eps", "weight_decay", "grad_clip"] and key["weight_decay"] == 0.5

"""The models' and recipes' configurations: the named presets (with the published sizes), their checks, and the
initialisation scale every model and the toy head check alike."""

import dataclasses

import equinox as eqx
import jax
import pytest
from nets_common import KEY, SMALL_TOY

from gradflow.nets import GPT, ViT, gpt_config, train_config, train_toy_attention, vit_config


def test_bad_input():
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


def test_init_scale_is_checked_by_the_models_and_the_toy():
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="init_scale must be a finite positive number"):
            ViT(vit_config("tiny"), key=KEY, init_scale=bad)
        with pytest.raises(ValueError, match="init_scale must be a finite positive number"):
            GPT(gpt_config("gpt2-tiny"), key=KEY, init_scale=bad)
    with pytest.raises(ValueError, match=r"init_scale must lie in \(0, 1\), got 1.0"):
        train_toy_attention(SMALL_TOY, init_scale=1.0, steps=1, lr=0.1)

"""What the networks' tests share: the embedded data, the tiny ViT and recipe, and comparisons of runs. One recipe
shape (batch 64, evaluation batch 256) for the ViT runs, so that the test modules share the compiled step."""

import dataclasses
import functools

import equinox as eqx
import jax
import numpy as np

from gradflow.nets import ViT, load_images, load_text, train_config, vit_config

DIGITS = load_images(None, seed=0)
VIT_CFG = dataclasses.replace(vit_config("tiny"), n_classes=DIGITS.num_classes)


@functools.cache
def text():
    """The embedded English corpus (loaded once)."""
    return load_text(None)


def vit(scale: float = 1.0) -> ViT:
    """The tiny ViT for the digits, key 0."""
    return ViT(VIT_CFG, key=jax.random.key(0), init_scale=scale)


def tiny_recipe(steps: int, **changes):
    """The ``tiny`` recipe over ``steps`` steps (its warm-up fraction kept), with ``changes``."""
    return dataclasses.replace(train_config("tiny").with_duration(steps, "steps"), **changes)


def params_equal(a, b) -> bool:
    """Whether two models hold the same arrays, bit for bit."""
    la, lb = (jax.tree_util.tree_leaves(eqx.filter(m, eqx.is_array)) for m in (a, b))
    return len(la) == len(lb) and all(np.array_equal(x, y) for x, y in zip(la, lb))


def without_timing(metrics: list[dict]) -> list[dict]:
    """The records without their throughput (the one field a resumed run does not reproduce)."""
    return [{k: v for k, v in m.items() if not k.endswith("_per_s")} for m in metrics]

"""What the networks' tests share: the embedded data, the tiny ViT, GPT, toy attention head and recipe, jitted
forward passes, and comparisons of runs. One recipe shape (batch 64, evaluation batch 256) for the ViT runs, and
one toy head, so that the test modules share the compiled step."""

import dataclasses
import functools

import equinox as eqx
import jax
import numpy as np

from gradflow.nets import GPT, ToyAttentionConfig, ViT, gpt_config, load_images, load_text, train_config, vit_config
from gradflow.nets._configs import GPTConfig

KEY = jax.random.key(0)
DIGITS = load_images(None, seed=0)
VIT_CFG = dataclasses.replace(vit_config("tiny"), n_classes=DIGITS.num_classes)
TINY_GPT = GPTConfig(vocab_size=257, context=16, d_emb=16, n_layers=2, n_heads=2, d_head=8, d_mlp=32)
"""A GPT smaller than ``gpt2-tiny``, for InRank's runs."""
SMALL_TOY = ToyAttentionConfig(n=20, tokens=3, dim=4, teacher_kq=(1.0,), teacher_vo=(1.0,))
TOY = dict(init_scale=0.1, lr=0.05, record_every=10, seed=2)
"""The toy head's runs: its task and training options."""


@eqx.filter_jit
def jit_call(model, x):
    """Jitted forward (eager dispatch of every op is slow on a shared CPU)."""
    return model(x)


@eqx.filter_jit
def jit_vcall(model, x):
    return jax.vmap(model)(x)


def tiny_vit(scale: float = 1.0, **changes) -> ViT:
    """``vit_config("tiny")`` with ``changes`` (its 10 classes), key 0."""
    return ViT(dataclasses.replace(vit_config("tiny"), **changes), key=KEY, init_scale=scale)


def tiny_gpt(scale: float = 1.0) -> GPT:
    """``gpt_config("gpt2-tiny")``, key 0."""
    return GPT(gpt_config("gpt2-tiny"), key=KEY, init_scale=scale)


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

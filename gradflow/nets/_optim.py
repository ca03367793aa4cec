"""The optimiser and the schedule of a recipe (``TrainConfig``): Adam, AdamW or SGD with optional clipping, the
learning rate by step, the run's length in steps, and the recipe's part of a run description."""

from __future__ import annotations

import dataclasses
import math

import jax
import optax

from ._configs import TrainConfig

_OPTIMIZER_FIELDS = ("optimizer", "b1", "b2", "eps", "weight_decay", "grad_clip")
_RESUMABLE_CHANGES = ("total", "warmup", "unit", "checkpoint_every", "sharding")
"""Recipe fields a resumed run may change: its length and schedule (the steps still to run follow the new one),
where checkpoints go and how the arrays are placed."""


def _decay_mask(params):
    """AdamW decays weight matrices, embeddings and InRank's low-rank factors ``u, v``; not biases,
    LayerNorm parameters or the class token."""

    def decay(path, leaf):
        names = [getattr(p, "name", "") for p in path]
        if any(n in ("ln1", "ln2", "ln_f", "cls_token") for n in names):
            return False
        return names[-1] in ("weight", "wq", "wk", "wv", "wo", "wte", "wpe", "pos_embed", "u", "v")

    return jax.tree_util.tree_map_with_path(decay, params)


def optimizer_key(config: TrainConfig) -> tuple:
    """The fields of ``config`` that :func:`make_optimizer` reads (hashable: a key of the compiled steps)."""
    return tuple((f, getattr(config, f)) for f in _OPTIMIZER_FIELDS)


def make_optimizer(config: TrainConfig) -> optax.GradientTransformation:
    """Clip (optional) → Adam moments (not for ``"sgd"``) → decoupled weight decay (AdamW). The learning rate is
    applied by the step (``update × −lr``), so one compiled step serves every schedule and run length."""
    parts = [] if config.grad_clip is None else [optax.clip_by_global_norm(config.grad_clip)]
    if config.optimizer != "sgd":
        parts.append(optax.scale_by_adam(b1=config.b1, b2=config.b2, eps=config.eps))
    if config.optimizer == "adamw":
        parts.append(optax.add_decayed_weights(config.weight_decay, mask=_decay_mask))
    return optax.chain(*parts) if parts else optax.identity()


def step_counts(config: TrainConfig, n_train: int, stop_after: int | None) -> tuple[int, int, int, int]:
    """``(steps per epoch, total steps, warm-up steps, last step to run)`` for ``n_train`` training examples."""
    if config.batch_size > n_train:
        raise ValueError(f"batch_size {config.batch_size} exceeds the {n_train} training examples")
    per_epoch = n_train // config.batch_size
    scale = per_epoch if config.unit == "epochs" else 1
    total, warmup = config.total * scale, config.warmup * scale
    return per_epoch, total, warmup, total if stop_after is None else min(stop_after, total)


def learning_rate_schedule(config: TrainConfig, total_steps: int, warmup_steps: int):
    """``lr(step)``: linear warm-up from 0 to ``config.lr`` over ``warmup_steps``, then cosine decay to 0 at
    ``total_steps`` (``config.schedule="constant"``: ``config.lr``); ``step`` counts the updates already done."""
    decay = max(total_steps - warmup_steps, 1)

    def lr(step: int) -> float:
        if step < warmup_steps:
            return config.lr * step / warmup_steps
        if config.schedule == "constant":
            return config.lr
        return config.lr * 0.5 * (1.0 + math.cos(math.pi * min(step - warmup_steps, decay) / decay))

    return lr


def recipe_description(config: TrainConfig) -> dict:
    """The recipe in a run description (what a resumed run must match): every field but those a resumed run may
    change (``_RESUMABLE_CHANGES``: its length and warm-up, ``checkpoint_every``, ``sharding``)."""
    return {k: v for k, v in dataclasses.asdict(config).items() if k not in _RESUMABLE_CHANGES}

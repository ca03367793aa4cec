"""Model and training configurations (frozen dataclasses) and the named presets."""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

ATTENTION_IMPLEMENTATIONS = ("auto", "xla", "cudnn")  # ``_layers.attend``


def check_attention(name: str) -> None:
    """Refuse an attention implementation that is not one of ``ATTENTION_IMPLEMENTATIONS``."""
    if name not in ATTENTION_IMPLEMENTATIONS:
        *first, last = map(repr, ATTENTION_IMPLEMENTATIONS)
        raise ValueError(f"attention must be {', '.join(first)} or {last}, got {name!r}")


@dataclasses.dataclass(frozen=True)
class ViTConfig:
    """Vision transformer. Images are (H, W, C) = (image_size, image_size, channels).

    ``pool="cls"`` classifies from a learned class token (as in [DBK+20]); ``"mean"`` averages the patch tokens.
    ``remat=True`` recomputes each block's activations in the backward pass (see ``_layers.apply_stacked``).
    ``attention``: ``"auto"`` (cuDNN's fused flash attention on a GPU in bf16 where cuDNN accepts the shapes,
    else XLA), ``"xla"`` or ``"cudnn"`` (``_layers.attend``); the same function either way.
    """

    image_size: int
    channels: int
    patch: int
    d_emb: int
    n_layers: int
    n_heads: int
    d_head: int
    d_mlp: int
    n_classes: int
    pool: Literal["cls", "mean"] = "cls"
    remat: bool = False
    attention: Literal["auto", "xla", "cudnn"] = "auto"

    def __post_init__(self):
        check_attention(self.attention)
        if self.image_size % self.patch:
            raise ValueError(f"image_size {self.image_size} is not a multiple of patch {self.patch}")
        if self.pool not in ("cls", "mean"):
            raise ValueError(f"pool must be 'cls' or 'mean', got {self.pool!r}")

    @property
    def n_patches(self) -> int:
        return (self.image_size // self.patch) ** 2


@dataclasses.dataclass(frozen=True)
class GPTConfig:
    """GPT-2 style decoder (pre-LayerNorm, GELU MLP, learned positions, LM head tied to the token embedding).

    ``remat=True`` recomputes each block's activations in the backward pass instead of keeping them (see
    ``_layers.apply_stacked``): on for the paper-scale presets, whose micro-batch of 16 × 1024 tokens would
    otherwise keep every layer's attention probabilities (GPT-2 small, bf16: the compiled gradient's temporaries
    drop from 46.7 to 13.3 GiB, most of the rest being the 16 × 1024 × 50257 logits). ``attention`` as in
    ``ViTConfig``.
    """

    vocab_size: int
    context: int
    d_emb: int
    n_layers: int
    n_heads: int
    d_head: int
    d_mlp: int
    remat: bool = False
    attention: Literal["auto", "xla", "cudnn"] = "auto"

    def __post_init__(self):
        check_attention(self.attention)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Optimisation recipe. ``total`` and ``warmup`` are counted in ``unit`` (epochs or optimiser steps).

    ``optimizer``: Adam, AdamW (decoupled weight decay) or ``"sgd"``, plain gradient descent
    ``θ ← θ − lr·g``. Learning rate: linear warm-up from 0 to ``lr`` over ``warmup``, then (``schedule``)
    cosine decay to 0 at ``total``, or ``lr`` throughout (``"constant"``).
    ``batch_size`` is the global batch; it is split into ``batch_size // micro_batch`` micro-batches whose
    gradients are averaged inside one jitted step (gradient accumulation). ``log_every=None``: no training-loss
    records (the losses are still checked at every sync point).

    ``sharding`` places the parameters and optimiser state on the devices of the run (every micro-batch is split
    over the devices, whose number must divide it): ``"replicated"``, a copy on every device (data parallelism,
    DDP); ``"fsdp"``, each large array split along one axis over the devices (see ``_distributed.Layout``). It
    changes where arrays live, not what is computed: a run may resume with another sharding or device count.
    """

    optimizer: Literal["adam", "adamw", "sgd"] = "adam"
    lr: float = 1e-4
    weight_decay: float = 0.0
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    grad_clip: float | None = None
    total: int = 500
    warmup: int = 15
    unit: Literal["epochs", "steps"] = "epochs"
    batch_size: int = 512
    micro_batch: int | None = None
    eval_every: int = 1000
    checkpoint_every: int = 1000
    log_every: int | None = 10
    n_spectra: int = 30
    eval_batch_size: int = 512
    schedule: Literal["cosine", "constant"] = "cosine"
    sharding: Literal["replicated", "fsdp"] = "replicated"

    def __post_init__(self):
        for field, allowed in (
            ("optimizer", ("adam", "adamw", "sgd")),
            ("schedule", ("cosine", "constant")),
            ("sharding", ("replicated", "fsdp")),
        ):
            if getattr(self, field) not in allowed:
                raise ValueError(f"{field} must be one of {allowed}, got {getattr(self, field)!r}")
        if self.unit not in ("epochs", "steps"):
            raise ValueError(f"unit must be 'epochs' or 'steps', got {self.unit!r}")
        if self.log_every is not None and self.log_every < 1:
            raise ValueError(f"log_every must be a positive number of steps or None, got {self.log_every}")
        if not 0 <= self.warmup <= self.total or self.total < 1:
            raise ValueError(f"need 0 <= warmup <= total and total >= 1, got warmup={self.warmup}, total={self.total}")
        micro = self.micro_batch or self.batch_size
        if self.batch_size % micro:
            raise ValueError(f"batch_size {self.batch_size} is not a multiple of micro_batch {micro}")

    @property
    def n_micro(self) -> int:
        return self.batch_size // (self.micro_batch or self.batch_size)

    def with_duration(self, total: int, unit: Literal["epochs", "steps"]) -> TrainConfig:
        """The same recipe over ``total`` ``unit``s, keeping the warm-up's fraction of the run."""
        warmup = round(total * self.warmup / self.total)
        return dataclasses.replace(self, total=total, unit=unit, warmup=warmup)

    def with_overrides(
        self,
        *,
        batch_size: int | None = None,
        micro_batch: int | None = None,
        lr: float | None = None,
        checkpoint_every: int | None = None,
        steps: int | None = None,
        epochs: int | None = None,
        sharding: str | None = None,
    ) -> TrainConfig:
        """The recipe with the command line's overrides (``None``: keep the recipe's).

        A new ``batch_size`` keeps the recipe's ``micro_batch`` only if it divides the new batch; ``steps``
        wins over ``epochs``; the warm-up keeps its fraction of the run (:meth:`with_duration`).
        """
        cfg = self
        if batch_size is not None:
            keep = cfg.micro_batch is not None and batch_size % cfg.micro_batch == 0
            cfg = dataclasses.replace(cfg, batch_size=batch_size, micro_batch=cfg.micro_batch if keep else None)
        changes = {
            k: v
            for k, v in (
                ("micro_batch", micro_batch),
                ("lr", lr),
                ("checkpoint_every", checkpoint_every),
                ("sharding", sharding),
            )
            if v is not None
        }
        cfg = dataclasses.replace(cfg, **changes)
        if steps is not None:
            return cfg.with_duration(steps, "steps")
        if epochs is not None:
            return cfg.with_duration(epochs, "epochs")
        return cfg


VIT_CONFIGS = {
    # Paper §5 / appendix B.1 (CIFAR-10/100); n_classes is set from the data.
    "paper": ViTConfig(
        image_size=32, channels=3, patch=4, d_emb=512, n_layers=6, n_heads=8, d_head=128, d_mlp=512, n_classes=10
    ),
    # ViT-Base/16 [DBK+20] (ImageNet, appendix B.3).
    "vit-base-16": ViTConfig(
        image_size=224, channels=3, patch=16, d_emb=768, n_layers=12, n_heads=12, d_head=64, d_mlp=3072, n_classes=1000
    ),
    # CPU tests and demos on the embedded 8×8 digits.
    "tiny": ViTConfig(
        image_size=8, channels=1, patch=2, d_emb=32, n_layers=2, n_heads=4, d_head=8, d_mlp=64, n_classes=10
    ),
}

GPT_CONFIGS = {
    "gpt2-small": GPTConfig(
        vocab_size=50257, context=1024, d_emb=768, n_layers=12, n_heads=12, d_head=64, d_mlp=3072, remat=True
    ),
    "gpt2-medium": GPTConfig(
        vocab_size=50257, context=1024, d_emb=1024, n_layers=24, n_heads=16, d_head=64, d_mlp=4096, remat=True
    ),
    "gpt2-large": GPTConfig(
        vocab_size=50257, context=1024, d_emb=1280, n_layers=36, n_heads=20, d_head=64, d_mlp=5120, remat=True
    ),
    # CPU tests and demos; vocab_size is set from the tokenizer.
    "gpt2-tiny": GPTConfig(vocab_size=256, context=32, d_emb=32, n_layers=2, n_heads=4, d_head=8, d_mlp=128),
}

TRAIN_CONFIGS = {
    # Paper appendix B.1: Adam, lr 1e-4, 15 warm-up epochs, cosine decay, batch 512, 500 epochs, no wd.
    "vit-cifar": TrainConfig(lr=1e-4, total=500, warmup=15, batch_size=512, eval_every=2000, checkpoint_every=2000),
    # Paper appendix B.3: ViT-Base/16 on ImageNet, Adam, lr 3e-3, batch 4096 (accumulated from 512), 360 epochs.
    "vit-imagenet": TrainConfig(
        lr=3e-3, total=360, warmup=15, batch_size=4096, micro_batch=512, eval_every=5000, checkpoint_every=5000
    ),
    # InRank paper, Table 4: AdamW 6e-4, wd 0.1, warm-up 1 of 100 epochs, effective batch 512 by accumulation.
    "gpt2-wikitext103": TrainConfig(
        optimizer="adamw",
        lr=6e-4,
        weight_decay=0.1,
        b2=0.95,
        grad_clip=1.0,
        total=100,
        warmup=1,
        batch_size=512,
        micro_batch=16,
        eval_every=2000,
        checkpoint_every=2000,
        eval_batch_size=16,
    ),
    # CPU demos and tests: Adam, lr 3e-3, 50 steps.
    "tiny": TrainConfig(
        lr=3e-3,
        total=50,
        warmup=5,
        unit="steps",
        batch_size=64,
        eval_every=25,
        checkpoint_every=25,
        log_every=5,
        n_spectra=10,
        eval_batch_size=256,
    ),
}


def _lookup(table: dict, name: str, kind: str):
    try:
        return table[name]
    except KeyError:
        raise ValueError(f"unknown {kind} config {name!r}; choose one of {sorted(table)}") from None


def vit_config(name: str) -> ViTConfig:
    """The named ViT config: ``paper``, ``vit-base-16`` or ``tiny``."""
    return _lookup(VIT_CONFIGS, name, "ViT")


def gpt_config(name: str) -> GPTConfig:
    """The named GPT config: ``gpt2-small``, ``gpt2-medium``, ``gpt2-large`` or ``gpt2-tiny``."""
    return _lookup(GPT_CONFIGS, name, "GPT")


def train_config(name: str) -> TrainConfig:
    """The named training recipe: ``vit-cifar``, ``vit-imagenet``, ``gpt2-wikitext103`` or ``tiny``."""
    return _lookup(TRAIN_CONFIGS, name, "training")


def check_init_scale(scale: float, *, below_one: bool = False) -> float:
    """``scale`` if it is a finite positive number (below 1 with ``below_one``: the toy's time ``t / log(1/α)``
    needs it), else a ValueError that says the range. The models, the toy and the command line all check so."""
    upper = 1.0 if below_one else math.inf
    if not 0 < scale < upper:
        allowed = "lie in (0, 1)" if below_one else "be a finite positive number"
        raise ValueError(f"init_scale must {allowed}, got {scale!r}")
    return scale

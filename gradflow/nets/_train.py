"""Training loop: one jitted step (gradient accumulation, clipping, Adam/AdamW, warm-up + cosine),
deterministic data order, checkpoints with exact resume, JSON-lines metrics, scheduled spectra.

Mixed precision: parameters and optimiser state are float32; the forward/backward pass runs on a copy of
the parameters cast to ``compute_dtype`` (bf16 on GPU/TPU, float32 on CPU by default); LayerNorm, softmax
and the loss are float32. No array depends on the global ``jax_enable_x64`` flag.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import pathlib
import time
from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm.auto import tqdm

from . import _runs
from ._configs import TrainConfig, ViTConfig
from ._data import ImageDataset, TextDataset, batch_indices
from ._layers import cast_floating
from ._spectra import perturbation_spectra, weight_spectra


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite."""


class TrainState(eqx.Module):
    params: eqx.Module
    opt_state: optax.OptState


class TrainResult(eqx.Module):
    """``model`` after training, ``init_model`` at step 0, ``metrics`` (the records of metrics.jsonl),
    ``evaluation`` (the final evaluation record), ``steps`` (optimiser steps done), ``out`` (run folder or None)."""

    model: eqx.Module
    init_model: eqx.Module
    metrics: list
    evaluation: dict
    steps: int
    out: pathlib.Path | None


def default_compute_dtype():
    """bfloat16 on GPU/TPU, float32 on CPU."""
    return jnp.dtype(jnp.float32 if jax.default_backend() == "cpu" else jnp.bfloat16)


# ----------------------------------------------------------------------------- data on device


def _image_arrays(data: ImageDataset, model):
    c = model.config
    expected = (c.image_size, c.image_size, c.channels)
    if data.train_x.shape[1:] != expected or data.test_x.shape[1:] != expected:
        raise ValueError(
            f"model config expects images of shape {expected} (H, W, C); got train "
            f"{data.train_x.shape[1:]}, test {data.test_x.shape[1:]}"
        )
    for y, split in ((data.train_y, "train"), (data.test_y, "test")):
        if y.size and (y.min() < 0 or y.max() >= c.n_classes):
            raise ValueError(f"{split} labels must lie in [0, {c.n_classes}), got [{y.min()}, {y.max()}]")
    scale = 255.0 if data.train_x.dtype == np.uint8 else 1.0
    flat = data.train_x.reshape(-1, data.train_x.shape[-1]).astype(np.float64) / scale
    mean, std = flat.mean(0), flat.std(0)
    std = np.where(std > 0, std, 1.0)
    to = lambda a: jnp.asarray(a, dtype=jnp.uint8 if a.dtype == np.uint8 else jnp.float32)
    stats = (jnp.asarray(mean, jnp.float32), jnp.asarray(std, jnp.float32), jnp.float32(scale))
    return (
        (to(data.train_x), jnp.asarray(data.train_y, jnp.int32)),
        (to(data.test_x), jnp.asarray(data.test_y, jnp.int32)),
        stats,
    )


def _token_arrays(data: TextDataset, model):
    c = model.config
    for a, split in ((data.train, "train"), (data.valid, "valid")):
        if a.size and (a.min() < 0 or a.max() >= c.vocab_size):
            raise ValueError(f"{split} tokens must lie in [0, {c.vocab_size}), got [{a.min()}, {a.max()}]")
        if a.size < c.context + 1:
            raise ValueError(f"{split} stream has {a.size} tokens, fewer than context + 1 = {c.context + 1}")
    return jnp.asarray(data.train, jnp.int32), jnp.asarray(data.valid, jnp.int32), c.context


def _n_examples(data, context: int | None, split: str) -> int:
    if isinstance(data, ImageDataset):
        return (data.train_x if split == "train" else data.test_x).shape[0]
    stream = data.train if split == "train" else data.valid
    return (stream.size - 1) // context


def _example_losses(model, arrays, idx, compute_dtype, kind):
    """Per-example loss (float32) and per-example count of correct predictions / tokens. ``arrays``: images
    ``((x, y), (mean, std, scale))``, or the token stream, read in windows of ``model.config.context + 1``."""
    m = cast_floating(model, compute_dtype)
    if kind == "image":
        (x, y), (mean, std, scale) = arrays
        images = ((x[idx].astype(jnp.float32) / scale - mean) / std).astype(compute_dtype)
        logits = jax.vmap(m)(images).astype(jnp.float32)
        labels = y[idx]
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
        return loss, (jnp.argmax(logits, -1) == labels).astype(jnp.float32)
    stream, context = arrays, model.config.context
    windows = jax.vmap(lambda i: jax.lax.dynamic_slice(stream, (i * context,), (context + 1,)))(idx)
    logits = jax.vmap(m)(windows[:, :-1])
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, windows[:, 1:]).mean(-1)
    return loss, jnp.full(loss.shape, context, jnp.float32)


# ----------------------------------------------------------------------------- optimiser


def _decay_mask(params):
    """AdamW decays weight matrices, embeddings and InRank's low-rank factors ``u, v``; not biases,
    LayerNorm parameters or the class token."""

    def decay(path, leaf):
        names = [getattr(p, "name", "") for p in path]
        if any(n in ("ln1", "ln2", "ln_f", "cls_token") for n in names):
            return False
        return names[-1] in ("weight", "wq", "wk", "wv", "wo", "wte", "wpe", "pos_embed", "u", "v")

    return jax.tree_util.tree_map_with_path(decay, params)


def make_optimizer(config: TrainConfig) -> optax.GradientTransformation:
    """Clip (optional) → Adam moments → decoupled weight decay (AdamW). The learning rate is applied by the
    step (``update × −lr``), so one compiled step serves every schedule and run length."""
    parts = [] if config.grad_clip is None else [optax.clip_by_global_norm(config.grad_clip)]
    parts.append(optax.scale_by_adam(b1=config.b1, b2=config.b2, eps=config.eps))
    if config.optimizer == "adamw":
        parts.append(optax.add_decayed_weights(config.weight_decay, mask=_decay_mask))
    return optax.chain(*parts)


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
    ``total_steps`` (``step`` counts the updates already done)."""
    decay = max(total_steps - warmup_steps, 1)

    def lr(step: int) -> float:
        if step < warmup_steps:
            return config.lr * step / warmup_steps
        return config.lr * 0.5 * (1.0 + math.cos(math.pi * min(step - warmup_steps, decay) / decay))

    return lr


def split_model(model, trainable=eqx.is_inexact_array):
    """``(params, frozen, static)`` with ``eqx.combine(params, frozen, static)`` the model: the arrays selected by
    ``trainable`` (a filter or a filter spec), the other arrays (used but not trained, e.g. InRank's ``W_0``) and
    the non-array rest (hashable: a static argument of the step)."""
    params, rest = eqx.partition(model, trainable)
    frozen, static = eqx.partition(rest, eqx.is_array)
    return params, frozen, static


def _mean_loss(model, arrays, idx, *, compute_dtype, kind):
    return _example_losses(model, arrays, idx, compute_dtype, kind)[0].mean()


def make_step(optimizer: optax.GradientTransformation, loss_fn, traces: list | None = None):
    """The jitted optimiser step of every training loop here, on a model split by :func:`split_model`::

        step(params, opt_state, frozen, static, arrays, idx, lr) -> (params, opt_state, loss, grad_norm)

    ``idx`` holds one micro-batch per row: the loss ``L`` and gradient ``g`` are the means over the rows of
    ``loss_fn(model, arrays, idx[i])`` and its gradient in ``params`` (accumulated by ``lax.scan``), then
    ``params ← params − lr · optimizer.update(g)``. ``params`` and ``opt_state`` are donated (updated in place);
    ``L`` and ``‖g‖₂`` stay on the device, so that the host never waits for a step before queueing the next.
    ``traces[0]``, if given, counts the compilations.
    """

    def step(params, opt_state, frozen, static, arrays, idx, lr):
        if traces is not None:
            traces[0] += 1  # runs only while tracing

        def micro(carry, micro_idx):
            value = jax.value_and_grad(lambda p: loss_fn(eqx.combine(p, frozen, static), arrays, micro_idx))(params)
            return jax.tree_util.tree_map(jnp.add, carry, value), None

        zeros = (jnp.float32(0), jax.tree_util.tree_map(jnp.zeros_like, params))
        (loss, grads), _ = jax.lax.scan(micro, zeros, idx)
        n = jnp.float32(idx.shape[0])
        loss, grads = loss / n, jax.tree_util.tree_map(lambda g: g / n, grads)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, jax.tree_util.tree_map(lambda u: -lr * u, updates))
        return params, opt_state, loss, optax.tree.norm(grads)

    # plain jax.jit: eqx.filter_jit waits for every call to finish
    return jax.jit(step, donate_argnums=(0, 1), static_argnums=3)


class StepLog:
    """Losses and gradient norms of the steps run since the last sync point, still on the device, and the wall
    time of the steps alone.

    ``add`` queues a step's results; ``sync`` waits for the device, fetches the queued results in one transfer,
    books the time since the last ``restart`` to the queued steps (``timed=False``: to none, e.g. for a compiling
    step) and returns them as ``(step, loss, grad_norm)`` floats, raising ``NonFiniteLossError`` at the first
    non-finite loss. Work between ``sync`` and ``restart`` (evaluation, checkpoints, spectra, rank checks) is not
    timed; ``take_timing`` returns and resets ``(seconds, steps)``.
    """

    def __init__(self, config: TrainConfig, schedule):
        self._config, self._schedule = config, schedule
        self._pending: list = []
        self._seconds, self._steps, self._t0 = 0.0, 0, time.perf_counter()

    def add(self, step: int, loss, grad_norm) -> None:
        self._pending.append((step, loss, grad_norm))

    def sync(self, timed: bool = True) -> list[tuple[int, float, float]]:
        values = jax.device_get([(loss, g) for _, loss, g in self._pending])
        if timed:
            self._seconds += time.perf_counter() - self._t0
            self._steps += len(self._pending)
        done = [(step, float(loss), float(g)) for (step, _, _), (loss, g) in zip(self._pending, values)]
        self._pending = []
        for step, loss, _ in done:
            if not math.isfinite(loss):
                raise NonFiniteLossError(
                    f"loss is {loss} at step {step} (learning rate {self._schedule(step - 1):.3g}); stopping. "
                    f"Try a lower learning rate (TrainConfig.lr={self._config.lr:g}) or gradient clipping."
                )
        return done

    def restart(self) -> None:
        self._t0 = time.perf_counter()

    def take_timing(self) -> tuple[float, int]:
        timing, (self._seconds, self._steps) = (self._seconds, self._steps), (0.0, 0)
        return timing


def _make_eval(compute_dtype, kind):
    @eqx.filter_jit
    def evaluate(arrays, model, idx, weight):
        loss, correct = _example_losses(model, arrays, idx, compute_dtype, kind)
        return jnp.sum(loss * weight), jnp.sum(correct * weight), jnp.sum(weight)

    return evaluate


class Compiled(NamedTuple):
    step: Callable
    evaluate: Callable
    traces: list


@functools.lru_cache(maxsize=16)
def compiled(optimizer_fields: tuple, compute_dtype, kind: str) -> Compiled:
    """Jitted step (:func:`make_step` on the mean example loss) and evaluation, shared by all runs with the same
    optimiser settings (several init scales, run lengths, learning rates, the modes of an InRank comparison);
    ``traces[0]`` counts the step's compilations."""
    traces = [0]
    loss_fn = functools.partial(_mean_loss, compute_dtype=compute_dtype, kind=kind)
    optimizer = make_optimizer(TrainConfig(**dict(optimizer_fields)))
    return Compiled(make_step(optimizer, loss_fn, traces), _make_eval(compute_dtype, kind), traces)


def compiled_for(config: TrainConfig, compute_dtype, kind: str) -> Compiled:
    return compiled(tuple((f, getattr(config, f)) for f in _OPTIMIZER_FIELDS), jnp.dtype(compute_dtype), kind)


_OPTIMIZER_FIELDS = ("optimizer", "b1", "b2", "eps", "weight_decay", "grad_clip")


def _evaluate(evaluate, arrays, model, n: int, batch: int, kind: str) -> dict:
    """Mean loss over the whole split (last batch padded and masked), with accuracy or perplexity."""
    totals = np.zeros(3)
    for start in range(0, n, batch):
        idx = np.arange(start, start + batch)
        weight = (idx < n).astype(np.float32)
        idx = np.where(idx < n, idx, 0).astype(np.int32)
        totals += np.array([float(v) for v in evaluate(arrays, model, jnp.asarray(idx), jnp.asarray(weight))])
    loss = totals[0] / totals[2]
    if kind == "image":
        return {"eval_loss": loss, "eval_accuracy": totals[1] / totals[2]}
    return {"eval_loss": loss, "eval_perplexity": math.exp(min(loss, 700.0))}


# ----------------------------------------------------------------------------- schedule helpers


def spectra_steps(total_steps: int, n: int) -> list[int]:
    """``n`` log-spaced steps in [1, total_steps] (rounded, unique), always including the last step."""
    if n <= 0:
        return []
    steps = np.unique(np.round(np.logspace(0, math.log10(total_steps), n)).astype(int))
    return sorted(set(steps.tolist()) | {total_steps})


# ----------------------------------------------------------------------------- entry point


def train(
    model: eqx.Module,
    config: TrainConfig,
    data: ImageDataset | TextDataset,
    *,
    seed: int = 0,
    out: str | pathlib.Path | None = None,
    resume: bool = False,
    compute_dtype=None,
    progress: bool = True,
    stop_after: int | None = None,
) -> TrainResult:
    """Train ``model`` (a ``ViT`` on an ``ImageDataset`` or a ``GPT`` on a ``TextDataset``, see ``_data``)
    with the recipe ``config``. Images are standardised per channel with the training set's mean and std
    (uint8 first divided by 255); no augmentation. Text examples are the non-overlapping windows of
    ``context + 1`` tokens; evaluation uses the test images or the ``valid`` stream.

    ``seed`` fixes the data order (``_data.batch_indices``; the data position is the step count); the
    initialisation is fixed by the key the model was built with. With ``out``, metrics go to
    ``out/metrics.jsonl`` as produced, checkpoints to ``out/checkpoint`` every ``config.checkpoint_every``
    steps and at the end, and the attention spectra (``config.n_spectra`` log-spaced steps) to ``out/spectra``.
    ``resume=True`` continues from the checkpoint in ``out`` and reproduces the uninterrupted run bit for bit;
    it refuses a checkpoint of a different run (recipe, seed, model, data, compute dtype, initial weights:
    ``_runs.check_resumable``). ``stop_after`` ends the run after that many optimiser steps in total, with a
    checkpoint, as an interruption would (the schedule still spans the full recipe). Training-loss records are
    means over windows ending at multiples of ``config.log_every``, with the throughput of the steps alone
    (``img_per_s`` / ``tok_per_s``; not the first, compiling, step of a session). Losses stay on the device until
    the next log, evaluation, spectra or checkpoint step (no per-step host synchronisation); raises
    ``NonFiniteLossError`` naming the first step whose loss is not finite.
    """
    if isinstance(data, ImageDataset) != isinstance(getattr(model, "config", None), ViTConfig) or not isinstance(
        data, (ImageDataset, TextDataset)
    ):
        raise TypeError(
            f"train a ViT on an ImageDataset or a GPT on a TextDataset; got "
            f"{type(model).__name__} and {type(data).__name__}"
        )
    kind = "image" if isinstance(data, ImageDataset) else "token"
    compute_dtype = default_compute_dtype() if compute_dtype is None else jnp.dtype(compute_dtype)
    if kind == "image":
        train_arrays, test_arrays, stats = _image_arrays(data, model)
        train_arrays, test_arrays = (train_arrays, stats), (test_arrays, stats)
        context = None
    else:
        train_stream, valid_stream, context = _token_arrays(data, model)
        train_arrays, test_arrays = train_stream, valid_stream
    n_train, n_test = _n_examples(data, context, "train"), _n_examples(data, context, "test")
    per_epoch, total_steps, warmup_steps, last_step = step_counts(config, n_train, stop_after)

    optimizer = make_optimizer(config)
    init_model = model
    # the step donates `params`: train a copy, so that `model` (the initialisation) stays valid
    params, frozen, static = split_model(model)
    params = jax.tree_util.tree_map(lambda a: jnp.array(a, copy=True), params)
    opt_state = optimizer.init(params)
    start = 0
    out = pathlib.Path(out) if out is not None else None
    metrics: list[dict] = []
    window: list[float] = []  # checked losses since the last metrics record (saved with checkpoints)
    last_grad_norm = None
    description = _runs.describe(
        seed=seed,
        config=recipe_description(config),
        model=model.config,
        data=data_description(data),
        compute_dtype=compute_dtype,
        init_weights=_runs.fingerprint(model),
    )
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        log = _runs.MetricsLog(out / "metrics.jsonl")
        ckpt, spectra_dir = out / "checkpoint", out / "spectra"
        if resume and _runs.has_checkpoint(ckpt):
            _runs.check_resumable(ckpt, _runs.checkpoint_meta(ckpt), description)
            state, meta = _runs.load_checkpoint(ckpt, TrainState(model, opt_state))
            params, frozen, static = split_model(state.params)
            opt_state = state.opt_state
            init_model = _runs.load_tree(ckpt / "init.eqx", model)
            start, window, last_grad_norm = meta["step"], meta["log_window"], meta["grad_norm"]
            log.truncate_after(start)
            _runs.prune_spectra_after(spectra_dir, start)
            metrics = _runs.read_metrics(log.path)
        else:
            if log.path.exists():
                log.path.unlink()
            _runs.prune_spectra_after(spectra_dir, -1)
            _runs.clear_checkpoint(ckpt)
            ckpt.mkdir(parents=True, exist_ok=True)
            _runs.save_tree(ckpt / "init.eqx", model)
            _runs.save_spectra(spectra_dir, "init", weight_spectra(model), 0)
    elif resume:
        raise ValueError("resume=True needs the run folder `out`")

    def current():
        return eqx.combine(params, frozen, static)

    def record(rec: dict) -> None:
        rec = {k: (float(v) if isinstance(v, (np.floating, float)) else v) for k, v in rec.items()}
        metrics.append(rec)
        if out is not None:
            log.append(rec)

    def checkpoint(step: int) -> None:
        if out is not None:
            _runs.save_checkpoint(
                ckpt,
                TrainState(current(), opt_state),
                {
                    **description,
                    "step": step,
                    "total_steps": total_steps,
                    "log_window": window,
                    "grad_norm": last_grad_norm,
                },
            )

    step_fn, eval_fn, _ = compiled_for(config, compute_dtype, kind)
    schedule = learning_rate_schedule(config, total_steps, warmup_steps)
    measure_at = set(spectra_steps(total_steps, config.n_spectra)) if out is not None else set()
    examples_per_step = config.batch_size * (context or 1)
    unit_name = "tok/s" if kind == "token" else "img/s"
    steps = StepLog(config, schedule)
    bar = tqdm(total=total_steps, initial=start, disable=not progress, desc="train", dynamic_ncols=True)

    def sync(timed: bool = True) -> None:
        """Wait for the queued steps and take their losses (stopping at the first that is not finite)."""
        nonlocal last_grad_norm
        for _, loss, last_grad_norm in steps.sync(timed):  # noqa: B007 - nonlocal, read after the loop
            window.append(loss)

    def log_window(step: int) -> None:
        """One record with the mean loss since the previous record (windows end at multiples of log_every)."""
        nonlocal window
        seconds, n = steps.take_timing()
        rate = {unit_name: examples_per_step * n / seconds} if n else {}  # none if only a compiling step ran
        mean = float(np.mean(window))
        record(
            {
                "step": step,
                "loss": mean,
                "grad_norm": last_grad_norm,
                "lr": schedule(step - 1),
                **{k.replace("/", "_per_"): v for k, v in rate.items()},
            }
        )
        bar.set_postfix(loss=f"{mean:.4f}", **{k: f"{v:.0f}" for k, v in rate.items()})
        window = []

    for step in range(start + 1, last_step + 1):
        idx = batch_indices(n_train, batch_size=config.batch_size, seed=seed, step=step - 1)
        idx = idx.astype(np.int32).reshape(config.n_micro, -1)
        params, opt_state, loss, gnorm = step_fn(
            params, opt_state, frozen, static, train_arrays, jnp.asarray(idx), jnp.float32(schedule(step - 1))
        )
        steps.add(step, loss, gnorm)
        bar.update(1)
        is_log = step % config.log_every == 0 or step == total_steps
        is_eval = step % config.eval_every == 0 or step == total_steps
        is_ckpt = step % config.checkpoint_every == 0 or step == last_step
        if step == start + 1 or is_log or is_eval or is_ckpt or step in measure_at:
            sync(timed=step > start + 1)  # the first step of a session compiles: not timed
            if is_log:
                log_window(step)
            if step in measure_at:
                _runs.save_spectra(
                    spectra_dir, _runs.spectra_name(step), perturbation_spectra(current(), init_model), step
                )
            if is_eval:
                record(
                    {"step": step, **_evaluate(eval_fn, test_arrays, current(), n_test, config.eval_batch_size, kind)}
                )
            if is_ckpt:
                checkpoint(step)
            steps.restart()
    bar.close()
    evaluation = next((m for m in reversed(metrics) if "eval_loss" in m), {})
    return TrainResult(
        model=current(),
        init_model=init_model,
        metrics=metrics,
        evaluation=evaluation,
        steps=max(last_step, start),
        out=out,
    )


def recipe_description(config: TrainConfig) -> dict:
    """The recipe in a run description: every field but ``checkpoint_every``, which a resumed run may change."""
    return {k: v for k, v in dataclasses.asdict(config).items() if k != "checkpoint_every"}


def data_description(data) -> dict:
    """What identifies a data set in a run description: its name and sizes."""
    if isinstance(data, ImageDataset):
        return {
            "name": data.name,
            "train": int(data.train_x.shape[0]),
            "test": int(data.test_x.shape[0]),
            "image_shape": list(data.image_shape),
            "classes": int(data.num_classes),
        }
    return {
        "name": data.name,
        "tokenizer": data.tokenizer_name,
        "train_tokens": int(data.train.size),
        "valid_tokens": int(data.valid.size),
    }

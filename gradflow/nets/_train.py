"""``train``: a ViT on images or a GPT on text, through the one training loop (``_loop.run``): the data on the
devices, the losses, the evaluation, the attention spectra at log-spaced steps, and the result.

Mixed precision: parameters and optimiser state are float32; the forward/backward pass runs on a copy of
the parameters cast to ``compute_dtype`` (bf16 on GPU/TPU, float32 on CPU by default); LayerNorm, softmax
and the loss are float32. No array depends on the global ``jax_enable_x64`` flag.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import pathlib
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from . import _loop, _runs
from ._configs import TrainConfig, ViTConfig
from ._data import ImageDataset, TextDataset, batch_indices
from ._distributed import Layout, is_writer, make_layout, to_host
from ._layers import cast_floating
from ._optim import recipe_description, step_counts
from ._spectra import perturbation_spectra, weight_spectra
from ._step import non_finite


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


# ----------------------------------------------------------------------------- data


def _image_arrays(data: ImageDataset, model):
    """Host arrays ``((train_x, train_y), stats)``, ``((test_x, test_y), stats)``, with ``stats`` the per-channel
    ``(mean, std, scale)`` of the training images."""
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
    to = lambda a: np.asarray(a, dtype=np.uint8 if a.dtype == np.uint8 else np.float32)
    stats = (np.asarray(mean, np.float32), np.asarray(std, np.float32), np.asarray(scale, np.float32))
    return (
        ((to(data.train_x), np.asarray(data.train_y, np.int32)), stats),
        ((to(data.test_x), np.asarray(data.test_y, np.int32)), stats),
    )


def _token_arrays(data: TextDataset, model):
    c = model.config
    for a, split in ((data.train, "train"), (data.valid, "valid")):
        if a.size and (a.min() < 0 or a.max() >= c.vocab_size):
            raise ValueError(f"{split} tokens must lie in [0, {c.vocab_size}), got [{a.min()}, {a.max()}]")
        if a.size < c.context + 1:
            raise ValueError(f"{split} stream has {a.size} tokens, fewer than context + 1 = {c.context + 1}")
    return np.asarray(data.train, np.int32), np.asarray(data.valid, np.int32)


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


@dataclasses.dataclass(frozen=True)
class MeanLoss:
    """The mean example loss of ``kind`` (``"image"`` or ``"token"``) computed in ``compute_dtype``: the loss of the
    training step (hashable, so that runs with the same loss share the compiled step)."""

    kind: str
    compute_dtype: np.dtype

    def __call__(self, model, arrays, idx):
        return _example_losses(model, arrays, idx, self.compute_dtype, self.kind)[0].mean()


@functools.lru_cache(maxsize=8)
def _eval_fn(compute_dtype, kind):
    @eqx.filter_jit
    def evaluate(arrays, model, idx, weight):
        loss, correct = _example_losses(model, arrays, idx, compute_dtype, kind)
        return jnp.sum(loss * weight), jnp.sum(correct * weight), jnp.sum(weight)

    return evaluate


def _evaluate(
    model, arrays, layout: Layout, step: int, *, n: int, batch: int, compute_dtype, kind: str, tokenizer=None
) -> dict:
    """Mean loss over the whole split (batches split over the devices, the last padded and masked), with accuracy
    or perplexity (per token of ``tokenizer``)."""
    evaluate, batch = _eval_fn(compute_dtype, kind), layout.eval_batch(batch)
    totals = np.zeros(3)
    for start in range(0, n, batch):
        idx = np.arange(start, start + batch)
        weight = layout.batch((idx < n).astype(np.float32))
        idx = layout.batch(np.where(idx < n, idx, 0).astype(np.int32))
        totals += np.array([float(v) for v in evaluate(arrays, model, idx, weight)])
    loss = totals[0] / totals[2]
    if kind == "image":
        return {"eval_loss": loss, "eval_accuracy": totals[1] / totals[2]}
    return {"eval_loss": loss, "eval_perplexity": math.exp(min(loss, 700.0)), "tokenizer": tokenizer}


def data_task(model, data: ImageDataset | TextDataset, config: TrainConfig, *, seed: int, compute_dtype) -> _loop.Task:
    """The training task of a ViT on an ``ImageDataset`` or a GPT on a ``TextDataset``: the mean cross-entropy of
    a batch of images, or of the next tokens of a batch of windows of ``context + 1`` tokens (the stream's
    non-overlapping windows are the examples); batches in the order of ``_data.batch_indices(seed=seed)``;
    evaluation on the test images or the ``valid`` stream."""
    if isinstance(data, ImageDataset):
        train_arrays, test_arrays = _image_arrays(data, model)
        n_train, n_test, per_example, kind, rate = data.train_x.shape[0], data.test_x.shape[0], 1, "image", "img_per_s"
        tokenizer = None
    else:
        train_arrays, test_arrays = _token_arrays(data, model)
        per_example, kind, rate, tokenizer = model.config.context, "token", "tok_per_s", data.tokenizer_name
        n_train, n_test = (data.train.size - 1) // per_example, (data.valid.size - 1) // per_example

    def batch(step: int) -> np.ndarray:
        idx = batch_indices(n_train, batch_size=config.batch_size, seed=seed, step=step)
        return idx.astype(np.int32).reshape(config.n_micro, -1)

    evaluate = functools.partial(
        _evaluate,
        n=n_test,
        batch=config.eval_batch_size,
        compute_dtype=compute_dtype,
        kind=kind,
        tokenizer=tokenizer,
    )
    return _loop.Task(
        loss=MeanLoss(kind, compute_dtype),
        arrays=train_arrays,
        n_train=n_train,
        batch=batch,
        eval_arrays=test_arrays,
        evaluate=evaluate,
        examples_per_step=config.batch_size * per_example,
        rate_key=rate,
    )


def data_run(model, config: TrainConfig, data, *, seed: int, compute_dtype, **fields) -> tuple[_loop.Task, dict]:
    """The task of training ``model`` (a ViT on an ``ImageDataset`` or a GPT on a ``TextDataset``) on ``data``
    (:func:`data_task`, ``compute_dtype`` None: the default) and the run's description: ``fields``, the seed, the
    recipe, the model, the data, the compute dtype and the initial weights."""
    if isinstance(data, ImageDataset) != isinstance(getattr(model, "config", None), ViTConfig) or not isinstance(
        data, (ImageDataset, TextDataset)
    ):
        raise TypeError(
            f"train a ViT on an ImageDataset or a GPT on a TextDataset; got "
            f"{type(model).__name__} and {type(data).__name__}"
        )
    compute_dtype = default_compute_dtype() if compute_dtype is None else jnp.dtype(compute_dtype)
    task = data_task(model, data, config, seed=seed, compute_dtype=compute_dtype)
    description = _runs.describe(
        **fields,
        seed=seed,
        config=recipe_description(config),
        model=model_description(model.config),
        data=data_description(data),
        compute_dtype=compute_dtype,
        init_weights=_runs.fingerprint(model),
    )
    return task, description


def model_description(config) -> dict:
    """A ViT or GPT config as a run description records it: without ``attention``, which picks a kernel for the
    same function (a run may resume under another)."""
    return {k: v for k, v in dataclasses.asdict(config).items() if k != "attention"}


# ----------------------------------------------------------------------------- spectra


def spectra_steps(total_steps: int, n: int) -> list[int]:
    """``n`` log-spaced steps in [1, total_steps] (rounded, unique), always including the last step."""
    if n <= 0:
        return []
    steps = np.unique(np.round(np.logspace(0, math.log10(total_steps), n)).astype(int))
    return sorted(set(steps.tolist()) | {total_steps})


class SpectraProbe:
    """The attention spectra in ``folder``: of the weights at initialisation, of their perturbations at ``steps``
    (a ``_loop.Probe``)."""

    def __init__(self, folder: pathlib.Path, steps):
        self.folder, self.steps = folder, frozenset(steps)

    def start(self, model) -> None:
        spectra = to_host(weight_spectra(model))
        if is_writer():
            _runs.prune_spectra_after(self.folder, -1)
            _runs.save_spectra(self.folder, "init", spectra, 0)

    def resume(self, step: int) -> None:
        if is_writer():
            _runs.prune_spectra_after(self.folder, step)

    def measure(self, step: int, model, init_model) -> None:
        spectra = to_host(perturbation_spectra(model, init_model))
        if not all(np.all(np.isfinite(a)) for a in vars(spectra).values()):
            raise non_finite(f"the attention spectra after step {step} are not finite")
        if is_writer():
            _runs.save_spectra(self.folder, _runs.spectra_name(step), spectra, step)


# ----------------------------------------------------------------------------- entry point


def train(
    model: eqx.Module,
    config: TrainConfig,
    data: ImageDataset | TextDataset,
    *,
    seed: int = 0,
    out: str | pathlib.Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    compute_dtype=None,
    progress: bool = True,
    stop_after: int | None = None,
    devices: int | Sequence[jax.Device] | None = None,
) -> TrainResult:
    """Train ``model`` (a ``ViT`` on an ``ImageDataset`` or a ``GPT`` on a ``TextDataset``, see ``_data``)
    with the recipe ``config``. Images are standardised per channel with the training set's mean and std
    (uint8 first divided by 255); no augmentation. Text examples are the non-overlapping windows of
    ``context + 1`` tokens; evaluation uses the test images or the ``valid`` stream.

    ``seed`` fixes the data order (``_data.batch_indices``; the data position is the step count); the
    initialisation is fixed by the key the model was built with. With ``out``, metrics go to
    ``out/metrics.jsonl`` as produced, checkpoints to ``out/checkpoint`` every ``config.checkpoint_every``
    steps and at the end, and the attention spectra (``config.n_spectra`` log-spaced steps) to ``out/spectra``.
    An ``out`` holding an earlier run is refused (``_runs.RunExistsError``) unless ``resume=True`` or
    ``overwrite=True`` (start it again). ``resume=True`` continues from the checkpoint in ``out`` and reproduces
    the uninterrupted run bit for bit; it refuses a checkpoint of a different run (recipe, seed, model, data,
    compute dtype, initial weights: ``_runs.check_resumable``) but allows a longer recipe (more steps or epochs:
    the steps still to run follow the new schedule). ``stop_after`` ends the run after that many optimiser steps
    in total, with a checkpoint, as an interruption would (the schedule still spans the full recipe); so does
    Ctrl-C, after the step in flight (``_stop.RunInterrupted``, a ``KeyboardInterrupt``). Training-loss records are
    means over windows ending at multiples of ``config.log_every``, with the throughput of the steps alone
    (``img_per_s`` / ``tok_per_s``; not the steps that compiled). Losses stay on the device until
    the next log, evaluation, spectra or checkpoint step (no per-step host synchronisation); raises
    ``NonFiniteLossError`` naming the first step whose loss is not finite.

    ``devices``: where to train (None: every device of every process; an int: the first that many; or a list of
    devices). Each micro-batch is split over them (their number must divide it); ``config.sharding`` replicates
    the parameters and optimiser state on each (``"replicated"``) or shards them (``"fsdp"``). A checkpoint
    resumes on any number of devices (to rounding: the sums over the batch are split differently). In a run of
    several processes (``jax.distributed.initialize()`` first), each calls ``train`` alike and process 0 writes
    ``out``.
    """
    task, description = data_run(model, config, data, seed=seed, compute_dtype=compute_dtype)
    out = pathlib.Path(out) if out is not None else None
    total = step_counts(config, task.n_train, None)[1]
    probe = None if out is None else SpectraProbe(out / "spectra", spectra_steps(total, config.n_spectra))
    layout = make_layout(devices, config.sharding)
    options = dict(out=out, resume=resume, overwrite=overwrite, stop_after=stop_after, progress=progress)
    result = _loop.run(model, config, task, layout=layout, description=description, probe=probe, **options)
    return TrainResult(
        model=result.model,
        init_model=result.init_model,
        metrics=result.metrics,
        evaluation=last_evaluation(result.metrics),
        steps=result.steps,
        out=out,
    )


def last_evaluation(metrics: list[dict]) -> dict:
    """The last evaluation record of ``metrics`` (empty if none)."""
    return next((m for m in reversed(metrics) if "eval_loss" in m), {})


def data_description(data) -> dict:
    """What identifies a data set in a run description: its name and sizes."""
    if isinstance(data, ImageDataset):
        sizes = {"train": data.train_x.shape[0], "test": data.test_x.shape[0], "classes": data.num_classes}
        return {"name": data.name, **{k: int(v) for k, v in sizes.items()}, "image_shape": list(data.image_shape)}
    sizes = {"train_tokens": data.train.size, "valid_tokens": data.valid.size}
    return {"name": data.name, "tokenizer": data.tokenizer_name, **{k: int(v) for k, v in sizes.items()}}

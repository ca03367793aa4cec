"""The one training loop of ``gradflow.nets`` (``train``, ``train_inrank`` and ``train_toy_attention`` run it).

One jitted step (gradient accumulation, clipping, Adam/AdamW/SGD, the learning rate as an argument) with the
parameters and optimiser state donated; losses and gradient norms stay on the device until the next sync point
(log, evaluation, checkpoint, measurement, reparametrisation check), where they are fetched at once and checked
for finiteness; deterministic data order (the data position is the step count); checkpoints with exact resume.

What differs between the runs comes in as small pieces: a :class:`Task` (loss, data, evaluation), a
:class:`Reparametrisation` (how the trained arrays parametrise the model: InRank supplies its start, its rule at
sync points and its trainable filter) and an optional :class:`Probe` (measurements at chosen steps: the attention
spectra). The devices come as a ``_distributed.Layout``: the batch is split over them and the parameters replicated
or sharded, by the same step.

Mixed precision: parameters and optimiser state are float32; the loss computes on a copy cast to the compute dtype
(bf16 on GPU/TPU, float32 on CPU by default; see ``_train``). No array depends on the global ``jax_enable_x64``.

A run folder::

    metrics.jsonl           training-loss and evaluation records, appended as produced
    <log>.jsonl             the reparametrisation's records (InRank: ranks.jsonl)
    checkpoint/state.eqx    TrainState(model, opt_state) as whole host arrays (any device count can load it)
    checkpoint/init.eqx     the model as given (the initialisation)
    checkpoint/meta.json    the run's description, the step, the loss window, timings, the reparametrisation state
"""

from __future__ import annotations

import dataclasses
import functools
import math
import pathlib
import time
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple, Protocol

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm.auto import tqdm

from . import _runs
from ._configs import TrainConfig
from ._distributed import Layout, is_writer, to_host


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite."""


class TrainState(eqx.Module):
    """What a checkpoint holds: the model (trained and frozen arrays alike) and the optimiser state."""

    model: eqx.Module
    opt_state: optax.OptState


# ----------------------------------------------------------------------------- optimiser and schedule


def _decay_mask(params):
    """AdamW decays weight matrices, embeddings and InRank's low-rank factors ``u, v``; not biases,
    LayerNorm parameters or the class token."""

    def decay(path, leaf):
        names = [getattr(p, "name", "") for p in path]
        if any(n in ("ln1", "ln2", "ln_f", "cls_token") for n in names):
            return False
        return names[-1] in ("weight", "wq", "wk", "wv", "wo", "wte", "wpe", "pos_embed", "u", "v")

    return jax.tree_util.tree_map_with_path(decay, params)


_OPTIMIZER_FIELDS = ("optimizer", "b1", "b2", "eps", "weight_decay", "grad_clip")


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


# ----------------------------------------------------------------------------- the step


def split_model(model, trainable=eqx.is_inexact_array):
    """``(params, frozen, static)`` with ``eqx.combine(params, frozen, static)`` the model: the arrays selected by
    ``trainable`` (a filter or a filter spec), the other arrays (used but not trained, e.g. InRank's ``W_0``) and
    the non-array rest (hashable: a static argument of the step)."""
    params, rest = eqx.partition(model, trainable)
    frozen, static = eqx.partition(rest, eqx.is_array)
    return params, frozen, static


def make_step(optimizer: optax.GradientTransformation, loss_fn, traces: list | None = None):
    """The jitted optimiser step, on a model split by :func:`split_model`::

        step(params, opt_state, frozen, static, layout, arrays, idx, lr) -> (params, opt_state, loss, grad_norm)

    ``idx`` holds one micro-batch per row: the loss ``L`` and gradient ``g`` are the means over the rows of
    ``loss_fn(model, arrays, idx[i])`` and its gradient in ``params`` (accumulated by ``lax.scan``), then
    ``params ← params − lr · optimizer.update(g)``. ``params`` and ``opt_state`` are donated (updated in place);
    ``L`` and ``‖g‖₂`` stay on the device, so that the host never waits for a step before queueing the next.
    ``layout`` (static) says where the arrays live: with ``idx`` split over its devices each computes its share of
    every micro-batch; the gradient, parameters and optimiser state are kept in the layout's placement (XLA
    inserts the all-reduce, or the gathers and reduce-scatters of FSDP). ``traces[0]``, if given, counts the
    compilations.
    """

    def step(params, opt_state, frozen, static, layout: Layout, arrays, idx, lr):
        if traces is not None:
            traces[0] += 1  # runs only while tracing

        def micro(carry, micro_idx):
            value = jax.value_and_grad(lambda p: loss_fn(eqx.combine(p, frozen, static), arrays, micro_idx))(params)
            return jax.tree_util.tree_map(jnp.add, carry, value), None

        zeros = (jnp.float32(0), jax.tree_util.tree_map(jnp.zeros_like, params))
        (loss, grads), _ = jax.lax.scan(micro, zeros, idx)
        n = jnp.float32(idx.shape[0])
        loss, grads = loss / n, layout.constrain(jax.tree_util.tree_map(lambda g: g / n, grads))
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, jax.tree_util.tree_map(lambda u: -lr * u, updates))
        return layout.constrain(params), layout.constrain(opt_state), loss, optax.tree.norm(grads)

    # plain jax.jit: eqx.filter_jit waits for every call to finish
    return jax.jit(step, donate_argnums=(0, 1), static_argnums=(3, 4))


class CompiledStep(NamedTuple):
    step: Callable
    traces: list


@functools.lru_cache(maxsize=16)
def compiled_step(loss_fn: Hashable, optimizer: tuple) -> CompiledStep:
    """The jitted step (:func:`make_step`) of ``loss_fn`` with the optimiser of :func:`optimizer_key`'s fields,
    shared by all runs with the same loss and optimiser settings (several init scales, run lengths, learning rates,
    the modes of an InRank comparison, device layouts); ``traces[0]`` counts its compilations."""
    traces = [0]
    return CompiledStep(make_step(make_optimizer(TrainConfig(**dict(optimizer))), loss_fn, traces), traces)


class StepLog:
    """Losses and gradient norms of the steps run since the last sync point, still on the device, and the wall
    time of the steps alone.

    ``add`` queues a step's results; ``sync`` waits for the device, fetches the queued results in one transfer,
    books the time since the last ``restart`` to the queued steps (``timed=False``: to none, e.g. for a compiling
    step) and returns them as ``(step, loss, grad_norm)`` floats, raising ``NonFiniteLossError`` at the first
    non-finite loss. Work between ``sync`` and ``restart`` (evaluation, checkpoints, spectra, rank checks) is not
    timed; ``take_timing`` returns and resets ``(seconds, steps)``.
    """

    def __init__(self, schedule):
        self._schedule = schedule
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
                    "Try a lower learning rate (TrainConfig.lr) or gradient clipping (TrainConfig.grad_clip)."
                )
        return done

    def restart(self) -> None:
        self._t0 = time.perf_counter()

    def take_timing(self) -> tuple[float, int]:
        timing, (self._seconds, self._steps) = (self._seconds, self._steps), (0.0, 0)
        return timing


# ----------------------------------------------------------------------------- the pieces of a run


class Task(NamedTuple):
    """What is learned: ``loss(model, arrays, idx)`` the mean loss of the examples ``idx`` (hashable: it keys the
    compiled step), ``arrays`` the training data, ``n_train`` its number of examples, ``batch(k)`` the example
    indices of step ``k + 1`` (shape ``(n_micro, micro_batch)``), ``evaluate(model, eval_arrays, layout, step)``
    the fields of the evaluation record after ``step`` steps, and the throughput of the training-loss records: ``examples_per_step`` counted
    in ``rate_key`` (e.g. ``"tok_per_s"``; None: no throughput)."""

    loss: Callable
    arrays: Any
    n_train: int
    batch: Callable[[int], np.ndarray]
    eval_arrays: Any
    evaluate: Callable[[Any, Any, Layout, int], dict]
    examples_per_step: int = 1
    rate_key: str | None = None


class SyncOutcome(NamedTuple):
    """What a reparametrisation did at a sync point: the new ``model``, its ``records`` (for its log), whether the
    optimiser state restarts (``reset``, e.g. new parameters) and the ``seconds`` its rule took (None: untimed)."""

    model: Any
    records: list
    reset: bool = False
    seconds: float | None = None


class Reparametrisation:
    """How the trained arrays parametrise the model. This base class trains every floating-point array as it is;
    a subclass (InRank) replaces the pieces:

    - ``start(model, gradient)``: the model trained from (``gradient(m)``: the gradient of the loss on the first
      micro-batch at ``m``);
    - ``trainable(model)``: the filter (spec) of the trained arrays; the other arrays are frozen;
    - ``sync_at(step, model)`` / ``on_sync(model, step)``: whether to act after ``step``, and the action
      (a :class:`SyncOutcome`);
    - ``state(model)``: JSON fields stored with a checkpoint, from which ``like(init_model, state)`` builds a model
      of the checkpointed structure (run under ``eqx.filter_eval_shape``: nothing is computed);
    - ``record_fields(model)``: fields added to the training-loss records; ``log_name``: the name of its log file.
    """

    log_name: str | None = None

    def start(self, model, gradient: Callable):
        return model

    def trainable(self, model):
        return eqx.is_inexact_array

    def sync_at(self, step: int, model) -> bool:
        return False

    def on_sync(self, model, step: int) -> SyncOutcome:
        return SyncOutcome(model, [])

    def state(self, model) -> dict:
        return {}

    def like(self, init_model, state: dict):
        return init_model

    def record_fields(self, model) -> dict:
        return {}


class Probe(Protocol):
    """Measurements at chosen ``steps`` (written to the run folder): ``start(model)`` on a fresh run,
    ``resume(step)`` when resuming from ``step``, ``measure(step, model, init_model)``. Every process calls them
    (a measurement may gather arrays); only the writer process writes."""

    steps: frozenset

    def start(self, model) -> None: ...

    def resume(self, step: int) -> None: ...

    def measure(self, step: int, model, init_model) -> None: ...


class LoopResult(NamedTuple):
    """``model`` after training; ``init_model`` as given; ``metrics`` and ``records`` (the reparametrisation's
    log) of the whole run, resumed sessions included; ``steps`` done; ``timing`` (``seconds`` and ``steps`` of the
    timed steps, ``checks``: seconds of each reparametrisation rule, over all sessions); ``n_traces`` (compilations
    of the step in this call); ``state_bytes`` (parameters + optimiser state)."""

    model: Any
    init_model: Any
    metrics: list
    records: list
    steps: int
    timing: dict
    n_traces: int
    state_bytes: int


@eqx.filter_jit
def _gradient(loss_fn, model, arrays, idx):
    return eqx.filter_grad(lambda m: loss_fn(m, arrays, idx))(model)


def _copy(tree):
    """Fresh buffers for the array leaves of ``tree`` (the step donates what it trains; the caller keeps ``tree``)."""
    return jax.tree_util.tree_map(lambda a: jnp.array(a, copy=True) if eqx.is_array(a) else a, tree)


def _nbytes(tree) -> int:
    return int(sum(a.nbytes for a in jax.tree_util.tree_leaves(tree) if eqx.is_array(a)))


def _records_until(path: pathlib.Path, step: int) -> list[dict]:
    return [r for r in _runs.read_metrics(path) if r["step"] <= step] if path.exists() else []


# ----------------------------------------------------------------------------- the loop


def run(
    model,
    config: TrainConfig,
    task: Task,
    *,
    layout: Layout,
    description: dict,
    reparam: Reparametrisation | None = None,
    probe: Probe | None = None,
    out: str | pathlib.Path | None = None,
    resume: bool = False,
    stop_after: int | None = None,
    evaluate_at_start: bool = False,
    progress: bool = False,
    desc: str = "train",
) -> LoopResult:
    """Train ``model`` on ``task`` with the recipe ``config`` on ``layout``'s devices.

    Records: every ``config.log_every`` steps (and at the last step of the recipe) the mean training loss since the
    previous record, the last gradient norm, the learning rate, the throughput of the steps alone (not those that
    compiled) and the reparametrisation's fields; every ``config.eval_every`` steps and at the end the task's
    evaluation (also at step 0 with ``evaluate_at_start``). With ``out`` they are appended to ``metrics.jsonl``
    as produced, and a checkpoint is written every ``config.checkpoint_every`` steps and after the last step run.
    ``resume=True`` continues from that checkpoint, bit for bit as the uninterrupted run on the same devices (to
    rounding on others), and refuses a checkpoint whose ``description`` differs, naming the fields.
    ``stop_after`` ends after that many steps in total, as an interruption would (the schedule still spans the
    recipe). In a multi-process run every process runs this; process 0 alone writes the run folder, which must be
    one file system for all processes to resume.
    """
    reparam = reparam or Reparametrisation()
    if resume and out is None:
        raise ValueError("resume=True needs the run folder `out`")
    _, total, warmup, last = step_counts(config, task.n_train, stop_after)
    optimizer, schedule = make_optimizer(config), learning_rate_schedule(config, total, warmup)
    step_fn, traces = compiled_step(task.loss, optimizer_key(config))
    traces_before, writer = traces[0], is_writer()
    arrays, eval_arrays = layout.replicate(task.arrays), layout.replicate(task.eval_arrays)
    layout.batch(task.batch(0))  # a batch the devices do not divide: the error now, not after the setup
    out = pathlib.Path(out) if out is not None else None
    ckpt = None if out is None else out / "checkpoint"
    logs = {} if out is None else {"metrics": _runs.MetricsLog(out / "metrics.jsonl")}
    if out is not None and reparam.log_name:
        logs["records"] = _runs.MetricsLog(out / f"{reparam.log_name}.jsonl")
    metrics, records, window, grad_norm = [], [], [], None
    timing = {"seconds": 0.0, "steps": 0, "checks": []}
    start, init_model = 0, model

    if resume and _runs.has_checkpoint(ckpt):
        meta = _runs.checkpoint_meta(ckpt)
        _runs.check_resumable(ckpt, meta, description)
        init_model = _runs.load_tree(ckpt / "init.eqx", model)

        def like():
            m = reparam.like(init_model, meta)
            return TrainState(m, optimizer.init(eqx.filter(m, reparam.trainable(m))))

        state = _runs.load_checkpoint(ckpt, eqx.filter_eval_shape(like))
        model, opt_state = state.model, state.opt_state
        start, window, grad_norm, timing = meta["step"], meta["log_window"], meta["grad_norm"], meta["timing"]
        metrics = _records_until(logs["metrics"].path, start)
        records = _records_until(logs["records"].path, start) if "records" in logs else []
        if writer:
            for log in logs.values():
                log.truncate_after(start)
        if probe is not None:
            probe.resume(start)
    else:
        if out is not None and writer:
            out.mkdir(parents=True, exist_ok=True)
            _runs.clear_checkpoint(ckpt)
            ckpt.mkdir(parents=True, exist_ok=True)
            for log in logs.values():
                log.path.unlink(missing_ok=True)
            _runs.save_tree(ckpt / "init.eqx", to_host(model))
        if out is not None and probe is not None:
            probe.start(model)
        first = layout.batch(task.batch(0)[0])
        model = reparam.start(layout.place(_copy(model)), lambda m: _gradient(task.loss, m, arrays, first))
        opt_state = None
    params, frozen, static = split_model(model, reparam.trainable(model))
    params, frozen = layout.place((params, frozen))
    opt_state = layout.place(optimizer.init(params) if opt_state is None else opt_state)
    placed_init = layout.place(init_model) if probe is not None else None

    def current():
        return eqx.combine(params, frozen, static)

    def record(rec: dict, log: str = "metrics") -> None:
        rec = {k: (float(v) if isinstance(v, (np.floating, float)) else v) for k, v in rec.items()}
        (metrics if log == "metrics" else records).append(rec)
        if log in logs and writer:
            logs[log].append(rec)

    def evaluate(step: int) -> None:
        record({"step": step, **task.evaluate(current(), eval_arrays, layout, step)})

    def checkpoint(step: int) -> None:
        host = to_host(TrainState(current(), opt_state))  # every process: the gather may be collective
        if writer:
            meta = {
                **description,
                **reparam.state(current()),
                "step": step,
                "total_steps": total,
                "log_window": window,
                "grad_norm": grad_norm,
                "timing": timing,
                "devices": layout.n_devices,
                "sharding": layout.sharding,
            }
            _runs.save_checkpoint(ckpt, host, meta)

    if start == 0 and evaluate_at_start:
        evaluate(0)
    steps, shape_model = StepLog(schedule), current()
    rate_time = [0.0, 0]  # seconds and steps timed since the last training-loss record
    bar = tqdm(total=total, initial=start, disable=not progress, desc=desc, dynamic_ncols=True)
    steps.restart()
    for step in range(start + 1, last + 1):
        traced = traces[0]
        idx = layout.batch(task.batch(step - 1))
        lr = jnp.float32(schedule(step - 1))
        params, opt_state, loss, gnorm = step_fn(params, opt_state, frozen, static, layout, arrays, idx, lr)
        steps.add(step, loss, gnorm)
        bar.update(1)
        compiled = traces[0] != traced
        is_sync = reparam.sync_at(step, shape_model)
        is_log = config.log_every is not None and (step % config.log_every == 0 or step == total)
        is_eval = step % config.eval_every == 0 or step == total
        is_ckpt = ckpt is not None and (step % config.checkpoint_every == 0 or step == last)
        is_probe = probe is not None and out is not None and step in probe.steps
        if not (compiled or is_sync or is_log or is_eval or is_ckpt or is_probe):
            continue
        done = steps.sync(timed=not compiled)  # a compiling step is not timed
        seconds, n = steps.take_timing()
        timing["seconds"], timing["steps"] = timing["seconds"] + seconds, timing["steps"] + n
        rate_time = [rate_time[0] + seconds, rate_time[1] + n]
        if config.log_every is not None:
            window += [loss for _, loss, _ in done]
        grad_norm = done[-1][2]
        if is_sync:
            outcome = reparam.on_sync(current(), step)
            params, frozen, static = split_model(outcome.model, reparam.trainable(outcome.model))
            params, frozen = layout.place((params, frozen))
            if outcome.reset:
                opt_state = layout.place(optimizer.init(params))
            if outcome.seconds is not None:
                timing["checks"].append(outcome.seconds)
            for rec in outcome.records:
                record(rec, "records")
            shape_model = current()
        if is_log:
            seconds, n = rate_time
            rate = {task.rate_key: task.examples_per_step * n / seconds} if task.rate_key and n else {}
            mean = float(np.mean(window))
            fields = {"step": step, "loss": mean, "grad_norm": grad_norm, "lr": schedule(step - 1), **rate}
            record({**fields, **reparam.record_fields(shape_model)})
            bar.set_postfix(loss=f"{mean:.4f}", **{k: f"{v:.0f}" for k, v in rate.items()})
            window, rate_time = [], [0.0, 0]
        if is_probe:
            probe.measure(step, current(), placed_init)
        if is_eval:
            evaluate(step)
        if is_ckpt:
            checkpoint(step)
        steps.restart()
    bar.close()
    return LoopResult(
        model=current(),
        init_model=init_model,
        metrics=metrics,
        records=records,
        steps=max(last, start),
        timing=timing,
        n_traces=traces[0] - traces_before,
        state_bytes=_nbytes((params, opt_state)),
    )


def recipe_description(config: TrainConfig) -> dict:
    """The recipe in a run description: every field but ``checkpoint_every`` and ``sharding``, which a resumed run
    may change."""
    return {k: v for k, v in dataclasses.asdict(config).items() if k not in ("checkpoint_every", "sharding")}

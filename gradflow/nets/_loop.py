"""The one training loop of ``gradflow.nets`` (``train``, ``train_inrank`` and ``train_toy_attention`` run it).

One jitted step (``_step``: gradient accumulation, clipping, Adam/AdamW/SGD, the learning rate as an argument) with
the parameters and optimiser state donated; losses and gradient norms stay on the device until the next sync point
(log, evaluation, checkpoint, measurement, reparametrisation check), where they are fetched at once and checked
for finiteness; deterministic data order (the data position is the step count); checkpoints with exact resume
(``_runs.RunFolder``); Ctrl-C stops after the step in flight, with a checkpoint (``_stop``).

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

import pathlib
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from ._configs import TrainConfig
from ._distributed import Layout, is_writer, to_host
from ._optim import learning_rate_schedule, make_optimizer, optimizer_key, step_counts
from ._runs import RunFolder
from ._step import StepLog, TrainState, all_finite, compiled_step, non_finite, split_model
from ._stop import RunInterrupted, StopRequest


class Task(NamedTuple):
    """What is learned: ``loss(model, arrays, idx)`` the mean loss of the examples ``idx`` (hashable: it keys the
    compiled step), ``arrays`` the training data, ``n_train`` its number of examples, ``batch(k)`` the example
    indices of step ``k + 1`` (shape ``(n_micro, micro_batch)``), ``evaluate(model, eval_arrays, layout, step)``
    the fields of the evaluation record after ``step`` steps, and the throughput of the training-loss records:
    ``examples_per_step`` counted in ``rate_key`` (e.g. ``"tok_per_s"``; None: no throughput)."""

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


class _Due(NamedTuple):
    """What a step's end calls for; any of them makes it a sync point."""

    compiled: bool
    sync: bool
    log: bool
    evaluate: bool
    checkpoint: bool
    probe: bool
    stop: bool


@eqx.filter_jit
def _gradient(loss_fn, model, arrays, idx):
    return eqx.filter_grad(lambda m: loss_fn(m, arrays, idx))(model)


def _copy(tree):
    """Fresh buffers for the array leaves of ``tree`` (the step donates what it trains; the caller keeps ``tree``)."""
    return jax.tree_util.tree_map(lambda a: jnp.array(a, copy=True) if eqx.is_array(a) else a, tree)


def _nbytes(tree) -> int:
    return int(sum(a.nbytes for a in jax.tree_util.tree_leaves(tree) if eqx.is_array(a)))


class _Session:
    """One call of :func:`run`: the training state (split model, optimiser state, loss window, timings, records)
    and what the loop does at a step's end."""

    def __init__(self, config: TrainConfig, task: Task, layout: Layout, reparam, probe, folder, description, total):
        self.config, self.task, self.layout, self.reparam, self.probe = config, task, layout, reparam, probe
        self.folder, self.description, self.total = folder, description, total
        self.optimizer = make_optimizer(config)
        self.schedule = learning_rate_schedule(config, total, step_counts(config, task.n_train, None)[2])
        self.step_fn, self.traces = compiled_step(task.loss, optimizer_key(config))
        self.traces_before = self.traces[0]
        self.arrays, self.eval_arrays = layout.replicate(task.arrays), layout.replicate(task.eval_arrays)
        self.metrics, self.records, self.window, self.grad_norm = [], [], [], None
        self.timing = {"seconds": 0.0, "steps": 0, "checks": []}
        self.rate_time = [0.0, 0]  # seconds and steps timed since the last training-loss record
        self.start, self.stop = 0, StopRequest()

    # ------------------------------------------------------------------------- the state

    def begin(self, model) -> None:
        """A fresh run from ``model``."""
        self.init_model = model
        if self.folder is not None:
            self.folder.start(to_host(model), self._meta(0))
            if self.probe is not None:
                self.probe.start(model)
        first = self.layout.batch(self.task.batch(0)[0])
        gradient = lambda m: _gradient(self.task.loss, m, self.arrays, first)
        self._place(self.reparam.start(self.layout.place(_copy(model)), gradient))

    def restore(self, model, meta: dict) -> None:
        """The run checkpointed with ``meta``, built like ``model``."""
        self.init_model = self.folder.load_init(model)
        reparam = self.reparam

        def like():
            m = reparam.like(self.init_model, meta)
            return TrainState(m, self.optimizer.init(eqx.filter(m, reparam.trainable(m))))

        state = self.folder.load(eqx.filter_eval_shape(like))
        self.start, self.window, self.grad_norm, self.timing = (
            meta[k] for k in ("step", "log_window", "grad_norm", "timing")
        )
        logs = self.folder.resume(self.start)
        self.metrics, self.records = logs["metrics"], logs.get(reparam.log_name, [])
        if self.probe is not None:
            self.probe.resume(self.start)
        self._place(state.model, state.opt_state)

    def _place(self, model, opt_state=None) -> None:
        """Split ``model`` into trained, frozen and static parts, on the layout, with ``opt_state`` (None: new)."""
        params, frozen, self.static = split_model(model, self.reparam.trainable(model))
        self.params, self.frozen = self.layout.place((params, frozen))
        self.opt_state = self.layout.place(self.optimizer.init(self.params) if opt_state is None else opt_state)
        self.shape_model = self.current()

    def current(self):
        return eqx.combine(self.params, self.frozen, self.static)

    def _meta(self, step: int) -> dict:
        return {
            **self.description,
            **(self.reparam.state(self.current()) if step else {}),
            "step": step,
            "total_steps": self.total,
            "log_window": self.window,
            "grad_norm": self.grad_norm,
            "timing": self.timing,
            "devices": self.layout.n_devices,
            "sharding": self.layout.sharding,
        }

    # ------------------------------------------------------------------------- records and checkpoints

    def record(self, rec: dict, log: str = "metrics") -> None:
        """Keep ``rec`` in the run's ``metrics`` or the reparametrisation's records (``log``), and write it."""
        rec = {k: (float(v) if isinstance(v, (np.floating, float)) else v) for k, v in rec.items()}
        (self.metrics if log == "metrics" else self.records).append(rec)
        if self.folder is not None:
            with self.stop.deferred():
                self.folder.append(log, rec)

    def evaluate(self, step: int) -> None:
        """The task's evaluation record after ``step`` steps; a non-finite number in it stops the run."""
        fields = self.task.evaluate(self.current(), self.eval_arrays, self.layout, step)
        bad = [k for k, v in fields.items() if isinstance(v, (float, list)) and not np.all(np.isfinite(v))]
        if bad:
            lr = self.schedule(max(step - 1, 0))
            raise non_finite(f"the evaluation after step {step} is not finite ({', '.join(bad)})", lr)
        self.record({"step": step, **fields})

    def checkpoint(self, step: int) -> None:
        host = to_host(TrainState(self.current(), self.opt_state))  # every process: the gather may be collective
        with self.stop.deferred():
            self.folder.save(host, self._meta(step))

    # ------------------------------------------------------------------------- the loop

    def train(self, last: int, *, progress: bool, desc: str) -> None:
        """Steps ``start + 1 .. last``; Ctrl-C stops after the step in flight, with a checkpoint."""
        steps, placed_init = StepLog(self.schedule), None
        if self.probe is not None and self.folder is not None:
            placed_init = self.layout.place(self.init_model)
        batch, placed = None, None
        bar = tqdm(total=self.total, initial=self.start, disable=not progress, desc=desc, dynamic_ncols=True)
        with self.stop, bar:
            steps.restart()
            for step in range(self.start + 1, last + 1):
                traced, idx = self.traces[0], self.task.batch(step - 1)
                if idx is not batch:  # a task with one batch (full-batch GD) places it once
                    batch, placed = idx, self.layout.batch(idx)
                lr = np.float32(self.schedule(step - 1))
                self.params, self.opt_state, loss, gnorm = self.step_fn(
                    self.params, self.opt_state, self.frozen, self.static, self.layout, self.arrays, placed, lr
                )
                steps.add(step, loss, gnorm)
                bar.update(1)
                due = self._due(step, last, compiled=self.traces[0] != traced)
                if any(due):
                    self._sync_point(step, due, steps, bar, placed_init)
                    steps.restart()
                if due.stop:
                    raise RunInterrupted(self._interrupted(step))

    def _due(self, step: int, last: int, *, compiled: bool) -> _Due:
        config, stop = self.config, self.stop.requested
        return _Due(
            compiled=compiled,
            sync=self.reparam.sync_at(step, self.shape_model),
            log=config.log_every is not None and (step % config.log_every == 0 or step == self.total),
            evaluate=step % config.eval_every == 0 or step == self.total,
            checkpoint=self.folder is not None and (step % config.checkpoint_every == 0 or step == last or stop),
            probe=self.probe is not None and self.folder is not None and step in self.probe.steps,
            stop=stop,
        )

    def _sync_point(self, step: int, due: _Due, steps: StepLog, bar, placed_init) -> None:
        """Fetch the queued losses (checked), check the parameters before anything is measured or saved, then do
        whatever ``due`` asks for, in order."""
        done = steps.sync(timed=not due.compiled)  # a compiling step is not timed
        seconds, n = steps.take_timing()
        self.timing["seconds"], self.timing["steps"] = self.timing["seconds"] + seconds, self.timing["steps"] + n
        self.rate_time = [self.rate_time[0] + seconds, self.rate_time[1] + n]
        if self.config.log_every is not None:
            self.window += [loss for _, loss, _ in done]
        self.grad_norm = done[-1][2]
        if (due.probe or due.evaluate or due.checkpoint) and not all_finite(self.params):
            raise non_finite(f"the parameters after step {step} are not finite", self.schedule(step - 1))
        if due.sync:
            self._reparametrise(step)
        if due.log:
            self._log(step, bar)
        if due.probe:
            self.probe.measure(step, self.current(), placed_init)
        if due.evaluate:
            self.evaluate(step)
        if due.checkpoint:
            self.checkpoint(step)

    def _reparametrise(self, step: int) -> None:
        outcome = self.reparam.on_sync(self.current(), step)
        self._place(outcome.model, None if outcome.reset else self.opt_state)
        if outcome.seconds is not None:
            self.timing["checks"].append(outcome.seconds)
        for rec in outcome.records:
            self.record(rec, self.reparam.log_name)

    def _log(self, step: int, bar) -> None:
        """The training-loss record: the mean loss since the last one, the throughput, the reparametrisation's
        fields."""
        seconds, n = self.rate_time
        task = self.task
        rate = {task.rate_key: task.examples_per_step * n / seconds} if task.rate_key and n else {}
        mean = float(np.mean(self.window))
        fields = {"step": step, "loss": mean, "grad_norm": self.grad_norm, "lr": self.schedule(step - 1), **rate}
        self.record({**fields, **self.reparam.record_fields(self.shape_model)})
        bar.set_postfix(loss=f"{mean:.4f}", **{k: f"{v:.0f}" for k, v in rate.items()})
        self.window, self.rate_time = [], [0.0, 0]

    def _interrupted(self, step: int) -> str:
        where = f"interrupted after step {step} of {self.total}"
        if self.folder is None:
            return f"{where}; nothing is saved (no run folder)"
        return (
            f"{where}; its checkpoint and the records up to it are in {self.folder.path}: continue with --resume "
            "(resume=True)"
        )

    def result(self, last: int) -> LoopResult:
        return LoopResult(
            model=self.current(),
            init_model=self.init_model,
            metrics=self.metrics,
            records=self.records,
            steps=max(last, self.start),
            timing=self.timing,
            n_traces=self.traces[0] - self.traces_before,
            state_bytes=_nbytes((self.params, self.opt_state)),
        )


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
    overwrite: bool = False,
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

    An ``out`` that holds an earlier run is refused (``_runs.RunExistsError``) unless ``resume=True``, which
    continues from its checkpoint, bit for bit as the uninterrupted run on the same devices (to rounding on
    others), or ``overwrite=True``, which starts it again. A resume refuses a checkpoint whose ``description``
    differs, naming the fields; it may lengthen the recipe (the steps still to run follow the new schedule).
    ``stop_after`` ends after that many steps in total, as an interruption would (the schedule still spans the
    recipe). Ctrl-C (SIGINT) stops after the step in flight, with a checkpoint there, and raises
    ``_stop.RunInterrupted`` (a ``KeyboardInterrupt``); a second Ctrl-C stops at once. In a multi-process run every
    process runs this; process 0 alone writes the run folder, which must be one file system for all processes to
    resume.
    """
    reparam = reparam or Reparametrisation()
    if resume and out is None:
        raise ValueError("resume=True needs the run folder `out`")
    if resume and overwrite:
        raise ValueError("resume=True continues the run in `out`, overwrite=True starts it again: choose one")
    _, total, _, last = step_counts(config, task.n_train, stop_after)
    layout.batch(task.batch(0))  # a batch the devices do not divide: the error now, not after the setup
    folder = None
    if out is not None:
        folder = RunFolder(out, ["metrics", *filter(None, [reparam.log_name])], writer=is_writer())
    meta = None if folder is None else folder.resumable(description, total, resume=resume, overwrite=overwrite)
    session = _Session(config, task, layout, reparam, probe, folder, description, total)
    if meta is None:
        session.begin(model)
        if evaluate_at_start:
            session.evaluate(0)
    else:
        session.restore(model, meta)
    session.train(last, progress=progress, desc=desc)
    return session.result(last)

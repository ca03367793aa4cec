"""InRank training runs (paper 004, Algorithms 2 and 3) through the training loop of the networks: the
reparametrisation strategy, ``train_inrank`` in the three modes, ``compare_inrank`` and its report.

The rule itself (explained ratio, rank growth, the reparametrised layers) is in ``_inrank``; this module only
says when to apply it: ``W_0 + U V`` from the first batch's gradient at the start, a rank check every
``check_every`` steps, and for InRank-Efficient the switch to fixed rank after ``efficient_after`` steps.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import time
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from . import _inrank, _loop
from ._configs import TrainConfig
from ._data import TextDataset
from ._distributed import is_writer, make_layout
from ._inrank import InRankConfig
from ._optim import step_counts
from ._train import data_run, last_evaluation

MODES = ("full", "inrank", "inrank-efficient")
_MLP = ("fc_in", "fc_out")


class InRank(_loop.Reparametrisation):
    """The training loop's view of InRank in ``mode``: start from ``to_inrank`` on the first micro-batch's gradient
    (not in mode ``"full"``), train every array but ``W_0``, check the ranks every ``config.check_every`` steps of
    the InRank phase (``update_ranks``, new modes drawn from ``PRNGKey(seed)`` folded with the step) and, at step
    ``switch``, replace the layers by their fixed-rank factorisation (``to_low_rank``; Adam's moments restart).
    Its records (``ranks.jsonl``) hold the ranks and explained ratios of each check and the ranks of the switch;
    the training-loss records get the ``phase``."""

    log_name = "ranks"

    def __init__(self, mode: str, config: InRankConfig, *, switch: int | None, seed: int):
        self.mode, self.config, self.switch, self.key = mode, config, switch, jax.random.PRNGKey(seed)

    def start(self, model, gradient):
        if self.mode == "full":
            return model
        g = gradient(model)
        return _inrank.to_inrank(model, {n: getattr(g.blocks.mlp, n).weight for n in _MLP}, config=self.config)

    def trainable(self, model):
        return _inrank.trainable(model)

    def sync_at(self, step: int, model) -> bool:
        checks = _inrank.phase(model) == "inrank" and step % self.config.check_every == 0
        return checks or step == self.switch

    def on_sync(self, model, step: int) -> _loop.SyncOutcome:
        records, seconds, reset = [], None, False
        if _inrank.phase(model) == "inrank" and step % self.config.check_every == 0:
            t0 = time.perf_counter()
            model, info = _inrank.update_ranks(model, jax.random.fold_in(self.key, step), config=self.config)
            seconds = time.perf_counter() - t0
            records.append({"step": step, "phase": "inrank", **info})
        if step == self.switch:
            model, reset = _inrank.to_low_rank(model), True
            ranks = _inrank.mlp_ranks(model)
            records.append({"step": step, "phase": "fixed-rank", **{n: {"rank": r} for n, r in ranks.items()}})
        return _loop.SyncOutcome(model, records, reset, seconds)

    def state(self, model) -> dict:
        return {"phase": _inrank.phase(model), "ranks": _inrank.mlp_ranks(model)}

    def like(self, init_model, state: dict):
        m = init_model
        if state["phase"] != "full":
            zeros = {n: jnp.zeros_like(getattr(m.blocks.mlp, n).weight) for n in _MLP}
            m = _inrank.to_inrank(m, zeros, config=self.config)
        if state["phase"] == "fixed-rank":
            m = _inrank.to_low_rank(m, ranks=state["ranks"])
        return m

    def record_fields(self, model) -> dict:
        return {"phase": _inrank.phase(model)}


@dataclasses.dataclass(frozen=True)
class InRankResult:
    """A run of :func:`train_inrank`.

    ``metrics``: the training/evaluation records; ``ranks``: the rank records (also ``ranks.jsonl``);
    ``evaluation``: the last evaluation (``eval_perplexity`` is per token of ``tokenizer_name``; empty if the run
    stopped before any); ``seconds_per_step``: mean wall time of the steps that did not compile, over the run's
    sessions when resumed;
    ``seconds_per_rank_check``: median wall time of a rank check (spectra, rule, new modes; None without checks);
    ``state_bytes``: parameters + optimiser state at the end; ``peak_memory_bytes``: the device's
    ``peak_bytes_in_use`` (process-wide, None where the backend does not report it); ``n_traces``: times the
    training step was traced (compiled) in this call.
    """

    model: eqx.Module
    mode: str
    metrics: list
    ranks: list
    evaluation: dict
    steps: int
    seconds_per_step: float
    seconds_per_rank_check: float | None
    parameters: dict
    state_bytes: int
    peak_memory_bytes: int | None
    n_traces: int
    tokenizer_name: str


def _peak_memory() -> int | None:
    stats = jax.devices()[0].memory_stats()
    return None if not stats else stats.get("peak_bytes_in_use")


def train_inrank(
    model,
    config: TrainConfig,
    data: TextDataset,
    *,
    mode: str = "inrank-efficient",
    inrank: InRankConfig = InRankConfig(),
    seed: int = 0,
    out=None,
    resume: bool = False,
    overwrite: bool = False,
    compute_dtype=None,
    stop_after: int | None = None,
    devices: int | Sequence[jax.Device] | None = None,
    progress: bool = True,
) -> InRankResult:
    """Train a ``GPT`` on ``data`` with the recipe ``config`` in one of three modes:

    ``"full"`` (every weight trained, the baseline), ``"inrank"`` (Algorithm 2 throughout) or
    ``"inrank-efficient"`` (Algorithm 3: InRank for ``inrank.efficient_after`` steps, default one epoch, then
    fixed rank). All modes run ``train``'s loop (``_loop.run``: the same step, optimiser, schedule, data order,
    evaluation on the ``valid`` stream, records, checkpoints and devices), so they compare like for like; losses
    are checked for finiteness at each sync point (logging, rank check, evaluation, checkpoint), never after every
    step.

    With ``out``: ``metrics.jsonl`` and ``ranks.jsonl`` (one record per rank check) are written as produced, and a
    checkpoint goes to ``out/checkpoint`` every ``config.checkpoint_every`` steps and at the end: the model (with
    ``W_0``, the factors and their masks ``n_active`` / ``rank``) and the optimiser state, and in ``meta.json``
    the step (also the data position: step ``k`` trains on ``batch_indices(..., seed=seed, step=k - 1)``), the
    phase (``full``, ``inrank``, or ``fixed-rank`` after the switch), the ranks and the loss window.
    ``resume=True`` continues from that checkpoint and reproduces the uninterrupted run (parameters, ranks,
    metrics; the timings cover the steps actually run); without it, an ``out`` holding an earlier run is refused
    unless ``overwrite=True``. ``stop_after`` ends the run after that many steps in total, with a checkpoint, as
    an interruption (Ctrl-C) would (the schedule, logging and evaluation still follow the full recipe).
    ``devices``, ``config.sharding`` and ``progress`` (a bar per run): as in ``train``.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if not isinstance(data, TextDataset):
        raise TypeError(f"InRank trains a GPT on a TextDataset, got {type(data).__name__}")
    fields = dict(mode=mode, inrank=None if mode == "full" else inrank)
    task, description = data_run(model, config, data, seed=seed, compute_dtype=compute_dtype, **fields)
    per_epoch = step_counts(config, task.n_train, None)[0]
    switch = (inrank.efficient_after or per_epoch) if mode == "inrank-efficient" else None
    reparam, layout = InRank(mode, inrank, switch=switch, seed=seed), make_layout(devices, config.sharding)
    options = dict(out=out, resume=resume, overwrite=overwrite, stop_after=stop_after, desc=mode, progress=progress)
    run = _loop.run(model, config, task, layout=layout, description=description, reparam=reparam, **options)
    checks = run.timing["checks"]
    return InRankResult(
        model=run.model,
        mode=mode,
        metrics=run.metrics,
        ranks=run.records,
        evaluation=last_evaluation(run.metrics),
        steps=run.steps,
        seconds_per_step=run.timing["seconds"] / max(run.timing["steps"], 1),
        seconds_per_rank_check=float(np.median(checks)) if checks else None,
        parameters=_inrank.parameter_count(run.model),
        state_bytes=run.state_bytes,
        peak_memory_bytes=_peak_memory(),
        n_traces=run.n_traces,
        tokenizer_name=data.tokenizer_name,
    )


def _mean_rank(model) -> float:
    r = _inrank.mlp_ranks(model)
    return float(np.mean(r["fc_in"] + r["fc_out"]))


def compare_inrank(
    build, config: TrainConfig, data: TextDataset, *, modes=("full", "inrank-efficient"), out=None, **options
) -> dict:
    """Train ``build()`` (a fresh GPT) in each of ``modes`` and tabulate perplexity, mean MLP rank, parameters,
    time per step and memory. Returns ``{mode: row}``; with ``out`` also writes ``comparison.json`` and
    ``comparison.md`` (and each run's logs and checkpoint in ``out/<mode>``, which ``resume=True`` continues;
    finished runs are only reloaded). ``options``: those of :func:`train_inrank` (``inrank``, ``seed``,
    ``resume``, ``overwrite``, ``compute_dtype``, ``stop_after``, ``devices``, ``progress``)."""
    rows = {}
    for mode in modes:
        folder = None if out is None else pathlib.Path(out) / mode
        r = train_inrank(build(), config, data, mode=mode, out=folder, **options)
        rows[mode] = {
            "eval_perplexity": r.evaluation.get("eval_perplexity"),
            "eval_loss": r.evaluation.get("eval_loss"),
            "mean_mlp_rank": _mean_rank(r.model),
            "ranks": _inrank.mlp_ranks(r.model),
            "trainable_parameters": r.parameters["trainable"],
            "seconds_per_step": r.seconds_per_step,
            "seconds_per_rank_check": r.seconds_per_rank_check,
            "state_bytes": r.state_bytes,
            "peak_memory_bytes": r.peak_memory_bytes,
            "steps": r.steps,
            "n_traces": r.n_traces,
            "tokenizer": r.tokenizer_name,
        }
    if out is not None and is_writer():
        out = pathlib.Path(out)
        (out / "comparison.json").write_text(json.dumps(rows, indent=1))
        (out / "comparison.md").write_text(comparison_table(rows, data))
    return rows


def comparison_table(rows: dict, data: TextDataset) -> str:
    """Markdown table of :func:`compare_inrank`'s rows, with the tokenizer caveat."""
    lines = [
        f"InRank comparison on {data.name} (device: {jax.devices()[0].device_kind})",
        "",
        "| mode | eval perplexity | mean MLP rank | trainable params | s/step | s/rank check | "
        "params+opt state MB | peak MB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for mode, r in rows.items():
        peak = "n/a" if r["peak_memory_bytes"] is None else f"{r['peak_memory_bytes'] / 2**20:.0f}"
        ppl = "n/a" if r["eval_perplexity"] is None else f"{r['eval_perplexity']:.4g}"
        check = "n/a" if r["seconds_per_rank_check"] is None else f"{r['seconds_per_rank_check']:.4f}"
        lines.append(
            f"| {mode} | {ppl} | {r['mean_mlp_rank']:.1f} | {r['trainable_parameters']:,} | "
            f"{r['seconds_per_step']:.4f} | {check} | {r['state_bytes'] / 2**20:.1f} | {peak} |"
        )
    if data.tokenizer_name != "gpt2":
        lines += [
            "",
            f"Perplexity is per `{data.tokenizer_name}` token: not comparable with the InRank paper's "
            "GPT-2-BPE perplexities (19.3 / 19.6 for GPT-2 small on WikiText-103).",
        ]
    return "\n".join(lines) + "\n"

"""InRank: incremental low-rank learning of the GPT-2 MLP layers (paper 004, Algorithms 2 and 3).

Every MLP matrix (``blocks.mlp.fc_in``, ``blocks.mlp.fc_out``; ``y = x W + b``, ``W`` of shape d_in × d_out) is
written ``W = W_0 + U V`` with ``W_0`` the frozen initial weight, ``U`` (d_in × R) and ``V`` (R × d_out).
Following the paper (and its reference implementation), ``U V`` always uses ``r + b`` modes: the rank
``r`` and ``b`` buffer modes, so that its spectrum beyond ``r`` can be measured.

- Start (Alg. 2, lines 1–3): the gradient ``G = ∂L/∂W`` at ``W_0`` on the first batch, ``G = Σ s_i a_i c_iᵀ``;
  ``U[:, i] = −ε a_i``, ``V[i] = ε c_iᵀ`` for ``i < r₀ + b``, so ``U V = −ε² Σ a_i c_iᵀ`` (a descent direction).
- Every ``check_every`` steps (line 7): with ``s`` the singular values of ``M = U V``, the explained ratio is
  ``g(M, r, b) = 1 − var(s_{r+1..r+b}) / var(s_{1..r+b})`` (population variances; ``g = 1`` when
  ``s_{1..r+b}`` are all equal, e.g. all 0); the rank becomes the smallest ``r' ≥ r`` with ``g(M, r', b) ≥ α``
  (``r' ≤ R − b``, the allocation). The new modes ``r + b .. r' + b`` start at small random values (line 8):
  entries ``ε N(0, 1/d_in)`` in ``U`` and ``ε N(0, 1/d_out)`` in ``V``.
- InRank-Efficient (Alg. 3): after ``efficient_after`` steps (default: one epoch), ``W_0 + U V`` is replaced by
  its best rank-``r`` factorisation ``U* V*`` (``U* = a √s``, ``V* = √s cᵀ``, buffer discarded) and training
  continues on ``U*, V*`` (``W_0`` is gone). Adam's moments restart; the learning-rate schedule runs on.

Rank changes without recompilation: ``U, V`` are allocated at ``R`` columns (default ``min(d_in, d_out) // 2``,
as in the reference implementation) and the modes beyond ``r + b`` are masked (they are zero, get zero
gradient and zero Adam update). The jitted step is therefore traced once for the InRank phase and once
more after the switch to the fixed-rank phase (``InRankResult.n_traces`` counts it); the price is that the
InRank phase computes with all ``R`` columns. In the fixed-rank phase the layers of the scanned stack share
one width, the largest rank over layers, the other layers' extra columns being masked zeros.

Runs checkpoint their whole state (the model with ``W_0``, factors and masks, the optimiser state, the phase and
the step) and resume exactly (:func:`train_inrank`); ``_plots.plot_inrank_ranks`` draws their ``ranks.jsonl``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from . import _runs
from ._configs import TrainConfig
from ._data import TextDataset, batch_indices
from ._spectra import product_singular_values

__all__ = [
    "InRankConfig",
    "InRankLinear",
    "LowRankLinear",
    "InRankResult",
    "explained_ratio",
    "explained_ratios",
    "grow_rank",
    "to_inrank",
    "update_ranks",
    "to_low_rank",
    "mlp_ranks",
    "parameter_count",
    "train_inrank",
    "compare_inrank",
    "comparison_table",
    "add_subcommand",
]

F32 = jnp.float32
_MLP = ("fc_in", "fc_out")
MODES = ("full", "inrank", "inrank-efficient")


@dataclasses.dataclass(frozen=True)
class InRankConfig:
    """InRank hyper-parameters; defaults are the paper's (r₀ = 2, b = 100, α = 0.9).

    Attributes:
        init_rank: r₀.
        buffer: b (≥ 1).
        threshold: α, the explained ratio to maintain.
        check_every: steps between rank checks (the paper checks every step, "relaxed to every k").
        eps: ε, the scale of the initial and of the added modes.
        max_rank: R, the columns allocated to ``U, V`` including the buffer (default ``min(d_in, d_out) // 2``).
        efficient_after: steps of InRank before the switch to fixed rank in InRank-Efficient (default: one epoch).
    """

    init_rank: int = 2
    buffer: int = 100
    threshold: float = 0.9
    check_every: int = 10
    eps: float = 1e-3
    max_rank: int | None = None
    efficient_after: int | None = None

    def __post_init__(self):
        if self.init_rank < 1 or self.buffer < 1 or self.check_every < 1:
            raise ValueError(f"need init_rank >= 1, buffer >= 1, check_every >= 1; got {self}")
        if not 0 < self.threshold < 1 or self.eps < 0:
            raise ValueError(f"need 0 < threshold < 1 and eps >= 0; got {self.threshold}, {self.eps}")

    def allocation(self, d_in: int, d_out: int) -> int:
        """R for a d_in × d_out matrix."""
        r = min(d_in, d_out) // 2 if self.max_rank is None else self.max_rank
        if not self.init_rank + self.buffer <= r <= min(d_in, d_out):
            raise ValueError(
                f"need init_rank + buffer = {self.init_rank + self.buffer} <= max_rank = {r} <= "
                f"min(d_in, d_out) = {min(d_in, d_out)}; lower buffer or set max_rank"
            )
        return r


# ----------------------------------------------------------------------------- the explained ratio


def explained_ratio(s, rank: int, buffer: int) -> float:
    """``g(M, r, b) = 1 − var(s_{r+1..r+b}) / var(s_{1..r+b})`` for singular values ``s`` (zero-padded to r + b)."""
    s = np.sort(np.abs(np.asarray(s, np.float64)))[::-1]
    s = np.pad(s, (0, max(0, rank + buffer - s.size)))
    total = s[: rank + buffer].var()
    return 1.0 if total == 0 else float(1.0 - s[rank : rank + buffer].var() / total)


def explained_ratios(s, buffer: int) -> np.ndarray:
    """``g(M, r, b)`` for every ``r = 0 .. len(s) − b`` (last axis of ``s``, sorted descending), via prefix sums."""
    s = np.sort(np.abs(np.asarray(s, np.float64)), axis=-1)[..., ::-1]
    n = s.shape[-1] - buffer + 1
    if n < 1:
        raise ValueError(f"need at least buffer = {buffer} singular values, got {s.shape[-1]}")
    zero = np.zeros(s.shape[:-1] + (1,))
    c1 = np.concatenate([zero, np.cumsum(s, -1)], -1)
    c2 = np.concatenate([zero, np.cumsum(s * s, -1)], -1)
    r = np.arange(n)

    def var(a, b):  # population variance of s[a:b], b − a > 0
        m = b - a
        mean = (c1[..., b] - c1[..., a]) / m
        return np.maximum((c2[..., b] - c2[..., a]) / m - mean * mean, 0.0)

    total = var(np.zeros_like(r), r + buffer)
    tail = var(r, r + buffer)
    scale = np.maximum(c2[..., -1:] / s.shape[-1], np.finfo(np.float64).tiny)
    flat = total <= 1e-12 * scale  # all of s_{1..r+b} equal (up to rounding)
    return np.where(flat, 1.0, 1.0 - tail / np.where(flat, 1.0, total))


def grow_rank(s, rank: int, *, buffer: int, threshold: float) -> int:
    """Algorithm 2, line 7: the smallest ``r' ≥ rank`` with ``g(M, r', b) ≥ threshold``, at most ``len(s) − b``."""
    g = explained_ratios(s, buffer)
    cap = g.size - 1
    if rank > cap:
        raise ValueError(f"rank {rank} + buffer {buffer} exceeds the {len(s)} singular values")
    ok = np.flatnonzero(g[rank:] >= threshold)
    return int(rank + ok[0]) if ok.size else cap


# ----------------------------------------------------------------------------- layers


class InRankLinear(eqx.Module):
    """``y = x (W_0 + U diag(m) V) + b`` with ``W_0`` frozen and ``m_i = [i < n_active]``, ``n_active = r + b``."""

    w0: jax.Array
    u: jax.Array
    v: jax.Array
    bias: jax.Array
    n_active: jax.Array
    buffer: int = eqx.field(static=True)

    def __call__(self, x: jax.Array) -> jax.Array:
        dt = x.dtype
        mask = (jnp.arange(self.u.shape[-1]) < self.n_active).astype(dt)
        w0 = jax.lax.stop_gradient(self.w0).astype(dt)
        return x @ w0 + ((x @ self.u.astype(dt)) * mask) @ self.v.astype(dt) + self.bias.astype(dt)


class LowRankLinear(eqx.Module):
    """``y = x U diag(m) V + b`` with ``m_i = [i < rank]`` (Algorithm 3's fixed-rank layer)."""

    u: jax.Array
    v: jax.Array
    bias: jax.Array
    rank: jax.Array

    def __call__(self, x: jax.Array) -> jax.Array:
        dt = x.dtype
        mask = (jnp.arange(self.u.shape[-1]) < self.rank).astype(dt)
        return ((x @ self.u.astype(dt)) * mask) @ self.v.astype(dt) + self.bias.astype(dt)


def _get(model, name):
    return getattr(model.blocks.mlp, name)


def _replace(model, name, layer):
    return eqx.tree_at(lambda m: getattr(m.blocks.mlp, name), model, layer)


def to_inrank(model, grads: dict, *, config: InRankConfig = InRankConfig()):
    """Algorithm 2, lines 1–3: reparametrise ``model``'s MLP matrices as ``W_0 + U V``.

    ``grads[name]`` is ``∂L/∂W`` of ``blocks.mlp.<name>.weight`` (layers, d_in, d_out) at the initialisation,
    for ``name`` in ``fc_in``, ``fc_out``. With ``eps = 0`` the model computes exactly what it did before.
    """
    for name in _MLP:
        lin = _get(model, name)
        w = lin.weight
        if grads[name].shape != w.shape:
            raise ValueError(f"gradient for {name} has shape {grads[name].shape}, weight {w.shape}")
        n_layers, d_in, d_out = w.shape
        R = config.allocation(d_in, d_out)
        k = config.init_rank + config.buffer
        a, _, ct = jnp.linalg.svd(grads[name].astype(F32), full_matrices=False)
        eps = F32(config.eps)
        u = jnp.zeros((n_layers, d_in, R), F32).at[:, :, :k].set(-eps * a[:, :, :k])
        v = jnp.zeros((n_layers, R, d_out), F32).at[:, :k, :].set(eps * ct[:, :k, :])
        layer = InRankLinear(
            w0=w.astype(F32),
            u=u,
            v=v,
            bias=lin.bias,
            n_active=jnp.full((n_layers,), k, jnp.int32),
            buffer=config.buffer,
        )
        model = _replace(model, name, layer)
    return model


@jax.jit
def _layer_spectrum(u, v, n_active):
    mask = (jnp.arange(u.shape[-1]) < n_active[:, None]).astype(F32)
    return product_singular_values(u * mask[:, None, :], jnp.swapaxes(v, -1, -2) * mask[:, None, :])


@jax.jit
def _activate(u, v, old, new, key, eps):
    cols = jnp.arange(u.shape[-1])
    fresh = (cols >= old[:, None]) & (cols < new[:, None])  # (layers, R)
    ku, kv = jax.random.split(key)
    ru = eps * jax.random.normal(ku, u.shape, F32) / jnp.sqrt(F32(u.shape[1]))
    rv = eps * jax.random.normal(kv, v.shape, F32) / jnp.sqrt(F32(v.shape[2]))
    return jnp.where(fresh[:, None, :], ru, u), jnp.where(fresh[:, :, None], rv, v)


def update_ranks(model, key, *, config: InRankConfig = InRankConfig()):
    """Algorithm 2, lines 6–8 for every MLP matrix: grow the ranks, start the new modes at small random values.

    Returns ``(model, info)`` with ``info[name] = {"rank": [...], "explained_ratio": [...]}`` per layer
    (the ratio at the new rank).
    """
    info = {}
    for i, name in enumerate(_MLP):
        lin = _get(model, name)
        s = np.asarray(_layer_spectrum(lin.u, lin.v, lin.n_active))
        old = np.asarray(lin.n_active) - lin.buffer
        new = np.array(
            [grow_rank(s[l], int(old[l]), buffer=lin.buffer, threshold=config.threshold) for l in range(len(old))]
        )
        info[name] = {
            "rank": new.tolist(),
            "explained_ratio": [explained_ratio(s[l], int(new[l]), lin.buffer) for l in range(len(new))],
        }
        if np.any(new != old):
            n_active = jnp.asarray(new + lin.buffer, jnp.int32)
            u, v = _activate(lin.u, lin.v, lin.n_active, n_active, jax.random.fold_in(key, i), F32(config.eps))
            model = _replace(model, name, dataclasses.replace(lin, u=u, v=v, n_active=n_active))
    return model, info


def to_low_rank(model, *, ranks: dict | None = None):
    """Algorithm 3, lines 4–6: replace each ``W_0 + U V`` by its best rank-``r`` factorisation ``U* V*``.

    ``r`` is the layer's InRank rank (buffer discarded) unless ``ranks[name]`` (one int per layer) says
    otherwise. Exact when ``rank(W_0 + U V) ≤ r``; otherwise the Eckart–Young truncation.
    """
    for name in _MLP:
        lin = _get(model, name)
        mask = (jnp.arange(lin.u.shape[-1]) < lin.n_active[:, None]).astype(F32)
        w = lin.w0 + (lin.u * mask[:, None, :]) @ lin.v
        r = np.asarray(lin.n_active) - lin.buffer if ranks is None else np.asarray(ranks[name])
        n_layers, d_in, d_out = w.shape
        if r.shape != (n_layers,) or r.min() < 1 or r.max() > min(d_in, d_out):
            raise ValueError(f"{name}: need one rank in [1, {min(d_in, d_out)}] per layer, got {r}")
        width = int(r.max())
        a, s, ct = jnp.linalg.svd(w, full_matrices=False)
        keep = (jnp.arange(width) < jnp.asarray(r)[:, None]).astype(F32)
        root = jnp.sqrt(s[:, :width]) * keep
        layer = LowRankLinear(
            u=a[:, :, :width] * root[:, None, :],
            v=root[:, :, None] * ct[:, :width, :],
            bias=lin.bias,
            rank=jnp.asarray(r, jnp.int32),
        )
        model = _replace(model, name, layer)
    return model


def mlp_ranks(model) -> dict:
    """Rank per layer of each MLP matrix: InRank's ``r``, the fixed rank, or ``min(d_in, d_out)`` (full)."""
    out = {}
    for name in _MLP:
        lin = _get(model, name)
        if isinstance(lin, InRankLinear):
            out[name] = (np.asarray(lin.n_active) - lin.buffer).tolist()
        elif isinstance(lin, LowRankLinear):
            out[name] = np.asarray(lin.rank).tolist()
        else:
            out[name] = [min(lin.weight.shape[1:])] * lin.weight.shape[0]
    return out


def parameter_count(model) -> dict:
    """``{"trainable", "frozen", "allocated"}``: trainable parameters counting only the active modes of the
    MLP factors, frozen ``W_0`` entries, and all stored floating-point entries."""
    allocated = sum(a.size for a in jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_inexact_array)))
    trainable, frozen = allocated, 0
    for name in _MLP:
        lin = _get(model, name)
        if isinstance(lin, (InRankLinear, LowRankLinear)):
            d_in, d_out = lin.u.shape[1], lin.v.shape[2]
            active = np.asarray(lin.n_active if isinstance(lin, InRankLinear) else lin.rank).sum()
            trainable -= lin.u.size + lin.v.size - int(active) * (d_in + d_out)
        if isinstance(lin, InRankLinear):
            frozen += lin.w0.size
            trainable -= lin.w0.size
    return {"trainable": int(trainable), "frozen": int(frozen), "allocated": int(allocated)}


# ----------------------------------------------------------------------------- training


@dataclasses.dataclass(frozen=True)
class InRankResult:
    """A run of :func:`train_inrank`.

    ``metrics``: the training/evaluation records; ``ranks``: the rank records (also ``ranks.jsonl``);
    ``evaluation``: the last evaluation (``eval_perplexity`` is per token of ``tokenizer_name``; empty if the run
    stopped before any); ``seconds_per_step``: mean wall time of the steps after each phase's first (compiling)
    step, over the run's sessions when resumed;
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


def _trainable(model):
    """Filter spec: floating-point arrays, except the frozen ``W_0`` of InRank layers."""
    spec = jax.tree_util.tree_map(eqx.is_inexact_array, model)
    for name in _MLP:
        if isinstance(_get(model, name), InRankLinear):
            spec = eqx.tree_at(lambda m: getattr(m.blocks.mlp, name).w0, spec, False)
    return spec


def _lm_loss(model, arrays, idx, compute_dtype):
    from ._train import _mean_loss

    return _mean_loss(model, arrays, idx, compute_dtype=compute_dtype, kind="token")


@eqx.filter_jit
def _mlp_gradients(model, arrays, idx, compute_dtype):
    g = eqx.filter_grad(lambda m: _lm_loss(m, arrays, idx, compute_dtype))(model)
    return {name: getattr(g.blocks.mlp, name).weight for name in _MLP}


def _nbytes(tree) -> int:
    return int(sum(a.nbytes for a in jax.tree_util.tree_leaves(tree) if eqx.is_array(a)))


def _peak_memory() -> int | None:
    stats = jax.devices()[0].memory_stats()
    return None if not stats else stats.get("peak_bytes_in_use")


def _checkpoint_like(model, phase: str, ranks: dict | None, inrank: InRankConfig, optimizer):
    """Structure, shapes and dtypes of the checkpointed ``(model, opt_state)`` of a run in ``phase``, built from
    the initial ``model`` without computing anything (``ranks``: the fixed ranks of the ``fixed-rank`` phase)."""

    def build():
        m = model
        if phase != "full":
            m = to_inrank(m, {n: jnp.zeros_like(_get(m, n).weight) for n in _MLP}, config=inrank)
        if phase == "fixed-rank":
            m = to_low_rank(m, ranks=ranks)
        return m, optimizer.init(eqx.filter(m, _trainable(m)))

    return eqx.filter_eval_shape(build)


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
    compute_dtype=None,
    stop_after: int | None = None,
) -> InRankResult:
    """Train a ``GPT`` on ``data`` with the recipe ``config`` in one of three modes:

    ``"full"`` (every weight trained, the baseline), ``"inrank"`` (Algorithm 2 throughout) or
    ``"inrank-efficient"`` (Algorithm 3: InRank for ``inrank.efficient_after`` steps, default one epoch, then
    fixed rank). All modes use ``train``'s step, optimiser and schedule (``_train.make_step``, ``make_optimizer``,
    ``learning_rate_schedule``), data order (``_data.batch_indices``) and evaluation (the ``valid`` stream), so
    they compare like for like; as in ``train``, losses are checked for finiteness at each sync point (logging,
    rank check, evaluation, checkpoint), never after every step.

    With ``out``: ``metrics.jsonl`` and ``ranks.jsonl`` (one record per rank check) are written as produced, and a
    checkpoint goes to ``out/checkpoint`` every ``config.checkpoint_every`` steps and at the end: the model (with
    ``W_0``, the factors and their masks ``n_active`` / ``rank``) and the optimiser state, and in ``meta.json``
    the step (also the data position: step ``k`` trains on ``batch_indices(..., seed=seed, step=k - 1)``), the
    phase (``full``, ``inrank``, or ``fixed-rank`` after the switch), the ranks and the loss window.
    ``resume=True`` continues from that checkpoint and reproduces the uninterrupted run (parameters, ranks,
    metrics; the timings cover the steps actually run). ``stop_after`` ends the run after that many steps in
    total, with a checkpoint, as an interruption would (the schedule, logging and evaluation still follow the
    full recipe).
    """
    from ._train import (
        StepLog,
        _evaluate,
        _token_arrays,
        compiled_for,
        data_description,
        default_compute_dtype,
        learning_rate_schedule,
        make_optimizer,
        recipe_description,
        split_model,
        step_counts,
    )

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if not isinstance(data, TextDataset):
        raise TypeError(f"InRank trains a GPT on a TextDataset, got {type(data).__name__}")
    if resume and out is None:
        raise ValueError("resume=True needs the run folder `out`")
    compute_dtype = default_compute_dtype() if compute_dtype is None else jnp.dtype(compute_dtype)
    train_stream, valid_stream, context = _token_arrays(data, model)
    arrays, eval_arrays = train_stream, valid_stream
    n_train, n_valid = (data.train.size - 1) // context, (data.valid.size - 1) // context
    per_epoch, total, warmup, last = step_counts(config, n_train, stop_after)
    switch = (inrank.efficient_after or per_epoch) if mode == "inrank-efficient" else None

    def batch(step):
        idx = batch_indices(n_train, batch_size=config.batch_size, seed=seed, step=step)
        return jnp.asarray(idx.astype(np.int32).reshape(config.n_micro, -1))

    key = jax.random.PRNGKey(seed)
    optimizer, schedule = make_optimizer(config), learning_rate_schedule(config, total, warmup)
    description = _runs.describe(
        mode=mode,
        seed=seed,
        config=recipe_description(config),
        model=model.config,
        data=data_description(data),
        compute_dtype=compute_dtype,
        inrank=None if mode == "full" else inrank,
        init_weights=_runs.fingerprint(model),
    )
    metrics, rank_log, logs = [], [], {}
    start, losses, phase = 0, [], "full" if mode == "full" else "inrank"
    timing = {"seconds": 0.0, "steps": 0, "rank_checks": []}  # steps after each phase's first (compiling) one
    ckpt = None if out is None else pathlib.Path(out) / "checkpoint"
    if ckpt is not None:
        ckpt.parent.mkdir(parents=True, exist_ok=True)
        logs = {name: _runs.MetricsLog(ckpt.parent / f"{name}.jsonl") for name in ("metrics", "ranks")}
    if resume and _runs.has_checkpoint(ckpt):
        meta = _runs.checkpoint_meta(ckpt)
        _runs.check_resumable(ckpt, meta, description)
        like = _checkpoint_like(model, meta["phase"], meta["ranks"], inrank, optimizer)
        (model, opt_state), meta = _runs.load_checkpoint(ckpt, like)
        start, losses, phase, timing = meta["step"], meta["log_window"], meta["phase"], meta["timing"]
        for log in logs.values():
            log.truncate_after(start)
        metrics, rank_log = (_runs.read_metrics(log.path) if log.path.exists() else [] for log in logs.values())
    else:
        if ckpt is not None:
            _runs.clear_checkpoint(ckpt)
            for log in logs.values():
                log.path.unlink(missing_ok=True)
        # the step donates the trained arrays: train a copy, so that the caller's `model` stays valid
        model = jax.tree_util.tree_map(lambda a: jnp.array(a, copy=True) if eqx.is_array(a) else a, model)
        if mode != "full":
            grads = _mlp_gradients(model, arrays, batch(0)[0], compute_dtype)  # first micro-batch
            model = to_inrank(model, grads, config=inrank)
        opt_state = optimizer.init(eqx.filter(model, _trainable(model)))
    params, frozen, static = split_model(model, _trainable(model))
    step_fn, eval_fn, traces = compiled_for(config, compute_dtype, "token")
    traces_before = traces[0]
    steps = StepLog(config, schedule)

    def current():
        return eqx.combine(params, frozen, static)

    def record(kind, rec):
        (metrics if kind == "metrics" else rank_log).append(rec)
        if kind in logs:
            logs[kind].append(rec)

    def checkpoint(step):
        _runs.save_checkpoint(
            ckpt,
            (current(), opt_state),
            {
                **description,
                "step": step,
                "phase": phase,
                "ranks": mlp_ranks(current()),
                "total_steps": total,
                "log_window": losses,
                "timing": timing,
            },
        )

    def sync(timed=True):
        losses.extend(loss for _, loss, _ in steps.sync(timed))
        seconds, n = steps.take_timing()
        timing["seconds"] += seconds
        timing["steps"] += n

    first_of_phase = start + 1
    for step in range(start + 1, last + 1):
        params, opt_state, loss, gnorm = step_fn(
            params, opt_state, frozen, static, arrays, batch(step - 1), jnp.float32(schedule(step - 1))
        )
        steps.add(step, loss, gnorm)
        is_check = phase == "inrank" and step % inrank.check_every == 0
        is_switch = switch is not None and step == switch
        is_log = step % config.log_every == 0 or step == total
        is_eval = step % config.eval_every == 0 or step == total
        is_ckpt = ckpt is not None and (step % config.checkpoint_every == 0 or step == last)
        if not (step == first_of_phase or is_check or is_switch or is_log or is_eval or is_ckpt):
            continue
        sync(timed=step != first_of_phase)  # a phase's first step compiles: not timed
        if is_check:
            t0 = time.perf_counter()
            model, info = update_ranks(current(), jax.random.fold_in(key, step), config=inrank)
            params, frozen, static = split_model(model, _trainable(model))
            timing["rank_checks"].append(time.perf_counter() - t0)
            record("ranks", {"step": step, "phase": phase, **info})
        if is_switch:
            model = to_low_rank(current())
            phase, first_of_phase = "fixed-rank", step + 1
            params, frozen, static = split_model(model, _trainable(model))
            opt_state = optimizer.init(params)
            record("ranks", {"step": step, "phase": phase, **{n: {"rank": r} for n, r in mlp_ranks(model).items()}})
        if is_log:
            record("metrics", {"step": step, "loss": float(np.mean(losses)), "phase": phase})
            losses = []
        if is_eval:
            ev = _evaluate(eval_fn, eval_arrays, current(), n_valid, config.eval_batch_size, "token")
            record("metrics", {"step": step, **ev, "tokenizer": data.tokenizer_name})
        if is_ckpt:
            checkpoint(step)
        steps.restart()
    model = current()
    evaluation = next((m for m in reversed(metrics) if "eval_loss" in m), {})
    checks = timing["rank_checks"]
    return InRankResult(
        model=model,
        mode=mode,
        metrics=metrics,
        ranks=rank_log,
        evaluation=evaluation,
        steps=max(last, start),
        seconds_per_step=timing["seconds"] / max(timing["steps"], 1),
        seconds_per_rank_check=float(np.median(checks)) if checks else None,
        parameters=parameter_count(model),
        state_bytes=_nbytes((params, opt_state)),
        peak_memory_bytes=_peak_memory(),
        n_traces=traces[0] - traces_before,
        tokenizer_name=data.tokenizer_name,
    )


def _mean_rank(model) -> float:
    r = mlp_ranks(model)
    return float(np.mean(r["fc_in"] + r["fc_out"]))


def compare_inrank(
    build,
    config: TrainConfig,
    data: TextDataset,
    *,
    modes=("full", "inrank-efficient"),
    inrank: InRankConfig = InRankConfig(),
    seed: int = 0,
    out=None,
    resume: bool = False,
    compute_dtype=None,
    stop_after: int | None = None,
) -> dict:
    """Train ``build()`` (a fresh GPT) in each of ``modes`` and tabulate perplexity, mean MLP rank, parameters,
    time per step and memory. Returns ``{mode: row}``; with ``out`` also writes ``comparison.json`` and
    ``comparison.md`` (and each run's logs and checkpoint in ``out/<mode>``, which ``resume=True`` continues;
    finished runs are only reloaded)."""
    rows = {}
    for mode in modes:
        r = train_inrank(
            build(),
            config,
            data,
            mode=mode,
            inrank=inrank,
            seed=seed,
            compute_dtype=compute_dtype,
            out=None if out is None else pathlib.Path(out) / mode,
            resume=resume,
            stop_after=stop_after,
        )
        rows[mode] = {
            "eval_perplexity": r.evaluation.get("eval_perplexity"),
            "eval_loss": r.evaluation.get("eval_loss"),
            "mean_mlp_rank": _mean_rank(r.model),
            "ranks": mlp_ranks(r.model),
            "trainable_parameters": r.parameters["trainable"],
            "seconds_per_step": r.seconds_per_step,
            "seconds_per_rank_check": r.seconds_per_rank_check,
            "state_bytes": r.state_bytes,
            "peak_memory_bytes": r.peak_memory_bytes,
            "steps": r.steps,
            "n_traces": r.n_traces,
            "tokenizer": r.tokenizer_name,
        }
    if out is not None:
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


# ----------------------------------------------------------------------------- CLI


def add_subcommand(subparsers) -> argparse.ArgumentParser:
    """Register ``inrank``: train a GPT in full rank, InRank and/or InRank-Efficient and compare."""
    p = subparsers.add_parser("inrank", help="InRank / InRank-Efficient vs full-rank GPT-2 training (paper 004)")
    p.add_argument("--config", default="gpt2-tiny", help="GPT config (gpt2-tiny, gpt2-small, ...)")
    p.add_argument("--train-config", default=None, help="recipe (default: tiny for gpt2-tiny, else gpt2-wikitext103)")
    p.add_argument("--data-dir", default=None, help="WikiText-103/2 raw folder (absent: the embedded English corpus)")
    p.add_argument("--modes", nargs="+", choices=MODES, default=["full", "inrank-efficient"])
    p.add_argument("--steps", type=int, default=None, help="train for this many optimiser steps")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument(
        "--checkpoint-every", type=int, default=None, help="steps between checkpoints (default: the recipe's)"
    )
    p.add_argument("--init-rank", type=int, default=2)
    p.add_argument("--buffer", type=int, default=100)
    p.add_argument("--threshold", type=float, default=0.9)
    p.add_argument("--check-every", type=int, default=10)
    p.add_argument("--eps", type=float, default=1e-3)
    p.add_argument("--max-rank", type=int, default=None)
    p.add_argument(
        "--efficient-after", type=int, default=None, help="InRank steps before fixing the rank (default 1 epoch)"
    )
    p.add_argument("--compute-dtype", choices=("auto", "float32", "bfloat16"), default="auto")
    p.add_argument(
        "--remat",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="recompute the block activations in the backward pass (default: on for the paper-scale "
        "configs, off for gpt2-tiny)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="inrank_output")
    p.add_argument("--resume", action="store_true", help="continue the runs found in --out")
    p.set_defaults(func=_run_cli)
    return p


def _run_cli(args) -> None:
    from ._configs import gpt_config, train_config
    from ._data import load_text
    from ._gpt import GPT
    from ._plots import plot_inrank_ranks

    data = load_text(args.data_dir)
    cfg = dataclasses.replace(gpt_config(args.config), vocab_size=data.vocab_size)
    if args.remat is not None:
        cfg = dataclasses.replace(cfg, remat=args.remat)
    recipe = train_config(args.train_config or ("tiny" if args.config == "gpt2-tiny" else "gpt2-wikitext103"))
    recipe = recipe.with_overrides(
        batch_size=args.batch_size, lr=args.lr, checkpoint_every=args.checkpoint_every, steps=args.steps
    )
    inrank = InRankConfig(
        init_rank=args.init_rank,
        buffer=args.buffer,
        threshold=args.threshold,
        check_every=args.check_every,
        eps=args.eps,
        max_rank=args.max_rank,
        efficient_after=args.efficient_after,
    )
    dtype = None if args.compute_dtype == "auto" else jnp.dtype(args.compute_dtype)
    out = pathlib.Path(args.out)
    rows = compare_inrank(
        lambda: GPT(cfg, key=jax.random.PRNGKey(args.seed)),
        recipe,
        data,
        modes=tuple(args.modes),
        inrank=inrank,
        seed=args.seed,
        out=out,
        resume=args.resume,
        compute_dtype=dtype,
    )
    print(comparison_table(rows, data))
    for mode in rows:
        records = out / mode / "ranks.jsonl"
        if records.exists() and records.stat().st_size:
            figure = plot_inrank_ranks(
                records,
                out / "figures" / f"ranks_{mode}.png",
                until=rows[mode]["steps"],
                title=f"{mode}, {args.config}",
            )
            print(f"ranks through training: {figure}")

"""Comparing factorised runs at finite α with the greedy low-rank limit (docs/math.md, *Full weights: comparing the
limits*).

For every run (one α), every weight matrix ``W_j`` and every stage window ``[T_k + δ, T_{k+1} − δ]`` (the last
window ends at the run's last time), :func:`~gradflow.compare_limits` reports the sup over the window of

* ``weights_distance``: ``‖W_j(τ) − W̄_j^k‖_2``, the distance to the greedy saddle (spectral norm),
* ``b_distance``: ``max_i |b_{j,i}(τ) − b̄_{j,i}(τ)|``, the log scales of the singular values
  ``b_{j,i} = log σ_i(W_j) / (2 log α)`` (descending ``σ``) against the limit's: 0 for the ``r_j^k`` learned
  directions, then the sleeping exponents ``e_{j,1} ≤ e_{j,2} ≤ …`` of the path, piecewise linear in τ,
* ``loss_distance``: ``|L(τ) − L(W̄^k)|``,

and the rank jumps detected on the run. **Detection rule**: stage ``k ≥ 1`` adds rank ``r = r_j^k`` to
``W_j``, ``j = j_{k−1}``; it is detected at the first ``τ`` where ``σ_r(W_j(τ)) ≥ threshold · σ_r(W̄_j^k)``
(linear interpolation of ``log σ_r`` between recorded times; ``threshold = 0.5`` is half the learned value).
In log scale this is where ``b_{j,r}`` crosses ``log(threshold σ_r(W̄_j^k)) / (2 log α)``, a level that tends
to 0 as α → 0: the time the r-th singular value becomes O(1).

Rates: as for diagonal weights, a least-squares fit of ``log d = c − r log log(1/α)`` per quantity and window.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, NamedTuple

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from .._kit._checks import check_losses, probe_times
from .._kit._comparison import AbstractComparison, check_run_scales, compare_runs, detect, window_masks
from .._kit._deprecation import renamed
from ._model import FactorizedModel
from ._path import FactorizedGreedyPath, predicted_log_scales
from ._phase_b import evaluate
from ._results import log_scales

_RUN_FIELDS = ("ts", "W", "log_singular_values", "loss", "log_alpha")


class RankComparison(AbstractComparison):
    """Distances between factorised runs at several α and the greedy low-rank limit, per stage window and weight
    matrix (docs/math.md, *Full weights: comparing the limits*).

    Shapes: ``A`` runs (one per α), ``K`` greedy stages (``K + 1`` saddles ``k = 0..K``), ``J`` weight matrices.

    Attributes:
        method: ``"flow"`` (exact gradient flow) or ``"gd"`` (gradient descent runs).
        names: the weight matrices' names.
        log_alpha: ``(A,)`` the runs' ``log α``.
        stage_times: ``(K + 1,)`` the greedy ``T_k`` (``T_0 = 0``).
        activated: ``(K,)`` the weight matrix ``j_k`` that gains a rank at ``T_{k+1}``.
        ranks: ``(K + 1, J)`` the ranks of the greedy saddles ``W̄^k``.
        window_start, window_end: ``(K + 1,)`` the window of saddle ``k``.
        weights_distance, b_distance: ``(A, K + 1, J)`` sup distances over each window, per weight matrix, of
            ``W_j`` and of the log scales ``b`` (NaN where a window is empty).
        loss_distance: ``(A, K + 1)``.
        detected_times: ``(A, K)`` the rank jumps ``1..K`` detected on each run (NaN if the run never gets there).
        time_error: ``(A, K)`` ``|detected − T_k|``.
        weights_rate, b_rate: ``(K + 1, J)`` fitted exponent ``r`` per window and weight matrix.
        loss_rate: ``(K + 1,)``; time_rate: ``(K,)``.
        threshold, delta: the detection fraction and the window margin used.
        result: ``"successful"``, ``"run_failed"`` (a run is not finite from some time on) or ``"single_scale"``
            (one α, no rates), as a ``RESULTS`` value.
        message: which runs are not finite, from when (``""`` when successful).
        gd: the same comparison for gradient-descent runs, or None.
        runs: the runs compared (the flows ``compare_limits`` ran or was given, or the gradient-descent runs): one
            batched result, or a tuple of runs, one per α.
        path: the greedy low-rank limit they were compared with.
    """

    names: tuple[str, ...] = eqx.field(static=True)
    activated: np.ndarray
    ranks: np.ndarray
    gd: RankComparison | None = None
    runs: Any = None
    path: FactorizedGreedyPath | None = None
    _weights_name: ClassVar[str] = "W"
    W_distance = renamed("weights_distance", "W_distance", "RankComparison")
    W_rate = renamed("weights_rate", "W_rate", "RankComparison")
    factor = renamed("activated", "factor", "RankComparison")

    def _record(self, a, k, head, times):
        rec = dict(
            head,
            factor=self.names[int(self.activated[k - 1])] if k else "",
            **times,
            loss_distance=float(self.loss_distance[a, k]),
        )
        for j, name in enumerate(self.names):
            rec[f"rank[{name}]"] = int(self.ranks[k, j])
            rec[f"W_distance[{name}]"] = float(self.weights_distance[a, k, j])
            rec[f"b_distance[{name}]"] = float(self.b_distance[a, k, j])
        return rec

    def _rate_records(self, quantity, stage, rate):
        """Per weight matrix where ``rate`` has one per matrix, else with weight matrix ``""``."""
        rate = np.asarray(rate)
        per = zip(self.names, rate) if rate.ndim else [("", rate)]
        return [dict(method=self.method, quantity=quantity, stage=stage, factor=n, exponent=float(r)) for n, r in per]


class _Run(NamedTuple):
    """One run: ``log α``, times ``(m,)``, weights (per j ``(m, m_j, n_j)``), ``log σ`` (per j ``(m, k_j)``), loss."""

    log_alpha: float
    ts: np.ndarray
    W: tuple[np.ndarray, ...]
    log_sv: tuple[np.ndarray, ...]
    loss: np.ndarray


def stable_rank(W) -> np.ndarray:
    """``‖W‖_F² / ‖W‖_2²`` of a matrix or a stack of matrices (last two axes); 0 for a zero matrix."""
    W = np.asarray(W, dtype=np.float64)
    sv = np.linalg.svd(W, compute_uv=False)
    top = sv[..., 0] ** 2
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(top > 0, np.sum(sv**2, axis=-1) / np.where(top > 0, top, 1.0), 0.0)


def _as_runs(results, log_alphas, model: FactorizedModel) -> list[_Run]:
    """Split factorised runs (one batched result or a sequence) into :class:`_Run` per α, in the order of
    ``log_alphas`` (a run that records another scale is an error)."""
    if not isinstance(results, (list, tuple)):
        results = [results]
    J = len(model.shapes)
    runs = []
    for res in results:
        missing = [f for f in _RUN_FIELDS if not hasattr(res, f)]
        if missing:
            raise TypeError(
                f"every run of a factorised model must have {', '.join(_RUN_FIELDS)} (a FactorizedFlowResult or a "
                f"FactorizedGDResult); got {type(res).__name__} without {', '.join(missing)}."
            )
        Ws = tuple(np.asarray(w, dtype=np.float64) for w in res.W)
        log_sv = tuple(np.asarray(s, dtype=np.float64) for s in res.log_singular_values)
        if len(Ws) != J or len(log_sv) != J:
            raise ValueError(f"a run holds {len(Ws)} weight matrices; the model has {J}.")
        loss, ts = np.asarray(res.loss, dtype=np.float64), np.asarray(res.ts, dtype=np.float64)
        recorded = np.atleast_1d(np.asarray(res.log_alpha, dtype=np.float64))
        if loss.ndim == 1:
            Ws, log_sv, loss = tuple(w[None] for w in Ws), tuple(s[None] for s in log_sv), loss[None]
        for j, (w, shape) in enumerate(zip(Ws, model.shapes)):
            if w.shape[-2:] != shape or w.shape[:2] != loss.shape:
                raise ValueError(f"a run's W[{j}] has shape {w.shape[-2:]}; the model's is {shape}.")
        for a in range(loss.shape[0]):
            runs.append(
                _Run(
                    float(recorded[a]),
                    ts[a] if ts.ndim == 2 else ts,
                    tuple(w[a] for w in Ws),
                    tuple(s[a][:, :k] for s, k in zip(log_sv, model.widths)),  # GD reports min(m, n) of them
                    loss[a],
                )
            )
    check_run_scales([run.log_alpha for run in runs], log_alphas)
    return [run._replace(log_alpha=float(la)) for run, la in zip(runs, log_alphas)]


def _jump_levels(path) -> list[tuple[int, int, float]]:
    """For each rank jump ``k = 1..K``: the weight matrix ``j``, the new rank ``r`` and ``log σ_r(W̄_j^k)``."""
    ranks = np.asarray(path.ranks)
    out = []
    for k, j in enumerate(np.asarray(path.activated), start=1):
        j, r = int(j), int(ranks[k, j])
        if r <= ranks[k - 1, j]:  # phase (B) lost the new rank again: no jump to detect
            out.append((j, r, math.nan))
            continue
        sv = np.linalg.svd(np.asarray(path.W[j][k], dtype=np.float64), compute_uv=False)
        out.append((j, r, math.log(sv[r - 1])))
    return out


def _compare_runs(path, runs, *, widths, names, method="flow", delta=None, threshold=0.5) -> RankComparison:
    """Compare :class:`_Run` s with the greedy low-rank ``path``: per window and weight matrix the sup distances
    of ``W_j`` (spectral norm) and of the log scales, and of the loss; the rank jumps where ``σ_r(W_j)`` reaches
    ``threshold · σ_r(W̄_j^k)``."""
    levels = _jump_levels(path)
    path_loss = np.asarray(path.loss, dtype=np.float64)

    def distances(run: _Run, starts, ends):
        K1, J = starts.size, len(run.W)
        d = dict(weights=np.full((K1, J), np.nan), b=np.full((K1, J), np.nan), loss=np.full(K1, np.nan))
        for k, inside in window_masks(run.ts, starts, ends):
            tau = run.ts[inside]
            d["loss"][k] = np.max(np.abs(run.loss[inside] - path_loss[k]))
            for j in range(J):
                diff = run.W[j][inside] - np.asarray(path.W[j][k], dtype=np.float64)
                d["weights"][k, j] = np.max(np.linalg.norm(diff, ord=2, axis=(-2, -1)))
                b = log_scales(run.log_sv[j][inside], run.log_alpha)
                d["b"][k, j] = np.max(np.abs(b - predicted_log_scales(path, tau, j, widths[j])))
        detected = [
            detect(run.ts, -run.log_sv[j][:, r - 1], [-(level + math.log(threshold))])[0]
            if np.isfinite(level)
            else np.nan
            for j, r, level in levels
        ]
        return d, np.array(detected)

    return compare_runs(
        RankComparison,
        path,
        runs,
        distances,
        method=method,
        delta=delta,
        threshold=threshold,
        names=tuple(names),
        activated=np.asarray(path.activated, dtype=np.int64),
        ranks=np.asarray(path.ranks, dtype=np.int64),
    )


def compare(model: FactorizedModel, path, runs, log_alphas, **options) -> RankComparison:
    """Compare runs of the factorised ``model`` (one batched result or one per ``log_alphas``, anything with
    ``ts``, ``W``, ``log_singular_values``, ``loss``, ``log_alpha``) with the greedy low-rank ``path``; the runs'
    loss at their recorded times (``kit.probe_times``) must be the model's there (``kit.check_losses``)."""
    runs = _as_runs(runs, log_alphas, model)
    picks = [probe_times(run.loss) for run in runs]
    recorded = [run.loss[i] for run, at in zip(runs, picks) for i in at]
    computed = [loss_of_weights(model, tuple(w[i] for w in run.W)) for run, at in zip(runs, picks) for i in at]
    method = options.get("method", "flow")
    check_losses(recorded, computed, f"the {method} runs (at their recorded times)")
    return _compare_runs(path, runs, widths=model.widths, names=model.names, **options)


def loss_of_weights(model: FactorizedModel, Ws) -> float:
    """The model's loss at the weight matrices ``Ws`` (NumPy), in float64."""
    return float(evaluate(model, tuple(jnp.asarray(np.asarray(w, dtype=np.float64)) for w in Ws))[1])

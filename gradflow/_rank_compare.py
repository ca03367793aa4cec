"""Comparing factorised runs at finite α with the greedy low-rank limit (docs/math.md, *Full weights: comparing the
limits*).

For every run (one α), every weight matrix ``W_j`` and every stage window ``[T_k + δ, T_{k+1} − δ]`` (the last
window ends at the run's last time), :func:`compare_rank_limits` reports the sup over the window of

* ``W_distance``: ``‖W_j(τ) − W̄_j^k‖_2``, the distance to the greedy saddle (spectral norm),
* ``b_distance``: ``max_i |b_{j,i}(τ) − b̄_{j,i}(τ)|``, the log scales of the singular values
  ``b_{j,i} = log σ_i(W_j) / (2 log α)`` (descending ``σ``) against the limit's: 0 for the ``r_j^k`` learned
  directions, then the sleeping exponents ``e_{j,1} ≤ e_{j,2} ≤ …`` of the path, linear in τ,
* ``loss_distance``: ``|L(τ) − L(W̄^k)|``,

and the rank jumps detected on the run. **Detection rule**: stage ``k ≥ 1`` adds rank ``r = r_j^k`` to
``W_j``, ``j = j_{k−1}``; it is detected at the first ``τ`` where ``σ_r(W_j(τ)) ≥ threshold · σ_r(W̄_j^k)``
(linear interpolation of ``log σ_r`` between recorded times; ``threshold = 0.5`` is half the learned value).
In log scale this is where ``b_{j,r}`` crosses ``log(threshold σ_r(W̄_j^k)) / (2 log α)``, a level that tends
to 0 as α → 0: the time the r-th singular value becomes O(1).

Rates: as for diagonal weights, a least-squares fit of ``log d = c − r log log(1/α)`` per quantity and window.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import equinox as eqx
import numpy as np

from ._checks import check_scales
from ._compare import _check_options, _detect, default_delta, default_times, fit_rate
from ._config import float64
from ._experiments import run_gd
from ._factorized import FactorizedModel, check_factorized_model, check_factors
from ._flow import simulate_flow
from ._greedy import greedy_limit

_QUANTITIES = ("W", "b", "loss", "time")
_RUN_FIELDS = ("ts", "W", "log_singular_values", "loss", "log_alpha")


class RankComparison(eqx.Module):
    """Distances between factorised runs at several α and the greedy low-rank limit, per stage window and weight
    matrix (docs/math.md, *Full weights: comparing the limits*).

    Shapes: ``A`` runs (one per α), ``K`` greedy stages (``K + 1`` saddles ``k = 0..K``), ``J`` weight matrices.

    Attributes:
        method: ``"flow"`` (exact gradient flow) or ``"gd"`` (gradient descent runs).
        names: the weight matrices' names.
        log_alpha: ``(A,)`` the runs' ``log α``.
        stage_times: ``(K + 1,)`` the greedy ``T_k`` (``T_0 = 0``).
        factor: ``(K,)`` the weight matrix ``j_k`` that gains a rank at ``T_{k+1}``.
        ranks: ``(K + 1, J)`` the ranks of the greedy saddles ``W̄^k``.
        window_start, window_end: ``(K + 1,)`` the window of saddle ``k``.
        W_distance, b_distance: ``(A, K + 1, J)`` sup distances over each window, per weight matrix (NaN where a
            window is empty).
        loss_distance: ``(A, K + 1)``.
        detected_times: ``(A, K)`` the rank jumps ``1..K`` detected on each run (NaN if the run never gets there).
        time_error: ``(A, K)`` ``|detected − T_k|``.
        W_rate, b_rate: ``(K + 1, J)`` fitted exponent ``r`` per window and weight matrix.
        loss_rate: ``(K + 1,)``; time_rate: ``(K,)``.
        threshold, delta: the detection fraction and the window margin used.
        gd: the same comparison for gradient-descent runs, or None.
    """

    method: str = eqx.field(static=True)
    names: tuple[str, ...] = eqx.field(static=True)
    log_alpha: np.ndarray
    stage_times: np.ndarray
    factor: np.ndarray
    ranks: np.ndarray
    window_start: np.ndarray
    window_end: np.ndarray
    W_distance: np.ndarray
    b_distance: np.ndarray
    loss_distance: np.ndarray
    detected_times: np.ndarray
    time_error: np.ndarray
    W_rate: np.ndarray
    b_rate: np.ndarray
    loss_rate: np.ndarray
    time_rate: np.ndarray
    threshold: float
    delta: float
    gd: RankComparison | None = None

    @property
    def alpha(self) -> np.ndarray:
        """``α`` per run (0 where ``α`` underflows float64)."""
        return np.exp(self.log_alpha)

    def worst(self, quantity: str) -> np.ndarray:
        """``(A,)`` the largest distance over all windows and weight matrices (or rank jumps) for ``quantity``."""
        d = self._distance(quantity).reshape(self.log_alpha.size, -1)
        with np.errstate(invalid="ignore"):
            return np.array([np.nanmax(row) if np.any(np.isfinite(row)) else np.nan for row in d])

    def per_window(self, quantity: str) -> np.ndarray:
        """``(A, K + 1)`` the distance per window, the largest over the weight matrices (``(A, K)`` for ``time``)."""
        d = self._distance(quantity)
        if d.ndim == 3:
            with np.errstate(invalid="ignore"):
                filled = np.where(np.isnan(d), -np.inf, d).max(axis=-1)
            d = np.where(np.isneginf(filled), np.nan, filled)
        return d

    def summary(self) -> dict[str, float]:
        """Fitted exponent ``r`` (``d ≈ C (log 1/α)^(−r)``) of the worst-window distance per quantity."""
        return {q: fit_rate(self.log_alpha, self.worst(q))[0] for q in _QUANTITIES}

    def _distance(self, quantity: str) -> np.ndarray:
        if quantity not in _QUANTITIES:
            raise ValueError(f"quantity must be one of {_QUANTITIES}; got {quantity!r}.")
        return self.time_error if quantity == "time" else getattr(self, f"{quantity}_distance")

    def to_records(self) -> list[dict[str, Any]]:
        """One record per (method, α, saddle k), then the gradient-descent records if any."""
        records = []
        K = self.stage_times.size - 1
        for a, log_a in enumerate(self.log_alpha):
            for k in range(K + 1):
                rec: dict[str, Any] = dict(
                    method=self.method,
                    log_alpha=float(log_a),
                    alpha=float(np.exp(log_a)),
                    stage=k,
                    factor=self.names[int(self.factor[k - 1])] if k else "",
                    T_greedy=float(self.stage_times[k]),
                    T_detected=float(self.detected_times[a, k - 1]) if k else 0.0,
                    time_error=float(self.time_error[a, k - 1]) if k else 0.0,
                    window_start=float(self.window_start[k]),
                    window_end=float(self.window_end[k]),
                    loss_distance=float(self.loss_distance[a, k]),
                )
                for j, name in enumerate(self.names):
                    rec[f"rank[{name}]"] = int(self.ranks[k, j])
                    rec[f"W_distance[{name}]"] = float(self.W_distance[a, k, j])
                    rec[f"b_distance[{name}]"] = float(self.b_distance[a, k, j])
                records.append(rec)
        return records + (self.gd.to_records() if self.gd is not None else [])

    def rate_records(self) -> list[dict[str, Any]]:
        """The fitted exponents: one record per (method, quantity, stage, weight matrix), stage ``"worst"`` for the
        summary (weight matrix ``""`` where the quantity has none)."""
        out = []
        for comp in (self, self.gd):
            if comp is None:
                continue
            worst = comp.summary()
            for q in _QUANTITIES:
                rates = getattr(comp, f"{q}_rate")
                first = 1 if q == "time" else 0
                for k in range(rates.shape[0]):
                    per = [(comp.names[j], rates[k, j]) for j in range(len(comp.names))] if rates.ndim == 2 else None
                    for name, r in per or [("", rates[k])]:
                        out.append(
                            dict(method=comp.method, quantity=q, stage=str(k + first), factor=name, exponent=float(r))
                        )
                out.append(dict(method=comp.method, quantity=q, stage="worst", factor="", exponent=worst[q]))
        return out

    def to_table(self) -> str:
        """The records as CSV text."""
        records = self.to_records()
        cols = list(records[0]) if records else []
        lines = [",".join(cols)]
        for rec in records:
            lines.append(",".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in rec.values()))
        return "\n".join(lines) + "\n"


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


def log_scales(log_sv, log_alpha) -> np.ndarray:
    """The log scales ``b = log σ / (2 log α)`` of singular values given by their logs (1 at ``σ = α²``, 0 at 1)."""
    return np.asarray(log_sv, dtype=np.float64) / (2.0 * float(log_alpha))


def predicted_log_scales(path, tau, j: int, width: int) -> np.ndarray:
    """The limit's log scales of the ``width`` singular values of ``W_j`` at times ``tau`` (descending ``σ``):
    0 for the ``r_j^k`` learned directions, then the path's sleeping exponents ``e_{j,i}(τ)``, linear in τ."""
    tau = np.asarray(tau, dtype=np.float64)
    k = path.stage_at(tau)
    rank = np.asarray(path.ranks)[k, j]
    sleeping = np.asarray(path.b_at(tau))[..., j, :]
    out = np.zeros(tau.shape + (width,))
    for i in range(width):
        s = i - rank  # index among the sleeping directions, where i is not learned
        out[..., i] = np.where(s >= 0, np.take_along_axis(sleeping, np.clip(s, 0, None)[..., None], -1)[..., 0], 0.0)
    return out


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
    if log_alphas.size != len(runs):
        raise ValueError(f"got {len(runs)} runs for {log_alphas.size} values of alpha; give one run per alpha.")
    for run, la in zip(runs, log_alphas):
        if not np.isclose(run.log_alpha, la, rtol=1e-12, atol=0.0):
            raise ValueError(
                f"a run records log α = {run.log_alpha:.6g} but is given as log α = {la:.6g}; pass the runs in the "
                "order of alphas=."
            )
    return [run._replace(log_alpha=float(la)) for run, la in zip(runs, log_alphas)]


def _jump_levels(path) -> list[tuple[int, int, float]]:
    """For each rank jump ``k = 1..K``: the weight matrix ``j``, the new rank ``r`` and ``log σ_r(W̄_j^k)``."""
    ranks = np.asarray(path.ranks)
    out = []
    for k, j in enumerate(np.asarray(path.factor), start=1):
        j, r = int(j), int(ranks[k, j])
        if r <= ranks[k - 1, j]:  # phase (B) lost the new rank again: no jump to detect
            out.append((j, r, math.nan))
            continue
        sv = np.linalg.svd(np.asarray(path.W[j][k], dtype=np.float64), compute_uv=False)
        out.append((j, r, math.log(sv[r - 1])))
    return out


def _run_distances(path, run: _Run, starts, ends, levels, threshold, widths):
    K1, J = starts.size, len(run.W)
    dW, db = np.full((K1, J), np.nan), np.full((K1, J), np.nan)
    dloss = np.full(K1, np.nan)
    path_loss = np.asarray(path.loss, dtype=np.float64)
    for k in range(K1):
        inside = (run.ts >= starts[k]) & (run.ts <= ends[k])
        if starts[k] >= ends[k] or not np.any(inside):
            continue
        tau = run.ts[inside]
        dloss[k] = np.max(np.abs(run.loss[inside] - path_loss[k]))
        for j in range(J):
            diff = run.W[j][inside] - np.asarray(path.W[j][k], dtype=np.float64)
            dW[k, j] = np.max(np.linalg.norm(diff, ord=2, axis=(-2, -1)))
            b = log_scales(run.log_sv[j][inside], run.log_alpha)
            db[k, j] = np.max(np.abs(b - predicted_log_scales(path, tau, j, widths[j])))
    detected = np.array(
        [
            _detect(run.ts, -run.log_sv[j][:, r - 1], [-(level + math.log(threshold))])[0]
            if np.isfinite(level)
            else np.nan
            for j, r, level in levels
        ]
    )
    return dW, db, dloss, detected


def _compare_runs(path, runs, *, widths, names, method="flow", delta=None, threshold=0.5) -> RankComparison:
    """Compare :class:`_Run` s with the greedy low-rank ``path``."""
    _check_options(delta, threshold)
    times = np.asarray(path.times, dtype=np.float64)
    K = times.size - 1
    delta = default_delta(times) if delta is None else float(delta)
    horizon = min(float(r.ts[-1]) for r in runs)
    starts = times + delta
    ends = np.append(times[1:] - delta, horizon)
    levels = _jump_levels(path)
    rows = [_run_distances(path, run, starts, ends, levels, threshold, widths) for run in runs]
    dW, db, dloss, detected = (np.stack([row[i] for row in rows]) for i in range(4))
    detected = detected.reshape(len(runs), K)
    log_alpha = np.array([r.log_alpha for r in runs], dtype=np.float64)
    err = np.abs(detected - times[1:])

    def rate(d):
        return np.apply_along_axis(lambda col: fit_rate(log_alpha, col)[0], 0, d) if d.size else d[0]

    return RankComparison(
        method=method,
        names=tuple(names),
        log_alpha=log_alpha,
        stage_times=times,
        factor=np.asarray(path.factor, dtype=np.int64),
        ranks=np.asarray(path.ranks, dtype=np.int64),
        window_start=starts,
        window_end=ends,
        W_distance=dW,
        b_distance=db,
        loss_distance=dloss,
        detected_times=detected,
        time_error=err,
        W_rate=rate(dW),
        b_rate=rate(db),
        loss_rate=rate(dloss),
        time_rate=rate(err),
        threshold=float(threshold),
        delta=delta,
    )


@float64
def compare_rank_limits(
    model: FactorizedModel,
    *,
    alphas=None,
    log_alphas=None,
    u0,
    v0,
    path=None,
    delta: float | None = None,
    ts=None,
    gd=None,
    threshold: float = 0.5,
    flows=None,
    flow_options: Mapping[str, Any] | None = None,
) -> RankComparison:
    """[`compare_limits`][gradflow.compare_limits] for a [`FactorizedModel`][gradflow.FactorizedModel] (same
    arguments, called by it): the flow at every α (one batched call) against the greedy low-rank limit.

    ``u0, v0`` are tuples of initial factors (``U_j(0) = α u0[j]``, ``V_j(0) = α v0[j]``); ``path`` a
    ``FactorizedGreedyPath`` (``greedy_limit(model)`` if None); ``flows`` precomputed runs (one batched
    ``FactorizedFlowResult`` or one per α; anything with ``ts``, ``W``, ``log_singular_values``, ``loss``,
    ``log_alpha``); ``gd`` a mapping of ``simulate_gd`` options (``lr`` required) or the runs.
    """
    check_factorized_model(model)
    log_alphas = np.atleast_1d(check_scales(alphas, log_alphas, names=("alphas", "log_alphas"))[0])
    _check_options(delta, threshold)
    u0, v0 = check_factors(u0, v0, model)
    if path is None:
        path = greedy_limit(model, u0=u0, v0=v0)
    times = np.asarray(path.times, dtype=np.float64)
    delta = default_delta(times) if delta is None else float(delta)
    ts = default_times(times, delta=delta) if ts is None else np.asarray(ts, dtype=np.float64)
    if flows is None:
        flows = simulate_flow(model, u0=u0, v0=v0, ts=ts, log_alpha=log_alphas, **dict(flow_options or {}))
    options = dict(widths=model.widths, names=model.names, delta=delta, threshold=threshold)
    comparison = _compare_runs(path, _as_runs(flows, log_alphas, model), method="flow", **options)
    if gd is None:
        return comparison
    gd_runs = run_gd(model, log_alphas=log_alphas, u0=u0, v0=v0, horizon=float(ts[-1]), options=gd)
    gd_cmp = _compare_runs(path, _as_runs(gd_runs, log_alphas, model), method="gd", **options)
    return dataclasses.replace(comparison, gd=gd_cmp)

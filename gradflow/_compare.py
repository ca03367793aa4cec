"""Comparing runs at finite α with their greedy limit (docs/math.md, *What the comparison measures*).

For every run (one α) and every stage window ``[T_k + δ, T_{k+1} − δ]`` (the last window ends at
the run's last time), :func:`compare_limits` reports the sup over the window of

* ``beta_distance``: ``max_i |β_i(τ) − β^k_i|``,
* ``b_distance``: ``max_i |b_i(τ) − (b^k_i − (τ − T_k) g_i(θ^k))|``,
* ``loss_distance``: ``|L(τ) − L(θ^k)|``,

and the stage times detected on the run. **Detection rule**: stage ``k ≥ 1`` starts at the first
``τ`` where the run's loss has covered the fraction ``threshold`` of the drop between consecutive
greedy plateaus, ``L(τ) ≤ L(θ^{k−1}) − threshold·(L(θ^{k−1}) − L(θ^k))`` (linear interpolation
between recorded times; ``threshold = 0.5`` is the midpoint). Gradient flow decreases the loss, so
the first crossing is the only one.

Rates: for each quantity and stage, a least-squares fit of ``log d = c − r·log log(1/α)`` over the
α's, i.e. ``d ≈ C·(log 1/α)^(−r)``; the theory suggests ``r ≈ 1`` for ``b`` and the stage times.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import equinox as eqx
import numpy as np

from ._checks import check_init, check_scales, init_checked
from ._experiments import run_gd
from ._factorized import FactorizedModel
from ._flow import simulate_flow
from ._greedy import greedy_limit
from ._model import check_model
from ._trajectory import Trajectory

if TYPE_CHECKING:
    from ._rank_compare import RankComparison

_QUANTITIES = ("beta", "b", "loss", "time")


class Comparison(eqx.Module):
    """Distances between runs at several α and the greedy limit, per stage window (docs/math.md, *What the
    comparison measures*).

    Shapes: ``A`` runs (one per α), ``K`` greedy stages (``K + 1`` plateaus ``k = 0..K``).

    Attributes:
        method: ``"flow"`` (exact gradient flow) or ``"gd"`` (gradient descent runs).
        log_alpha: ``(A,)`` the runs' ``log α``.
        stage_times: ``(K + 1,)`` the greedy ``T_k`` (``T_0 = 0``).
        window_start, window_end: ``(K + 1,)`` the window of plateau ``k``.
        beta_distance, b_distance, loss_distance: ``(A, K + 1)`` sup distances over each window
            (NaN where a window is empty or holds no recorded time).
        detected_times: ``(A, K)`` the start of stages ``1..K`` detected on each run (NaN if the
            run never gets there).
        time_error: ``(A, K)`` ``|detected − T_k|``.
        beta_rate, b_rate, loss_rate: ``(K + 1,)`` fitted exponent ``r`` per window.
        time_rate: ``(K,)`` fitted exponent ``r`` per stage time.
        threshold, delta: the detection fraction and the window margin used.
        gd: the same comparison for gradient-descent runs, or None.
    """

    method: str = eqx.field(static=True)
    log_alpha: np.ndarray
    stage_times: np.ndarray
    window_start: np.ndarray
    window_end: np.ndarray
    beta_distance: np.ndarray
    b_distance: np.ndarray
    loss_distance: np.ndarray
    detected_times: np.ndarray
    time_error: np.ndarray
    beta_rate: np.ndarray
    b_rate: np.ndarray
    loss_rate: np.ndarray
    time_rate: np.ndarray
    threshold: float
    delta: float
    gd: Comparison | None = None

    @property
    def alpha(self) -> np.ndarray:
        """``α`` per run (0 where ``α`` underflows float64)."""
        return np.exp(self.log_alpha)

    def worst(self, quantity: str) -> np.ndarray:
        """``(A,)`` the largest distance over all windows (or stage times) for ``quantity``."""
        d = self._distance(quantity)
        with np.errstate(invalid="ignore"):
            return np.array([np.nanmax(row) if np.any(np.isfinite(row)) else np.nan for row in d])

    def summary(self) -> dict[str, float]:
        """Fitted exponent ``r`` (``d ≈ C (log 1/α)^(−r)``) of the worst-window distance per quantity."""
        return {q: fit_rate(self.log_alpha, self.worst(q))[0] for q in _QUANTITIES}

    def _distance(self, quantity: str) -> np.ndarray:
        if quantity not in _QUANTITIES:
            raise ValueError(f"quantity must be one of {_QUANTITIES}; got {quantity!r}.")
        return self.time_error if quantity == "time" else getattr(self, f"{quantity}_distance")

    def to_records(self) -> list[dict[str, Any]]:
        """One record per (method, α, plateau k), then the gradient-descent records if any."""
        records = []
        K = self.stage_times.size - 1
        for a, log_a in enumerate(self.log_alpha):
            for k in range(K + 1):
                records.append(
                    dict(
                        method=self.method,
                        log_alpha=float(log_a),
                        alpha=float(np.exp(log_a)),
                        stage=k,
                        T_greedy=float(self.stage_times[k]),
                        T_detected=float(self.detected_times[a, k - 1]) if k else 0.0,
                        time_error=float(self.time_error[a, k - 1]) if k else 0.0,
                        window_start=float(self.window_start[k]),
                        window_end=float(self.window_end[k]),
                        beta_distance=float(self.beta_distance[a, k]),
                        b_distance=float(self.b_distance[a, k]),
                        loss_distance=float(self.loss_distance[a, k]),
                    )
                )
        return records + (self.gd.to_records() if self.gd is not None else [])

    def rate_records(self) -> list[dict[str, Any]]:
        """The fitted exponents: one record per (method, quantity, stage), stage ``"worst"`` for the summary."""
        out = []
        for comp in (self, self.gd):
            if comp is None:
                continue
            worst = comp.summary()
            for q in _QUANTITIES:
                rates = getattr(comp, f"{q}_rate")
                first = 1 if q == "time" else 0
                for j, r in enumerate(rates):
                    out.append(dict(method=comp.method, quantity=q, stage=str(j + first), exponent=float(r)))
                out.append(dict(method=comp.method, quantity=q, stage="worst", exponent=worst[q]))
        return out

    def to_table(self) -> str:
        """The records as CSV text."""
        records = self.to_records()
        cols = list(records[0]) if records else []
        lines = [",".join(cols)]
        for rec in records:
            lines.append(",".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in rec.values()))
        return "\n".join(lines) + "\n"


def fit_rate(log_alpha, distance) -> tuple[float, float]:
    """Fit ``log d = c − r log log(1/α)`` by least squares; returns ``(r, c)`` (NaN with < 2 usable points)."""
    log_alpha = np.asarray(log_alpha, dtype=np.float64)
    distance = np.asarray(distance, dtype=np.float64)
    ok = np.isfinite(distance) & (distance > 0) & (log_alpha < 0)
    if np.count_nonzero(ok) < 2 or np.ptp(log_alpha[ok]) == 0:
        return math.nan, math.nan
    x = np.log(-log_alpha[ok])
    slope, intercept = np.polyfit(x, np.log(distance[ok]), 1)
    return float(-slope), float(intercept)


def default_delta(stage_times) -> float:
    """Default window margin: a quarter of the shortest stage (of ``T_1`` when there is one stage; 0.05 if none)."""
    gaps = np.diff(np.asarray(stage_times, dtype=np.float64))
    gaps = gaps[np.isfinite(gaps) & (gaps > 0)]
    return 0.25 * float(gaps.min()) if gaps.size else 0.05


def default_horizon(stage_times) -> float:
    """Default last time: ``1.25 T_K`` (1 when the path has no stage)."""
    last = float(np.asarray(stage_times)[-1])
    return 1.25 * last if last > 0 else 1.0


def default_times(
    stage_times, *, num: int = 1000, horizon: float | None = None, delta: float | None = None
) -> np.ndarray:
    """An even grid on ``[0, horizon]`` with every window edge and stage time added."""
    stage_times = np.asarray(stage_times, dtype=np.float64)
    horizon = default_horizon(stage_times) if horizon is None else float(horizon)
    delta = default_delta(stage_times) if delta is None else float(delta)
    extra = np.concatenate([stage_times, stage_times + delta, stage_times - delta])
    ts = np.union1d(np.linspace(0.0, horizon, num), extra[(extra >= 0) & (extra <= horizon)])
    return ts


def _detect(ts, loss, levels) -> np.ndarray:
    """First time (linearly interpolated) at which ``loss`` drops to each level; NaN if never."""
    out = np.full(len(levels), np.nan)
    for j, level in enumerate(levels):
        below = np.flatnonzero(loss <= level)
        if below.size == 0:
            continue
        i = below[0]
        if i == 0:
            out[j] = ts[0]
            continue
        l0, l1 = loss[i - 1], loss[i]
        frac = (l0 - level) / (l0 - l1) if l0 != l1 else 1.0
        out[j] = ts[i - 1] + frac * (ts[i] - ts[i - 1])
    return out


def _run_distances(path, ts, beta, b, loss, starts, ends, levels):
    K1 = starts.size
    dbeta, db, dloss = (np.full(K1, np.nan) for _ in range(3))
    path_beta, path_loss = np.asarray(path.beta), np.asarray(path.loss)
    for k in range(K1):
        inside = (ts >= starts[k]) & (ts <= ends[k])
        if starts[k] >= ends[k] or not np.any(inside):
            continue
        dbeta[k] = np.max(np.abs(beta[inside] - path_beta[k]))
        db[k] = np.max(np.abs(b[inside] - path.b_at(ts[inside])))
        dloss[k] = np.max(np.abs(loss[inside] - path_loss[k]))
    return dbeta, db, dloss, _detect(ts, loss, levels)


def _as_runs(results, log_alphas) -> list[tuple[float, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Split trajectories (one batched result or a sequence) into ``(log α, ts, β, b, loss)`` per run.

    ``log_alphas`` gives each run's scale, in order; a run that records another one is an error.
    """
    if not isinstance(results, (list, tuple)):
        results = [results]
    runs = []
    for res in results:
        if not isinstance(res, Trajectory):
            raise TypeError(
                "every run must be a gradflow.Trajectory (with ts, beta, b, loss and log_alpha), e.g. a FlowResult "
                f"or a GDResult; got {type(res).__name__}."
            )
        beta, b, loss, ts = (np.asarray(x, dtype=np.float64) for x in (res.beta, res.b, res.loss, res.ts))
        recorded = np.atleast_1d(np.asarray(res.log_alpha, dtype=np.float64))
        if beta.ndim == 2:
            beta, b, loss = beta[None], b[None], loss[None]
        for a in range(beta.shape[0]):
            runs.append((float(recorded[a]), ts[a] if ts.ndim == 2 else ts, beta[a], b[a], loss[a]))
    if log_alphas.size != len(runs):
        raise ValueError(f"got {len(runs)} runs for {log_alphas.size} values of alpha; give one run per alpha.")
    for run, la in zip(runs, log_alphas):
        if not np.isclose(run[0], la, rtol=1e-12, atol=0.0):
            raise ValueError(
                f"a run records log α = {run[0]:.6g} but is given as log α = {la:.6g}; pass the runs in the order "
                "of alphas=."
            )
    return [(float(la), *run[1:]) for run, la in zip(runs, log_alphas)]


def _check_options(delta, threshold) -> None:
    if not 0.0 < threshold < 1.0:
        raise ValueError(
            f"threshold must lie strictly between 0 and 1 (a fraction of each loss drop); got {threshold!r}."
        )
    if delta is not None and not delta >= 0:
        raise ValueError(f"delta must be a non-negative rescaled time; got {delta!r}.")


def _compare_runs(
    path, runs, *, method: str = "flow", delta: float | None = None, threshold: float = 0.5
) -> Comparison:
    """Compare runs given as ``(log α, ts, β, b, loss)`` tuples with the greedy ``path``."""
    _check_options(delta, threshold)
    times = np.asarray(path.times, dtype=np.float64)
    K = times.size - 1
    delta = default_delta(times) if delta is None else float(delta)
    horizon = min(float(r[1][-1]) for r in runs)
    starts = times + delta
    ends = np.append(times[1:] - delta, horizon)
    loss = np.asarray(path.loss, dtype=np.float64)
    levels = loss[:-1] - threshold * (loss[:-1] - loss[1:])
    rows = [_run_distances(path, ts, beta, b, run_loss, starts, ends, levels) for _, ts, beta, b, run_loss in runs]
    log_alpha = np.array([r[0] for r in runs], dtype=np.float64)
    dbeta, db, dloss, detected = (np.array([row[j] for row in rows]).reshape(len(runs), -1) for j in range(4))
    detected = detected.reshape(len(runs), K)
    err = np.abs(detected - times[1:])
    rate = lambda d: np.array([fit_rate(log_alpha, d[:, k])[0] for k in range(d.shape[1])])  # noqa: E731
    return Comparison(
        method=method,
        log_alpha=log_alpha,
        stage_times=times,
        window_start=starts,
        window_end=ends,
        beta_distance=dbeta,
        b_distance=db,
        loss_distance=dloss,
        detected_times=detected,
        time_error=err,
        beta_rate=rate(dbeta),
        b_rate=rate(db),
        loss_rate=rate(dloss),
        time_rate=rate(err),
        threshold=float(threshold),
        delta=delta,
    )


def compare_limits(
    model,
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
) -> Comparison | RankComparison:
    """Run the flow at every α (one batched call) and compare it with the greedy limit (docs/math.md, *What the
    comparison measures*).

    Args:
        model: a ``DiagonalModel``, or a [`FactorizedModel`][gradflow.FactorizedModel]: then the comparison
            is a [`RankComparison`][gradflow.RankComparison] with the greedy low-rank limit (docs/math.md, *Full
            weights: comparing the limits*), the same arguments with tuples of factors for ``u0, v0``.
        alphas / log_alphas: the initialisation scales (give one of them).
        u0, v0: the initialisation direction, ``θ(0) = α (u0, v0)``, checked once for every run as in
            [`simulate_flow`][gradflow.simulate_flow].
        path: the greedy limit (``greedy_limit(model, u0=u0, v0=v0)`` if None).
        delta: window margin in rescaled time (default :func:`default_delta`).
        ts: rescaled times to record (default :func:`default_times`: 1000 points up to ``1.25 T_K``).
        gd: gradient-descent runs to compare as well: a mapping of ``simulate_gd`` options (``lr``
            required; ``steps`` defaults to reaching the last time of ``ts``; ``record_every``
            to about 1000 records), or a sequence of [`Trajectory`][gradflow.Trajectory] (e.g.
            ``GDResult``), one per α in order.
        threshold: the fraction of each loss drop that marks a detected stage time.
        flows: precomputed runs, [`Trajectory`][gradflow.Trajectory] objects (one batched result or one
            per α, e.g. ``FlowResult``), to use instead of running the flow.
        flow_options: more ``simulate_flow`` options (``atol``, ``rtol``, ``max_steps``, ...).
    """
    if isinstance(model, FactorizedModel):
        from ._rank_compare import compare_rank_limits

        args = dict(alphas=alphas, log_alphas=log_alphas, path=path, delta=delta, ts=ts, gd=gd, threshold=threshold)
        return compare_rank_limits(model, u0=u0, v0=v0, flows=flows, flow_options=flow_options, **args)
    check_model(model)
    log_alphas = np.atleast_1d(check_scales(alphas, log_alphas, names=("alphas", "log_alphas"))[0])
    _check_options(delta, threshold)
    u0, v0 = check_init(u0, v0, model.p, model.names)
    with init_checked():
        if path is None:
            path = greedy_limit(model, u0=u0, v0=v0)
        times = np.asarray(path.times, dtype=np.float64)
        delta = default_delta(times) if delta is None else float(delta)
        if ts is None:
            ts = default_times(times, delta=delta)
        ts = np.asarray(ts, dtype=np.float64)
        if flows is None:
            flows = simulate_flow(model, u0=u0, v0=v0, ts=ts, log_alpha=log_alphas, **dict(flow_options or {}))
        comparison = _compare_runs(path, _as_runs(flows, log_alphas), method="flow", delta=delta, threshold=threshold)
        if gd is None:
            return comparison
        gd_runs = run_gd(model, log_alphas=log_alphas, u0=u0, v0=v0, horizon=float(ts[-1]), options=gd)
    gd_cmp = _compare_runs(path, _as_runs(gd_runs, log_alphas), method="gd", delta=delta, threshold=threshold)
    return dataclasses.replace(comparison, gd=gd_cmp)

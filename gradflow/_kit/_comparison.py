"""What the comparisons of runs at finite α with a greedy limit share (docs/math.md, *What the comparison measures*
and *Full weights: comparing the limits*): the stage windows, the first crossing of a level, the rate fits and the
result's records.

Windows are ``[T_k + δ, T_{k+1} − δ]`` (the last one ends at the runs' last time). A rate is the least-squares fit
of ``log d = c − r·log log(1/α)`` over the α's, i.e. ``d ≈ C·(log 1/α)^(−r)``, by default over the asymptotic ones
(:func:`asymptotic_range`).

A run's stage time is detected by interpolating its loss between recorded times, so its error is resolved only
where the recorded times are finer than it: the default times (:func:`default_times`) are refined around every
``T_k`` down to ``0.01 dτ/dt`` of the smallest α, and an error not larger than their spacing is reported."""

import dataclasses
import math
from typing import Any, ClassVar

import equinox as eqx
import numpy as np
from equinox import AbstractClassVar, AbstractVar

from .._results import RESULTS
from ._assumptions import warn
from ._batch import batch_index
from ._checks import check_scales
from ._deprecation import RenamedKeys, warn_renamed


class AbstractComparison(eqx.Module):
    """Distances between runs at several α and a greedy limit, per stage window: what
    [`Comparison`][gradflow.Comparison] and [`RankComparison`][gradflow.RankComparison] share.

    Shapes: ``A`` runs (one per α), ``K`` greedy stages, ``K + 1`` windows. The quantities are ``"weights"`` (β for
    diagonal weights, the matrices ``W_j`` for full ones), ``"b"`` (the log scales), ``"loss"`` and ``"time"``
    (the stage times); each but ``time`` has a ``q_distance`` of shape ``(A, K + 1, …)`` and a ``q_rate``; ``time``
    has ``time_error`` ``(A, K)`` and ``time_rate``. The rates are fitted over the scales ``fit_range``, ``[lowest,
    highest]`` log α (:func:`asymptotic_range`; ``summary`` and ``rate_records`` take another). ``result`` says what
    could not be computed, as a ``RESULTS`` value:
    ``"successful"``, ``"run_failed"`` (a run is not finite from some time on: its distances from there are NaN or
    infinite, and the rates are fitted over the other runs) or ``"single_scale"`` (one α: no rates); ``message``
    says which runs and from when (``""`` when successful).
    """

    _quantities: ClassVar[tuple[str, ...]] = ("weights", "b", "loss", "time")
    _weights_name: AbstractClassVar[str]
    method: str = eqx.field(static=True)
    log_alpha: np.ndarray
    stage_times: np.ndarray
    window_start: np.ndarray
    window_end: np.ndarray
    weights_distance: np.ndarray
    b_distance: np.ndarray
    loss_distance: np.ndarray
    detected_times: np.ndarray
    time_error: np.ndarray
    weights_rate: np.ndarray
    b_rate: np.ndarray
    loss_rate: np.ndarray
    time_rate: np.ndarray
    threshold: float
    delta: float
    fit_range: np.ndarray
    result: str = eqx.field(static=True)
    message: str = eqx.field(static=True)
    gd: AbstractVar["AbstractComparison | None"]
    runs: AbstractVar[Any]

    @property
    def alpha(self) -> np.ndarray:
        """``α`` per run (0 where ``α`` underflows float64)."""
        return np.exp(self.log_alpha)

    def worst(self, quantity: str) -> np.ndarray:
        """``(A,)`` the largest distance over all windows (and weight matrices; or stage times) for ``quantity``."""
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

    def summary(self, fit_range=None) -> dict[str, float]:
        """Fitted exponent ``r`` (``d ≈ C (log 1/α)^(−r)``) of the worst-window distance per quantity, over the scales
        with log α in ``fit_range`` (``(lowest, highest)``; default the comparison's ``fit_range``); the key ``"beta"``
        or ``"W"`` still reads ``"weights"``, with a ``DeprecationWarning``."""
        used = self.fitted(fit_range)
        rates = {q: fit_rate(self.log_alpha[used], self.worst(q)[used])[0] for q in self._quantities}
        return RenamedKeys(rates, {self._weights_name: "weights"}, f"{type(self).__name__}.summary()")

    def fitted(self, fit_range=None) -> np.ndarray:
        """``(A,)`` which runs the rates are fitted over: log α in ``fit_range`` (default the comparison's)."""
        low, high = check_fit_range(self.fit_range if fit_range is None else fit_range)
        return (self.log_alpha >= low) & (self.log_alpha <= high)

    def fit_description(self, fit_range=None) -> str:
        """Which scales the rates are fitted over, in words."""
        used = self.fitted(fit_range)
        if not used.any():
            return "no scale lies in the fit range: the rates are NaN"
        close = np.abs(self.detected_times - self.stage_times[1:]) <= self.delta
        if fit_range is not None:
            which = "the given fit range"
        elif np.count_nonzero(np.all(close, axis=1)) >= 2:
            which = "the asymptotic ones, whose detected stage times all lie within δ of T_k"
        else:
            which = "all of them, as fewer than two have every detected stage time within δ of T_k (asymptotic)"
        low, high = self.log_alpha[used].min(), self.log_alpha[used].max()
        return f"{int(used.sum())} of {used.size} scales, log α from {low:.6g} to {high:.6g}: {which}"

    def table_name(self, quantity: str) -> str:
        """The name of ``quantity`` in the tables and reports (``to_records``, ``rate_records``, the reports' text),
        which keep their names: ``"beta"`` or ``"W"`` for ``"weights"``."""
        return self._weights_name if quantity == "weights" else quantity

    def __getitem__(self, index) -> "AbstractComparison":
        """The comparison of some of the runs: ``comparison[1:3]``, ``comparison[[0, 2]]`` (``comparison[i]`` keeps
        the axis of the runs, of length 1). The rates are fitted again over the runs kept; ``gd`` keeps its runs at
        the same α."""
        index = np.atleast_1d(batch_index(index, self.log_alpha.size, type(self).__name__))
        per_run = ["log_alpha", "detected_times", "time_error"] + [f"{q}_distance" for q in self._quantities[:-1]]
        picked = {name: getattr(self, name)[index] for name in per_run}
        la = picked["log_alpha"]
        rates = {f"{q}_rate": fit_rates(la, picked[f"{q}_distance"]) for q in self._quantities[:-1]}
        rates["time_rate"] = fit_rates(la, picked["time_error"])
        runs = None if self.runs is None else each_run(self.runs)
        runs = None if runs is None else [runs[i] for i in index]
        result, message = self.result, self.message
        if runs is not None:
            result, message = run_status(runs, self.method)
        elif np.unique(la).size < 2 and result == RESULTS.successful.value:
            result, message = RESULTS.single_scale.value, f"one scale, log α = {float(la[0]):.6g}: no rates"
        gd = self.gd
        if gd is not None:
            kept = np.flatnonzero(np.isin(gd.log_alpha, la))
            gd = gd[kept] if kept.size else None
        runs = None if runs is None else tuple(runs)
        return dataclasses.replace(self, **picked, **rates, result=result, message=message, gd=gd, runs=runs)

    def _distance(self, quantity: str) -> np.ndarray:
        if quantity == self._weights_name:
            warn_renamed(f'{type(self).__name__} quantity "{quantity}"', '"weights"')
            quantity = "weights"
        if quantity not in self._quantities:
            raise ValueError(f"quantity must be one of {self._quantities}; got {quantity!r}.")
        return self.time_error if quantity == "time" else getattr(self, f"{quantity}_distance")

    def to_records(self) -> list[dict[str, Any]]:
        """One record per (method, α, window k), then the gradient-descent records if any."""
        records = []
        for a, log_a in enumerate(self.log_alpha):
            for k in range(self.stage_times.size):
                head = dict(method=self.method, log_alpha=float(log_a), alpha=float(np.exp(log_a)), stage=k)
                times = dict(
                    T_greedy=float(self.stage_times[k]),
                    T_detected=float(self.detected_times[a, k - 1]) if k else 0.0,
                    time_error=float(self.time_error[a, k - 1]) if k else 0.0,
                    window_start=float(self.window_start[k]),
                    window_end=float(self.window_end[k]),
                )
                records.append(self._record(a, k, head, times))
        return records + (self.gd.to_records() if self.gd is not None else [])

    def _record(self, a: int, k: int, head: dict[str, Any], times: dict[str, Any]) -> dict[str, Any]:
        """The record of run ``a`` in window ``k``, from its leading columns and its stage-time columns: its
        distances, one per window (``beta_distance``, ``b_distance``, ``loss_distance``); a family whose distances
        have more axes (one per weight matrix) writes its own."""
        distances = {f"{self.table_name(q)}_distance": float(self._distance(q)[a, k]) for q in self._quantities[:-1]}
        return dict(head, **times, **distances)

    def rate_records(self, fit_range=None) -> list[dict[str, Any]]:
        """The fitted exponents: one record per (method, quantity, stage) and, where the rates have one per weight
        matrix, per weight matrix (column ``factor``, ``""`` where the quantity has none); stage ``"worst"`` for the
        summary. Fitted over log α in ``fit_range`` (default each comparison's own), which the columns
        ``fit_log_alpha_min`` and ``fit_log_alpha_max`` give."""
        out = []
        for comp in (self, self.gd):
            if comp is None:
                continue
            used = comp.fitted(fit_range)
            worst = comp.summary(fit_range)
            span = comp.log_alpha[used]
            bounds = dict(
                fit_log_alpha_min=float(span.min()) if span.size else math.nan,
                fit_log_alpha_max=float(span.max()) if span.size else math.nan,
            )
            for q in comp._quantities:
                first = 1 if q == "time" else 0
                name = comp.table_name(q)
                rates = getattr(comp, f"{q}_rate") if fit_range is None else fit_rates(span, comp._distance(q)[used])
                for k, rate in enumerate(rates):
                    out += [dict(r, **bounds) for r in comp._rate_records(name, str(k + first), rate)]
                out += [dict(r, **bounds) for r in comp._rate_records(name, "worst", worst[q])]
        return out

    def _rate_records(self, quantity: str, stage: str, rate) -> list[dict[str, Any]]:
        """The records of the fitted exponent(s) ``rate`` of ``quantity`` in ``stage``: one, where the rates are one
        per window (a family with one per weight matrix writes its own)."""
        return [dict(method=self.method, quantity=quantity, stage=stage, exponent=float(rate))]

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


def fit_rates(log_alpha, distance) -> np.ndarray:
    """:func:`fit_rate`'s ``r`` for every column of ``distance`` ``(A, …)``: shape ``distance.shape[1:]``."""
    if distance.size == 0:
        return np.full(distance.shape[1:], np.nan)
    return np.apply_along_axis(lambda col: fit_rate(log_alpha, col)[0], 0, distance)


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
    stage_times,
    *,
    num: int = 1000,
    horizon: float | None = None,
    delta: float | None = None,
    log_alphas=None,
    time_unit: float | None = None,
) -> np.ndarray:
    """An even grid on ``[0, horizon]`` with every window edge and stage time added and, given the runs' scales
    ``log_alphas``, refined around every stage time (:func:`refine_times`; ``time_unit``: the family's ``dτ/dt`` at
    the smallest α)."""
    stage_times = np.asarray(stage_times, dtype=np.float64)
    horizon = default_horizon(stage_times) if horizon is None else float(horizon)
    delta = default_delta(stage_times) if delta is None else float(delta)
    extra = np.concatenate([stage_times, stage_times + delta, stage_times - delta])
    ts = np.union1d(np.linspace(0.0, horizon, num), extra[(extra >= 0) & (extra <= horizon)])
    return ts if log_alphas is None else refine_times(ts, stage_times, delta, log_alphas, time_unit=time_unit)


PER_DECADE = 10  # refined times per decade of distance from a stage time: spaced 26% of their distance from it
RESOLUTION = 1e-14  # the closest refined time to a stage time, relative to the last time: float64 tells them apart


def refine_times(ts, stage_times, delta: float, log_alphas, *, time_unit: float | None = None) -> np.ndarray:
    """``ts`` with times at ``T_k ± d`` added, ``d`` from ``0.01 dτ/dt`` (``time_unit`` at the smallest α:
    ``1/log(1/α)`` if None, ``α^{L−2}`` at depth L) up to ``delta``, ``PER_DECADE`` per decade (at least two), and
    not below τ's float64 resolution. A jump takes O(1) time, so it is about ``dτ/dt`` wide in τ and a flow's stage
    time about as far from ``T_k`` (docs/math.md, *What the comparison measures*); detected by interpolation, it is
    capped by an even grid's spacing whatever α. The offsets resolve every α's jump to a quarter of its distance."""
    unit = 1.0 / max(-float(np.min(log_alphas)), 1.0) if time_unit is None else float(time_unit)
    finest = max(0.01 * unit, RESOLUTION * float(ts[-1]))  # measured errors × log(1/α) go down to 0.04
    if not finest < delta:
        return ts
    offsets = np.geomspace(finest, delta, max(2, math.ceil(PER_DECADE * math.log10(delta / finest)) + 1))
    near = (np.asarray(stage_times)[1:, None] + np.concatenate([-offsets, offsets])).ravel()
    return np.union1d(ts, near[(near >= 0) & (near <= ts[-1])])


def asymptotic_range(log_alpha, detected, stage_times, delta: float) -> np.ndarray:
    """The default fit range of the rates, ``[lowest, highest]`` log α: the scales whose detected stage times all lie
    within ``δ`` (the window margin) of the greedy ones, so that every window measures a plateau the flow is on and
    the rates their approach to it (at larger α the flow is not yet near the greedy path: a jump that falls inside a
    window turns its distance into the jump's size). Every scale where fewer than two are asymptotic."""
    log_alpha = np.asarray(log_alpha, dtype=np.float64)
    close = np.all(np.abs(np.asarray(detected) - np.asarray(stage_times)[1:]) <= delta, axis=1)
    chosen = log_alpha[close] if np.count_nonzero(close) >= 2 else log_alpha
    return np.array([chosen.min(), chosen.max()])


def check_fit_range(fit_range) -> tuple[float, float]:
    """``fit_range`` as ``(lowest, highest)`` log α: two numbers, in order (``-inf``/``inf`` leave a side open)."""
    try:
        low, high = (float(x) for x in np.asarray(fit_range, dtype=np.float64).reshape(2))
    except (TypeError, ValueError):
        raise ValueError(f"fit_range must be two log α, (lowest, highest); got {fit_range!r}.") from None
    if not low <= high:
        raise ValueError(f"fit_range must be (lowest, highest) log α with lowest <= highest; got {fit_range!r}.")
    return low, high


def warn_unresolved(method: str, log_alpha, stage_times, detected, runs) -> None:
    """Warn where a detected stage time's error ``|T̂_k − T_k|`` is not larger than the spacing of the run's recorded
    times around ``T̂_k``: that error is the grid's, not the run's."""
    unresolved = []
    for a, run in enumerate(runs):
        ts = np.asarray(run.ts, dtype=np.float64)
        found = np.isfinite(detected[a])
        i = np.clip(np.searchsorted(ts, detected[a][found]), 1, ts.size - 1)
        spacing = ts[i] - ts[i - 1]
        error = np.abs(detected[a][found] - stage_times[1:][found])
        for k in np.flatnonzero(found)[error <= spacing]:
            unresolved.append(f"log α = {log_alpha[a]:.6g}, k = {k + 1}")
    if unresolved:
        warn(
            f"the detected stage times of the {method} runs at {'; '.join(unresolved)} are no farther from T_k than the "
            "recorded times are apart there: those time errors (and their rate) are the grid's. Record finer times "
            "around T_k (ts=None refines them for the given alphas).",
            UserWarning,
        )


def windows(stage_times, delta: float, horizon: float) -> tuple[np.ndarray, np.ndarray]:
    """The windows ``[T_k + δ, T_{k+1} − δ]``, ``k = 0..K``, the last one ending at ``horizon``: ``(starts, ends)``."""
    return stage_times + delta, np.append(stage_times[1:] - delta, horizon)


def window_masks(ts, starts, ends):
    """``(k, inside)`` for every window ``k`` that holds recorded times, ``inside`` the mask of those in ``ts``."""
    for k, (start, end) in enumerate(zip(starts, ends)):
        inside = (ts >= start) & (ts <= end)
        if start < end and np.any(inside):
            yield k, inside


def compare_runs(cls, path, runs, distances, *, method: str, delta: float | None, threshold: float, **fields):
    """Compare ``runs`` (each with a ``log_alpha`` and times ``ts``) with the greedy ``path`` into a ``cls``.

    ``distances(run, starts, ends)`` gives a run's sup distance per window for each quantity ``q``, ``{q: (K + 1,
    …)}``, and the stage times ``(K,)`` detected on it. The result holds them (``q_distance``), the errors of the
    detected times, the fitted rates of all of them and ``fields``.
    """
    check_options(delta, threshold)
    times = np.asarray(path.times, dtype=np.float64)
    delta = default_delta(times) if delta is None else float(delta)
    for run in runs:
        check_windows(times, delta, np.asarray(run.ts), what=f"the {method} runs' times")
    starts, ends = windows(times, delta, min(float(run.ts[-1]) for run in runs))
    rows = [distances(run, starts, ends) for run in runs]
    log_alpha = np.array([run.log_alpha for run in runs], dtype=np.float64)
    result, message = run_status(runs, method)
    dist = {q: np.stack([d[q] for d, _ in rows]) for q in rows[0][0]}
    detected = np.stack([t for _, t in rows]).reshape(len(runs), times.size - 1)
    err = np.abs(detected - times[1:])
    warn_unresolved(method, log_alpha, times, detected, runs)
    fit_range = asymptotic_range(log_alpha, detected, times, delta)
    used = (log_alpha >= fit_range[0]) & (log_alpha <= fit_range[1])
    return cls(
        method=method,
        log_alpha=log_alpha,
        stage_times=times,
        window_start=starts,
        window_end=ends,
        detected_times=detected,
        time_error=err,
        time_rate=fit_rates(log_alpha[used], err[used]),
        threshold=float(threshold),
        delta=delta,
        fit_range=fit_range,
        result=result,
        message=message,
        **{f"{q}_distance": d for q, d in dist.items()},
        **{f"{q}_rate": fit_rates(log_alpha[used], d[used]) for q, d in dist.items()},
        **fields,
    )


def each_run(runs) -> list:
    """``runs`` (a batched result, a single run, or a sequence of them) as a list of single runs."""
    if isinstance(runs, (list, tuple)):
        return [one for run in runs for one in each_run(run)]
    if np.ndim(runs.log_alpha) == 1:
        return [runs[i] for i in range(np.shape(runs.log_alpha)[0])]
    return [runs]


def run_status(runs, method: str) -> tuple[str, str]:
    """What a comparison of ``runs`` could not compute: a run whose loss is not finite from some time on (a flow
    that stopped, a gradient descent that diverged), or rates, with fewer than two distinct α."""
    failed = []
    for run in runs:
        bad = ~np.isfinite(np.asarray(run.loss))
        if np.any(bad):
            failed.append(
                f"log α = {float(run.log_alpha):.6g} from τ = {float(np.asarray(run.ts)[np.argmax(bad)]):.4g} on"
            )
    if failed:
        return RESULTS.run_failed.value, (
            f"the {method} runs are not finite at {'; '.join(failed)} (each run's result and message say why): "
            "their distances from there are NaN or infinite, and each rate is fitted over the finite distances only"
        )
    scales = np.unique([float(run.log_alpha) for run in runs])
    if scales.size < 2:
        return RESULTS.single_scale.value, (
            f"one scale, log α = {float(scales[0]):.6g}: the distances are computed, but the rates fit them over two "
            "or more distinct α and are NaN; give more alphas for them"
        )
    return RESULTS.successful.value, ""


def detect(ts, loss, levels) -> np.ndarray:
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


def check_options(delta, threshold) -> None:
    """Check the comparison's window margin ``delta`` (None or ≥ 0) and detection fraction ``threshold`` (in (0, 1))."""
    if not 0.0 < threshold < 1.0:
        raise ValueError(
            f"threshold must lie strictly between 0 and 1 (a fraction of each loss drop); got {threshold!r}."
        )
    if delta is not None and not delta >= 0:
        raise ValueError(f"delta must be a non-negative rescaled time; got {delta!r}.")


def comparison_scales(alpha, log_alpha, flows) -> tuple[np.ndarray, str]:
    """The scales ``log α`` (1-D) a comparison runs at: ``alpha`` or ``log_alpha``, or without either, those the
    ``flows`` record; and the name they were given by."""
    if alpha is None and log_alpha is None and flows is not None:
        recorded = [np.atleast_1d(np.asarray(run.log_alpha, dtype=np.float64)) for run in _listed(flows)]
        return np.concatenate(recorded), "the flows' log_alpha"
    return np.atleast_1d(check_scales(alpha, log_alpha)[0]), "alpha" if log_alpha is None else "log_alpha"


def _listed(runs) -> list:
    return list(runs) if isinstance(runs, (list, tuple)) else [runs]


def check_distinct(log_alphas: np.ndarray, name: str) -> None:
    """Check that the scales ``log_alphas`` (given as the argument ``name``) are distinct."""
    values, counts = np.unique(log_alphas, return_counts=True)
    if np.any(counts > 1):
        twice = float(values[np.argmax(counts > 1)])
        raise ValueError(
            f"{name} must be distinct: log α = {twice:.6g} is given {int(counts.max())} times. Each α is one run, and "
            "the rates fit the distances over distinct α; give each α once."
        )


def check_windows(stage_times, delta: float, ts: np.ndarray, *, what: str = "ts", fix: str | None = None) -> None:
    """Check that the recorded times ``ts`` (``what``: the argument, or whose times they are) reach past the first stage
    time (else the error says ``fix``, by default to record past ``T_K``) and leave a recorded time in some window
    ``[T_k + δ, T_{k+1} − δ]`` (see :func:`windows`)."""
    stage_times = np.asarray(stage_times, dtype=np.float64)
    if stage_times.size > 1 and ts[-1] < stage_times[1]:
        fix = fix or (
            f"Record up to past the last stage time T_K = {stage_times[-1]:.4g} (ts=None records up to 1.25·T_K = "
            f"{default_horizon(stage_times):.4g})."
        )
        raise ValueError(
            f"{what} end at τ = {ts[-1]:.4g}, before the first stage time T_1 = {stage_times[1]:.4g}: no stage could be "
            f"detected. {fix}"
        )
    starts, ends = windows(stage_times, delta, float(ts[-1]))
    if next(window_masks(ts, starts, ends), None) is None:
        raise ValueError(
            f"delta = {delta:.4g} leaves none of {what} (up to τ = {ts[-1]:.4g}) in any stage window "
            f"[T_k + δ, T_(k+1) − δ] of the stage times {np.round(stage_times, 4).tolist()}. Pass a smaller delta (the "
            f"default, a quarter of the shortest stage, is {default_delta(stage_times):.4g})."
        )


def check_run_scales(recorded, log_alphas) -> None:
    """Check that the runs, recording the scales ``recorded``, are one per ``log_alphas``, in order."""
    if log_alphas.size != len(recorded):
        raise ValueError(f"got {len(recorded)} runs for {log_alphas.size} values of alpha; give one run per alpha.")
    for rec, la in zip(recorded, log_alphas):
        if not np.isclose(rec, la, rtol=1e-12, atol=0.0):
            raise ValueError(
                f"a run records log α = {rec:.6g} but is given as log α = {la:.6g}; pass the runs in the order "
                "of alpha= (or leave alpha out: the runs' own α are used)."
            )

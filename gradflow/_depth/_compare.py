"""Comparing flows of a depth-L diagonal network at finite α with its greedy limit (docs/depth.md, *The greedy limit
and the comparison*).

Per run (one α) and stage window ``[T_k + δ, T_{k+1} − δ]``: the sup over the window of ``max_i |β_i(τ) − β^k_i|``
(``weights``), of the sleeping clocks' ``max_i |c_i(τ) − (c^k_i − (τ − T_k)(L−2) s_i g_i)|`` with the flow's
``c = (α/|β|^{1/L})^{L−2}`` (``b``), of ``|L(τ) − L(β^k)|`` (``loss``), and the stage times detected on the loss (as
for the diagonal family). Two rates per quantity: ``*_rate``, the shared fit ``d ≈ C (log 1/α)^{−r}``, and
``*_power``, the fit ``d ≈ C α^{r}`` that depth calls for (plateaus last ``α^{−(L−2)}``: the theory's ``r`` is
``L − 2`` for the clocks and the stage times).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, NamedTuple

import equinox as eqx
import numpy as np

from .._kit._comparison import (
    AbstractComparison,
    check_run_scales,
    compare_runs,
    detect,
    each_run,
    window_masks,
)
from ._greedy import DepthGreedyPath
from ._results import DepthFlowResult, DepthGDResult


class DepthComparison(AbstractComparison):
    """Distances between flows at several α and the greedy limit of a depth-L diagonal network, per stage window.

    As the diagonal family's [`Comparison`][gradflow.Comparison] (``b_distance`` is the clocks' distance), with the
    power rates ``weights_power``, ``b_power``, ``loss_power`` (``(K + 1,)``) and ``time_power`` (``(K,)``): the
    exponent ``r`` of ``d ≈ C α^r``, fitted over every run. ``runs``, ``path`` and ``names``: the flows compared, the
    greedy limit and the coordinates' names; ``comparison[1:]`` keeps some runs (every rate fitted again).
    """

    weights_power: np.ndarray
    b_power: np.ndarray
    loss_power: np.ndarray
    time_power: np.ndarray
    gd: DepthComparison | None = None
    runs: Any = None
    path: DepthGreedyPath | None = None
    names: tuple[str, ...] | None = eqx.field(static=True, default=None)
    _weights_name: ClassVar[str] = "beta"

    def __getitem__(self, index) -> DepthComparison:
        return with_powers(super().__getitem__(index))


def power_rates(log_alpha, distance) -> np.ndarray:
    """The exponent ``r`` of ``d ≈ C α^r`` per column of ``distance`` (``(A, …)``), NaN where fewer than two
    finite positive distances."""
    log_alpha = np.asarray(log_alpha, dtype=np.float64)
    d = np.asarray(distance, dtype=np.float64)
    out = np.full(d.shape[1:], np.nan)
    for k in np.ndindex(out.shape):
        col = d[(slice(None),) + k]
        ok = np.isfinite(col) & (col > 0)
        if ok.sum() >= 2 and np.ptp(log_alpha[ok]) > 0:
            out[k] = np.polyfit(log_alpha[ok], np.log(col[ok]), 1)[0]
    return out


def with_powers(comparison: DepthComparison) -> DepthComparison:
    """``comparison`` with its power rates fitted to its distances."""
    la = comparison.log_alpha
    return dataclasses.replace(
        comparison,
        weights_power=power_rates(la, comparison.weights_distance),
        b_power=power_rates(la, comparison.b_distance),
        loss_power=power_rates(la, comparison.loss_distance),
        time_power=power_rates(la, comparison.time_error),
    )


class _Run(NamedTuple):
    """One run: ``log α``, times ``(m,)``, ``β`` and the clocks ``(m, p)``, loss ``(m,)``."""

    log_alpha: float
    ts: np.ndarray
    beta: np.ndarray
    clock: np.ndarray
    loss: np.ndarray


def _as_runs(runs, log_alphas) -> list[_Run]:
    """Split flows (one batched result, a single run or a sequence of them) into :class:`_Run` per α."""
    for res in runs if isinstance(runs, (list, tuple)) else [runs]:
        if not isinstance(res, (DepthFlowResult, DepthGDResult)):
            raise TypeError(
                f"every run must be a gradflow.DepthFlowResult or a gradflow.DepthGDResult; got {type(res).__name__}."
            )
    split = []
    for one in each_run(runs):
        arrays = (np.asarray(x) for x in (one.ts, one.beta, one.clock, one.loss))
        split.append(_Run(float(one.log_alpha), *arrays))
    check_run_scales([r.log_alpha for r in split], log_alphas)
    return [run._replace(log_alpha=float(la)) for run, la in zip(split, log_alphas)]


def compare(model, path, runs, log_alphas, *, method="flow", delta=None, threshold=0.5) -> DepthComparison:
    """Compare runs of the depth ``model`` (one per ``log_alphas``: exact flows, or gradient descents if ``method`` is
    ``"gd"``) with its greedy ``path``."""
    runs = _as_runs(runs, log_alphas)
    path_beta, path_loss = np.asarray(path.beta), np.asarray(path.loss)
    levels = path_loss[:-1] - threshold * (path_loss[:-1] - path_loss[1:])

    def distances(run, starts, ends):
        d = {q: np.full(starts.size, np.nan) for q in ("weights", "b", "loss")}
        for k, inside in window_masks(run.ts, starts, ends):
            d["weights"][k] = np.max(np.abs(run.beta[inside] - path_beta[k]))
            sleeping = ~path.support[k]
            target = path.b_at(run.ts[inside])
            d["b"][k] = np.max(np.abs(np.where(sleeping, run.clock[inside] - target, 0.0)))
            d["loss"][k] = np.max(np.abs(run.loss[inside] - path_loss[k]))
        return d, detect(run.ts, run.loss, levels)

    empty = np.zeros(0)
    partial = compare_runs(
        DepthComparison,
        path,
        runs,
        distances,
        method=method,
        delta=delta,
        threshold=threshold,
        weights_power=empty,
        b_power=empty,
        loss_power=empty,
        time_power=empty,
        names=tuple(model.names),
    )
    return with_powers(partial)

"""Comparing flows of a depth-L diagonal network at finite α with its greedy limit (docs/depth.md, *Comparing the
limits*).

Per run (one α) and stage window ``[T_k + δ, T_{k+1} − δ]``: the sup over the window of ``max_i |β_i(τ) − β^k_i|``
(``beta``), of the clocks' ``max_i |c_i(τ) − (c^k_i − (τ − T_k)(L−2) s_i g_i)|`` with the flow's
``c = (α/|β|^{1/L})^{L−2}`` (``b``), of ``|L(τ) − L(β^k)|`` (``loss``), and the stage times detected on the loss (as for
the diagonal family). Two rates per quantity: ``*_rate``, the shared fit ``d ≈ C (log 1/α)^{−r}``, and
``*_power``, the fit ``d ≈ C α^{r}`` that depth calls for (plateaus last ``α^{−(L−2)}``: the theory's ``r`` is
``L − 2`` for the clocks and the stage times).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from .._comparison import AbstractComparison, check_run_scales, compare_runs, detect, window_masks
from ._results import DepthFlowResult


class DepthComparison(AbstractComparison):
    """Distances between flows at several α and the greedy limit of a depth-L diagonal network, per stage window.

    As the diagonal family's [`Comparison`][gradflow.Comparison] (``b`` is the clocks' distance), with the power
    rates ``beta_power``, ``b_power``, ``loss_power`` (``(K + 1,)``) and ``time_power`` (``(K,)``): the exponent
    ``r`` of ``d ≈ C α^r``.
    """

    beta_distance: np.ndarray
    beta_rate: np.ndarray
    beta_power: np.ndarray
    b_power: np.ndarray
    loss_power: np.ndarray
    time_power: np.ndarray
    gd: None = None
    _quantities: ClassVar[tuple[str, ...]] = ("beta", "b", "loss", "time")

    def _record(self, a, k, head, times):
        return dict(
            head,
            **times,
            beta_distance=float(self.beta_distance[a, k]),
            b_distance=float(self.b_distance[a, k]),
            loss_distance=float(self.loss_distance[a, k]),
        )

    def _rate_records(self, quantity, stage, rate):
        return [dict(method=self.method, quantity=quantity, stage=stage, exponent=float(rate))]


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


def compare(model, path, runs, log_alphas, *, method="flow", delta=None, threshold=0.5) -> DepthComparison:
    """Compare flows of the depth ``model`` (one per ``log_alphas``) with its greedy ``path``."""
    if method != "flow":
        raise ValueError("a DepthModel's comparison takes exact flows only (method='flow').")
    L = model.depth
    split = []
    for res in runs if isinstance(runs, (list, tuple)) else [runs]:
        if not isinstance(res, DepthFlowResult):
            raise TypeError(f"every run must be a gradflow.DepthFlowResult; got {type(res).__name__}.")
        beta, loss = np.asarray(res.beta), np.asarray(res.loss)
        las = np.atleast_1d(res.log_alpha)
        if beta.ndim == 2:
            beta, loss = beta[None], loss[None]
        for a in range(beta.shape[0]):
            split.append((float(las[a]), np.asarray(res.ts), beta[a], loss[a]))
    check_run_scales([r[0] for r in split], log_alphas)
    path_beta, path_loss = np.asarray(path.beta), np.asarray(path.loss)
    levels = path_loss[:-1] - threshold * (path_loss[:-1] - path_loss[1:])

    class _Run:
        def __init__(self, la, ts, beta, loss):
            self.log_alpha, self.ts, self.beta, self.loss = la, ts, beta, loss

    def distances(run, starts, ends):
        d = {q: np.full(starts.size, np.nan) for q in ("beta", "b", "loss")}
        with np.errstate(divide="ignore", over="ignore"):
            clock = np.exp((L - 2) * (run.log_alpha - np.log(np.abs(run.beta)) / L))
        for k, inside in window_masks(run.ts, starts, ends):
            d["beta"][k] = np.max(np.abs(run.beta[inside] - path_beta[k]))
            sleeping = ~path.support[k]
            target = path.b_at(run.ts[inside])
            d["b"][k] = np.max(np.abs(np.where(sleeping, clock[inside] - target, 0.0)))
            d["loss"][k] = np.max(np.abs(run.loss[inside] - path_loss[k]))
        return d, detect(run.ts, run.loss, levels)

    objs = [_Run(la, ts, b, lo) for (_, ts, b, lo), la in zip(split, log_alphas)]
    partial = compare_runs(
        DepthComparison,
        path,
        objs,
        distances,
        method=method,
        delta=delta,
        threshold=threshold,
        beta_power=np.zeros(0),
        b_power=np.zeros(0),
        loss_power=np.zeros(0),
        time_power=np.zeros(0),
    )
    la = partial.log_alpha
    return DepthComparison(
        **{
            **{f: getattr(partial, f) for f in partial.__dataclass_fields__ if f != "_quantities"},
            "beta_power": power_rates(la, partial.beta_distance),
            "b_power": power_rates(la, partial.b_distance),
            "loss_power": power_rates(la, partial.loss_distance),
            "time_power": power_rates(la, partial.time_error),
        }
    )

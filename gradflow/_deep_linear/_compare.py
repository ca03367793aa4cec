"""Comparing flows of a deep linear network at finite α with its greedy low-rank limit (docs/deep-linear.md, *The
comparison*).

Per run (one α) and stage window ``[T_k + δ, T_{k+1} − δ]``: the sup over the window of ``max |W(τ) − W^k|`` over the
entries (``weights``), of ``max_r |b_r(τ) − b^k_r|`` with the flow's ``b = log σ / (L log α)`` of ``W``'s singular
values and the limit's 0 (learned) or 1 (sleeping) (``b``), of ``|L(τ) − L(W^k)|`` (``loss``), and the stage times
detected on the loss (as for the other families). The rates are the kit's fits ``d ≈ C (log 1/α)^{−r}``: the
sleeping ``b`` converge at that rate (``b − 1 = log(σ/α^L) / (L log α)``), while the weights, the loss and the
stage times converge as a power of α (plateaus last ``α^{−(L−2)}`` in ``t``), which shows as rates growing with
``log(1/α)``.
"""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple

import equinox as eqx
import numpy as np

from .._kit._comparison import AbstractComparison, check_run_scales, compare_runs, detect, each_run, window_masks
from ._greedy import DeepLinearGreedyPath
from ._results import DeepLinearFlowResult


class DeepLinearComparison(AbstractComparison):
    """Distances between flows of a [`DeepLinearModel`][gradflow.DeepLinearModel] at several α and its greedy
    low-rank limit, per stage window: ``weights_distance``, ``b_distance``, ``loss_distance`` (``(A, K + 1)``),
    ``detected_times`` and ``time_error`` (``(A, K)``), their fitted exponents ``*_rate``, ``runs`` and ``path``;
    ``comparison[1:]`` keeps some runs (the rates fitted again)."""

    gd: None = None
    runs: Any = None
    path: DeepLinearGreedyPath | None = None
    names: tuple[str, ...] | None = eqx.field(static=True, default=None)
    _weights_name: ClassVar[str] = "W"


class _Run(NamedTuple):
    """One run: ``log α``, times ``(m,)``, ``W`` ``(m, rows, cols)``, ``b`` ``(m, rank)``, loss ``(m,)``."""

    log_alpha: float
    ts: np.ndarray
    W: np.ndarray
    b: np.ndarray
    loss: np.ndarray


def _as_runs(runs, log_alphas) -> list[_Run]:
    """Split flows (one batched result, a single run or a sequence of them) into :class:`_Run` per α."""
    for res in runs if isinstance(runs, (list, tuple)) else [runs]:
        if not isinstance(res, DeepLinearFlowResult):
            raise TypeError(f"every run must be a gradflow.DeepLinearFlowResult; got {type(res).__name__}.")
    split = [
        _Run(float(one.log_alpha), *(np.asarray(x) for x in (one.ts, one.W, one.b, one.loss))) for one in each_run(runs)
    ]
    check_run_scales([r.log_alpha for r in split], log_alphas)
    return [run._replace(log_alpha=float(la)) for run, la in zip(split, log_alphas)]


def compare(model, path, runs, log_alphas, *, method="flow", delta=None, threshold=0.5) -> DeepLinearComparison:
    """Compare flows of the deep linear ``model`` (one per ``log_alphas``) with its greedy ``path``."""
    if method != "flow":
        raise ValueError("a DeepLinearModel's comparison takes exact flows only (method='flow').")
    runs = _as_runs(runs, log_alphas)
    path_W, path_b, path_loss = np.asarray(path.W), np.asarray(path.b), np.asarray(path.loss)
    levels = path_loss[:-1] - threshold * (path_loss[:-1] - path_loss[1:])

    def distances(run, starts, ends):
        d = {q: np.full(starts.size, np.nan) for q in ("weights", "b", "loss")}
        for k, inside in window_masks(run.ts, starts, ends):
            d["weights"][k] = np.max(np.abs(run.W[inside] - path_W[k]))
            d["b"][k] = np.max(np.abs(run.b[inside] - path_b[k]))
            d["loss"][k] = np.max(np.abs(run.loss[inside] - path_loss[k]))
        return d, detect(run.ts, run.loss, levels)

    return compare_runs(
        DeepLinearComparison,
        path,
        runs,
        distances,
        method=method,
        delta=delta,
        threshold=threshold,
        names=tuple(model.names),
    )

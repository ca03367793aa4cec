"""Comparing runs of a model with diagonal weights at finite α with their greedy limit (docs/math.md, *What the
comparison measures*).

For every run (one α) and every stage window ``[T_k + δ, T_{k+1} − δ]`` (the last window ends at
the run's last time), :func:`~gradflow.compare_limits` reports the sup over the window of

* ``weights_distance``: ``max_i |β_i(τ) − β^k_i|``,
* ``b_distance``: ``max_i |b_i(τ) − (b^k_i − (τ − T_k) g_i(θ^k))|``,
* ``loss_distance``: ``|L(τ) − L(θ^k)|``,

and the stage times detected on the run. **Detection rule**: stage ``k ≥ 1`` starts at the first ``τ`` where the run's loss has covered the fraction ``threshold`` of the drop between consecutive
greedy plateaus, ``L(τ) ≤ L(θ^{k−1}) − threshold·(L(θ^{k−1}) − L(θ^k))`` (linear interpolation
between recorded times; ``threshold = 0.5`` is the midpoint). Gradient flow decreases the loss, so
the first crossing is the only one.

Rates: for each quantity and stage, a least-squares fit of ``log d = c − r·log log(1/α)`` over the
α's, i.e. ``d ≈ C·(log 1/α)^(−r)``; the theory suggests ``r ≈ 1`` for ``b`` and the stage times.
"""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple

import equinox as eqx
import numpy as np

from .._kit._checks import check_losses, probe_times
from .._kit._comparison import AbstractComparison, check_run_scales, compare_runs, detect, window_masks
from .._kit._deprecation import renamed
from .._kit._trajectory import Trajectory
from ._model import evaluate_loss
from ._path import GreedyPath


class Comparison(AbstractComparison):
    """Distances between runs at several α and the greedy limit, per stage window (docs/math.md, *What the
    comparison measures*).

    Shapes: ``A`` runs (one per α), ``K`` greedy stages (``K + 1`` plateaus ``k = 0..K``).

    Attributes:
        method: ``"flow"`` (exact gradient flow) or ``"gd"`` (gradient descent runs).
        log_alpha: ``(A,)`` the runs' ``log α``.
        stage_times: ``(K + 1,)`` the greedy ``T_k`` (``T_0 = 0``).
        window_start, window_end: ``(K + 1,)`` the window of plateau ``k``.
        weights_distance, b_distance, loss_distance: ``(A, K + 1)`` sup distances over each window of ``β``, ``b``
            and the loss (NaN where a window is empty or holds no recorded time).
        detected_times: ``(A, K)`` the start of stages ``1..K`` detected on each run (NaN if the
            run never gets there).
        time_error: ``(A, K)`` ``|detected − T_k|``.
        weights_rate, b_rate, loss_rate: ``(K + 1,)`` fitted exponent ``r`` per window.
        time_rate: ``(K,)`` fitted exponent ``r`` per stage time.
        threshold, delta: the detection fraction and the window margin used.
        result: ``"successful"``, ``"run_failed"`` (a run is not finite from some time on) or ``"single_scale"``
            (one α, no rates), as a ``RESULTS`` value.
        message: which runs are not finite, from when (``""`` when successful).
        gd: the same comparison for gradient-descent runs, or None.
        runs: the runs compared (the flows ``compare_limits`` ran or was given, or the gradient-descent runs): one
            batched result, or a tuple of runs, one per α.
        path: the greedy limit they were compared with.
        names: the coordinates' names (the model's).
    """

    gd: Comparison | None = None
    runs: Any = None
    path: GreedyPath | None = None
    names: tuple[str, ...] | None = eqx.field(static=True, default=None)
    _weights_name: ClassVar[str] = "beta"
    beta_distance = renamed("weights_distance", "beta_distance", "Comparison")
    beta_rate = renamed("weights_rate", "beta_rate", "Comparison")


class _Run(NamedTuple):
    """One run: ``log α``, times ``(m,)``, ``β`` and ``b`` ``(m, p)``, loss ``(m,)``."""

    log_alpha: float
    ts: np.ndarray
    beta: np.ndarray
    b: np.ndarray
    loss: np.ndarray


def _as_runs(results, log_alphas) -> list[_Run]:
    """Split trajectories (one batched result or a sequence) into :class:`_Run` per α, in the order of
    ``log_alphas`` (a run that records another scale is an error)."""
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
            runs.append(_Run(float(recorded[a]), ts[a] if ts.ndim == 2 else ts, beta[a], b[a], loss[a]))
    check_run_scales([run.log_alpha for run in runs], log_alphas)
    return [run._replace(log_alpha=float(la)) for run, la in zip(runs, log_alphas)]


def _compare_runs(path, runs, *, names=None, method="flow", delta=None, threshold=0.5) -> Comparison:
    """Compare :class:`_Run` s with the greedy ``path``: per window the sup distances of ``β``, of ``b`` to the
    path's ``b^k − (τ − T_k) g(θ^k)`` and of the loss; the stage times where the loss has covered ``threshold`` of
    each drop between plateaus."""
    path_beta, path_loss = np.asarray(path.beta), np.asarray(path.loss, dtype=np.float64)
    levels = path_loss[:-1] - threshold * (path_loss[:-1] - path_loss[1:])

    def distances(run, starts, ends):
        d = {q: np.full(starts.size, np.nan) for q in ("weights", "b", "loss")}
        for k, inside in window_masks(run.ts, starts, ends):
            d["weights"][k] = np.max(np.abs(run.beta[inside] - path_beta[k]))
            d["b"][k] = np.max(np.abs(run.b[inside] - path.b_at(run.ts[inside])))
            d["loss"][k] = np.max(np.abs(run.loss[inside] - path_loss[k]))
        return d, detect(run.ts, run.loss, levels)

    names = None if names is None else tuple(names)
    return compare_runs(Comparison, path, runs, distances, method=method, delta=delta, threshold=threshold, names=names)


def compare(model, path, runs, log_alphas, **options) -> Comparison:
    """Compare runs of the diagonal ``model`` (trajectories, one per ``log_alphas``) with the greedy ``path``."""
    runs = _as_runs(runs, log_alphas)
    for run in runs:
        if run.beta.shape[-1] != model.p:
            raise ValueError(
                f"a run records p = {run.beta.shape[-1]} coordinates, but this DiagonalModel has p = {model.p}: it is "
                "another model's run; compute the flows with this model, or leave flows None."
            )
    picks = np.stack([probe_times(run.loss) for run in runs], axis=1)  # (PROBES, runs): the batch of one check
    recorded = [[run.loss[i] for run, i in zip(runs, at)] for at in picks]
    computed = [evaluate_loss(model, np.stack([run.beta[i] for run, i in zip(runs, at)])) for at in picks]
    method = options.get("method", "flow")
    check_losses(np.ravel(recorded), np.ravel(computed), f"the {method} runs (at their recorded times)")
    return _compare_runs(path, runs, names=model.names, **options)

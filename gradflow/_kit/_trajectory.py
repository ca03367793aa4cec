"""The trajectory protocol: what [`compare_limits`][gradflow.compare_limits] and the figures read from a run; and what
every family's discrete training records."""

from __future__ import annotations

from typing import ClassVar, Protocol, runtime_checkable

import equinox as eqx
import numpy as np

from .._results import RESULTS
from ._batch import batch_index, batch_size, take_runs


@runtime_checkable
class Trajectory(Protocol):
    """A run from ``θ(0) = α (u0, v0)`` sampled at rescaled times, or a batch of ``B`` such runs.

    [`FlowResult`][gradflow.FlowResult] and [`GDResult`][gradflow.GDResult] are trajectories; so is any
    object with these attributes (fields or properties), NumPy float64 arrays that gain a leading axis of
    length ``B`` for a batch of runs:

    Attributes:
        ts: rescaled times ``τ = t / log(1/α)``, shape ``(m,)`` (or ``(B, m)`` when they differ per run).
        beta: ``β = u ⊙ v``, shape ``(m, p)``.
        b: log-scale weights ``b = log w / log α`` (docs/math.md, *Rescaled time and log coordinates*),
            shape ``(m, p)``.
        loss: ``L(θ)``, shape ``(m,)``.
        log_alpha: ``log α``, shape ``()``.
    """

    ts: np.ndarray
    beta: np.ndarray
    b: np.ndarray
    loss: np.ndarray
    log_alpha: np.ndarray


class Batched(eqx.Module):
    """A result that may hold a batch of runs, one per α (``log_alpha`` of shape ``(B,)``): ``result[i]`` is run
    ``i`` alone, ``result[1:3]`` or ``result[[0, 2]]`` a smaller batch; the fields named in ``_shared`` (the same for
    every run) are kept."""

    _shared: ClassVar[tuple[str, ...]] = ()

    def __getitem__(self, index):
        size = batch_size(self.log_alpha, type(self).__name__)
        index = batch_index(index, size, type(self).__name__)
        return take_runs(self, index, size, self._batched)

    def _batched(self, field: str, leaf: np.ndarray) -> bool:
        """Whether ``leaf`` of ``field`` (of leading length ``B``) holds one entry per run."""
        return field not in self._shared


def time_unit(depth: int, log_alpha) -> np.ndarray:
    """``dτ/dt`` of a depth-L network: ``α^{L−2}`` (``L ≥ 3``) or ``1/log(1/α)`` (``L = 2``), the rescaled time per
    unit of time (docs/depth.md, *The clock*)."""
    log_alpha = np.asarray(log_alpha, dtype=np.float64)
    return np.exp((depth - 2) * log_alpha) if depth > 2 else 1.0 / -log_alpha


class AbstractGDResult(Batched):
    """Discrete training recorded every few steps: what the gradient-descent results of every family share (as the
    flow's results: a ``result`` and a ``message`` per run).

    Attributes:
        steps: the recorded step numbers ``0, record_every, …, steps``, shape ``(m,)``.
        loss: the full-batch loss, shape ``(m,)``.
        log_alpha: ``log α``.
        lr: the learning rate.
        result: ``"successful"``, or ``"non_finite"`` where the run diverged (its gradient, weights or loss became NaN
            or infinite; every record after that step is NaN), per run: shape ``()`` or ``(A,)``.
        message: the step where it became non-finite (``""`` when successful), in the shape of ``result``.
    """

    _shared: ClassVar[tuple[str, ...]] = ("steps",)
    steps: np.ndarray
    loss: np.ndarray
    log_alpha: np.ndarray
    lr: float
    result: np.ndarray
    message: np.ndarray

    @property
    def ts(self) -> np.ndarray:
        """The rescaled times ``τ = step · lr / log(1/α)``, shape ``(m,)`` (``(A, m)`` for ``A`` scales)."""
        return self.steps * self.lr / -self.log_alpha[..., None]


class AbstractFlowResult(Batched):
    """The exact flow sampled at rescaled times: what the flow results of every family share (as diffrax's
    ``Solution``: the solver's ``stats``, and its ``result`` and ``message`` per run).

    Attributes:
        ts: rescaled times ``τ = t / log(1/α)``, shape ``(m,)``.
        loss: ``L``, shape ``(m,)``.
        log_alpha: ``log α``.
        stats: the solver's statistics.
        result: a ``RESULTS`` value per run.
        message: what went wrong, where (``""`` when successful).
    """

    _shared: ClassVar[tuple[str, ...]] = ("ts",)
    ts: np.ndarray
    loss: np.ndarray
    log_alpha: np.ndarray
    stats: dict
    result: np.ndarray
    message: np.ndarray

    @property
    def alpha(self) -> np.ndarray:
        """``α``; 0.0 where below the float64 range."""
        return np.exp(self.log_alpha)


def check_time_index(k, m: int) -> int:
    """``k``, checked to be an integer index into ``m`` recorded times (an ``IndexError`` if not)."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not -m <= k < m:
        raise IndexError(f"k must be an integer index into the {m} recorded times; got {k!r}.")
    return int(k)


def gd_status(steps, gradient_bad, records_finite, *, lr: float, log_alpha, model_at=None):
    """How gradient-descent runs ended: ``(result, message, after)`` per run (shape ``()`` or ``(A,)``; ``after`` has
    the shape of the records, ``(…, m)``).

    A run became non-finite at the first step ``s`` where its gradient was NaN or infinite (``gradient_bad``, −1 for
    none) or a record's weights or loss were (``records_finite``, whether each record at ``steps`` is finite);
    ``after`` marks its records after ``s``, which the family sets to NaN. ``model_at`` (per run, ``""`` for none):
    where the model's loss or gradient is not finite at the finite weights of the first non-finite gradient
    (:func:`~gradflow._kit._checks.non_finite_at`): ``h`` or the loss failed there, rather than the steps.
    """
    gradient_bad = np.asarray(gradient_bad)
    records_finite = np.asarray(records_finite)
    result = np.full(gradient_bad.shape, RESULTS.successful.value, dtype=object)
    message = np.full(gradient_bad.shape, "", dtype=object)
    after = np.zeros(records_finite.shape, dtype=bool)
    for run in np.ndindex(gradient_bad.shape):
        bad = [int(gradient_bad[run])] if gradient_bad[run] >= 0 else []
        bad += [int(s) for s in steps[~records_finite[run]][:1]]
        if not bad:
            continue
        s = min(bad)
        what = "its gradient, weights or loss is NaN or infinite there"
        where, fix = f"at step {s}", "the steps overshoot: lower lr"
        if s == 0:
            where, fix = "at the start, θ(0) = α (u0, v0)", "the start overflows: use smaller u0, v0 or α"
        at = "" if model_at is None else str(np.asarray(model_at, dtype=object)[run])
        if at and s == gradient_bad[run]:
            what = f"{at}, so the model's h or loss is not finite there"
            fix = "check h's domain (e.g. a log or sqrt of the weights); if those weights are huge, lower lr"
        result[run] = RESULTS.non_finite.value
        message[run] = (
            f"gradient descent at log α = {float(np.asarray(log_alpha)[run]):.6g} (lr = {lr:g}) became non-finite "
            f"{where}: {what}, and its records after step {s} are NaN; {fix}"
        )
        after[run] = steps > s
    return result.astype(str), message.astype(str), after

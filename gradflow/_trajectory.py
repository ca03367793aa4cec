"""The trajectory protocol: what [`compare_limits`][gradflow.compare_limits] and the figures read from a run; and what
every family's discrete training records."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import equinox as eqx
import numpy as np


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


class AbstractGDResult(eqx.Module):
    """Discrete training recorded every few steps: what the gradient-descent results of every family share.

    Attributes:
        steps: the recorded step numbers ``0, record_every, …, steps``, shape ``(m,)``.
        loss: the full-batch loss, shape ``(m,)``.
        log_alpha: ``log α``.
        lr: the learning rate.
    """

    steps: np.ndarray
    loss: np.ndarray
    log_alpha: np.ndarray
    lr: float

    @property
    def ts(self) -> np.ndarray:
        """The rescaled times ``τ = step · lr / log(1/α)``, shape ``(m,)`` (``(A, m)`` for ``A`` scales)."""
        return self.steps * self.lr / -self.log_alpha[..., None]


class AbstractFlowResult(eqx.Module):
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

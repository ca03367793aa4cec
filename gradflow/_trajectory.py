"""The trajectory protocol: what [`compare_limits`][gradflow.compare_limits] and the figures read from a run."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

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

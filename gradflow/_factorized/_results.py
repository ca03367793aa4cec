"""The results of the factorised engine: the exact flow and float64 gradient descent, sampled at output times."""

from __future__ import annotations

import equinox as eqx
import numpy as np

from .._kit._trajectory import AbstractFlowResult, AbstractGDResult, check_time_index

_TINY = float(np.finfo(np.float64).tiny)


def log_scales(log_sv, log_alpha) -> np.ndarray:
    """The log scales ``b = log σ / (2 log α)`` of singular values given by their logs (1 at ``σ = α²``, 0 at 1);
    ``log_alpha`` of shape ``()`` or ``(B,)`` for ``log_sv`` of shape ``(m, k)`` or ``(B, m, k)``."""
    return np.asarray(log_sv, dtype=np.float64) / (2.0 * np.asarray(log_alpha, dtype=np.float64)[..., None, None])


class FactorizedFlowState(eqx.Module):
    """The weights of a factorised flow at one time (from
    [`FactorizedFlowResult.state_at`][gradflow.FactorizedFlowResult.state_at]), exact in the logs of their singular
    values. Tuples hold one entry per weight matrix; every field gains a leading axis of length ``B`` for a batch.

    Attributes:
        W: the weight matrices ``W_j``, each ``(m_j, n_j)`` (0 where below the float64 range).
        log_singular_values: the log of every singular value of every ``W_j``, ``(k_j,)``, descending.
    """

    W: tuple[np.ndarray, ...]
    log_singular_values: tuple[np.ndarray, ...]

    @property
    def singular_values(self) -> tuple[np.ndarray, ...]:
        """The singular values of every ``W_j``; 0 where below the float64 range."""
        return tuple(np.exp(s) for s in self.log_singular_values)


class FactorizedFlowResult(AbstractFlowResult):
    """The gradient flow of a [`FactorizedModel`][gradflow.FactorizedModel] sampled at rescaled times ``ts``.

    All arrays are NumPy float64. With a batch of ``B`` scales every field but ``ts`` gains a leading axis
    of length ``B`` (``flow[i]`` is run ``i`` alone, ``flow[1:3]`` a smaller batch). Tuples hold one entry per weight
    matrix ``W_j``.

    Attributes:
        ts: rescaled times ``τ = t / log(1/α)``, shape ``(m,)``.
        W: the weight matrices ``W_j = U_j V_jᵀ``, each of shape ``(m, m_j, n_j)``; 0 where below the
            float64 range.
        log_singular_values: the natural log of every singular value of every ``W_j``, shape ``(m, k_j)``,
            descending, exact at every scale (``log α = −1e4`` included).
        loss: ``L``, shape ``(m,)``.
        log_alpha: ``log α``.
        stats: the solver's statistics: ``num_steps``, ``num_accepted_steps``, ``num_rejected_steps``
            (arrays), ``max_steps`` (the cap it ran under, ``None`` for none) and ``solver`` (``"tsit5"`` or
            ``"kvaerno5"``).
        result: ``"successful"``, ``"max_steps_reached"`` or ``"solver_failed"`` (shape ``()`` or ``(B,)``).
        message: what went wrong, where (``""`` when successful).
    """

    W: tuple[np.ndarray, ...]
    log_singular_values: tuple[np.ndarray, ...]

    @property
    def weights(self) -> tuple[np.ndarray, ...]:
        """``W``, as ``FlowResult.weights`` holds ``β`` for diagonal weights."""
        return self.W

    @property
    def singular_values(self) -> tuple[np.ndarray, ...]:
        """The singular values of every ``W_j``, shape ``(m, k_j)``; 0 where below the float64 range."""
        return tuple(np.exp(s) for s in self.log_singular_values)

    @property
    def b(self) -> tuple[np.ndarray, ...]:
        """The log scales of the singular values, ``b = log σ / (2 log α)``, per j of shape ``(m, k_j)``, exact at
        every scale: 1 at the start (``σ ≈ α²``), 0 once learned, in the normalisation of the diagonal
        ``b = log w / log α``; in the order of ``singular_values`` (descending ``σ``, so ascending ``b``), as
        [`FactorizedGreedyPath.b_at`][gradflow.FactorizedGreedyPath.b_at] lays out the limit's."""
        return tuple(log_scales(s, self.log_alpha) for s in self.log_singular_values)

    def state_at(self, k: int) -> FactorizedFlowState:
        """The weights at the recorded time ``ts[k]`` (a batch of them for a batched result)."""
        k = check_time_index(k, len(self.ts))
        return FactorizedFlowState(
            W=tuple(w[..., k, :, :] for w in self.W),
            log_singular_values=tuple(s[..., k, :] for s in self.log_singular_values),
        )


class FactorizedGDResult(AbstractGDResult):
    """Full-batch gradient descent on the factors, recorded every ``record_every`` steps (NumPy float64).

    With ``A`` scales every field but ``steps`` and ``lr`` gains a leading axis of length ``A``.

    Attributes:
        steps: the recorded step numbers, shape ``(m,)``.
        W: the weight matrices ``W_j = U_j V_jᵀ``, each of shape ``(m, m_j, n_j)``.
        loss: ``L``, shape ``(m,)``.
        log_alpha: ``log α``.
        lr: the learning rate.
        result, message: ``"successful"``, or ``"non_finite"`` and the step where the run diverged (as for
            [`GDResult`][gradflow.GDResult]).
    """

    W: tuple[np.ndarray, ...]

    @property
    def weights(self) -> tuple[np.ndarray, ...]:
        """``W``, as ``GDResult.weights`` holds ``β`` for diagonal weights."""
        return self.W

    @property
    def b(self) -> tuple[np.ndarray, ...]:
        """The log scales ``log σ / (2 log α)`` of the singular values (as ``FactorizedFlowResult.b``; the
        singular values clipped to the smallest positive float64), per j of shape ``(m, min(m_j, n_j))``."""
        return tuple(log_scales(s, self.log_alpha) for s in self.log_singular_values)

    @property
    def singular_values(self) -> tuple[np.ndarray, ...]:
        """The singular values of every ``W_j``, descending, shape ``(m, min(m_j, n_j))``."""
        return tuple(np.linalg.svd(w, compute_uv=False) for w in self.W)

    @property
    def log_singular_values(self) -> tuple[np.ndarray, ...]:
        """Their logs, the singular values clipped to the smallest positive float64."""
        return tuple(np.log(np.maximum(s, _TINY)) for s in self.singular_values)

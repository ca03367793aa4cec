"""The results of the deep linear family: the flow of a deep linear network sampled at output times
(docs/deep-linear.md)."""

from __future__ import annotations

import equinox as eqx
import numpy as np

from .._kit._trajectory import AbstractFlowResult, check_time_index


def log_scales(log_sv, log_alpha, depth: int) -> np.ndarray:
    """``b = log σ / (L log α)`` of singular values given by their logs: 1 at ``σ = α^L`` (a balanced start of
    order-one directions), 0 at ``σ = 1``; at ``L = 2`` the factorised family's ``log σ / (2 log α)``."""
    return np.asarray(log_sv, dtype=np.float64) / (depth * np.asarray(log_alpha, dtype=np.float64)[..., None, None])


class DeepLinearFlowState(eqx.Module):
    """A deep linear network at one recorded time (from
    [`DeepLinearFlowResult.state_at`][gradflow.DeepLinearFlowResult.state_at]); every field gains a leading axis of
    length ``B`` for a batch.

    Attributes:
        layers: ``(W_1, …, W_L)``, shapes ``model.layer_shapes``.
        W: the end-to-end matrix ``W_L ⋯ W_1``, ``(m, n)``.
        log_singular_values: the logs of ``W``'s ``model.rank`` largest singular values, descending.
    """

    layers: tuple[np.ndarray, ...]
    W: np.ndarray
    log_singular_values: np.ndarray


class DeepLinearFlowResult(AbstractFlowResult):
    """The gradient flow of a [`DeepLinearModel`][gradflow.DeepLinearModel] from ``W_l(0) = α u0[l−1]``, sampled
    at rescaled times ``ts``. With a batch of ``B`` scales every field but ``ts`` gains a leading axis of length
    ``B``, and ``flow[i]``, ``flow[1:3]`` select runs.

    Attributes:
        ts: rescaled times, ``τ = t α^{L−2}`` (L ≥ 3) or ``t / log(1/α)`` (L = 2), shape ``(m,)``.
        layers: ``(W_1, …, W_L)``, each ``(m, d_l, d_{l−1})``.
        W: the end-to-end matrix ``W_L ⋯ W_1``, ``(m, rows, cols)``.
        log_singular_values: the log of ``W``'s ``model.rank`` largest singular values, ``(m, rank)``, descending,
            from the layers in units of α (exact below the float64 range of ``W`` itself).
        loss: ``L(W)``, shape ``(m,)``.
        log_alpha: ``log α``.
        stats: ``num_steps``, ``num_accepted_steps``, ``num_rejected_steps`` and ``max_steps``.
        result, message: as for every flow (``"successful"``, ``"max_steps_reached"``, ``"solver_failed"``,
            ``"interrupted"``; the message says where). After the time a failed run stopped at, its fields are
            ``+inf`` (NaN for the loss).
    """

    layers: tuple[np.ndarray, ...]
    W: np.ndarray
    log_singular_values: np.ndarray

    @property
    def depth(self) -> int:
        """The number of layers ``L``."""
        return len(self.layers)

    @property
    def weights(self) -> np.ndarray:
        """``W``, under the name every family's results share."""
        return self.W

    @property
    def singular_values(self) -> np.ndarray:
        """``W``'s singular values, ``(m, rank)``, descending."""
        return np.exp(self.log_singular_values)

    @property
    def b(self) -> np.ndarray:
        """``b = log σ / (L log α)`` of ``W``'s singular values, ``(m, rank)``: 1 at a balanced start of order-one
        directions (``σ ≈ α^L``), 0 once learned; at ``L = 2`` the factorised family's ``log σ / (2 log α)``."""
        return log_scales(self.log_singular_values, self.log_alpha, self.depth)

    def state_at(self, k: int) -> DeepLinearFlowState:
        """The network at the recorded time ``ts[k]`` (a batch of them for a batched result)."""
        k = check_time_index(k, len(self.ts))
        return DeepLinearFlowState(
            layers=tuple(w[..., k, :, :] for w in self.layers),
            W=self.W[..., k, :, :],
            log_singular_values=self.log_singular_values[..., k, :],
        )

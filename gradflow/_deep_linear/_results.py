"""The results of the deep linear family: the flow of a deep linear network sampled at output times
(docs/deep-linear.md)."""

from __future__ import annotations

import equinox as eqx
import numpy as np

from .._kit._trajectory import AbstractFlowResult, AbstractGDResult, check_time_index, time_unit


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
        stats: ``num_steps``, ``num_accepted_steps``, ``num_rejected_steps`` and ``max_steps``; below the direct
            integration's range (docs/deep-linear.md, *Small α*) ``num_steps`` (the accepted steps of its scipy
            solves, also ``num_accepted_steps``) and ``num_stages``; between the two (*Between the two ranges*)
            ``num_steps``, ``num_accepted_steps`` and ``num_frame_turns``; in a batch across the paths, a count that
            one path does not keep is −1 in its runs.
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


class DeepLinearGDResult(AbstractGDResult):
    """Discrete training of a [`DeepLinearModel`][gradflow.DeepLinearModel] recorded every ``record_every`` steps:
    the layers the optimizer updated, from ``W_l(0) = α u0[l−1]``, with the loss. With ``A`` scales every field but
    ``steps`` and ``lr`` gains a leading axis of length ``A`` (so does ``ts``).

    Attributes:
        steps: the recorded step numbers ``0, record_every, …, steps``, shape ``(m,)``.
        layers: ``(W_1, …, W_L)``, each ``(m, d_l, d_{l−1})``.
        loss: the full-batch loss, shape ``(m,)``.
        log_alpha: ``log α``; alpha: ``α``, the float64 number the layers were started from.
        lr: the learning rate.
        result, message: ``"successful"``, or ``"non_finite"`` where the run diverged (its records after that step
            are NaN), as for every family's gradient descent.
    """

    layers: tuple[np.ndarray, ...]
    alpha: np.ndarray

    @property
    def depth(self) -> int:
        """``L``."""
        return len(self.layers)

    @property
    def ts(self) -> np.ndarray:
        """The rescaled times of the steps, ``τ = k · lr · α^{L−2}`` (``L ≥ 3``) or ``k · lr / log(1/α)`` (``L = 2``),
        as the flow's ``ts``; shape ``(m,)`` (``(A, m)`` for ``A`` scales)."""
        return self.steps * self.lr * np.asarray(time_unit(self.depth, self.log_alpha))[..., None]

    @property
    def W(self) -> np.ndarray:
        """The end-to-end matrix ``W_L ⋯ W_1``, ``(m, rows, columns)``."""
        out = self.layers[0]
        for w in self.layers[1:]:
            out = w @ out
        return out

    @property
    def weights(self) -> np.ndarray:
        """``W``, under the name every family's results share."""
        return self.W

    @property
    def singular_values(self) -> np.ndarray:
        """``W``'s singular values, descending, ``(m, min(rows, columns))``."""
        return np.linalg.svd(self.W, compute_uv=False)

    @property
    def b(self) -> np.ndarray:
        """``b = log σ / (L log α)`` of ``W``'s singular values, as
        [`DeepLinearFlowResult.b`][gradflow.DeepLinearFlowResult] (``σ`` clipped to the smallest positive float64)."""
        log_sv = np.log(np.maximum(self.singular_values, np.finfo(np.float64).tiny))
        return log_scales(log_sv, self.log_alpha, self.depth)

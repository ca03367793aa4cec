"""The greedy low-rank limit of a factorised model: its path of saddles (docs/math.md, *Full weights: the greedy
low-rank limit*)."""

from __future__ import annotations

import numpy as np

from .._kit._deprecation import renamed, renamed_method
from .._kit._greedy import AbstractGreedyPath
from ._sleeping import fold


class FactorizedGreedyPath(AbstractGreedyPath):
    """The greedy low-rank limit (docs/math.md, *Full weights: the greedy low-rank limit*): stages
    ``k = 0..K`` of a [`FactorizedModel`][gradflow.FactorizedModel] and their diagnostics.

    Stage k holds the saddle ``W̄^k`` on ``[T_k, T_{k+1})`` in rescaled time (``T_{K+1} = ∞``). Arrays indexed
    by stage have ``K + 1`` rows, those indexed by transition ``k → k+1`` have ``K`` rows; ``J`` is the number
    of weight matrices and ``k_max`` the largest width.

    Attributes:
        times: ``(K+1,)`` the stage times ``T_0 = 0 < T_1 ≤ … ≤ T_K``.
        activated: ``(K,)`` the weight matrix ``j_k`` that gains a rank at ``T_{k+1}``.
        ranks: ``(K+1, J)`` the rank of every ``W̄_j^k``.
        W: per weight matrix j, ``(K+1, m_j, n_j)`` the saddles ``W̄_j^k`` (``W̄^0 = 0``).
        loss: ``(K+1,)`` ``L(W̄^k)``.
        sigma: ``(K+1, J)`` ``σ_1(G_j(W̄^k))``, the speed of factor j's leading sleeping direction (0 below
            ``g_zero·G``, and where factor j has no sleeping direction left).
        b: ``(K+1, J, k_max)`` the log scales ``e_{j,i} ∈ [0, 1]`` of the sleeping directions of every factor at
            ``T_k`` (of the singular values of ``W_j``, ``σ ≈ α^{2e}``), ascending (``k_j − r_j`` of them; NaN
            beyond).
        rates: ``(K+1, J, k_max)`` their signed speeds on stage k: ``σ_i(G_j(W̄^k))`` in order, but ``−σ_s`` for a
            direction that shrinks (the last one where ``orientation`` and ``saddle_orientation`` differ, one lost
            in phase (B)); see :meth:`sleeping_at` (NaN beyond).
        orientation: ``(K+1, J)`` ``sign det W_j`` carried by the flow into stage k, for a square ``W_j`` of full
            width whose sleeping directions have all moved below 1 (0: undefined).
        saddle_orientation: ``(K+1, J)`` ``sign det(W̄_j^k + G_j(W̄^k))``, the orientation that stage k grows
            (0 where ``W_j`` is not square of full width or ``G_j`` is singular on the sleeping directions).
        delta: ``(K, J)`` the time until factor j escapes: ``e_{j,1}/σ_1``, or ``(2 − e_{j,1})/σ_1`` for a
            direction that shrinks to ``e = 1`` and grows back (∞ if it cannot).
        final_delta: ``(J,)`` the same at the last stage (all ∞ when the path ended with ``T = ∞``).
        delta_gap: ``(K,)`` Δ of the runner-up factor minus Δ of ``j_k`` (∞ if alone).
        runner_up: ``(K,)`` the runner-up factor (-1 if none).
        singular_gap: ``(K,)`` ``(σ_1 − σ_2)/σ_1`` of ``G_{j_k}``: the escape direction is unique iff > 0.
        hessian_min_eig: ``(K+1,)`` the smallest eigenvalue of the Hessian of L in the factors at
            ``W̄^k`` (balanced factors), off the gauge directions ``(U X, −V Xᵀ)``: ``W̄^k`` is a strict
            local minimum at its ranks iff > 0 (``+∞`` at ``W̄^0 = 0``, NaN if not checked).
        stationarity: ``(K+1,)`` ``max_j ‖P_T(G_j)‖_2 / G``, the gradient along the rank-``r_j`` manifold at
            ``W̄^k`` (``P_T`` its tangent projection; ``G = max_j σ_1(G_j(0))``).
        epsilon_discrepancy: ``(K,)`` the largest distance between the ``W̄^{k+1}`` from the two smallest ε,
            relative to ``max_j ‖W̄_j^{k+1}‖_2`` (∞: different ranks).
        perturbation_spread: ``(K,)`` the same for perturbed phase-(B) starts (NaN if not run).
        assumptions_ok: ``(K+1, 3)`` bool, per stage: a unique escape (one factor, a simple top singular
            value, no rank lost on the way in); a strict local minimum at the ranks; the ε → 0 limit and
            the perturbed starts agree (a check that was not run reads True).
        result, message, warnings: as for [`GreedyPath`][gradflow.GreedyPath]: ``"successful"`` (no factor
            has a sleeping direction with ``σ_1 > 0`` left), ``"max_stages"``, ``"phase_b_failed"``,
            ``"no_minimiser"`` or ``"non_finite"``.
    """

    activated: np.ndarray
    ranks: np.ndarray
    W: tuple[np.ndarray, ...]
    sigma: np.ndarray
    rates: np.ndarray
    orientation: np.ndarray
    saddle_orientation: np.ndarray
    delta: np.ndarray
    singular_gap: np.ndarray

    @property
    def weights(self) -> tuple[np.ndarray, ...]:
        """``W``: the saddles of every stage, as ``FactorizedFlowResult.weights``."""
        return self.W

    def weights_at(self, tau) -> tuple[np.ndarray, ...]:
        """``W̄_j^k`` for the stage holding τ (piecewise constant), per j of shape ``τ.shape + (m_j, n_j)``."""
        k = self.stage_at(tau)
        return tuple(w[k] for w in self.W)

    W_at = renamed_method("weights_at", "W_at", "FactorizedGreedyPath")
    factor = renamed("activated", "factor", "FactorizedGreedyPath")

    @property
    def speeds(self) -> np.ndarray:
        """``rates``: on stage k the sleeping exponents move as ``b^k − (τ − T_k) rates^k``."""
        return self.rates

    def sleeping_at(self, tau) -> np.ndarray:
        """The sleeping exponents ``fold(b^k − (τ − T_k) rates^k)``, ``fold(x) = min(x, 2 − x)`` (a shrinking
        direction turns back at 1), piecewise linear, shape ``τ.shape + (J, k_max)``, NaN beyond the ``k_j − r_j``
        sleeping directions of ``W_j``; not sorted within a stage when a direction lost in phase (B) passes another."""
        return fold(super().b_at(tau))

    def b_at(self, tau) -> tuple[np.ndarray, ...]:
        """The limit's log scales of the singular values of every ``W_j`` at times τ, laid out as
        ``FactorizedFlowResult.b``: per j of shape ``τ.shape + (k_j,)``, for the singular values in descending
        order, 0 for the ``r_j^k`` learned directions, then the sleeping exponents (:meth:`sleeping_at`) ascending;
        ``b = log σ / (2 log α)`` is 1 at the start and 0 once learned (docs/math.md, *Full weights: comparing the
        limits*)."""
        widths = np.asarray(self.ranks)[0] + np.count_nonzero(~np.isnan(np.asarray(self.b)[0]), axis=-1)
        return tuple(predicted_log_scales(self, tau, j, int(w)) for j, w in enumerate(widths))


def predicted_log_scales(path, tau, j: int, width: int) -> np.ndarray:
    """The limit's log scales of the ``width`` singular values of ``W_j`` at times ``tau`` (descending ``σ``):
    0 for the ``r_j^k`` learned directions, then the path's sleeping exponents ``e_{j,i}(τ)``, piecewise linear,
    ascending (a direction lost in phase (B) may pass another within a stage)."""
    tau = np.asarray(tau, dtype=np.float64)
    k = path.stage_at(tau)
    rank = np.asarray(path.ranks)[k, j]
    sleeping = np.sort(np.asarray(path.sleeping_at(tau))[..., j, :], axis=-1)  # NaN (no direction) last
    out = np.zeros(tau.shape + (width,))
    for i in range(width):
        s = i - rank  # index among the sleeping directions, where i is not learned
        out[..., i] = np.where(s >= 0, np.take_along_axis(sleeping, np.clip(s, 0, None)[..., None], -1)[..., 0], 0.0)
    return out

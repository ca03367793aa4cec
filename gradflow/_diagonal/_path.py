"""The greedy limit of a model with diagonal weights: the path of Algorithm 1 (docs/math.md, *The stages*)."""

from __future__ import annotations

import numpy as np

from .._kit._deprecation import renamed, renamed_method
from .._kit._greedy import AbstractGreedyPath


class GreedyPath(AbstractGreedyPath):
    """The output of Algorithm 1 (docs/math.md, *The stages*): stages ``k = 0..K`` and their diagnostics.

    Stage ``k`` holds ``θ^k`` on ``[T_k, T_{k+1})`` in rescaled time (``T_{K+1} = ∞``). Arrays indexed by
    stage have ``K + 1`` rows; arrays indexed by transition ``k → k+1`` have ``K`` rows.

    Attributes:
        times: ``(K+1,)`` the stage times ``T_0 = 0 < T_1 ≤ … ≤ T_K``.
        u, v, beta: ``(K+1, p)`` the stationary points ``θ^k = (u^k, v^k)`` and ``β^k = u^k ⊙ v^k``
            (``β^0 = 0``). ``v^k = s^k ⊙ u^k``. When ``u0, v0`` were given, the signs match the flow from
            ``α(u0, v0)`` (the larger of ``|u0_i|, |v0_i|`` keeps its sign); otherwise ``u ≥ 0``.
        b: ``(K+1, p)`` the log-scale weights ``b^k`` (``b^0 = 1``), eq. (10).
        loss: ``(K+1,)`` ``L(θ^k)``.
        g: ``(K+1, p)`` ``g(θ^k) = −∇_β L``, with entries below ``g_zero·G`` (which include the whole
            support, where θ^k is stationary) set to exactly 0, as Algorithm 1 uses them.
        support: ``(K+1, p)`` bool, ``S_k = supp(u^k)``.
        delta: ``(K, p)`` ``Δ_k(i)`` of eq. (8) for every coordinate (∞ where not a candidate).
        activated: ``(K,)`` the coordinate ``i_k`` activated at ``T_{k+1}``.
        sign: ``(K,)`` bool, whether ``v_{i_k}`` took the sign of ``u_{i_k}`` (``g_{i_k}(θ^k) > 0``).
        final_delta: ``(p,)`` Δ at the last stage (all ∞ when the path ended with ``T = ∞``).
        delta_gap: ``(K,)`` Δ of the runner-up minus Δ of the winner (Assumption 4.2; ∞ if alone).
        runner_up: ``(K,)`` the runner-up coordinate (-1 if none).
        hessian_min_eig: ``(K+1,)`` the smallest eigenvalue of the Hessian of ``ũ ↦ L(ũ, s^k ⊙ ũ)`` on
            ``S_k`` at ``u^k`` (Assumption 4.3; ``+∞`` for the empty support, NaN if not checked).
        perturbation_spread: ``(K,)`` the largest distance between the endpoint of phase (B) and the
            endpoints from perturbed starts, relative to ``‖u^{k+1}‖_∞`` (Assumption 4.4; NaN if not run).
        epsilon_discrepancy: ``(K,)`` the distance between the endpoints from the two smallest ε,
            relative to ``‖u^{k+1}‖_∞`` (the ε → 0 limit of eq. 11).
        stationarity: ``(K+1,)`` ``max_{i ∈ S_k} |g_i(θ^k)| / G``, the residual of the steady state.
        assumptions_ok: ``(K+1, 3)`` bool, columns Assumptions 4.2, 4.3, 4.4 for stage k (row k
            covers θ^k and the transition out of it; a check that was not run reads True).
        result: why the path ended, as in diffrax: ``"successful"`` (``T_{K+1} = ∞``: nothing is left to
            learn), ``"max_stages"`` (stopped at ``max_stages``), or, returned only with ``throw=False``,
            ``"phase_b_failed"`` (a phase (B) did not reach a stationary point), ``"no_minimiser"`` (a phase (B)
            runs off to infinity: the loss has no minimiser on the new support) or ``"non_finite"`` (the loss or
            ``g`` is NaN or infinite at a stage's point).
        message: the same in words, with the stage and the reason for a failure.
        warnings: every assumption failure, in words (each was also emitted with ``warnings.warn``; a failed
            phase (B) is in ``message`` instead).
    """

    u: np.ndarray
    v: np.ndarray
    beta: np.ndarray
    g: np.ndarray
    support: np.ndarray
    delta: np.ndarray
    activated: np.ndarray
    sign: np.ndarray

    @property
    def weights(self) -> np.ndarray:
        """``β^k``, ``(K+1, p)``: the weights of every stage, as ``FlowResult.weights``."""
        return self.beta

    def weights_at(self, tau) -> np.ndarray:
        """``β^k`` for the stage holding τ (piecewise constant), shape ``τ.shape + (p,)``: drawn over a flow's
        ``weights``."""
        return self.beta[self.stage_at(tau)]

    beta_at = renamed_method("weights_at", "beta_at", "GreedyPath")
    coordinate = renamed("activated", "coordinate", "GreedyPath")

    @property
    def speeds(self) -> np.ndarray:
        """``g(θ^k)``: on stage k the log-scale weights move as ``b^k − (τ − T_k) g(θ^k)`` (paper eq. 10)."""
        return self.g

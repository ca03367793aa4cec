"""The greedy limit of gradient flow from small initialisation: the paper's Algorithm 1 (docs/math.md,
*Algorithm 1: the greedy limit*).

As the initialisation scale α → 0, gradient flow in rescaled time τ = t / log(1/α) follows a
piecewise-constant path of stationary points θ^k = (u^k, v^k), v^k = s^k ⊙ u^k, held on
[T_k, T_{k+1}), while the log-scale weights b = log_α w move linearly (paper Theorem 4.5).
:func:`greedy_limit` computes that path:

- (A) paper eqs. (8)–(10): ``Δ_k(i) = (b_i^k − 1 + sgn g_i(θ^k)) / g_i(θ^k)`` for coordinates outside
  ``S_k`` with ``g_i ≠ 0`` (else ∞), ``i_k = argmin Δ_k``, ``T_{k+1} = T_k + Δ_k(i_k)``,
  ``b^{k+1} = b^k − g(θ^k) Δ_k(i_k)``; started from ``T_0 = 0``, ``b^0 = 1``, ``θ^0 = 0`` (docs/math.md,
  *The initial log-scale weight*: the paper's pseudocode misprints ``b^0 = 0``).
- (B) paper eq. (11): ``θ^{k+1} = lim_{ε→0} lim_{t→∞} ψ(t, ε)``, ψ the unscaled gradient flow from
  ``θ^k + (ε e_{i_k}, sgn(g_{i_k}) ε e_{i_k})``.

Phase (B) is a flow on the support. On ``S_k ∪ {i_k}`` the conservation law keeps ``u_i² − v_i² = 0``, so
``v = s ⊙ u`` throughout and the flow reduces to the magnitudes ``y = |u|``:

    dy/dt = s ⊙ y ⊙ g(β),    β = s ⊙ y²  (embedded into R^p, zero off the support),

a system of the support's size. It is integrated in ``z = log y`` (``dz/dt = s ⊙ g(β)``), where the escape of
the new coordinate from ε, of duration ~log(1/ε)/|g_{i_k}|, is a straight line crossed in a few steps and
the step control is on the relative error of the weights. The state is padded to 64 slots with a mask (a
prefix of the slots), beyond that to a power of two, and every Jacobian is built from the active slots
only, so one compilation serves every support up to 64 at the cost of its actual size. The solver is a
linearly implicit, L-stable W-method of order 2 (the escape and the relaxation onto θ^{k+1} run at very
different rates): two evaluations of g and one LU factorisation per step, with a ``∂g/∂β`` kept from step
to step by Broyden's update (rebuilt only when it mispredicts the change of g; the factor ``∂β/∂z = 2β`` is
exact at every step), until it is nearly steady; it is then polished by Newton's method on
``g_S(β_S) = 0``, which starts from the matrix the flow kept. The
trajectory only has to pick the basin; the last digits come from Newton, which also puts a leaving
coordinate whose root lies on the boundary ``β_j = 0`` exactly there. The ε → 0 limit is taken by
running the flow from every ε of ``GreedyTolerances.epsilons`` (one compiled call per stage, flow and
Newton together) and checking that the endpoints agree; the smallest ε gives θ^{k+1} and the
discrepancy is reported. This is honest because, when θ^{k+1} is
a strict local minimum (Assumption 4.3), the endpoint is locally constant in ε: the start is
``O(ε²)`` off the unstable manifold of θ^k along ``e_{i_k}`` (the coupling to ``y_{i_k}`` is
quadratic), so every small enough ε lands in the same basin, and a disagreement means that the
limit (11) is not reached at these ε (reported, never hidden).
"""

from __future__ import annotations

import dataclasses
import enum
import math
import warnings
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._assumptions import (
    AssumptionWarning,
    choose_coordinate,
    hessian_min_eig,
    perturbed_starts,
    reduced_g,
    restricted_hessian,
    time_until_active,
)
from ._checks import check_init, check_int
from ._config import float64
from ._factorized import FactorizedModel
from ._frame import apply_frame, frame_of
from ._model import DiagonalModel, check_model


@dataclasses.dataclass(frozen=True)
class GreedyTolerances:
    """Every numerical threshold of :func:`greedy_limit`, scale-aware and overridable.

    Gradients are measured against ``G = ‖g(0)‖_∞`` (the first stage's speed, so ``T_1 = 1/G``):
    the only scale the problem has before any coordinate is active, and one that does not shrink as
    the loss goes to zero (a threshold relative to ``‖g(θ^k)‖`` would turn rounding noise at a
    zero-loss stage into spurious stages). Weights are measured against the size of the current
    weights. Defaults, and why:

    Attributes:
        g_zero: ``g_i(θ^k)`` counts as 0 when ``|g_i| ≤ g_zero · G``. A coordinate with a smaller
            gradient would need a time beyond ``1/(g_zero·G) = T_1/g_zero`` to activate, so the
            path treats stage times beyond about ``10⁶ T_1`` as ∞. Must sit well above
            ``stationary`` (the accuracy of g on the support).
        steady: phase (B)'s flow stops once every support coordinate has
            ``|g_i| ≤ steady · |g_{i_k}(θ^k)|`` (relative to the gradient that drives this stage, so the
            start never counts as steady) or is leaving; the endpoint is then polished by Newton's method. ``1e-4`` is well inside Newton's
            basin (quadratic convergence from there) yet reached after a few steps of the slow exponential
            approach.
        stationary: the Newton polish stops at ``max_{i∈S} |g_i| ≤ stationary · G``; θ^{k+1} is then a
            stationary point to about ``stationary·G / λ_min`` in β (λ_min of the β-Hessian on S), far
            below every other threshold. ``1e-10`` is about 10⁶ above float64 rounding of g.
        support: at the end of phase (B) a coordinate with ``|u_i| ≤ support · ‖u‖_∞`` that is shrinking
            (``s_i g_i < 0``) is leaving (paper Lemma D.4) and is dropped (set to exactly 0 before the
            polish); its weight ``≤ 1e-8 ‖β‖`` no longer moves the others. The polish also drops a
            shrinking coordinate of any size whose Newton step would cross 0 (the root on the support
            lies on the boundary ``β_i = 0``): one that leaves with ``g_i → 0`` decays only like
            ``t^{−1/2}`` and is often still above this threshold when the flow is steady.
        epsilons: the ε of eq. (11), relative to the natural size of the new coordinate,
            ``sqrt(|g_{i_k}| / |∂g_{i_k}/∂β_{i_k}|)`` at θ^k (the size at which it would be stationary
            alone; ``max(‖u^k‖_∞, 1)`` if that curvature is 0). The flow is run from each of them; the
            smallest defines θ^{k+1}. Two decades apart, so that a limit that is not reached shows.
        epsilon_agreement: the ε → 0 limit counts as reached when the endpoints from the two smallest
            ε agree to ``epsilon_agreement · ‖u^{k+1}‖_∞`` (and have the same support); else the stage
            is flagged (Assumption 4.4 / eq. 11) and a warning is emitted. Polished endpoints of the
            same basin agree to ~1e-10, different basins differ at O(1).
        tie: two candidates are tied in eq. (9) when their Δ differ by at most ``tie · T_{k+1}``;
            this is reported as an Assumption 4.2 failure. ``1e-6`` is far above the rounding of Δ.
        hessian: Assumption 4.3 holds when the smallest eigenvalue of the restricted Hessian (in
            ``ũ``, with ``v = s ⊙ ũ``) exceeds ``hessian · G``. That Hessian is ``4 D H_β D`` with
            ``D = diag(ũ)`` and has the units of g, so ``G`` is its natural scale (for an orthonormal
            linear model its eigenvalues are ``4|β_i|``).
        perturbation: size of the random relative perturbations of phase (B)'s start for
            Assumption 4.4 (``y ↦ y ⊙ (1 + perturbation·z)``, z ~ N(0, 1) clipped to ±3; the paper's
            appendix A uses perturbations of standard deviation 1e-2).
        perturbations: how many perturbed starts to run per stage (0 disables the 4.4 spread check).
        spread: Assumption 4.4 holds when every perturbed endpoint is within
            ``spread · ‖u^{k+1}‖_∞`` of the unperturbed one.
        ode_tol: the step-size controller's tolerance for phase (B), which is integrated in ``log |u|``: the
            local error of ``log |u|`` per step, i.e. the relative error of the weights. Loose on purpose: the
            endpoint is an attractor, so the trajectory only has to stay in its basin (the ε and perturbation
            checks test exactly that); its last digits come from the Newton polish.
        ode_rtol, ode_atol: the step-size controller's tolerances for phase (B) of the greedy low-rank limit
            (a [`FactorizedModel`][gradflow.FactorizedModel], integrated in the factors themselves by an explicit
            method, at ``rtol = min(ode_rtol, steady/100)``; ``ode_atol`` relative to the larger of the current
            weights and the natural size of the new direction).
        max_steps: the most solver steps (accepted or rejected) one phase (B) may take before it is declared not
            to converge (a phase (B) of the default toy takes 15–40).
        newton_steps: the most Newton steps of the polish (from ``steady`` it takes 2–6, the first ones with the
            matrix the flow kept).
    """

    g_zero: float = 1e-6
    steady: float = 1e-4
    stationary: float = 1e-10
    support: float = 1e-4
    epsilons: tuple[float, ...] = (1e-3, 1e-5)
    epsilon_agreement: float = 1e-6
    tie: float = 1e-6
    hessian: float = 1e-6
    perturbation: float = 1e-2
    perturbations: int = 2
    spread: float = 1e-6
    ode_tol: float = 1e-3
    ode_rtol: float = 1e-4
    ode_atol: float = 1e-9
    max_steps: int = 2048
    newton_steps: int = 20

    def __post_init__(self):
        positive = (
            "g_zero",
            "steady",
            "stationary",
            "support",
            "epsilon_agreement",
            "tie",
            "hessian",
            "spread",
            "ode_tol",
            "ode_rtol",
            "ode_atol",
        )
        for name in positive:
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"GreedyTolerances.{name} must be a positive finite number; got {value!r}.")
        if not self.stationary < self.g_zero:
            raise ValueError(
                f"GreedyTolerances.stationary ({self.stationary}) must be smaller than g_zero ({self.g_zero}): "
                "the gradient on the support must be resolved below what counts as a nonzero gradient."
            )
        eps = tuple(float(e) for e in self.epsilons)
        if len(eps) < 2 or any(not (0 < e < 1) for e in eps) or len(set(eps)) != len(eps):
            raise ValueError(
                f"GreedyTolerances.epsilons needs at least two distinct values in (0, 1); got {self.epsilons!r}."
            )
        object.__setattr__(self, "epsilons", tuple(sorted(eps, reverse=True)))
        check_int(self.perturbations, "GreedyTolerances.perturbations", minimum=0)
        if not 0 < self.perturbation < 1 / 3:
            raise ValueError(f"GreedyTolerances.perturbation must lie in (0, 1/3); got {self.perturbation!r}.")
        for name in ("max_steps", "newton_steps"):
            check_int(getattr(self, name), f"GreedyTolerances.{name}")


def stage_index(times: np.ndarray, tau) -> np.ndarray:
    """The stage ``k`` with ``times[k] ≤ τ < times[k+1]``, vectorised over ``τ ≥ 0``."""
    tau = np.asarray(tau, dtype=np.float64)
    if np.any(~(tau >= 0)):
        raise ValueError("rescaled time τ must be non-negative (and not NaN).")
    return np.searchsorted(times, tau, side="right") - 1


class GreedyPath(eqx.Module):
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
        coordinate: ``(K,)`` the coordinate ``i_k`` activated at ``T_{k+1}``.
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
            learn), ``"max_stages"`` (stopped at ``max_stages``) or ``"phase_b_failed"`` (a phase (B) did not
            reach a stationary point; returned only with ``throw=False``).
        message: the same in words, with the stage and the reason for a failure.
        warnings: every assumption failure, in words (each was also emitted with ``warnings.warn``; a failed
            phase (B) is in ``message`` instead).
    """

    times: np.ndarray
    u: np.ndarray
    v: np.ndarray
    beta: np.ndarray
    b: np.ndarray
    loss: np.ndarray
    g: np.ndarray
    support: np.ndarray
    delta: np.ndarray
    coordinate: np.ndarray
    sign: np.ndarray
    final_delta: np.ndarray
    delta_gap: np.ndarray
    runner_up: np.ndarray
    hessian_min_eig: np.ndarray
    perturbation_spread: np.ndarray
    epsilon_discrepancy: np.ndarray
    stationarity: np.ndarray
    assumptions_ok: np.ndarray
    result: str = eqx.field(static=True)
    message: str = eqx.field(static=True)
    warnings: tuple[str, ...] = eqx.field(static=True)

    @property
    def num_stages(self) -> int:
        """``K``, the number of activations (the path has ``K + 1`` stationary points)."""
        return int(self.coordinate.shape[0])

    def stage_at(self, tau) -> np.ndarray:
        """The stage ``k`` with ``T_k ≤ τ < T_{k+1}``, vectorised over ``τ ≥ 0``."""
        return stage_index(self.times, tau)

    def beta_at(self, tau) -> np.ndarray:
        """``β^k`` for the stage holding τ (piecewise constant), shape ``τ.shape + (p,)``."""
        return self.beta[self.stage_at(tau)]

    def loss_at(self, tau) -> np.ndarray:
        """``L(θ^k)`` for the stage holding τ (the loss staircase), shape ``τ.shape``."""
        return self.loss[self.stage_at(tau)]

    def b_at(self, tau) -> np.ndarray:
        """The log-scale weights ``b^k − (τ − T_k) g(θ^k)`` (piecewise linear), shape ``τ.shape + (p,)``."""
        tau = np.asarray(tau, dtype=np.float64)
        k = self.stage_at(tau)
        return self.b[k] - (tau - self.times[k])[..., None] * self.g[k]


# ----------------------------------------------------------------------------------------------
# Phase (B): the flow on the support from each start, then Newton's method, in one compiled call.


class _Outcome(enum.IntEnum):
    """How a run of phase (B) ended: the status per row that :func:`_phase_b` returns."""

    STATIONARY = 0
    MAX_STEPS = 1  # the flow took max_steps without becoming steady
    NOT_STEADY = 2  # the flow reached t1 (or its solver failed) without becoming steady
    NEWTON_FAILED = 3  # Newton's method did not converge or left the sign orthant


_WHY = {
    _Outcome.MAX_STEPS: "the flow took max_steps = {max_steps} solver steps without becoming steady",
    _Outcome.NOT_STEADY: "the flow reached t1 (or its solver failed) without becoming steady",
    _Outcome.NEWTON_FAILED: (
        "Newton's method did not converge, or moved a coordinate that is not leaving out of its sign orthant"
    ),
}


class _Thresholds(NamedTuple):
    """Phase (B)'s thresholds for one stage, as traced scalars, so that every stage reuses one compilation."""

    speed: jax.Array  # |g_{i_k}(θ^k)|, the new coordinate's speed
    steady: jax.Array  # the flow stops once every support |g_i| is below this (or the coordinate is leaving)
    support: jax.Array  # y_i ≤ support · max y is off the support
    tol: jax.Array  # the local error of log y per step
    dt0: jax.Array  # the first step: the new coordinate's log y moves by about 1
    t1: jax.Array  # the flow's last time
    stationary: jax.Array  # Newton's method stops at max_S |g| ≤ stationary


def _columns(mv, active, size, dtype) -> jax.Array:
    """The matrix of the linear map ``mv`` whose columns ``j ≥ active`` are ``e_j``: one ``mv`` (one JVP) per
    active column, in sequence, so that the padded slots of the reduced state cost nothing.

    Batching the columns would turn each small matrix product of g (one per sample) into a batched one, which
    XLA's CPU backend runs 2–3× slower than the same products one column after the other.
    """

    def body(j, cols):
        return cols.at[:, j].set(mv(jax.nn.one_hot(j, size, dtype=dtype)))

    return jax.lax.fori_loop(0, active, body, jnp.eye(size, dtype=dtype))


class _WState(NamedTuple):
    t: jax.Array
    h: jax.Array  # the next step to try
    z: jax.Array
    f: jax.Array  # the field at z: the last evaluation of an accepted step is the first of the next
    dg: jax.Array  # the kept ∂g/∂β
    steps: jax.Array  # steps tried, accepted or not
    rejected: jax.Array  # the last step was rejected: the next one does not grow
    done: jax.Array  # stop(z, f) after an accepted step
    h_accepted: jax.Array  # the last accepted step
    ratio_accepted: jax.Array  # its error over tol (0: none yet)


def _w_flow(field, dg_of, signs, mask, z0, dg0, stop, dt0, t1, tol, max_steps) -> _WState:
    """``dz/dt = f(z)`` (``field``) from ``z0`` until ``stop(z, f(z))`` holds after an accepted step (or ``t1``, or
    ``max_steps`` steps), by the L-stable linearly implicit W-method of order 2 of Steihaug & Wolfbrandt (the
    formula of MATLAB's ``ode23s``, Shampine & Reichelt 1997, with its third-order error estimate):

        W = I − h d A,   d = 1/(2 + √2),   k₁ = W⁻¹ f(z),   f₁ = f(z + h k₁/2),   k₂ = W⁻¹ (f₁ − k₁) + k₁,
        z⁺ = z + h k₂,   k₃ = W⁻¹ (f(z⁺) − (6 + √2)(k₂ − f₁) − 2 (k₁ − f(z))),   error h (k₁ − 2k₂ + k₃)/6:

    two evaluations of g and one LU factorisation per step, and no iteration. A W-method keeps its order for
    any matrix ``A``; here ``A = diag(s) B diag(2β)`` with ``B`` a kept ``∂g/∂β`` (from ``dg0``) and the factor
    ``∂β/∂z = 2β``, which changes by orders of magnitude while the new coordinate escapes, exact at each step.
    After each accepted step ``B`` takes Broyden's update ``B += (Δg − B Δβ) Δβᵀ / ‖Δβ‖²``, so that it maps
    the step's ``Δβ`` onto the observed ``Δg`` (the secant condition); where it mispredicted ``Δg`` by more than
    ``‖Δg‖`` itself (worse than predicting no change) it is rebuilt instead (``dg_of``, one JVP per active
    slot). The step size follows the RMS of the error over the active slots against ``tol`` (exponent 1/3, with
    Gustafsson's predictive correction after accepted steps, Hairer & Wanner II §IV.8, which foresees the error's
    growth where the new coordinate turns onto the steady state; growth at most ``_FACTORMAX`` per step and none
    right after a rejection).
    """
    eye = jnp.eye(z0.size, dtype=z0.dtype)
    both = mask[:, None] & mask[None, :]
    active = jnp.sum(mask)

    def body(s: _WState) -> _WState:
        beta = jnp.where(mask, signs * jnp.exp(2 * s.z), 0.0)
        lu = jax.scipy.linalg.lu_factor(eye - s.h * _D * jnp.where(both, signs[:, None] * s.dg * (2 * beta), 0.0))

        def solve(b):
            return jax.scipy.linalg.lu_solve(lu, b)

        k1 = solve(s.f)
        f1 = field(s.z + 0.5 * s.h * k1)
        k2 = solve(f1 - k1) + k1
        z1 = s.z + s.h * k2
        f2 = field(z1)
        k3 = solve(f2 - _E32 * (k2 - f1) - 2 * (k1 - s.f))
        ratio = jnp.sqrt(jnp.sum((s.h / 6 * (k1 - 2 * k2 + k3)) ** 2) / active) / tol
        ok = (ratio <= 1) & jnp.all(jnp.isfinite(f2))  # NaN or inf: rejected
        factor = _SAFETY * ratio ** (-1 / 3)
        # Gustafsson's prediction after an accepted step: the error's trend over the last two accepted steps.
        predicted = factor * (s.h / s.h_accepted) * (s.ratio_accepted / ratio) ** (1 / 3)
        factor = jnp.where(ok & (s.ratio_accepted > 0), jnp.minimum(factor, predicted), factor)
        factor = jnp.clip(factor, _FACTORMIN, jnp.where(s.rejected, 1.0, _FACTORMAX))
        factor = jnp.where(jnp.isnan(factor), _FACTORMIN, factor)
        t = jnp.where(ok, s.t + s.h, s.t)
        z, f = jnp.where(ok, z1, s.z), jnp.where(ok, f2, s.f)
        dbeta = jnp.where(mask, signs * jnp.exp(2 * z), 0.0) - beta  # 0 after a rejection
        # Δg − B Δβ on the support (f = s ⊙ g; the padded rows of a rebuilt ∂g/∂β are not zero)
        miss = jnp.where(mask, signs * (f - s.f) - s.dg @ dbeta, 0.0)
        rebuild = ok & (jnp.max(jnp.abs(miss)) > jnp.max(jnp.abs(f - s.f)))
        broyden = s.dg + jnp.outer(miss, dbeta) / jnp.maximum(jnp.sum(dbeta**2), jnp.finfo(z0.dtype).tiny)
        return _WState(
            t=t,
            h=jnp.minimum(s.h * factor, t1 - t),
            z=z,
            f=f,
            dg=jax.lax.cond(rebuild, lambda: dg_of(z), lambda: broyden),
            steps=s.steps + 1,
            rejected=~ok,
            h_accepted=jnp.where(ok, s.h, s.h_accepted),
            ratio_accepted=jnp.where(ok, jnp.maximum(ratio, 1e-10), s.ratio_accepted),
            done=ok & stop(z, f),
        )

    def cond(s: _WState):
        return ~s.done & (s.steps < max_steps) & (s.t < t1)

    no = jnp.array(False)
    return jax.lax.while_loop(
        cond,
        body,
        _WState(
            jnp.zeros((), z0.dtype),
            jnp.asarray(dt0, z0.dtype),
            z0,
            field(z0),
            dg0,
            0,
            no,
            no,
            jnp.ones((), z0.dtype),
            jnp.zeros((), z0.dtype),
        ),
    )


def _dg(g_on, beta, active) -> jax.Array:
    """``∂g/∂β`` on the reduced state at ``β_S`` (minus the β-Hessian of L there): one linearisation of g, then
    one JVP per active slot (:func:`_columns`)."""
    _, lin = jax.linearize(g_on, beta)
    return _columns(lin, active, beta.size, beta.dtype)


def _newton(g_on, dg, signs, y, keep, shrinking, stationary, steps, active):
    """Newton's method on ``g_S(β_S) = 0`` in β from magnitudes ``y`` on the support ``S = keep``.

    ``∂g/∂β = −H`` (H the β-Hessian of L on S), so ``β ← β + H⁻¹ g``. ``dg`` is the ``∂g/∂β`` that the flow
    kept (:func:`_w_flow`): it is used as a chord iteration, at one evaluation of g per step and converging
    linearly at the rate of the matrix's relative error, and rebuilt at the current point (:func:`_dg`, the
    leading ``active`` slots: one JVP, about one evaluation of g, per slot), which restores Newton's quadratic
    convergence, when that is cheaper: when at the rate of the last step (``max_S |g|`` after it over before)
    the chord would need more steps to reach ``stationary`` than ``active + _NEWTON_AFTER`` (the rebuild and
    the Newton steps after it). A step that does not reduce ``max_S |g|`` always rebuilds it.

    A step that would move a coordinate out of its sign orthant (``s_j β_j ≤ 0``) is not taken. If
    that coordinate is leaving (``shrinking``: ``s_j g_j < 0`` where the flow stopped), the root on S
    lies on or beyond the boundary ``β_j = 0``, so the flow's limit has ``β_j = 0``: j is dropped from
    S and the iteration goes on from the same point. (A leaving coordinate whose gradient vanishes at
    the limit decays only like ``t^{−1/2}``, not exponentially, and can still be above the ``support``
    threshold when the flow is steady.) Any other such step fails. Stops at ``max_S |g| ≤ stationary``
    or after ``steps`` steps.

    Returns ``(y, converged, residuals)``: ``residuals[n]`` is ``max_S |g|`` before step n (NaN after
    the last one).
    """
    size = y.size

    def body(state):
        n, y, keep, _, _, residuals, dg = state
        beta = jnp.where(keep, signs * y * y, 0.0)
        g = jnp.where(keep, g_on(beta), 0.0)
        gmax = jnp.max(jnp.abs(g))
        converged = gmax <= stationary
        # At the rate of the last step, the chord needs log(gmax/stationary) / log(rate⁻¹) more steps.
        rate = gmax / residuals[jnp.maximum(n - 1, 0)]
        slow = (n > 0) & ~(jnp.log(gmax / stationary) < -(active + _NEWTON_AFTER) * jnp.log(rate))
        dg = jax.lax.cond(slow & ~converged, lambda: _dg(g_on, beta, active), lambda: dg)
        hess = jnp.where(keep[:, None] & keep[None, :], -dg, jnp.eye(size, dtype=y.dtype))
        beta_next = beta + jnp.linalg.solve(hess, g)
        out = keep & ~(signs * beta_next > 0)
        failed = ~converged & (jnp.any(out & ~shrinking) | ~jnp.all(jnp.isfinite(beta_next)))
        step = ~converged & ~failed & ~jnp.any(out)
        keep = keep & ~(~converged & ~failed & out)
        y = jnp.where(keep, jnp.where(step, jnp.sqrt(jnp.maximum(signs * beta_next, 0.0)), y), 0.0)
        return n + 1, y, keep, converged, failed, residuals.at[n].set(gmax), dg

    def cond(state):
        n, _, _, converged, failed, _, _ = state
        return (n < steps) & ~converged & ~failed

    init = (0, jnp.where(keep, y, 0.0), keep, False, False, jnp.full(steps, jnp.nan, dtype=y.dtype), dg)
    _, y, _, converged, _, residuals, _ = jax.lax.while_loop(cond, body, init)
    return y, converged, residuals


@eqx.filter_jit
def _phase_b(model, base, slot, epsilons, factors, index, mask, signs, thresholds, max_steps, newton_steps):
    """Phase (B) from θ^k (magnitudes ``base`` on the reduced support, 0 in the new coordinate's ``slot``): the
    flow of ``z = log y``,

        dz/dt = s ⊙ g(s ⊙ e^{2z})   (on the support; the padded slots stay put),

    until nearly steady, then Newton's method (:func:`_newton`) from its endpoint.

    In ``z`` the escape of the new coordinate from ε is a straight line (``dz_i/dt ≈ |g_i(θ^k)|``) that
    the solver crosses in a few steps, a leaving coordinate stays positive, and the step control is on the
    relative error of ``y``. ``thresholds`` (a ``_Thresholds``): the flow stops when every support
    coordinate has ``|g_i| ≤ steady`` or is leaving (``y_i ≤ support · max y`` and shrinking,
    ``s_i g_i < 0``); coordinates with ``y_i ≤ support · max y`` are set to 0 before and after Newton's
    method (the path's definition of the support). The rows run one after the other (``lax.map``): each
    stops at its own step count, and batching them would make every small matrix product of g a slower
    batched one. Row r starts from ``base`` with ``y_slot = epsilons[r] · natural``, times ``factors[r]`` (1, or
    the perturbations of Assumption 4.4), where ``natural = sqrt(|g_{i_k}| / |∂g_{i_k}/∂β_{i_k}|)`` at θ^k
    (``max(‖base‖_∞, 1)`` if that curvature is 0) is the new coordinate's natural size. The flow is
    :func:`_w_flow`; every row starts from ``∂g/∂β`` at θ^k, which also gives that curvature, and Newton's
    method starts from the matrix its flow kept. ``mask`` is a prefix of the padded state, so one compilation
    serves every support that fits. Returns the polished endpoints, a status per row (0: stationary, else an
    ``_Outcome``), the flow's step counts and the Newton residuals.
    """
    speed, steady, support, tol, dt0, t1, stationary = thresholds
    active = jnp.sum(mask)
    g_on = reduced_g(model, index, mask)

    def beta_of(z):
        return jnp.where(mask, signs * jnp.exp(2 * z), 0.0)

    def field(z):
        return jnp.where(mask, signs * g_on(beta_of(z)), 0.0)

    def is_steady(z, f):  # f = s ⊙ g on the support
        leaving = (z <= jnp.log(support) + jnp.max(jnp.where(mask, z, -jnp.inf))) & (f < 0)
        return jnp.all(~mask | (jnp.abs(f) <= steady) | leaving)

    def log_y(y):
        return jnp.where(mask, jnp.log(jnp.where(mask, y, 1.0)), 0.0)

    def dg_of(z):
        return _dg(g_on, beta_of(z), active)

    dg0 = _dg(g_on, jnp.where(mask, signs * base * base, 0.0), active)
    curvature = jnp.abs(dg0[slot, slot])
    natural = jnp.where(curvature > 0, jnp.sqrt(speed / curvature), jnp.maximum(jnp.max(base), 1.0))
    starts = jnp.where(jnp.arange(base.size) == slot, epsilons[:, None] * natural, base) * factors

    def one(y0):
        end = _w_flow(field, dg_of, signs, mask, log_y(y0), dg0, is_steady, dt0, t1, tol, max_steps)
        y = jnp.where(mask, jnp.exp(end.z), 0.0)
        keep = mask & (y > support * jnp.max(y))
        y, converged, residuals = _newton(g_on, end.dg, signs, y, keep, end.f < 0, stationary, newton_steps, active)
        y = jnp.where(y > support * jnp.max(y), y, 0.0)  # a root on the boundary may come out as β_j ≈ +0
        flow_status = jnp.where(end.steps >= max_steps, 1, 2)
        status = jnp.where(end.done, jnp.where(converged, 0, 3), flow_status)
        return y, status, end.steps, residuals

    return jax.lax.map(one, starts)


@eqx.filter_jit
def _g_and_loss(model, beta):
    return model.g(beta), model.loss_of_beta(beta)


def _capacity(n: int, p: int) -> int:
    """Padded size of the reduced state: ``_PADDED`` (one compilation for every support up to that size),
    beyond it a power of two ≥ n; at most p."""
    return min(p, max(_PADDED, 1 << (n - 1).bit_length()))


_PADDED = 64
_D = 1 / (2 + math.sqrt(2))  # the W-method's diagonal coefficient (L-stable)
_E32 = 6 + math.sqrt(2)  # and the coefficient of its error estimate
_SAFETY = 0.9  # the step-size controller's safety factor
_FACTORMIN = 0.2  # and its bounds on the change of the step per step
_FACTORMAX = 5.0
_NEWTON_AFTER = 2  # Newton steps after a rebuild of ∂g/∂β, in the cost of a rebuild


class _Reduced(eqx.Module):
    index: np.ndarray
    mask: np.ndarray
    signs: np.ndarray


def _reduce(coords: np.ndarray, signs: np.ndarray, p: int) -> _Reduced:
    cap = _capacity(coords.size, p)
    index = np.zeros(cap, dtype=np.int64)
    index[: coords.size] = coords
    mask = np.zeros(cap, dtype=bool)
    mask[: coords.size] = True
    return _Reduced(index, mask, np.where(mask, signs[index], 1.0))


# ----------------------------------------------------------------------------------------------


@float64
def greedy_limit(
    model: DiagonalModel,
    *,
    u0=None,
    v0=None,
    max_stages: int | None = None,
    tolerances: GreedyTolerances = GreedyTolerances(),
    check_assumptions: bool = True,
    seed: int = 0,
    progress: bool = False,
    throw: bool = True,
) -> GreedyPath:
    """The α → 0 limit of gradient flow from ``α (u0, v0)``: Algorithm 1 of the paper (docs/math.md,
    *Algorithm 1: the greedy limit*).

    Args:
        model: the model with diagonal weights, or a [`FactorizedModel`][gradflow.FactorizedModel]: then the
            greedy low-rank limit (docs/math.md, *Full weights: the greedy low-rank limit*) comes back as a
            [`FactorizedGreedyPath`][gradflow.FactorizedGreedyPath].
        u0, v0: optional initialisation directions. They do not change the path (only ``b^0 = 1``
            enters), but they are checked against Assumption 4.2 (``|u0_i| ≠ |v0_i|``, else a
            ``ValueError`` naming the coordinates; a near-degenerate gap is an ``AssumptionWarning``, as
            for [`simulate_flow`][gradflow.simulate_flow]) and fix the signs of the returned ``u, v`` to
            match the flow from ``α (u0, v0)``.
        max_stages: stop after this many activations (``None``: until ``T = ∞``, which includes a
            loss that has reached zero, since then ``g = 0``).
        tolerances: the thresholds, see :class:`GreedyTolerances`.
        check_assumptions: compute the Hessian of Assumption 4.3 and the perturbed phase-(B) runs
            of Assumption 4.4. The 4.2 checks (ties, leaving coordinates) and the ε → 0 check are
            part of the algorithm and always run.
        seed: seeds the perturbations of Assumption 4.4.
        progress: print one line per stage.
        throw: as in diffrax: raise a ``RuntimeError`` if a phase (B) does not reach a stationary point.
            With ``throw=False`` the path up to that stage comes back, with the failure in ``result``
            and ``message``.

    Returns:
        A :class:`GreedyPath`. Assumption failures are recorded in it and emitted as
        :class:`AssumptionWarning`; only a phase (B) that cannot reach a stationary point ends the path
        early (``result = "phase_b_failed"``).

    Ties in eq. (9) (Δ within ``tolerances.tie · T_{k+1}``) are broken towards the lowest coordinate
    index; the other tied coordinates land on ``b ∈ {0, 2}`` too and are activated at the next stages
    at the same time.
    """
    if isinstance(model, FactorizedModel):  # full weights: the greedy low-rank limit (gradflow/_glrl.py)
        from ._glrl import greedy_low_rank

        kwargs = dict(max_stages=max_stages, tolerances=tolerances, check_assumptions=check_assumptions, seed=seed)
        return greedy_low_rank(model, u0=u0, v0=v0, progress=progress, throw=throw, **kwargs)
    check_model(model)
    if not isinstance(tolerances, GreedyTolerances):
        raise TypeError(f"tolerances must be a GreedyTolerances; got {type(tolerances).__name__}.")
    if max_stages is not None:
        max_stages = check_int(max_stages, "max_stages", minimum=0)
    p = model.p
    if (u0 is None) != (v0 is None):
        raise ValueError("give both u0 and v0, or neither.")
    swap, sign = np.zeros(p, dtype=bool), np.ones(p)
    if u0 is not None:
        swap, sign = frame_of(*check_init(u0, v0, p, model.names, stacklevel=3))
    # The data go to the device once, not with every compiled call.
    model = jax.tree_util.tree_map(lambda x: jnp.asarray(x) if eqx.is_array(x) else x, model)
    g0, loss0 = _evaluate(model, np.zeros(p), np.ones(p))
    G = float(np.max(np.abs(g0))) or 1.0  # g(0) = 0: every Δ is ∞; any positive G keeps the thresholds finite
    ctx = _Context(model, tolerances, G, check_assumptions, np.random.default_rng([seed, 4]))
    stages, transitions, end = _run(ctx, g0, loss0, max_stages, progress)
    if throw and end.result == "phase_b_failed":
        raise RuntimeError(
            f"greedy_limit: {end.message}. Pass throw=False to get the path up to stage {len(transitions)}."
        )
    return _stack(stages, transitions, end, swap, sign)


# ----------------------------------------------------------------------------------------------
# Algorithm 1 as a loop over immutable records: a stage θ^k, then the transition k → k+1.


@dataclasses.dataclass(frozen=True)
class _Context:
    """What stays fixed during one run of Algorithm 1."""

    model: DiagonalModel
    tol: GreedyTolerances
    G: float  # ‖g(0)‖_∞, the scale of every gradient threshold
    check: bool  # run the checks of Assumptions 4.3 and 4.4
    rng: np.random.Generator  # the perturbations of Assumption 4.4


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Checked:
    """A record's two flags of Assumptions 4.2–4.4 (which ones: see the record) and its warnings, in words."""

    ok: tuple[bool, bool] = (True, True)
    warnings: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Stage(_Checked):
    """``θ^k`` and its checks: one row of the stage arrays of :class:`GreedyPath`.

    The weights are held in the frame ``u_n > |v_n|`` of the flow as magnitudes ``y = |u_n|`` and signs
    ``s`` (``v_n = s ⊙ u_n``); ``ok`` is Assumption 4.2 (every coordinate that left on the way in has
    ``g ≠ 0``) and 4.3.
    """

    time: float
    y: np.ndarray
    signs: np.ndarray
    b: np.ndarray
    support: np.ndarray
    g: np.ndarray  # g(θ^k) with the support and |g_i| ≤ g_zero·G set to 0, as Algorithm 1 uses it
    loss: float
    stationarity: float
    hessian_min_eig: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Transition(_Checked):
    """Stage ``k → k+1``: phase (A)'s choice and phase (B)'s end; one row of the transition arrays.

    ``ok`` is Assumption 4.2 (no tie in eq. 9) and 4.4 (the ε → 0 limit is reached and the perturbed
    starts agree).
    """

    delta: np.ndarray
    coordinate: int
    sign: bool
    delta_gap: float
    runner_up: int
    epsilon_discrepancy: float
    perturbation_spread: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class _End(_Checked):
    """Why the path ended; ``ok`` holds the flags (4.2, 4.4) of a transition that was started but failed."""

    result: str
    message: str
    final_delta: np.ndarray


@dataclasses.dataclass(frozen=True)
class _PhaseB:
    """The end of phase (B) (eq. 11) from every ε and the perturbed starts.

    ``outcome`` is that of the first ε whose run failed (then ``epsilon`` is that ε and ``y`` is None),
    else ``STATIONARY`` with ``y = |u^{k+1}|``, the ε discrepancy and the spread of the perturbed runs.
    """

    outcome: _Outcome
    epsilon: float
    y: np.ndarray | None = None
    discrepancy: float = math.nan
    spread: float = math.nan


def _run(ctx: _Context, g0, loss0, max_stages, progress) -> tuple[list[_Stage], list[_Transition], _End]:
    """Algorithm 1 from ``θ^0 = 0``, ``b^0 = 1``, ``T_0 = 0``: the stages, the transitions and the end."""
    p, names, tol = ctx.model.p, ctx.model.names, ctx.tol
    stage = _stage(ctx, 0, 0.0, np.zeros(p), np.ones(p), np.ones(p), np.zeros(p, dtype=bool), g0, loss0, (True, ()))
    _emit(stage.warnings)
    stages, transitions = [stage], []
    while True:
        k = len(transitions)
        delta = time_until_active(stage.b, stage.g, ~stage.support)
        if not np.any(np.isfinite(delta)):
            message = "T = ∞: no coordinate off the support has a gradient above g_zero·G, so none activates"
            return stages, transitions, _End(result="successful", message=message, final_delta=delta)
        if max_stages is not None and k >= max_stages:
            message = f"stopped after max_stages = {max_stages} activations (final_delta holds the next Δ)"
            return stages, transitions, _End(result="max_stages", message=message, final_delta=delta)
        choice = choose_coordinate(delta, tol.tie * (stage.time + float(np.min(delta))))
        i = choice.coordinate
        tie = ()
        if choice.tied.size:
            tie = (
                f"Assumption 4.2 fails at stage {k}: Δ is tied between {names[i]} and "
                f"{', '.join(names[j] for j in choice.tied)} (gap {choice.gap:.3g}); activating "
                f"{names[i]} (lowest index) first.",
            )
        signs = stage.signs.copy()
        signs[i] = np.sign(stage.g[i])
        phase_b = _phase_b_ends(ctx, stage, signs, i)
        if phase_b.outcome is not _Outcome.STATIONARY:
            why = _WHY[phase_b.outcome].format(max_steps=tol.max_steps)
            message = (
                f"phase (B) of stage {k} (activating {names[i]}) did not reach a stationary point: from "
                f"ε = {phase_b.epsilon:g}, {why}"
            )
            _emit(tie)
            end = _End(result="phase_b_failed", message=message, final_delta=delta, ok=(not tie, False), warnings=tie)
            return stages, transitions, end
        transition = _transition(ctx, k, delta, choice, stage.g[i], phase_b, tie)
        _emit(transition.warnings)
        transitions.append(transition)
        step = float(delta[i])
        b = np.clip(stage.b - stage.g * step, 0.0, 2.0)
        landed = np.concatenate([[i], choice.tied])
        b[landed] = 1.0 - np.sign(stage.g[landed])  # eq. (10): exactly 0 (v takes u's sign) or 2 (v flips)
        support = phase_b.y > tol.support * np.max(phase_b.y)
        y = np.where(support, phase_b.y, 0.0)
        g_raw, loss = _evaluate(ctx.model, y, signs)
        dropped = np.flatnonzero((stage.support | (np.arange(p) == i)) & ~support)
        stage = _stage(
            ctx, k + 1, stage.time + step, y, signs, b, support, g_raw, loss, _left(ctx, k + 1, dropped, g_raw, signs)
        )
        _emit(stage.warnings)
        stages.append(stage)
        if progress:
            left = f", left: {_names(names, dropped)}" if dropped.size else ""
            print(
                f"greedy stage {k + 1}: T = {stage.time:.6g}, activated {names[i]}{left}, loss = {loss:.6g}", flush=True
            )


def _emit(messages) -> None:
    """Emit ``messages`` as ``AssumptionWarning`` at the caller of ``greedy_limit``."""
    for message in messages:
        warnings.warn(message, AssumptionWarning, stacklevel=5)


def _evaluate(model, y, signs) -> tuple[np.ndarray, float]:
    g, loss = _g_and_loss(model, jnp.asarray(signs * y * y))
    return np.asarray(g), float(loss)


def _names(names, idx) -> str:
    return "{" + ", ".join(names[i] for i in idx) + "}"


def _left(ctx: _Context, k: int, dropped, g_raw, signs) -> tuple[bool, tuple[str, ...]]:
    """Assumption 4.2 for the coordinates that left the support on the way into stage ``k``.

    Lemma D.4: a leaving coordinate sits at ``b_j ∈ {0, 2}`` with ``s_j g_j(θ^k) < 0``, and Assumption 4.2
    asks ``g_j(θ^k) ≠ 0``.
    """
    messages = tuple(
        f"Assumption 4.2 fails at stage {k}: {ctx.model.names[j]} left the support with g = {g_raw[j]:.3g} "
        "(needs g ≠ 0 of sign opposite to its weight's sign, Lemma D.4)."
        for j in dropped
        if not (np.abs(g_raw[j]) > ctx.tol.g_zero * ctx.G and signs[j] * g_raw[j] < 0)
    )
    return not messages, messages


def _stage(ctx: _Context, k, T, y, signs, b, support, g_raw, loss, left) -> _Stage:
    """Stage ``k`` at ``θ^k`` (magnitudes ``y``, signs ``s``), with its Assumption 4.3 checks."""
    tol, p = ctx.tol, ctx.model.p
    ok42, messages = left
    g = np.where(support | (np.abs(g_raw) <= tol.g_zero * ctx.G), 0.0, g_raw)
    stationarity = float(np.max(np.abs(g_raw[support]), initial=0.0) / ctx.G)
    ok43 = True
    if stationarity > tol.stationary:
        ok43 = False
        messages += (
            f"Assumption 4.3 fails at stage {k}: θ^{k} is not a stationary point on its support "
            f"(max |g_i| = {stationarity:.3g}·G after the Newton polish).",
        )
    eig = float("nan")
    if ctx.check:
        red = _reduce(np.flatnonzero(support), signs, p)
        hess = np.asarray(restricted_hessian(ctx.model, red.index, red.mask, red.signs, jnp.asarray(y[red.index])))
        eig = hessian_min_eig(hess, red.mask)
        if not eig > tol.hessian * ctx.G:
            ok43 = False
            messages += (
                f"Assumption 4.3 fails at stage {k}: the Hessian of L restricted to the support "
                f"{_names(ctx.model.names, np.flatnonzero(support))} has smallest eigenvalue {eig:.3g}, so θ^{k} "
                "is not a strict local minimum.",
            )
    return _Stage(
        time=T,
        y=y,
        signs=signs,
        b=b.copy(),
        support=support.copy(),
        g=g,
        loss=loss,
        stationarity=stationarity,
        hessian_min_eig=eig,
        ok=(ok42, ok43),
        warnings=messages,
    )


def _transition(ctx: _Context, k, delta, choice, g_i, end: _PhaseB, tie) -> _Transition:
    """The transition ``k → k+1`` with its Assumption 4.4 and ε → 0 checks."""
    tol = ctx.tol
    messages = tie
    if end.discrepancy > tol.epsilon_agreement:
        messages += (
            f"the ε → 0 limit of eq. (11) is not reached at stage {k}: endpoints from ε = "
            f"{tol.epsilons[-2]:g} and {tol.epsilons[-1]:g} differ by {end.discrepancy:.3g} (relative; inf: "
            "different supports).",
        )
    if end.spread > tol.spread:
        messages += (
            f"Assumption 4.4 fails at stage {k}: perturbing phase (B)'s start moves its endpoint by "
            f"{end.spread:.3g} (relative).",
        )
    ok44 = end.discrepancy <= tol.epsilon_agreement and not end.spread > tol.spread
    return _Transition(
        delta=delta,
        coordinate=choice.coordinate,
        sign=bool(g_i > 0),
        delta_gap=choice.gap,
        runner_up=choice.runner_up,
        epsilon_discrepancy=end.discrepancy,
        perturbation_spread=end.spread,
        ok=(not tie, ok44),
        warnings=messages,
    )


def _phase_b_ends(ctx: _Context, stage: _Stage, signs, i) -> _PhaseB:
    """Phase (B) from every ε (and the perturbed starts), in one compiled call of :func:`_phase_b`.

    Each run is integrated until nearly steady (``tolerances.steady``), its leaving coordinates
    are dropped, and its endpoint is polished by Newton's method on ``g_S(β_S) = 0`` to
    ``tolerances.stationary`` (the flow has already chosen the basin; Newton only removes the
    last digits of the slow approach).
    """
    model, tol, p, y, g_i = ctx.model, ctx.tol, ctx.model.p, stage.y, stage.g[i]
    coords = np.flatnonzero(stage.support | (np.arange(p) == i))
    red = _reduce(coords, signs, p)
    slot = int(np.flatnonzero(red.index == i)[0])
    base = np.where(red.mask, y[red.index], 0.0)  # y_i = 0: i is not on the support yet
    epsilons = np.asarray(tol.epsilons)
    factors = np.ones((epsilons.size, base.size))
    n_pert = tol.perturbations if ctx.check else 0
    if n_pert:  # perturbations of the start from the largest ε (Assumption 4.4)
        epsilons = np.concatenate([epsilons, np.full(n_pert, epsilons[0])])
        factors = np.concatenate(
            [factors, perturbed_starts(np.ones(base.size), red.mask, n_pert, tol.perturbation, ctx.rng)]
        )
    t1 = 1e6 * (math.log(1.0 / tol.epsilons[-1]) + 1.0) / abs(g_i)
    thresholds = _Thresholds(
        *map(
            jnp.asarray,
            (
                abs(g_i),
                tol.steady * abs(g_i),
                tol.support,
                tol.ode_tol,
                1.0 / abs(g_i),
                t1,
                tol.stationary * ctx.G,
            ),
        )
    )
    ends, status, _, _ = _phase_b(
        model,
        jnp.asarray(base),
        jnp.asarray(slot),
        jnp.asarray(epsilons),
        jnp.asarray(factors),
        red.index,
        red.mask,
        red.signs,
        thresholds,
        tol.max_steps,
        tol.newton_steps,
    )
    ends, status = np.asarray(ends), np.asarray(status)
    n_eps = len(tol.epsilons)
    for eps, code in zip(tol.epsilons, status[:n_eps]):
        if code:
            return _PhaseB(_Outcome(int(code)), eps)
    ref, prev = ends[n_eps - 1], ends[n_eps - 2]
    norm = float(np.max(ref))
    same = np.array_equal(ref > 0, prev > 0)
    disc = float(np.max(np.abs(prev - ref)) / norm) if same else float("inf")
    spread = float("nan")
    if n_pert:
        pert = ends[n_eps:]
        spread = float(np.max(np.abs(pert - ref)) / norm) if np.all(status[n_eps:] == 0) else float("inf")
    y_next = np.zeros(p)
    y_next[red.index[red.mask]] = ref[red.mask]
    return _PhaseB(_Outcome.STATIONARY, tol.epsilons[-1], y_next, disc, spread)


def _stack(stages: list[_Stage], transitions: list[_Transition], end: _End, swap, sign) -> GreedyPath:
    """The records as the arrays of a :class:`GreedyPath`, the weights mapped out of the flow's frame."""
    K, p = len(transitions), stages[0].y.size

    def rows(records, name, shape, dtype=np.float64):
        return np.asarray([getattr(r, name) for r in records], dtype=dtype).reshape(shape)

    y, signs = rows(stages, "y", (K + 1, p)), rows(stages, "signs", (K + 1, p))
    u, v = apply_frame(y, signs * y, swap, sign)
    stage_ok, out_ok = rows(stages, "ok", (K + 1, 2), bool), rows(transitions + [end], "ok", (K + 1, 2), bool)
    return GreedyPath(
        times=rows(stages, "time", (K + 1,)),
        u=u,
        v=v,
        beta=signs * y * y,
        b=rows(stages, "b", (K + 1, p)),
        loss=rows(stages, "loss", (K + 1,)),
        g=rows(stages, "g", (K + 1, p)),
        support=rows(stages, "support", (K + 1, p), bool),
        delta=rows(transitions, "delta", (K, p)),
        coordinate=rows(transitions, "coordinate", (K,), np.int64),
        sign=rows(transitions, "sign", (K,), bool),
        final_delta=np.asarray(end.final_delta, dtype=np.float64),
        delta_gap=rows(transitions, "delta_gap", (K,)),
        runner_up=rows(transitions, "runner_up", (K,), np.int64),
        hessian_min_eig=rows(stages, "hessian_min_eig", (K + 1,)),
        perturbation_spread=rows(transitions, "perturbation_spread", (K,)),
        epsilon_discrepancy=rows(transitions, "epsilon_discrepancy", (K,)),
        stationarity=rows(stages, "stationarity", (K + 1,)),
        assumptions_ok=np.stack([stage_ok[:, 0] & out_ok[:, 0], stage_ok[:, 1], out_ok[:, 1]], axis=1),
        result=end.result,
        message=end.message,
        warnings=tuple(m for r in _interleave(stages, transitions, end) for m in r.warnings),
    )


def _interleave(stages, transitions, end):
    """Stage 0, transition 0, stage 1, …, stage K, then the end: the order the warnings were emitted in."""
    for stage, transition in zip(stages, transitions + [end]):
        yield stage
        yield transition

"""The greedy limit of gradient flow from small initialisation: the paper's Algorithm 1 (SPEC §3).

As the initialisation scale α → 0, gradient flow in rescaled time τ = t / log(1/α) follows a
piecewise-constant path of stationary points θ^k = (u^k, v^k), v^k = s^k ⊙ u^k, held on
[T_k, T_{k+1}), while the log-scale weights b = log_α w move linearly (paper Theorem 4.5).
:func:`greedy_limit` computes that path:

- (A) paper eqs. (8)–(10): ``Δ_k(i) = (b_i^k − 1 + sgn g_i(θ^k)) / g_i(θ^k)`` for coordinates outside
  ``S_k`` with ``g_i ≠ 0`` (else ∞), ``i_k = argmin Δ_k``, ``T_{k+1} = T_k + Δ_k(i_k)``,
  ``b^{k+1} = b^k − g(θ^k) Δ_k(i_k)``; started from ``T_0 = 0``, ``b^0 = 1``, ``θ^0 = 0`` (SPEC §3: the
  paper's pseudocode misprints ``b^0 = 0``).
- (B) paper eq. (11): ``θ^{k+1} = lim_{ε→0} lim_{t→∞} ψ(t, ε)``, ψ the unscaled gradient flow from
  ``θ^k + (ε e_{i_k}, sgn(g_{i_k}) ε e_{i_k})``.

Phase (B) is a flow on the support. On ``S_k ∪ {i_k}`` the conservation law keeps ``u_i² − v_i² = 0``, so
``v = s ⊙ u`` throughout and the flow reduces to the magnitudes ``y = |u|``:

    dy/dt = s ⊙ y ⊙ g(β),    β = s ⊙ y²  (embedded into R^p, zero off the support),

a system of the support's size (padded to a power of two with a mask, so that stages compile once
per size class), integrated with Diffrax's ``Kvaerno5`` (an L-stable ESDIRK method: the escape
from ε, of duration ~log(1/ε)/|g_{i_k}|, and the relaxation onto θ^{k+1} run at very different
rates; a chord root finder reuses one Jacobian per step) with a PID controller until a
``diffrax.Event`` finds it nearly steady, then polished by Newton's method on ``g_S(β_S) = 0``. The
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
import math
import warnings

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
import optimistix as optx

from ._assumptions import (
    AssumptionWarning,
    check_initialisation,
    choose_coordinate,
    embed,
    hessian_min_eig,
    perturbed_starts,
    restricted_hessian,
    time_until_active,
)
from ._config import float64
from ._model import DiagonalModel, check_vector


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
        init_degenerate: ``|u0_i|`` and ``|v0_i|`` count as equal (Assumption 4.2 fails) when they differ
            by at most ``init_degenerate · max(|u0_i|, |v0_i|)``.
        ode_rtol, ode_atol: the step-size controller's tolerances for phase (B) (``ode_atol`` relative to
            the larger of ``‖u^k‖_∞`` and the natural size of the new coordinate). Loose on purpose: the endpoint is an attractor, so the
            trajectory only has to stay in its basin (the ε and perturbation checks test exactly
            that); its last digits come from the Newton polish.
        max_steps: the most solver steps one phase (B) may take before it is declared not to converge
            (a phase (B) of the default toy takes 14–42).
        newton_steps: the most Newton steps of the polish (from ``steady`` it takes 1–2).
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
    init_degenerate: float = 1e-12
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
        if not (isinstance(self.perturbations, int) and self.perturbations >= 0):
            raise ValueError(
                f"GreedyTolerances.perturbations must be a non-negative integer; got {self.perturbations!r}."
            )
        if not 0 < self.perturbation < 1 / 3:
            raise ValueError(f"GreedyTolerances.perturbation must lie in (0, 1/3); got {self.perturbation!r}.")
        if not 0 <= self.init_degenerate < 1:
            raise ValueError(f"GreedyTolerances.init_degenerate must lie in [0, 1); got {self.init_degenerate!r}.")
        for name in ("max_steps", "newton_steps"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value > 0):
                raise ValueError(f"GreedyTolerances.{name} must be a positive integer; got {value!r}.")


class GreedyPath(eqx.Module):
    """The output of Algorithm 1 (SPEC §3): stages ``k = 0..K`` and their diagnostics.

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
        end_reason: ``"T = inf"``, ``"max_stages"`` or ``"assumption failed: …"``.
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
        warnings: every assumption failure, in words (each was also emitted with ``warnings.warn``).
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
    end_reason: str = eqx.field(static=True)
    warnings: tuple[str, ...] = eqx.field(static=True)

    @property
    def num_stages(self) -> int:
        """``K``, the number of activations (the path has ``K + 1`` stationary points)."""
        return int(self.coordinate.shape[0])

    def stage_at(self, tau) -> np.ndarray:
        """The stage ``k`` with ``T_k ≤ τ < T_{k+1}``, vectorised over ``τ ≥ 0``."""
        tau = np.asarray(tau, dtype=np.float64)
        if np.any(~(tau >= 0)):
            raise ValueError("rescaled time τ must be non-negative (and not NaN).")
        return np.searchsorted(self.times, tau, side="right") - 1

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

# Why a row of phase (B) did not give a stationary point (``_phase_b``'s status; 0: it did).
_STATUS = {
    1: "the flow took max_steps = {max_steps} solver steps without becoming steady",
    2: "the flow reached t1 (or its solver failed) without becoming steady",
    3: "Newton's method did not converge, or moved a coordinate that is not leaving out of its sign orthant",
}


class _ColumnLU(lx.LU):
    """LU factorisation of a Jacobian built one column (one JVP) at a time.

    ``lx.LU`` materialises the Jacobian with one batched JVP over all columns; batching turns each
    small matrix product of g (one per sample) into a batched one, which XLA's CPU backend runs 2–3×
    slower than the same products one column after the other.
    """

    def init(self, operator, options):
        structure = operator.in_structure()
        columns = jax.lax.map(operator.mv, jnp.eye(operator.in_size(), dtype=structure.dtype))
        return super().init(lx.MatrixLinearOperator(columns.T), options)


def _reduced_g(model: DiagonalModel, index, mask, signs, y):
    return model.g(embed(model.p, index, mask, signs, y))[index]


def _newton(model, index, mask, signs, y, shrinking, stationary, steps):
    """Newton's method on ``g_S(β_S) = 0`` in β from magnitudes ``y`` on the support ``S = mask``.

    ``∂g/∂β = −H`` (H the β-Hessian of L on S), so ``β ← β + H⁻¹ g``; g and H come from one
    linearisation of g, the columns of H one JVP each (in sequence, see :class:`_ColumnLU`).

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

    def g_of_beta(beta):
        return model.g(jnp.zeros(model.p, dtype=beta.dtype).at[index].add(beta))[index]

    def body(state):
        n, y, keep, _, _, residuals = state
        beta = jnp.where(keep, signs * y * y, 0.0)
        g, g_lin = jax.linearize(g_of_beta, beta)
        g = jnp.where(keep, g, 0.0)
        hess = -jax.lax.map(g_lin, jnp.eye(size, dtype=y.dtype)).T
        hess = jnp.where(keep[:, None] & keep[None, :], hess, jnp.eye(size, dtype=y.dtype))
        gmax = jnp.max(jnp.abs(g))
        converged = gmax <= stationary
        beta_next = beta + jnp.linalg.solve(hess, g)
        out = keep & ~(signs * beta_next > 0)
        failed = ~converged & (jnp.any(out & ~shrinking) | ~jnp.all(jnp.isfinite(beta_next)))
        step = ~converged & ~failed & ~jnp.any(out)
        keep = keep & ~(~converged & ~failed & out)
        y = jnp.where(keep, jnp.where(step, jnp.sqrt(jnp.maximum(signs * beta_next, 0.0)), y), 0.0)
        return n + 1, y, keep, converged, failed, residuals.at[n].set(gmax)

    def cond(state):
        n, _, _, converged, failed, _ = state
        return (n < steps) & ~converged & ~failed

    init = (0, jnp.where(mask, y, 0.0), mask, False, False, jnp.full(steps, jnp.nan, dtype=y.dtype))
    _, y, _, converged, _, residuals = jax.lax.while_loop(cond, body, init)
    return y, converged, residuals


@eqx.filter_jit
def _phase_b(model, starts, index, mask, signs, thresholds, max_steps, newton_steps):
    """Phase (B) from each row of ``starts``: the flow ``dy/dt = s ⊙ y ⊙ g(s ⊙ y²)`` until nearly
    steady, then Newton's method (:func:`_newton`) from its endpoint.

    ``thresholds = (steady, support, rtol, atol, root_tol, t1, stationary)``: the flow stops when
    every support coordinate has ``|g_i| ≤ steady`` or is leaving (``y_i ≤ support · max y`` and
    shrinking, ``s_i g_i < 0``); coordinates with ``y_i ≤ support · max y`` are set to 0 before and
    after Newton's method (the path's definition of the support). The rows run one after the other
    (``lax.map``): each stops at its own step count, and batching them would make every small matrix
    product of g a slower batched one. Returns the polished endpoints, a status per row (0:
    stationary, else a key of ``_STATUS``), the flow's step counts and the Newton residuals.
    """
    steady, support, rtol, atol, root_tol, t1, stationary = thresholds

    def field(t, y, args):
        return jnp.where(mask, signs * y * _reduced_g(model, index, mask, signs, y), 0.0)

    def leaving(y, g):
        return (y <= support * jnp.max(y)) & (signs * g < 0)

    def is_steady(t, y, args, **kwargs):
        g = _reduced_g(model, index, mask, signs, y)
        return jnp.all(~mask | (jnp.abs(g) <= steady) | leaving(y, g))

    # Chord: one Jacobian per step (Kvaerno5 evaluates it at the second stage and reuses it), the
    # stage equations then cost one evaluation of g per iteration.
    solver = diffrax.Kvaerno5(root_finder=optx.Chord(rtol=1e-8, atol=root_tol, linear_solver=_ColumnLU()))

    def one(y0):
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(field),
            solver,
            0.0,
            t1,
            None,
            y0,
            stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
            event=diffrax.Event(is_steady),
            saveat=diffrax.SaveAt(t1=True),
            max_steps=max_steps,
            throw=False,
        )
        y = sol.ys[-1]
        g = _reduced_g(model, index, mask, signs, y)
        keep = mask & (y > support * jnp.max(y))
        y, converged, residuals = _newton(model, index, keep, signs, y, signs * g < 0, stationary, newton_steps)
        y = jnp.where(y > support * jnp.max(y), y, 0.0)  # a root on the boundary may come out as β_j ≈ +0
        flow_status = jnp.where(sol.result == diffrax.RESULTS.max_steps_reached, 1, 2)
        status = jnp.where(sol.event_mask, jnp.where(converged, 0, 3), flow_status)
        return y, status, sol.stats["num_steps"], residuals

    return jax.lax.map(one, starts)


@eqx.filter_jit
def _g_and_loss(model, beta):
    return model.g(beta), model.loss_of_beta(beta)


@eqx.filter_jit
def _self_curvature(model, beta, i):
    """``∂g_i/∂β_i`` at β (one JVP), for the natural scale of a new coordinate."""
    e = jnp.zeros_like(beta).at[i].set(1.0)
    return jax.jvp(model.g, (beta,), (e,))[1][i]


def _capacity(n: int, p: int) -> int:
    """Padded size of the reduced state: a power of two ≥ n (at least 4), at most p, so few recompiles."""
    return min(p, max(4, 1 << (n - 1).bit_length()))


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
) -> GreedyPath:
    """The α → 0 limit of gradient flow from ``α (u0, v0)``: Algorithm 1 of the paper (SPEC §3).

    Args:
        model: the model with diagonal weights.
        u0, v0: optional initialisation directions. They do not change the path (only ``b^0 = 1``
            enters), but they are checked against Assumption 4.2 (``|u0_i| ≠ |v0_i|``, else a
            ``ValueError`` naming the coordinates) and fix the signs of the returned ``u, v`` to match
            the flow from ``α (u0, v0)``.
        max_stages: stop after this many activations (``None``: until ``T = ∞``, which includes a
            loss that has reached zero, since then ``g = 0``).
        tolerances: the thresholds, see :class:`GreedyTolerances`.
        check_assumptions: compute the Hessian of Assumption 4.3 and the perturbed phase-(B) runs
            of Assumption 4.4. The 4.2 checks (ties, leaving coordinates) and the ε → 0 check are
            part of the algorithm and always run.
        seed: seeds the perturbations of Assumption 4.4.
        progress: print one line per stage.

    Returns:
        A :class:`GreedyPath`. Assumption failures are recorded in it and emitted as
        :class:`AssumptionWarning`; only a phase (B) that cannot reach a stationary point ends the path
        early (``end_reason = "assumption failed: …"``).

    Ties in eq. (9) (Δ within ``tolerances.tie · T_{k+1}``) are broken towards the lowest coordinate
    index; the other tied coordinates land on ``b ∈ {0, 2}`` too and are activated at the next stages
    at the same time.
    """
    if not isinstance(model, DiagonalModel):
        raise TypeError(f"model must be a gradflow.DiagonalModel; got {type(model).__name__}.")
    if not isinstance(tolerances, GreedyTolerances):
        raise TypeError(f"tolerances must be a GreedyTolerances; got {type(tolerances).__name__}.")
    if max_stages is not None and (
        isinstance(max_stages, bool) or not isinstance(max_stages, (int, np.integer)) or max_stages < 0
    ):
        raise ValueError(f"max_stages must be a non-negative integer or None; got {max_stages!r}.")
    p = model.p
    tol = tolerances
    if (u0 is None) != (v0 is None):
        raise ValueError("give both u0 and v0, or neither.")
    orient = np.ones(p)
    v_major = np.zeros(p, dtype=bool)
    if u0 is not None:
        u0 = check_vector(u0, p, "u0")
        v0 = check_vector(v0, p, "v0")
        check_initialisation(u0, v0, tol.init_degenerate, model.names)
        v_major = np.abs(v0) > np.abs(u0)
        orient = np.where(v_major, np.sign(v0), np.sign(u0))
    # The data go to the device once, not with every compiled call.
    model = jax.tree_util.tree_map(lambda x: jnp.asarray(x) if eqx.is_array(x) else x, model)
    return _Run(model, tol, check_assumptions, np.random.default_rng([seed, 4]), progress, orient, v_major).path(
        max_stages
    )


class _Run:
    """The state of one run of Algorithm 1 and the per-stage records (plain Python, not traced)."""

    def __init__(self, model, tol, check, rng, progress, orient, v_major):
        self.model, self.tol, self.check, self.rng, self.progress = model, tol, check, rng, progress
        self.orient, self.v_major = orient, v_major
        self.p = model.p
        self.records: dict[str, list] = {k: [] for k in _STAGE_FIELDS + _TRANSITION_FIELDS}
        self.messages: list[str] = []

    def warn(self, message: str) -> None:
        self.messages.append(message)
        warnings.warn(message, AssumptionWarning, stacklevel=4)

    def _evaluate(self, y, signs):
        g, loss = _g_and_loss(self.model, jnp.asarray(signs * y * y))
        return np.asarray(g), float(loss)

    def _record_stage(self, k, T, y, signs, b, support, g_raw, loss, ok42):
        p, tol = self.p, self.tol
        g = np.where(support | (np.abs(g_raw) <= tol.g_zero * self.G), 0.0, g_raw)
        stationarity = float(np.max(np.abs(g_raw[support]), initial=0.0) / self.G)
        ok = [ok42, True, True]
        if stationarity > tol.stationary:
            ok[1] = False
            self.warn(
                f"Assumption 4.3 fails at stage {k}: θ^{k} is not a stationary point on its support "
                f"(max |g_i| = {stationarity:.3g}·G after the Newton polish)."
            )
        eig = float("nan")
        if self.check:
            red = _reduce(np.flatnonzero(support), signs, p)
            hess = np.asarray(restricted_hessian(self.model, red.index, red.mask, red.signs, jnp.asarray(y[red.index])))
            eig = hessian_min_eig(hess, red.mask)
            if not eig > tol.hessian * self.G:
                ok[1] = False
                self.warn(
                    f"Assumption 4.3 fails at stage {k}: the Hessian of L restricted to the support "
                    f"{self._names(np.flatnonzero(support))} has smallest eigenvalue {eig:.3g}, so θ^{k} is not a "
                    "strict local minimum."
                )
        u = self.orient * np.where(self.v_major, signs, 1.0) * y
        v = signs * u
        rec = self.records
        for name, value in (
            ("times", T),
            ("u", u),
            ("v", v),
            ("beta", signs * y * y),
            ("b", b.copy()),
            ("loss", loss),
            ("g", g),
            ("support", support.copy()),
            ("hessian_min_eig", eig),
            ("stationarity", stationarity),
            ("ok", ok),
        ):
            rec[name].append(value)
        return g

    def _names(self, idx) -> str:
        return "{" + ", ".join(self.model.names[i] for i in idx) + "}"

    def path(self, max_stages):
        model, tol, p = self.model, self.tol, self.p
        y, signs, support, b, T = np.zeros(p), np.ones(p), np.zeros(p, dtype=bool), np.ones(p), 0.0
        g_raw, loss = self._evaluate(y, signs)
        self.G = float(np.max(np.abs(g_raw)))
        if self.G == 0:
            self.G = 1.0  # g(0) = 0: every Δ is ∞; any positive reference keeps the thresholds finite.
        g = self._record_stage(0, T, y, signs, b, support, g_raw, loss, True)
        end_reason = "T = inf"
        k = 0
        while True:
            delta = time_until_active(b, g, ~support)
            if not np.any(np.isfinite(delta)):
                final_delta = delta
                break
            if max_stages is not None and k >= max_stages:
                final_delta, end_reason = delta, "max_stages"
                break
            choice = choose_coordinate(delta, tol.tie * (T + float(np.min(delta))))
            i = choice.coordinate
            step = float(delta[i])
            if choice.tied.size:
                self.records["ok"][k][0] = False
                self.warn(
                    f"Assumption 4.2 fails at stage {k}: Δ is tied between {model.names[i]} and "
                    f"{', '.join(model.names[j] for j in choice.tied)} (gap {choice.gap:.3g}); activating "
                    f"{model.names[i]} (lowest index) first."
                )
            b_next = np.clip(b - g * step, 0.0, 2.0)
            landed = np.concatenate([[i], choice.tied])
            b_next[landed] = 1.0 - np.sign(g[landed])  # eq. (10): exactly 0 (v takes u's sign) or 2 (v flips)
            new_signs = signs.copy()
            new_signs[i] = np.sign(g[i])
            outcome = self._phase_b(k, y, new_signs, support, i, g[i])
            if isinstance(outcome, str):
                final_delta = delta
                end_reason = f"assumption failed: phase (B) of stage {k} (activating {model.names[i]}) did not reach a stationary point"
                self.records["ok"][k][2] = False
                self.warn(f"Assumption 4.4 fails: {end_reason}: {outcome}.")
                break
            y_next, disc, spread = outcome
            support_next = y_next > tol.support * np.max(y_next)
            y_next = np.where(support_next, y_next, 0.0)
            T += step
            ok44 = disc <= tol.epsilon_agreement and not spread > tol.spread
            self.records["ok"][k][2] = ok44
            if disc > tol.epsilon_agreement:
                self.warn(
                    f"the ε → 0 limit of eq. (11) is not reached at stage {k}: endpoints from ε = "
                    f"{tol.epsilons[-2]:g} and {tol.epsilons[-1]:g} differ by {disc:.3g} (relative; inf: different supports)."
                )
            if spread > tol.spread:
                self.warn(
                    f"Assumption 4.4 fails at stage {k}: perturbing phase (B)'s start moves its endpoint by "
                    f"{spread:.3g} (relative)."
                )
            g_raw, loss = self._evaluate(y_next, new_signs)
            dropped = np.flatnonzero((support | (np.arange(p) == i)) & ~support_next)
            ok_next = True
            for j in dropped:
                # Lemma D.4: a leaving coordinate sits at b_j ∈ {0, 2} with s_j g_j(θ^{k+1}) < 0, and
                # Assumption 4.2 asks g_j(θ^{k+1}) ≠ 0.
                if not (np.abs(g_raw[j]) > tol.g_zero * self.G and new_signs[j] * g_raw[j] < 0):
                    ok_next = False
                    self.warn(
                        f"Assumption 4.2 fails at stage {k + 1}: {model.names[j]} left the support with "
                        f"g = {g_raw[j]:.3g} (needs g ≠ 0 of sign opposite to its weight's sign, Lemma D.4)."
                    )
            for name, value in (
                ("delta", delta),
                ("coordinate", i),
                ("sign", bool(g[i] > 0)),
                ("delta_gap", choice.gap),
                ("runner_up", choice.runner_up),
                ("epsilon_discrepancy", disc),
                ("perturbation_spread", spread),
            ):
                self.records[name].append(value)
            y, signs, support, b = y_next, new_signs, support_next, b_next
            k += 1
            g = self._record_stage(k, T, y, signs, b, support, g_raw, loss, ok_next)
            if self.progress:
                left = f", left: {self._names(dropped)}" if dropped.size else ""
                print(f"greedy stage {k}: T = {T:.6g}, activated {model.names[i]}{left}, loss = {loss:.6g}", flush=True)
        return self._finish(final_delta, end_reason)

    def _phase_b(self, k, y, signs, support, i, g_i):
        """Phase (B) from every ε (and the perturbed starts).

        Each run is integrated until nearly steady (``tolerances.steady``), its leaving coordinates
        are dropped, and its endpoint is polished by Newton's method on ``g_S(β_S) = 0`` to
        ``tolerances.stationary`` (the flow has already chosen the basin; Newton only removes the
        last digits of the slow approach). Returns ``(y^{k+1}, ε discrepancy, spread)``, or a string
        saying why a run from an ε did not reach a stationary point.
        """
        model, tol, p = self.model, self.tol, self.p
        coords = np.flatnonzero(support | (np.arange(p) == i))
        red = _reduce(coords, signs, p)
        beta = signs * y * y
        curvature = abs(float(_self_curvature(model, jnp.asarray(beta), jnp.asarray(i))))
        natural = math.sqrt(abs(g_i) / curvature) if curvature > 0 else max(float(np.max(y)), 1.0)
        scale = max(float(np.max(y)), natural)
        slot = int(np.flatnonzero(red.index == i)[0])
        base = np.where(red.mask, y[red.index], 0.0)
        starts = np.repeat(base[None], len(tol.epsilons), axis=0)
        starts[:, slot] = np.asarray(tol.epsilons) * natural
        n_pert = tol.perturbations if self.check else 0
        if n_pert:
            starts = np.concatenate([starts, perturbed_starts(starts[0], red.mask, n_pert, tol.perturbation, self.rng)])
        t1 = 1e6 * (math.log(1.0 / tol.epsilons[-1]) + 1.0) / abs(g_i)
        thresholds = (
            tol.steady * abs(g_i),
            tol.support,
            tol.ode_rtol,
            tol.ode_atol * scale,
            tol.ode_atol * scale * self.G,
            t1,
            tol.stationary * self.G,
        )
        ends, status, _, _ = _phase_b(
            model,
            jnp.asarray(starts),
            red.index,
            red.mask,
            red.signs,
            jnp.asarray(thresholds),
            tol.max_steps,
            tol.newton_steps,
        )
        ends, status = np.asarray(ends), np.asarray(status)
        n_eps = len(tol.epsilons)
        for eps, code in zip(tol.epsilons, status[:n_eps]):
            if code:
                return f"from ε = {eps:g}, " + _STATUS[int(code)].format(max_steps=tol.max_steps)
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
        return y_next, disc, spread

    def _finish(self, final_delta, end_reason) -> GreedyPath:
        rec, p = self.records, self.p
        K = len(rec["coordinate"])

        def stack(name, shape, dtype=np.float64):
            return np.asarray(rec[name], dtype=dtype).reshape(shape)

        return GreedyPath(
            times=stack("times", (K + 1,)),
            u=stack("u", (K + 1, p)),
            v=stack("v", (K + 1, p)),
            beta=stack("beta", (K + 1, p)),
            b=stack("b", (K + 1, p)),
            loss=stack("loss", (K + 1,)),
            g=stack("g", (K + 1, p)),
            support=stack("support", (K + 1, p), bool),
            delta=stack("delta", (K, p)),
            coordinate=stack("coordinate", (K,), np.int64),
            sign=stack("sign", (K,), bool),
            final_delta=np.asarray(final_delta, dtype=np.float64),
            delta_gap=stack("delta_gap", (K,)),
            runner_up=stack("runner_up", (K,), np.int64),
            hessian_min_eig=stack("hessian_min_eig", (K + 1,)),
            perturbation_spread=stack("perturbation_spread", (K,)),
            epsilon_discrepancy=stack("epsilon_discrepancy", (K,)),
            stationarity=stack("stationarity", (K + 1,)),
            assumptions_ok=stack("ok", (K + 1, 3), bool),
            end_reason=end_reason,
            warnings=tuple(self.messages),
        )


_STAGE_FIELDS = ("times", "u", "v", "beta", "b", "loss", "g", "support", "hessian_min_eig", "stationarity", "ok")
_TRANSITION_FIELDS = (
    "delta",
    "coordinate",
    "sign",
    "delta_gap",
    "runner_up",
    "epsilon_discrepancy",
    "perturbation_spread",
)

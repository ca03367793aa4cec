"""The greedy low-rank limit of gradient flow for factorised weights ``W_j = U_j V_jᵀ`` (Greedy Low-Rank
Learning, Li, Luo & Lyu, ICLR 2021, with stage times in rescaled time; docs/math.md, *Full weights: the
greedy low-rank limit*).

From ``α (U⁰, V⁰)`` as α → 0, the flow in rescaled time ``τ = t / log(1/α)`` holds at saddles
``W̄^k`` (critical points of L on the matrices of ranks ``r^k = (r_1, …, r_J)``) on ``[T_k, T_{k+1})``
and adds one rank to one factor at each ``T_{k+1}``. :func:`greedy_low_rank` computes that path:

- (A) the sleeping directions of factor j have log-scale exponents ``e_{j,1} ≤ … ≤ e_{j,k_j−r_j}`` (all 1
  at τ = 0); on a plateau ``e_{j,i}`` decreases at ``σ_i(G_j(W̄^k))``, ``G_j = −∇_{W_j} L``. Factor
  ``j_k = argmin_j e_{j,1} / σ_1(G_j)`` escapes first, at ``T_{k+1} = T_k + min_j e_{j,1}/σ_1(G_j)``,
  along the top singular pair ``(a, b)`` of ``G_{j_k}``.
- (B) ``W̄^{k+1} = lim_{ε→0} lim_{t→∞}`` of the unscaled gradient flow of the factors from ``W̄^k`` (balanced
  factors) with a new column ``(ε a, ε b)`` in factor ``j_k``.

Exact for matrix factorisation (``T_r = 1/σ_r(M)``, the saddles are its truncated SVDs); for other models
the bookkeeping of (A) beyond the first stage is a conjecture (docs/math.md, *Full weights: the greedy
low-rank limit*), checked against the exact flow in the tests.

Phase (B) runs on one flat vector of all factor entries, padded to the full widths (inactive columns
are exactly zero and masked), so a whole path compiles once: an explicit ``Tsit5`` until nearly steady (a
``diffrax.Event``), then Newton's method with a pseudo-inverse Hessian (the factorisation has the gauge
``U → U X``, ``V → V X^{-T}``, a null space of the Hessian). The ε → 0 limit is checked as for diagonal
weights: the endpoints from every ε of ``GreedyTolerances.epsilons`` must agree.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._assumptions import AssumptionWarning, choose_coordinate, perturbed_starts
from ._checks import check_int
from ._factorized import FactorizedModel, check_factorized_model, check_factors
from ._greedy import _WHY, GreedyTolerances, _Outcome, stage_index


class FactorizedGreedyPath(eqx.Module):
    """The greedy low-rank limit (docs/math.md, *Full weights: the greedy low-rank limit*): stages
    ``k = 0..K`` of a [`FactorizedModel`][gradflow.FactorizedModel] and their diagnostics.

    Stage k holds the saddle ``W̄^k`` on ``[T_k, T_{k+1})`` in rescaled time (``T_{K+1} = ∞``). Arrays indexed
    by stage have ``K + 1`` rows, those indexed by transition ``k → k+1`` have ``K`` rows; ``J`` is the number
    of weight matrices and ``k_max`` the largest width.

    Attributes:
        times: ``(K+1,)`` the stage times ``T_0 = 0 < T_1 ≤ … ≤ T_K``.
        factor: ``(K,)`` the weight matrix ``j_k`` that gains a rank at ``T_{k+1}``.
        ranks: ``(K+1, J)`` the rank of every ``W̄_j^k``.
        W: per weight matrix j, ``(K+1, m_j, n_j)`` the saddles ``W̄_j^k`` (``W̄^0 = 0``).
        loss: ``(K+1,)`` ``L(W̄^k)``.
        sigma: ``(K+1, J)`` ``σ_1(G_j(W̄^k))``, the speed of factor j's leading sleeping direction (0 below
            ``g_zero·G``, and where factor j has no sleeping direction left).
        b: ``(K+1, J, k_max)`` the log-scale exponents of the sleeping directions of every factor at
            ``T_k``, ascending (``k_j − r_j`` of them; NaN beyond).
        rates: ``(K+1, J, k_max)`` the speeds of those exponents on stage k, ``σ_i(G_j(W̄^k))`` (NaN beyond).
        delta: ``(K, J)`` the time until factor j escapes, ``e_{j,1}/σ_1(G_j)`` (∞ if it cannot).
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
            has a sleeping direction with ``σ_1 > 0`` left), ``"max_stages"`` or ``"phase_b_failed"``.
    """

    times: np.ndarray
    factor: np.ndarray
    ranks: np.ndarray
    W: tuple[np.ndarray, ...]
    loss: np.ndarray
    sigma: np.ndarray
    b: np.ndarray
    rates: np.ndarray
    delta: np.ndarray
    final_delta: np.ndarray
    delta_gap: np.ndarray
    runner_up: np.ndarray
    singular_gap: np.ndarray
    hessian_min_eig: np.ndarray
    stationarity: np.ndarray
    epsilon_discrepancy: np.ndarray
    perturbation_spread: np.ndarray
    assumptions_ok: np.ndarray
    result: str = eqx.field(static=True)
    message: str = eqx.field(static=True)
    warnings: tuple[str, ...] = eqx.field(static=True)

    @property
    def num_stages(self) -> int:
        """``K``, the number of escapes (the path has ``K + 1`` saddles)."""
        return int(self.factor.shape[0])

    def stage_at(self, tau) -> np.ndarray:
        """The stage ``k`` with ``T_k ≤ τ < T_{k+1}``, vectorised over ``τ ≥ 0``."""
        return stage_index(self.times, tau)

    def W_at(self, tau) -> tuple[np.ndarray, ...]:
        """``W̄_j^k`` for the stage holding τ (piecewise constant), per j of shape ``τ.shape + (m_j, n_j)``."""
        k = self.stage_at(tau)
        return tuple(w[k] for w in self.W)

    def loss_at(self, tau) -> np.ndarray:
        """``L(W̄^k)`` for the stage holding τ (the loss staircase)."""
        return self.loss[self.stage_at(tau)]

    def b_at(self, tau) -> np.ndarray:
        """The sleeping exponents ``b^k − (τ − T_k) rates^k`` (piecewise linear), shape ``τ.shape + (J, k_max)``."""
        tau = np.asarray(tau, dtype=np.float64)
        k = self.stage_at(tau)
        return self.b[k] - (tau - self.times[k])[..., None, None] * self.rates[k]


# ----------------------------------------------------------------------------------------------
# The factors as one flat vector, padded to the full widths.


@dataclasses.dataclass(frozen=True)
class _Layout:
    """Where each factor lives in the flat vector ``y = [vec U_1, vec V_1, vec U_2, …]``."""

    shapes: tuple[tuple[int, int], ...]
    widths: tuple[int, ...]

    @property
    def size(self) -> int:
        return sum((m + n) * k for (m, n), k in zip(self.shapes, self.widths))

    def split(self, y):
        """The factors ``(U_j, V_j)`` of a flat vector (NumPy or JAX)."""
        out, start = [], 0
        for (m, n), k in zip(self.shapes, self.widths):
            u = y[start : start + m * k].reshape(m, k)
            v = y[start + m * k : start + (m + n) * k].reshape(n, k)
            out.append((u, v))
            start += (m + n) * k
        return out

    def products(self, y):
        return tuple(u @ v.T for u, v in self.split(y))

    def flat(self, factors) -> np.ndarray:
        return np.concatenate([np.concatenate([u.ravel(), v.ravel()]) for u, v in factors])

    @property
    def columns(self) -> np.ndarray:
        """The factor column (numbered over all factors) of every entry of y."""
        ids, start = [], 0
        for (m, n), k in zip(self.shapes, self.widths):
            col = start + np.arange(k)
            ids.append(np.concatenate([np.broadcast_to(col, (m, k)).ravel(), np.broadcast_to(col, (n, k)).ravel()]))
            start += k
        return np.concatenate(ids)

    def mask(self, ranks) -> np.ndarray:
        """True on the first ``ranks[j]`` columns of every factor."""
        cols = [np.arange(k) < r for k, r in zip(self.widths, ranks)]
        return self.flat(
            [
                (np.broadcast_to(c, (m, k)), np.broadcast_to(c, (n, k)))
                for (m, n), k, c in zip(self.shapes, self.widths, cols)
            ]
        ).astype(bool)

    def balanced(self, Ws, ranks) -> np.ndarray:
        """Balanced factors ``U = P √S``, ``V = Q √S`` of the rank-``r_j`` truncated SVDs, zero-padded."""
        factors = []
        for w, r, k in zip(Ws, ranks, self.widths):
            p, s, qt = np.linalg.svd(w, full_matrices=False)
            root = np.sqrt(s[:r])
            u, v = np.zeros((w.shape[0], k)), np.zeros((w.shape[1], k))
            u[:, :r], v[:, :r] = p[:, :r] * root, qt[:r].T * root
            factors.append((u, v))
        return self.flat(factors)


def _loss(model, layout: _Layout, y):
    return model.loss_of_weights(layout.products(y))


# ----------------------------------------------------------------------------------------------
# Phase (B): flow, then Newton, from every start, in one compiled call.


def _residual(layout, y, grad, mask, support):
    """``max_c ‖∂L/∂(u_c, v_c)‖ / ‖(u_c, v_c)‖`` over the active columns c of every factor, from the gradient
    ``grad`` in y: ``∂L/∂u_c = −G v_c`` and ``∂L/∂v_c = −Gᵀ u_c``, so this is in the units of G, independent
    of the columns' sizes, and 0 exactly at a critical point of the ranks. A column below ``support`` times the
    largest that is shrinking is leaving (paper Lemma D.4, for columns) and does not count."""
    column = jnp.asarray(layout.columns)
    segments = int(layout.columns.max()) + 1

    def per_column(x):
        return jax.ops.segment_sum(jnp.where(mask, x, 0.0), column, num_segments=segments)

    size, pull, norm = per_column(grad * grad), per_column(grad * y), jnp.sqrt(per_column(y * y))
    leaving = (norm <= support * jnp.max(norm)) & (pull > 0)  # d‖col‖²/dt = −2 ⟨∂L/∂col, col⟩ < 0
    return jnp.max(jnp.where((norm > 0) & ~leaving, jnp.sqrt(size) / jnp.where(norm > 0, norm, 1.0), 0.0))


@eqx.filter_jit
def _phase_b(model, layout, starts, mask, thresholds, max_steps, newton_steps):
    """Phase (B) from each row of ``starts``: the gradient flow of the factors on ``mask`` until
    :func:`_residual` ``≤ steady``, then Newton's method until it is ``≤ stationary``. Returns the endpoints
    and a status per row (0: stationary, else an ``_Outcome``).

    The flow only has to choose the basin: an explicit ``Tsit5`` (the flow of a strict local minimum is not
    stiff, and an implicit method's Jacobians cost more than its steps save), run at ``rtol = min(ode_rtol,
    steady/100)`` because an explicit method hovers around the critical point at about its tolerance and must
    come below ``steady``; Newton's method gives the digits."""
    steady, stationary, support, rtol, atol, t1 = thresholds
    grad = jax.grad(lambda y: _loss(model, layout, y))

    def field(t, y, args):
        return jnp.where(mask, -grad(y), 0.0)

    def is_steady(t, y, args, **kwargs):
        return _residual(layout, y, grad(y), mask, support) <= steady

    def one(y0):
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(field),
            diffrax.Tsit5(),
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
        y, converged = _newton(model, layout, sol.ys[-1], mask, support, stationary, newton_steps)
        flow_status = jnp.where(sol.result == diffrax.RESULTS.max_steps_reached, 1, 2)
        return y, jnp.where(sol.event_mask, jnp.where(converged, 0, 3), flow_status)

    return jax.lax.map(one, starts)


def _newton(model, layout, y, mask, support, stationary, steps):
    """Newton's method on ``∂L/∂y = 0`` on ``mask`` until :func:`_residual` ``≤ stationary``, with the
    pseudo-inverse of the Hessian: the gauge ``(U X, −V Xᵀ)`` is its null space (eigenvalues below ``1e-9``
    of the largest are dropped; the gradient has no component along it)."""
    loss = lambda z: _loss(model, layout, z)  # noqa: E731
    grad = jax.grad(loss)

    def body(state):
        n, y, _, _ = state
        g = jnp.where(mask, grad(y), 0.0)
        hess = jnp.where(mask[:, None] & mask[None, :], jax.hessian(loss)(y), 0.0)
        lam, vec = jnp.linalg.eigh(0.5 * (hess + hess.T))
        keep = jnp.abs(lam) > 1e-9 * jnp.max(jnp.abs(lam))
        step = vec @ jnp.where(keep, (vec.T @ g) / jnp.where(keep, lam, 1.0), 0.0)
        converged = _residual(layout, y, g, mask, support) <= stationary
        y_next = jnp.where(mask, y - step, 0.0)
        failed = ~converged & ~jnp.all(jnp.isfinite(y_next))
        return n + 1, jnp.where(converged | failed, y, y_next), converged, failed

    def cond(state):
        n, _, converged, failed = state
        return (n < steps) & ~converged & ~failed

    _, y, converged, _ = jax.lax.while_loop(cond, body, (0, y, False, False))
    return y, converged


@eqx.filter_jit
def _evaluate(model, Ws):
    return model.G(Ws), model.loss_of_weights(Ws)


@eqx.filter_jit
def _curvature(model, Ws, j, direction):
    """``d²/dβ² L(W + β D)`` at β = 0 with ``D`` in weight matrix j: the natural size of a new column."""

    def along(beta):
        return model.loss_of_weights(tuple(w + beta * direction if i == j else w for i, w in enumerate(Ws)))

    return jax.grad(jax.grad(along))(0.0)


@eqx.filter_jit
def _hessian(model, layout, y):
    return jax.hessian(lambda z: _loss(model, layout, z))(y)


# ----------------------------------------------------------------------------------------------
# The path: stages and transitions as immutable records.


@dataclasses.dataclass(frozen=True)
class _Context:
    model: FactorizedModel
    layout: _Layout
    tol: GreedyTolerances
    G: float  # max_j σ_1(G_j(0)), the scale of every gradient threshold (T_1 = 1/G)
    check: bool
    rng: np.random.Generator


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Stage:
    """``W̄^k`` with its sleeping exponents and checks; ``ok`` = (no rank lost on the way in, local minimum)."""

    time: float
    y: np.ndarray  # balanced factors, flat
    ranks: tuple[int, ...]
    Ws: tuple[np.ndarray, ...]
    exponents: tuple[np.ndarray, ...]  # per factor, ascending, k_j − r_j of them
    rates: tuple[np.ndarray, ...]  # σ_i(G_j), i ≤ k_j − r_j, below g_zero·G set to 0
    pairs: tuple[tuple[np.ndarray, np.ndarray], ...]  # top singular pair (a, b) of every G_j
    gaps: tuple[float, ...]  # (σ_1 − σ_2)/σ_1 of every G_j (1 where σ_2 = 0, NaN where σ_1 = 0)
    loss: float
    stationarity: float
    hessian_min_eig: float
    ok: tuple[bool, bool]
    warnings: tuple[str, ...]

    @property
    def delta(self) -> np.ndarray:
        """Time until each factor escapes, ``e_{j,1}/σ_1(G_j)`` (∞ without a sleeping direction or speed)."""
        return np.array([e[0] / r[0] if e.size and r[0] > 0 else np.inf for e, r in zip(self.exponents, self.rates)])


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Transition:
    """``k → k+1``: the escaping factor and the end of phase (B); ``ok`` = (unique escape, ε/perturbations agree)."""

    delta: np.ndarray
    factor: int
    delta_gap: float
    runner_up: int
    singular_gap: float
    epsilon_discrepancy: float
    perturbation_spread: float
    ok: tuple[bool, bool]
    warnings: tuple[str, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class _End:
    result: str
    message: str
    final_delta: np.ndarray
    ok: tuple[bool, bool] = (True, True)
    warnings: tuple[str, ...] = ()


def _emit(messages) -> None:
    for message in messages:
        warnings.warn(message, AssumptionWarning, stacklevel=5)


def _stage(ctx: _Context, k: int, time: float, y, ranks, exponents, lost) -> _Stage:
    """Stage k at the balanced factors ``y``: gradients, speeds, stationarity and the local-minimum check."""
    tol, layout = ctx.tol, ctx.layout
    Ws = tuple(np.asarray(w) for w in layout.products(y))
    G, loss = _evaluate(ctx.model, tuple(jnp.asarray(w) for w in Ws))
    rates, pairs, gaps, residual = [], [], [], 0.0
    for g, w, r, k_j in zip(G, Ws, ranks, layout.widths):
        g = np.asarray(g)
        a, s, bt = np.linalg.svd(g)
        s = np.where(s > tol.g_zero * ctx.G, s, 0.0)
        rates.append(s[: k_j - r] if k_j > r else np.zeros(0))
        pairs.append((a[:, 0], bt[0]))
        gaps.append(float((s[0] - (s[1] if s.size > 1 else 0.0)) / s[0]) if s[0] > 0 else math.nan)
        p, _, qt = np.linalg.svd(w)
        left, right = p[:, :r], qt[:r].T
        off = g - (g - left @ (left.T @ g)) @ (np.eye(g.shape[1]) - right @ right.T)  # P_T(G)
        residual = max(residual, float(np.linalg.norm(off, 2)))
    stationarity = residual / ctx.G
    messages, ok_min = lost, True
    if stationarity > tol.stationary:
        ok_min = False
        messages += (
            f"W̄^{k} is not a critical point at its ranks: ‖P_T(G)‖ = {stationarity:.3g}·G after Newton's method.",
        )
    eig = math.inf if sum(ranks) == 0 else math.nan
    if ctx.check and sum(ranks):
        eig = _min_eig_off_gauge(ctx, y, ranks)
        if not eig > tol.hessian * ctx.G:
            ok_min = False
            messages += (
                f"W̄^{k} is not a strict local minimum at ranks {tuple(ranks)}: the Hessian in the factors has "
                f"smallest eigenvalue {eig:.3g} off the gauge directions.",
            )
    return _Stage(
        time=time,
        y=y,
        ranks=tuple(ranks),
        Ws=Ws,
        exponents=tuple(exponents),
        rates=tuple(rates),
        pairs=tuple(pairs),
        gaps=tuple(gaps),
        loss=float(loss),
        stationarity=stationarity,
        hessian_min_eig=eig,
        ok=(not lost, ok_min),
        warnings=messages,
    )


def _min_eig_off_gauge(ctx: _Context, y, ranks) -> float:
    """Smallest eigenvalue of the Hessian of L in the active factor entries, off the gauge ``(U X, −V Xᵀ)``."""
    layout = ctx.layout
    active = np.flatnonzero(layout.mask(ranks))
    hess = np.asarray(_hessian(ctx.model, layout, jnp.asarray(y)))[np.ix_(active, active)]
    gauge = []
    for j, ((u, v), r) in enumerate(zip(layout.split(y), ranks)):
        for a in range(r):
            for c in range(r):
                x = np.zeros((u.shape[1], u.shape[1]))
                x[a, c] = 1.0
                factors = [(np.zeros_like(uu), np.zeros_like(vv)) for uu, vv in layout.split(y)]
                factors[j] = (u @ x, -v @ x.T)
                gauge.append(layout.flat(factors)[active])
    basis, _, _ = np.linalg.svd(np.array(gauge).T, full_matrices=True)
    off = basis[:, len(gauge) :]
    return float(np.linalg.eigvalsh(off.T @ (0.5 * (hess + hess.T)) @ off)[0])


def _phase_b_ends(ctx: _Context, stage: _Stage, j: int):
    """Phase (B) into factor j from every ε and the perturbed starts. Returns (outcome, ε, y, ranks, disc, spread)."""
    tol, layout, model = ctx.tol, ctx.layout, ctx.model
    a, b = stage.pairs[j]
    sigma = float(stage.rates[j][0])
    curvature = abs(float(_curvature(model, tuple(jnp.asarray(w) for w in stage.Ws), j, jnp.asarray(np.outer(a, b)))))
    scale_now = float(np.max(np.abs(stage.y), initial=0.0))
    natural = math.sqrt(sigma / curvature) if curvature > 0 else max(scale_now, 1.0)
    scale = max(scale_now, natural)
    ranks = list(stage.ranks)
    column = ranks[j]
    ranks[j] += 1
    mask = layout.mask(ranks)
    starts = []
    for eps in tol.epsilons:
        factors = [(u.copy(), v.copy()) for u, v in layout.split(stage.y)]
        factors[j][0][:, column] = eps * natural * a
        factors[j][1][:, column] = eps * natural * b
        starts.append(layout.flat(factors))
    starts = np.array(starts)
    n_pert = tol.perturbations if ctx.check else 0
    if n_pert:
        starts = np.concatenate([starts, perturbed_starts(starts[0], mask, n_pert, tol.perturbation, ctx.rng)])
    t1 = 1e6 * (math.log(1.0 / tol.epsilons[-1]) + 1.0) / sigma
    thresholds = tuple(
        jnp.asarray(x)
        for x in (
            tol.steady * sigma,
            tol.stationary * ctx.G,
            tol.support,
            min(tol.ode_rtol, 1e-2 * tol.steady),  # an explicit method hovers at about its tolerance
            tol.ode_atol * scale,
            t1,
        )
    )
    ends, status = _phase_b(
        model, layout, jnp.asarray(starts), jnp.asarray(mask), thresholds, tol.max_steps, tol.newton_steps
    )
    ends, status = np.asarray(ends), np.asarray(status)
    n_eps = len(tol.epsilons)
    for eps, code in zip(tol.epsilons, status[:n_eps]):
        if code:
            return _Outcome(int(code)), eps, None, None, math.nan, math.nan
    products = [layout.products(e) for e in ends]
    size = max(float(np.linalg.norm(w, 2)) for w in products[n_eps - 1])
    found = [_ranks(ws, size, tol.support) for ws in products]

    def distance(i):
        if found[i] != found[n_eps - 1]:
            return math.inf
        return max(float(np.linalg.norm(p - q, 2)) for p, q in zip(products[i], products[n_eps - 1])) / size

    disc = distance(n_eps - 2)
    spread = math.nan
    if n_pert:
        spread = max(distance(i) if status[i] == 0 else math.inf for i in range(n_eps, len(ends)))
    return _Outcome.STATIONARY, tol.epsilons[-1], products[n_eps - 1], found[n_eps - 1], disc, spread


def _ranks(Ws, size: float, support: float) -> tuple[int, ...]:
    """Numerical ranks: singular values above ``support · size``."""
    return tuple(int(np.sum(np.linalg.svd(w, compute_uv=False) > support * size)) for w in Ws)


def _run(ctx: _Context, max_stages, progress):
    layout, tol, names = ctx.layout, ctx.tol, ctx.model.names
    J = len(layout.widths)
    stage = _stage(ctx, 0, 0.0, np.zeros(layout.size), (0,) * J, [np.ones(k) for k in layout.widths], ())
    _emit(stage.warnings)
    stages, transitions = [stage], []
    while True:
        k = len(transitions)
        delta = stage.delta
        if not np.any(np.isfinite(delta)):
            message = "T = ∞: no weight matrix has a sleeping direction with σ_1(G_j) above g_zero·G"
            return stages, transitions, _End(result="successful", message=message, final_delta=delta)
        if max_stages is not None and k >= max_stages:
            message = f"stopped after max_stages = {max_stages} escapes (final_delta holds the next Δ)"
            return stages, transitions, _End(result="max_stages", message=message, final_delta=delta)
        step = float(np.min(delta))
        choice = choose_coordinate(delta, tol.tie * (stage.time + step))
        j = choice.coordinate
        gap = stage.gaps[j]
        unique = ()
        if choice.tied.size:
            unique += (
                f"the escape at stage {k} is not unique: {names[j]} and {', '.join(names[i] for i in choice.tied)} "
                f"escape together (gap {choice.gap:.3g}); taking {names[j]} (lowest index) first.",
            )
        if gap <= tol.tie:
            unique += (
                f"the escape at stage {k} is not unique: the top singular value of G for {names[j]} is not simple "
                f"((σ_1 − σ_2)/σ_1 = {gap:.3g}).",
            )
        outcome, eps, Ws, ranks, disc, spread = _phase_b_ends(ctx, stage, j)
        if outcome is not _Outcome.STATIONARY:
            why = _WHY[outcome].format(max_steps=tol.max_steps)
            message = f"phase (B) of stage {k} (a rank for {names[j]}) did not reach a critical point: from ε = {eps:g}, {why}"
            _emit(unique)
            end = _End(
                result="phase_b_failed", message=message, final_delta=delta, ok=(not unique, False), warnings=unique
            )
            return stages, transitions, end
        messages = unique
        if disc > tol.epsilon_agreement:
            messages += (
                f"the ε → 0 limit of phase (B) is not reached at stage {k}: the saddles from ε = {tol.epsilons[-2]:g} "
                f"and {tol.epsilons[-1]:g} differ by {disc:.3g} (relative; inf: different ranks).",
            )
        if spread > tol.spread:
            messages += (f"perturbing phase (B)'s start at stage {k} moves its endpoint by {spread:.3g} (relative).",)
        transition = _Transition(
            delta=delta,
            factor=j,
            delta_gap=choice.gap,
            runner_up=choice.runner_up,
            singular_gap=gap,
            epsilon_discrepancy=disc,
            perturbation_spread=spread,
            ok=(not unique, disc <= tol.epsilon_agreement and not spread > tol.spread),
            warnings=messages,
        )
        _emit(messages)
        transitions.append(transition)
        # (A): every exponent moves at its speed; factor j's leading one reached 0 and is now active.
        exponents = [e - r * step for e, r in zip(stage.exponents, stage.rates)]
        exponents[j] = exponents[j][1:]
        expected = list(stage.ranks)
        expected[j] += 1
        lost = ()
        for i, (got, want) in enumerate(zip(ranks, expected)):
            if got < want:
                # A direction that leaves: balanced, its growing mode sits at α² (exponent 2), as a diagonal
                # coordinate leaving at b = 0 (paper Lemma D.4); the bookkeeping beyond is not covered.
                exponents[i] = np.concatenate([exponents[i], np.full(want - got, 2.0)])
                lost += (
                    f"{names[i]} lost {want - got} rank(s) in phase (B) of stage {k}; the log-scale bookkeeping "
                    "gives the leaving direction exponent 2, an extrapolation of the diagonal case.",
                )
        y = layout.balanced(Ws, ranks)
        stage = _stage(ctx, k + 1, stage.time + step, y, ranks, exponents, lost)
        _emit(stage.warnings)
        stages.append(stage)
        if progress:
            print(
                f"greedy stage {k + 1}: T = {stage.time:.6g}, rank +1 in {names[j]}, loss = {stage.loss:.6g}",
                flush=True,
            )


def _stack(stages, transitions, end: _End) -> FactorizedGreedyPath:
    K, J = len(transitions), len(stages[0].ranks)
    k_max = max(len(e) for e in stages[0].exponents)

    def padded(name):
        out = np.full((K + 1, J, k_max), np.nan)
        for s, stage in enumerate(stages):
            for j, values in enumerate(getattr(stage, name)):
                out[s, j, : len(values)] = values
        return out

    def rows(records, name, dtype=np.float64):
        return np.asarray([getattr(r, name) for r in records], dtype=dtype)

    stage_ok = rows(stages, "ok", bool).reshape(K + 1, 2)
    out_ok = rows(transitions + [end], "ok", bool).reshape(K + 1, 2)
    sigma = np.array([[r[0] if r.size else 0.0 for r in stage.rates] for stage in stages])
    order = [m for pair in zip(stages, transitions + [end]) for r in pair for m in r.warnings]
    return FactorizedGreedyPath(
        times=rows(stages, "time"),
        factor=rows(transitions, "factor", np.int64).reshape(K),
        ranks=rows(stages, "ranks", np.int64).reshape(K + 1, J),
        W=tuple(np.stack([stage.Ws[j] for stage in stages]) for j in range(J)),
        loss=rows(stages, "loss"),
        sigma=sigma,
        b=padded("exponents"),
        rates=padded("rates"),
        delta=rows(transitions, "delta").reshape(K, J),
        final_delta=np.asarray(end.final_delta, dtype=np.float64),
        delta_gap=rows(transitions, "delta_gap").reshape(K),
        runner_up=rows(transitions, "runner_up", np.int64).reshape(K),
        singular_gap=rows(transitions, "singular_gap").reshape(K),
        hessian_min_eig=rows(stages, "hessian_min_eig"),
        stationarity=rows(stages, "stationarity"),
        epsilon_discrepancy=rows(transitions, "epsilon_discrepancy").reshape(K),
        perturbation_spread=rows(transitions, "perturbation_spread").reshape(K),
        assumptions_ok=np.stack([stage_ok[:, 0] & out_ok[:, 0], stage_ok[:, 1], out_ok[:, 1]], axis=1),
        result=end.result,
        message=end.message,
        warnings=tuple(order),
    )


def greedy_low_rank(
    model: FactorizedModel,
    *,
    u0=None,
    v0=None,
    max_stages: int | None = None,
    tolerances: GreedyTolerances = GreedyTolerances(),
    check_assumptions: bool = True,
    seed: int = 0,
    progress: bool = False,
    throw: bool = True,
) -> FactorizedGreedyPath:
    """The greedy low-rank limit of a [`FactorizedModel`][gradflow.FactorizedModel]; called by
    [`greedy_limit`][gradflow.greedy_limit] (same arguments; runs inside its float64 scope).

    ``u0, v0`` (optional, tuples of initial factors) do not change the path: only their genericity enters
    (every sleeping exponent starts at 1); they are checked (shapes, full column rank of ``[U⁰_j; V⁰_j]``).
    ``tolerances`` are those of the diagonal engine, read for matrices: ``g_zero`` (a σ_1(G_j) below
    ``g_zero·G`` is 0), ``support`` (a singular value of W̄_j below ``support·max‖W̄‖`` is not in its rank),
    ``tie`` (two factors' Δ, or σ_1 and σ_2 of G_j, closer than that are a non-unique escape), ``hessian``,
    ``epsilons``/``epsilon_agreement``, ``perturbation(s)``/``spread``, and the ODE and Newton settings.
    """
    check_factorized_model(model)
    if not isinstance(tolerances, GreedyTolerances):
        raise TypeError(f"tolerances must be a GreedyTolerances; got {type(tolerances).__name__}.")
    if max_stages is not None:
        max_stages = check_int(max_stages, "max_stages", minimum=0)
    if (u0 is None) != (v0 is None):
        raise ValueError("give both u0 and v0, or neither.")
    if u0 is not None:
        check_factors(u0, v0, model)
    model = jax.tree_util.tree_map(lambda x: jnp.asarray(x) if eqx.is_array(x) else x, model)
    layout = _Layout(model.shapes, model.widths)
    G0, _ = _evaluate(model, tuple(jnp.zeros(s) for s in model.shapes))
    G = max(float(np.linalg.norm(np.asarray(g), 2)) for g in G0) or 1.0
    ctx = _Context(model, layout, tolerances, G, check_assumptions, np.random.default_rng([seed, 5]))
    stages, transitions, end = _run(ctx, max_stages, progress)
    if throw and end.result == "phase_b_failed":
        raise RuntimeError(
            f"greedy_limit: {end.message}. Pass throw=False to get the path up to stage {len(transitions)}."
        )
    return _stack(stages, transitions, end)

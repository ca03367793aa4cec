"""The greedy limit of a depth-L diagonal network (L ≥ 3) as α → 0 (docs/depth.md, *The greedy limit*).

Algorithm 1 with the depth-L clock in place of the log scales: in ``τ = t α^{L−2}`` each sleeping coordinate's clock
``c_i = (α/a_i)^{L−2}`` (for an unbalanced start, ``(L−2) ∫_{|ρ|}^∞ Π_{l≠m} (x² + C_l)^{−1/2} dx``, ``ρ = r/α``) moves
linearly, ``dc_i/dτ = −(L−2) s_i g_i(θ^k)``. It wakes with sign ``s_i`` when ``c_i`` reaches 0, or, for an unbalanced
start whose smallest layer can cross 0, with sign ``−s_i`` when ``c_i`` reaches ``c_i^max = (L−2) ∫_{−∞}^∞ ⋯``
(∞ for a balanced one). Phase (B) is the flow of the awake coordinates, balanced in the limit, ``da_i/dt = s_i g_i
a_i^{L−1}``, from the stationary point with the new coordinate at ``a = ε``; a coordinate that it drives to 0 leaves
the support with its clock at 0.
"""

from __future__ import annotations

import math
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from scipy.integrate import quad, solve_ivp

from .._kit import _checkpoint
from .._kit._assumptions import AssumptionWarning
from .._kit._greedy import AbstractGreedyPath, GreedyTolerances
from .._results import RESULTS
from ._flow import reduce_start
from ._model import DepthModel, check_init


class DepthGreedyPath(AbstractGreedyPath):
    """The greedy limit of a depth-L diagonal network: stages ``k = 0..K`` (stage k holds ``β^k`` on
    ``[T_k, T_{k+1})`` in ``τ = t α^{L−2}``).

    Attributes:
        times: ``(K+1,)`` ``T_0 = 0 < T_1 ≤ … ≤ T_K``.
        beta: ``(K+1, p)`` the stationary points ``β^k`` (``β^0 = 0``).
        b: ``(K+1, p)`` the clocks ``c^k`` at ``T_k`` (0 on the support); ``b_at(τ)`` moves them linearly.
        g: ``(K+1, p)`` ``g(β^k)`` with entries below ``g_zero · G`` set to 0.
        s: ``(K+1, p)`` the sign each sleeping coordinate takes when its clock reaches 0.
        support: ``(K+1, p)`` bool.
        delta: ``(K, p)`` the time until active of every coordinate at each stage.
        activated: ``(K,)`` the coordinate activated at ``T_{k+1}``; sign: ``(K,)`` the sign it takes.
        loss: ``(K+1,)`` ``L(β^k)``; final_delta, delta_gap, runner_up, hessian_min_eig, stationarity,
            epsilon_discrepancy, perturbation_spread (NaN: not run), assumptions_ok, result, message, warnings: as
            for the diagonal family's [`GreedyPath`][gradflow.GreedyPath].
    """

    beta: np.ndarray
    g: np.ndarray
    s: np.ndarray
    support: np.ndarray
    delta: np.ndarray
    activated: np.ndarray
    sign: np.ndarray
    depth: int = eqx.field(static=True)

    @property
    def weights(self) -> np.ndarray:
        """``β^k``, ``(K+1, p)``: the weights of every stage, as ``DepthFlowResult.weights``."""
        return self.beta

    def weights_at(self, tau) -> np.ndarray:
        """``β^k`` of the stage holding τ (piecewise constant), shape ``τ.shape + (p,)``."""
        return self.beta[self.stage_at(tau)]

    @property
    def speeds(self) -> np.ndarray:
        """``−dc/dτ = (L−2) s g`` on each stage (0 on the support)."""
        return np.where(self.support, 0.0, (self.depth - 2) * self.s * self.g)


def initial_clocks(W0: np.ndarray):
    """``(c⁰, c^max, s)`` of every coordinate from the layers' directions ``W0`` (shape ``(L, p)``)."""
    L, p = W0.shape
    red = reduce_start(W0)
    c0, cmax, s = np.empty(p), np.empty(p), np.empty(p)
    for i in range(p):
        C = red.C[:, i]
        rho = abs(red.rho0[i])
        s[i] = red.sigma_o[i] * (-1.0 if red.rho0[i] < 0 else 1.0)
        if np.all(C == 0):
            c0[i], cmax[i] = (rho ** -(L - 2) if rho > 0 else np.inf), np.inf
            continue

        def integrand(x, C=C):
            return float(np.prod(1.0 / np.sqrt(x * x + C)))

        c0[i] = (L - 2) * quad(integrand, rho, np.inf, epsabs=1e-13, epsrel=1e-12, limit=200)[0]
        if np.any(C == 0):
            cmax[i] = np.inf
        else:
            cmax[i] = 2 * (L - 2) * quad(integrand, 0.0, np.inf, epsabs=1e-13, epsrel=1e-12, limit=200)[0]
    return c0, cmax, s


@eqx.filter_jit
def _g(model, beta):
    return model.g(beta)


@eqx.filter_jit
def _loss(model, beta):
    return model.loss_of_beta(beta)


@eqx.filter_jit
def _hessian(model, beta):
    return jax.hessian(model.loss_of_beta)(beta)


def phase_b(model: DepthModel, beta, s, support, i, sign, eps, tol: GreedyTolerances):
    """The flow of the awake coordinates from ``β`` with coordinate ``i`` at ``a = ε`` and sign ``sign``, to its
    stationary point: ``(β, support, stationarity)``."""
    L = model.depth
    idx = np.flatnonzero(support | (np.arange(model.p) == i))
    sig = np.where(np.arange(model.p) == i, sign, np.sign(beta) + (beta == 0))[idx]
    y0 = np.log(np.where(idx == i, eps, np.abs(beta[idx]) ** (1.0 / L)))

    def full(y):
        out = np.zeros(model.p)
        out[idx] = sig * np.exp(L * y)
        return out

    def rhs(_, y):
        g = np.asarray(_g(model, jnp.asarray(full(y))))[idx]
        return sig * g * np.exp((L - 2) * y)

    g0 = np.asarray(_g(model, jnp.asarray(full(y0))))
    G = max(float(np.max(np.abs(g0))), 1e-300)
    escape = (eps ** -(L - 2) / (L - 2) if L > 2 else math.log(1.0 / eps)) / max(abs(float(g0[i])), 1e-300)

    def jac(_, y):
        return np.asarray(_phase_b_jacobian(model, jnp.asarray(y), jnp.asarray(idx), jnp.asarray(sig)))

    t_end = 10.0 * escape + 1e3 / G
    sol = solve_ivp(rhs, (0.0, t_end), y0, method="Radau", jac=jac, rtol=tol.ode_rtol * 1e-4, atol=tol.ode_atol)
    y = sol.y[:, -1]
    g = np.asarray(_g(model, jnp.asarray(full(y))))[idx]
    left = (y < np.max(y) + math.log(tol.support)) & (sig * g < 0)
    y = _polish(model, y, idx, sig, ~left)
    g = np.asarray(_g(model, jnp.asarray(full(y))))[idx]
    res = float(np.max(np.abs(np.where(left, 0.0, g)))) / G
    keep = ~left
    new_support = np.zeros(model.p, bool)
    new_support[idx[keep]] = True
    beta_new = np.where(new_support, full(y), 0.0)
    return beta_new, new_support, res


@eqx.filter_jit
def _phase_b_jacobian(model, y, idx, sig):
    L = model.depth

    def rhs(y):
        beta = jnp.zeros(model.p).at[idx].set(sig * jnp.exp(L * y))
        return sig * model.g(beta)[idx] * jnp.exp((L - 2) * y)

    return jax.jacfwd(rhs)(y)


def _polish(model, y, idx, sig, keep, steps: int = 8):
    """Newton on ``g = 0`` over the kept coordinates in ``β``, from the flow's end (a strict local minimum:
    Assumption 4.3), for a stationary point to float64's accuracy."""
    L = model.depth
    sub = idx[keep]
    for _ in range(steps):
        beta = np.zeros(model.p)
        beta[idx] = sig * np.exp(L * y)
        g = np.asarray(_g(model, jnp.asarray(beta)))[sub]
        H = np.asarray(_hessian(model, jnp.asarray(beta)))[np.ix_(sub, sub)]
        try:
            step = np.linalg.solve(H, g)
        except np.linalg.LinAlgError:
            break
        new = np.abs(beta[sub] + step)
        if np.any(new <= 0):
            break
        y = y.copy()
        y[keep] = np.log(new) / L
    return y


def _probe(model: DepthModel):
    """``g`` and the loss at a fixed generic ``β`` (``_checkpoint.fingerprint``)."""
    beta = jnp.asarray(0.3 * np.random.default_rng(20260).standard_normal(model.p))
    return _g(model, beta), _loss(model, beta)


def _tie_warning(k: int, transition: dict, tolerances: GreedyTolerances) -> str | None:
    """The warning of transition ``k`` if two coordinates tie for activation (Assumption 4.2), else None."""
    gap, first = float(transition["gap"]), float(np.asarray(transition["delta"])[int(transition["i"])])
    if gap < tolerances.tie * max(first, 1.0):
        return f"stage {k}: two coordinates tie for activation (gap {gap:.3g}); Assumption 4.2 fails."
    return None


def greedy(model: DepthModel, *, u0, v0, max_stages, tolerances, check_assumptions, seed, progress, checkpoint=None):
    """The greedy limit of ``greedy_limit`` for a [`DepthModel`][gradflow.DepthModel] from ``u0`` (the layers'
    directions, shape ``(L, p)``: the clocks start at ``(W0_i)^{−(L−2)}`` and so depend on them). ``checkpoint``: a
    file that keeps the finished stages (``gradflow._kit._checkpoint.Checkpoint``), resumed by a later call with the
    same model, ``u0`` and tolerances."""
    L = model.depth
    if L == 2:
        raise ValueError(
            "greedy_limit of a depth-2 DepthModel: use gradflow.DiagonalModel (u = w_1, v = w_2), whose Algorithm 1 "
            "is this limit at L = 2."
        )
    if u0 is None:
        raise ValueError(
            "give the layers' initial directions u0, shape (L, p): at depth L ≥ 3 the clocks start at "
            "(u0_i)^{-(L-2)}, so the greedy limit depends on them."
        )
    if v0 is not None:
        raise ValueError("a DepthModel takes its layers' directions as u0, shape (L, p); v0 is not taken.")
    W0 = check_init(model, u0)
    c, cmax, s = initial_clocks(W0)
    p = model.p
    beta = np.zeros(p)
    support = np.zeros(p, bool)
    T = 0.0
    G = max(float(np.max(np.abs(np.asarray(_g(model, jnp.zeros(p)))))), 1e-300)
    first = dict(T=T, beta=beta, c=c.copy(), s=s.copy(), support=support)
    stages, transitions = [first], []
    if checkpoint is not None:
        key = dict(model=_checkpoint.fingerprint(model, _probe), u0=W0, tolerances=tolerances)
        checkpoint = _checkpoint.Checkpoint(checkpoint, key, np.random.default_rng(seed))
        stages, transitions = checkpoint.start(first, max_stages, progress)
        last = stages[-1]
        T, beta, c, s = float(last["T"]), np.asarray(last["beta"]), np.asarray(last["c"]), np.asarray(last["s"])
        support = np.asarray(last["support"], bool)
    messages = [m for k, t in enumerate(transitions) if (m := _tie_warning(k, t, tolerances))]
    result, message = RESULTS.successful, ""
    while True:
        g = np.asarray(_g(model, jnp.asarray(beta)))
        g = np.where(np.abs(g) < tolerances.g_zero * G, 0.0, g)
        stages[-1]["g"] = g
        H = np.asarray(_hessian(model, jnp.asarray(beta)))[np.ix_(support, support)]
        stages[-1]["hessian"] = float(np.min(np.linalg.eigvalsh(H))) if support.any() else np.inf
        stages[-1]["loss"] = float(_loss(model, jnp.asarray(beta)))
        sg = s * g
        with np.errstate(divide="ignore", invalid="ignore"):
            delta = np.where(sg > 0, c / ((L - 2) * sg), np.where(sg < 0, (cmax - c) / ((L - 2) * np.abs(sg)), np.inf))
        delta = np.where(support | ~np.isfinite(delta), np.inf, np.maximum(delta, 0.0))
        order = np.argsort(delta)
        i = int(order[0])
        if not np.isfinite(delta[i]):
            stages[-1]["final_delta"] = delta
            break
        if max_stages is not None and len(transitions) >= max_stages:
            stages[-1]["final_delta"] = delta
            result, message = RESULTS.max_stages, f"the greedy path stopped at max_stages={max_stages} activations."
            break
        gap = float(delta[order[1]] - delta[i]) if p > 1 and np.isfinite(delta[order[1]]) else np.inf
        T += float(delta[i])
        c = np.where(support, c, c - (L - 2) * s * g * delta[i])
        sign = s[i] if sg[i] > 0 else -s[i]
        ends = []
        for eps in tolerances.epsilons[:1] + tolerances.epsilons[-1:]:
            ends.append(phase_b(model, beta, s, support, i, sign, eps, tolerances))
        (beta_new, support_new, res), (beta_small, _, _) = ends
        scale = max(float(np.max(np.abs(beta_new))), 1e-300)
        discrepancy = float(np.max(np.abs(beta_new - beta_small))) / scale
        left = support & ~support_new
        s = np.where(np.arange(p) == i, sign, np.where(left, np.sign(beta), s))
        c = np.where(support_new | left, 0.0, c)
        transitions.append(
            dict(
                delta=delta,
                i=i,
                sign=sign,
                gap=gap,
                runner_up=int(order[1]) if p > 1 and np.isfinite(delta[order[1]]) else -1,
                discrepancy=discrepancy,
                stationarity=res,
            )
        )
        if text := _tie_warning(len(transitions) - 1, transitions[-1], tolerances):
            messages.append(text)
        beta, support = beta_new, support_new
        stages.append(dict(T=T, beta=beta, c=c.copy(), s=s.copy(), support=support))
        if checkpoint is not None:
            checkpoint.save(stages, transitions)
    for text in messages:
        warnings.warn(text, AssumptionWarning, stacklevel=3)
    K = len(transitions)
    hess = np.array([st["hessian"] for st in stages])
    ok = np.ones((K + 1, 3), bool)
    ok[:, 1] = ~(hess < tolerances.hessian)
    return DepthGreedyPath(
        times=np.array([st["T"] for st in stages]),
        b=np.stack([st["c"] for st in stages]),
        loss=np.array([st["loss"] for st in stages]),
        final_delta=stages[-1]["final_delta"],
        delta_gap=np.array([t["gap"] for t in transitions]),
        runner_up=np.array([t["runner_up"] for t in transitions], int),
        hessian_min_eig=hess,
        stationarity=np.array([0.0] + [t["stationarity"] for t in transitions]),
        epsilon_discrepancy=np.array([t["discrepancy"] for t in transitions]),
        perturbation_spread=np.full(K, np.nan),
        assumptions_ok=ok,
        result=result.value,
        message=message,
        warnings=tuple(messages),
        beta=np.stack([st["beta"] for st in stages]),
        g=np.stack([st["g"] for st in stages]),
        s=np.stack([st["s"] for st in stages]),
        support=np.stack([st["support"] for st in stages]),
        delta=np.stack([t["delta"] for t in transitions]) if K else np.zeros((0, p)),
        activated=np.array([t["i"] for t in transitions], int),
        sign=np.array([t["sign"] for t in transitions]),
        depth=L,
    )

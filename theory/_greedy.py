"""Plateau dynamics of the log-scale weights and the time until active (paper Algorithm 1 (A),
appendix C.5; docs/math.md, *The stages*)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import sympy

from ._record import Derivation, check_claims


def _time_until_active_expr(b: sympy.Expr, g: sympy.Expr) -> sympy.Expr:
    """Δ(i) = (b_i − 1 + sgn g_i) / g_i (docs/math.md, *The stages*, (A))."""
    return (b - 1 + sympy.sign(g)) / g


def derive_plateau_dynamics() -> Derivation:
    """With g frozen at g(θ^k), d(log w)/dτ = log(1/α) g integrates to log_α w(τ) = b^k − (τ − T_k) g."""
    tau, t_k, b_k, g = sympy.symbols("tau T_k b_k g", real=True)
    alpha = sympy.Symbol("alpha", positive=True)
    log_w = sympy.Function("y")  # y(τ) = log w(τ)
    ode = sympy.Eq(log_w(tau).diff(tau), sympy.log(1 / alpha) * g)
    solution = sympy.dsolve(ode, log_w(tau), ics={log_w(t_k): b_k * sympy.log(alpha)}).rhs
    log_alpha_w = solution / sympy.log(alpha)
    claims = {
        "log_α w(τ) = b^k - (τ - T_k) g": log_alpha_w - (b_k - (tau - t_k) * g),
        "d(log_α w)/dτ = -g": log_alpha_w.diff(tau) + g,
    }
    statement = (
        r"\frac{d \log w_i}{d\tau} = \log(1/\alpha)\, g_i(\theta^k),\ \log_\alpha w_i(T_k) = b_i^k"
        r"\ \Rightarrow\ \log_\alpha w_i(\tau) = b_i^k - (\tau - T_k)\, g_i(\theta^k)"
    )
    return check_claims("plateau dynamics of log-scale weights (App. C.5)", statement, claims)


def derive_time_until_active() -> Derivation:
    """Δ_k(i) = (b_i − 1 + sgn g_i)/g_i is when b_i − Δ g_i reaches 0 (g_i > 0) or 2 (g_i < 0)."""
    b, delta, g = sympy.symbols("b Delta g", real=True)
    g_pos = sympy.Symbol("g", positive=True)
    g_neg = sympy.Symbol("g", negative=True)
    inside = sympy.Symbol("s", positive=True)
    b_inside = 2 * inside / (1 + inside)  # any b in (0, 2)
    (reach_zero,) = sympy.solve(sympy.Eq(b - delta * g_pos, 0), delta)
    (reach_two,) = sympy.solve(sympy.Eq(b - delta * g_neg, 2), delta)
    claims = {
        "g > 0: b - Δ g = 0 at Δ = (b - 1 + sgn g)/g": reach_zero - _time_until_active_expr(b, g_pos),
        "g < 0: b - Δ g = 2 at Δ = (b - 1 + sgn g)/g": reach_two - _time_until_active_expr(b, g_neg),
        "Δ > 0 for 0 < b < 2, g > 0": _time_until_active_expr(b_inside, g_pos).is_positive is True,
        "Δ > 0 for 0 < b < 2, g < 0": _time_until_active_expr(b_inside, g_neg).is_positive is True,
        "b^{k+1}_{i_k} = b - g Δ = 1 - sgn g ∈ {0, 2}": b - g * _time_until_active_expr(b, g) - (1 - sympy.sign(g)),
        "b^0 = 1, g > 0: Δ_0 = 1/|g|": _time_until_active_expr(1, g_pos) - 1 / abs(g_pos),
        "b^0 = 1, g < 0: Δ_0 = 1/|g|": _time_until_active_expr(1, g_neg) - 1 / abs(g_neg),
        "misprinted b^0 = 0 would give Δ_0 = 0 for g > 0": _time_until_active_expr(0, g_pos),
    }
    statement = (
        r"\Delta_k(i) = \frac{b_i^k - 1 + \operatorname{sgn} g_i(\theta^k)}{g_i(\theta^k)},\quad "
        r"b^{k+1} = b^k - g(\theta^k)\,\Delta_k(i_k),\ b^{k+1}_{i_k} \in \{0, 2\},\quad "
        r"b^0 = \mathbf 1 \Rightarrow T_1 = \min_i 1/|g_i(0)|"
    )
    return check_claims("time until active (Algorithm 1 (A))", statement, claims)


def time_until_active(b, g) -> np.ndarray:
    """Δ = (b − 1 + sgn g)/g elementwise, ∞ where g == 0 exactly (docs/math.md, *The stages*, (A)).

    No tolerance is applied: callers decide which g count as zero.
    """
    b, g = np.broadcast_arrays(np.asarray(b, dtype=float), np.asarray(g, dtype=float))
    with np.errstate(divide="ignore", invalid="ignore"):
        delta = (b - 1.0 + np.sign(g)) / g
    return np.where(g == 0.0, np.inf, delta)


class GreedyStages(NamedTuple):
    """Stage times T_1 < T_2 < … (T_0 = 0 omitted) and the coordinate activated at each."""

    times: np.ndarray
    order: np.ndarray


def greedy_orthonormal_stages(beta_star) -> GreedyStages:
    """Algorithm 1 for the diagonal linear model with (1/n) XᵀX = I, where g(β) = β* − β.

    Runs the greedy loop exactly (b^0 = 1, Δ from :func:`time_until_active`, b^{k+1} = b^k − g Δ);
    phase (B) sets the activated coordinate to β*_i since coordinates decouple. The result is
    T_k = 1/|β*_(k)| in increasing order; coordinates with β*_i = 0 never activate.
    Ties are broken towards the lower index.
    """
    beta_star = np.asarray(beta_star, dtype=float)
    if beta_star.ndim != 1:
        raise ValueError(f"beta_star must be a 1-D array, got shape {beta_star.shape}")
    log_scale_weights = np.ones_like(beta_star)
    beta = np.zeros_like(beta_star)
    stage_time = 0.0
    times, order = [], []
    while True:
        g = beta_star - beta
        delta = time_until_active(log_scale_weights, g)
        i = int(np.argmin(delta))
        if not np.isfinite(delta[i]):
            break
        stage_time += delta[i]
        log_scale_weights = log_scale_weights - g * delta[i]
        log_scale_weights[i] = 1.0 - np.sign(g[i])
        beta[i] = beta_star[i]
        times.append(stage_time)
        order.append(i)
    return GreedyStages(times=np.array(times, dtype=float), order=np.array(order, dtype=int))

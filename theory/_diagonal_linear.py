"""Exact solution of the diagonal linear model with orthonormal design, and its α → 0 staircase.

With (1/n) XᵀX = I the loss is ½‖β* − β‖², so g = β* − β and every coordinate decouples:
du/dt = v(β* − uv), dv/dt = u(β* − uv), started at α(u0, v0). With w = u + v, w̄ = u − v
(paper appendix C.4), c = w w̄ = α²(u0² − v0²) is conserved and z = w² solves the Riccati equation
dz/dt = 2z(β* − β), β = (z − c²/z)/4. Its closed form, with C = |c|, ρ = √(4β*² + c²),
A = (2β* + ρ)/C = e^{asinh(2β*/C)}, ζ = z/C, ζ0 = |u0 + v0| / |u0 − v0|, E = e^{−ρt}:

    ζ(t) = [ζ0 (A + E/A) + 1 − E] / [ζ0 (1 − E) + A E + 1/A],     β(t) = (C/4)(ζ − 1/ζ) = (C/2) sinh log ζ.

Every term is positive for t ≥ 0, so log(ζ/A) is a difference of two log-sum-exps: the numerical
oracle works in log α throughout and never forms α, C or A themselves.
"""

from __future__ import annotations

import functools

import numpy as np
import sympy

from ._record import Derivation, check_claims

_LOG2 = float(np.log(2.0))
# Above |x| = e^300, asinh(x) = sgn(x)(log|x| + log 2) to within e^-600, far below float64 resolution.
_ASINH_LOG_SWITCH = 300.0


def _zeta_expr(t, zeta0, big_a, rho):
    """ζ(t) written with positive terms only (see module docstring)."""
    decay = sympy.exp(-rho * t)
    return (zeta0 * (big_a + decay / big_a) + 1 - decay) / (zeta0 * (1 - decay) + big_a * decay + 1 / big_a)


@functools.cache
def diagonal_linear_beta_expression() -> tuple[sympy.Expr, tuple[sympy.Symbol, ...]]:
    """The closed form β(t) as a SymPy expression and its symbols (t, β*, u0, v0, α).

    Valid for t ≥ 0, α > 0, |u0| ≠ |v0|; evaluate it with mpmath for a high-precision reference.
    """
    t = sympy.Symbol("t", nonnegative=True)
    beta_star, u0, v0 = sympy.symbols("beta_star u0 v0", real=True)
    alpha = sympy.Symbol("alpha", positive=True)
    abs_c = alpha**2 * abs(u0 + v0) * abs(u0 - v0)
    rho = sympy.sqrt(4 * beta_star**2 + abs_c**2)
    big_a = sympy.exp(sympy.asinh(2 * beta_star / abs_c))  # = (2β* + ρ)/C, without cancellation for β* < 0
    zeta = _zeta_expr(t, abs(u0 + v0) / abs(u0 - v0), big_a, rho)
    return abs_c / 4 * (zeta - 1 / zeta), (t, beta_star, u0, v0, alpha)


def derive_diagonal_linear_closed_form() -> Derivation:
    """β(t) above solves du/dt = v(β* − uv), dv/dt = u(β* − uv) from α(u0, v0), any α, β*, |u0| ≠ |v0|."""
    t = sympy.Symbol("t", nonnegative=True)
    beta, beta_star = sympy.symbols("beta beta_star", real=True)
    c = sympy.Symbol("c", real=True, nonzero=True)
    abs_c, big_a, zeta0, rho, gain = sympy.symbols("C A zeta0 rho K", positive=True)
    z, z_plus, z_minus = sympy.symbols("z z_+ z_-", real=True)

    # Reduction of the (u, v) system to z = w² on the branch w = √z > 0 (w < 0: flip u and v together).
    z_of_t = sympy.Function("z", positive=True)(t)
    w = sympy.sqrt(z_of_t)
    u, v = (w + c / w) / 2, (w - c / w) / 2
    riccati = 2 * z_of_t * (beta_star - (z_of_t - c**2 / z_of_t) / 4)
    to_riccati = {sympy.Derivative(z_of_t, t): riccati}

    # Roots of the Riccati right-hand side and separation of variables.
    rho_exact = sympy.sqrt(4 * beta_star**2 + c**2)
    roots = {z_plus: 2 * beta_star + rho_exact, z_minus: 2 * beta_star - rho_exact}
    riccati_z = 2 * z * (beta_star - (z - c**2 / z) / 4)
    separated = riccati_z * (1 / (z - z_plus) - 1 / (z - z_minus))  # d/dt log((z − z+)/(z − z−))
    (z_separated,) = sympy.solve(sympy.Eq((z - z_plus) / (z - z_minus), gain * sympy.exp(-rho * t)), z)
    z0 = sympy.Symbol("z0", positive=True)
    decay = sympy.exp(-rho * t)
    z_positive_terms = (z0 * (z_plus - z_minus * decay) - z_plus * z_minus * (1 - decay)) / (
        z0 * (1 - decay) + z_plus * decay - z_minus
    )
    gain_at_zero = (z0 - z_plus) / (z0 - z_minus)

    # The closed form in the parametrisation β* = C(A − 1/A)/4, ρ = C(A + 1/A)/2 (A > 0 ↔ β* ∈ ℝ).
    beta_star_of_a = abs_c * (big_a - 1 / big_a) / 4
    rho_of_a = abs_c * (big_a + 1 / big_a) / 2
    zeta = _zeta_expr(t, zeta0, big_a, rho_of_a)
    z_closed = abs_c * zeta
    beta_closed = abs_c / 4 * (zeta - 1 / zeta)
    rho_of_c = sympy.sqrt(4 * beta_star**2 + abs_c**2)
    a_of_beta_star = (2 * beta_star + rho_of_c) / abs_c

    full, (t_full, _, u0, v0, alpha) = diagonal_linear_beta_expression()
    claims = {
        "orthonormal design: g = -dL/dβ = β* - β": -sympy.diff((beta_star - beta) ** 2 / 2, beta) - (beta_star - beta),
        "du/dt = v(β* - uv) on w = √z, w̄ = c/w": (u.diff(t) - v * (beta_star - u * v)).subs(to_riccati),
        "dv/dt = u(β* - uv) on w = √z, w̄ = c/w": (v.diff(t) - u * (beta_star - u * v)).subs(to_riccati),
        "uv = (z - c²/z)/4": u * v - (z_of_t - c**2 / z_of_t) / 4,
        "dz/dt = -(z - z+)(z - z-)/2, z± = 2β* ± ρ": (riccati_z + (z - z_plus) * (z - z_minus) / 2).subs(roots),
        "d/dt log((z - z+)/(z - z-)) = -ρ": (separated + (z_plus - z_minus) / 2).subs(roots),
        "solved for z = positive-term form (K = K(z0))": (z_separated.subs(gain, gain_at_zero) - z_positive_terms),
        "positive-term form in ζ = z/C with z+ = CA, z- = -C/A": (
            z_positive_terms.subs({z0: abs_c * zeta0, z_plus: abs_c * big_a, z_minus: -abs_c / big_a}) - z_closed
        ).subs(rho, rho_of_a),
        "A = exp(asinh(2β*/C)) = (2β* + ρ)/C": (
            sympy.exp(sympy.asinh(2 * beta_star / abs_c)).rewrite(sympy.log) - a_of_beta_star
        ),
        "A = (2β* + ρ)/C gives β* = C(A - 1/A)/4": beta_star_of_a.subs(big_a, a_of_beta_star) - beta_star,
        "A = (2β* + ρ)/C gives ρ = C(A + 1/A)/2": rho_of_a.subs(big_a, a_of_beta_star) - rho_of_c,
        "closed form solves dz/dt = 2z(β* - (z - C²/z)/4)": (
            z_closed.diff(t) - 2 * z_closed * (beta_star_of_a - (z_closed - abs_c**2 / z_closed) / 4)
        ),
        "closed form solves dβ/dt = (u² + v²)(β* - β), u² + v² = (z + C²/z)/2": (
            beta_closed.diff(t) - (z_closed + abs_c**2 / z_closed) / 2 * (beta_star_of_a - beta_closed)
        ),
        "ζ(0) = ζ0": zeta.subs(t, 0) - zeta0,
        "ζ0 = z(0)/C with z(0) = w(0)² = α²(u0 + v0)²": alpha**2
        * (u0 + v0) ** 2
        / (alpha**2 * abs(u0 + v0) * abs(u0 - v0))
        - abs(u0 + v0) / abs(u0 - v0),
        "β(0) = α² u0 v0": full.subs(t_full, 0) - alpha**2 * u0 * v0,
        "β(t→∞) = β*": sympy.limit(beta_closed, t, sympy.oo) - beta_star_of_a,
    }
    statement = (
        r"\beta(t) = \frac{C}{4}\Big(\zeta - \frac1\zeta\Big),\ "
        r"\zeta(t) = \frac{\zeta_0 (A + e^{-\rho t}/A) + 1 - e^{-\rho t}}"
        r"{\zeta_0 (1 - e^{-\rho t}) + A e^{-\rho t} + 1/A},\ "
        r"C = \alpha^2 |u_0^2 - v_0^2|,\ \rho = \sqrt{4\beta^{*2} + C^2},\ A = \frac{2\beta^* + \rho}{C},\ "
        r"\zeta_0 = \frac{|u_0 + v_0|}{|u_0 - v_0|}"
    )
    return check_claims("diagonal linear model, exact solution (orthonormal design)", statement, claims)


def derive_diagonal_linear_staircase() -> Derivation:
    """α → 0 with τ = t/log(1/α) fixed: β(τ) → 0 for τ < 1/|β*|, → β* for τ > 1/|β*|.

    Asymptotic argument with ℓ = log(1/α) → ∞, C = κ e^{−2ℓ}, t = τℓ, for β* > 0; β* < 0 follows
    from the symmetry (β*, v0) → (−β*, −v0), which maps A → 1/A, ζ0 → 1/ζ0, ζ → 1/ζ and β → −β.
    The rate of a positive quantity x is lim (log x)/ℓ; logs of products add rates, a negative rate
    means x → 0, and for positive terms max log x_j ≤ log Σ x_j ≤ max log x_j + log 3, so the rate
    of a sum is the largest rate. ζ is a ratio of sums of positive terms, hence:
    before the jump (τ = 1/(β*(1 + ε))) (1/ℓ) log|β| → −2ε/(1 + ε) < 0, so β → 0;
    after it (τ = (1 + ε)/β*) every term of ζ/A but ζ0 has a negative rate, so ζ/A → 1, and A → ∞,
    so β/β* = (ζ − 1/ζ)/(A − 1/A) → 1.
    β* = 0 (A = 1, ρ = C): β(t) = β(0)·4Eζ0/(ND) with ND ≥ 4ζ0, so |β(t)| ≤ α²|u0 v0| → 0.
    """
    ell, kappa, beta_star, zeta0, eps = sympy.symbols("ell kappa beta_star zeta0 epsilon", positive=True)
    big_a, t, rho_sym = sympy.symbols("A t rho", positive=True)
    abs_c = kappa * sympy.exp(-2 * ell)
    rho = sympy.sqrt(4 * beta_star**2 + abs_c**2)

    def rate(expr):
        return sympy.limit(sympy.log(expr) / ell, ell, sympy.oo)

    rate_c = rate(abs_c)
    rate_a = rate((2 * beta_star + rho) / abs_c)
    before, after = 1 / (beta_star * (1 + eps)), (1 + eps) / beta_star
    rate_decay_before = sympy.limit(-rho * before, ell, sympy.oo)  # E = e^{−ρτℓ}
    rate_decay_after = sympy.limit(-rho * after, ell, sympy.oo)
    # ζ = [ζ0 A + ζ0 E/A + (1 − E)] / [ζ0 (1 − E) + A E + 1/A]; 1 − E has rate 0 as E → 0.
    zeta_rate_before = sympy.Max(rate_a, rate_decay_before - rate_a, 0) - sympy.Max(
        0, rate_a + rate_decay_before, -rate_a
    )
    beta_rate_before = rate_c + zeta_rate_before
    # ζ/A = [ζ0 + ζ0 E/A² + (1 − E)/A] / [ζ0 (1 − E) + A E + 1/A]: all but ζ0 must vanish.
    vanishing_after = (rate_decay_after - 2 * rate_a, -rate_a, rate_a + rate_decay_after)

    zeta_zero = _zeta_expr(t, zeta0, 1, rho_sym)  # β* = 0 ⇔ A = 1
    decay = sympy.exp(-rho_sym * t)
    num_zero = zeta0 * (1 + decay) + 1 - decay
    den_zero = zeta0 * (1 - decay) + 1 + decay

    claims = {
        "symmetry: ζ(1/ζ0, 1/A) = 1/ζ(ζ0, A)": _zeta_expr(t, 1 / zeta0, 1 / big_a, rho_sym)
        - 1 / _zeta_expr(t, zeta0, big_a, rho_sym),
        "rate of C is -2": rate_c + 2,
        "rate of A is 2": rate_a - 2,
        "E decays on both sides of the jump": sympy.And(rate_decay_before < 0, rate_decay_after < 0),
        "τ < 1/β*: (1/ℓ) log ζ → 2/(1+ε)": zeta_rate_before - 2 / (1 + eps),
        "τ < 1/β*: (1/ℓ) log|β| → -2ε/(1+ε)": beta_rate_before + 2 * eps / (1 + eps),
        "τ < 1/β*: that rate is < 0, so β → 0": beta_rate_before < 0,
        "τ > 1/β*: ζ/A → ζ0/ζ0 = 1": sympy.And(*(r < 0 for r in vanishing_after)),
        "τ > 1/β*: A → ∞": rate_a > 0,
        "β* = 0: ζ - 1/ζ = (ζ0 - 1/ζ0)·4Eζ0/(ND)": (zeta_zero - 1 / zeta_zero)
        - (zeta0 - 1 / zeta0) * 4 * decay * zeta0 / (num_zero * den_zero),
        "β* = 0: ND - 4ζ0 = (1 - E²)(ζ0 - 1)² ≥ 0": num_zero * den_zero - 4 * zeta0 - (1 - decay**2) * (zeta0 - 1) ** 2,
    }
    statement = (
        r"\lim_{\alpha \to 0} \beta\big(\tau \log(1/\alpha)\big) = "
        r"\begin{cases} 0 & \tau < 1/|\beta^*| \\ \beta^* & \tau > 1/|\beta^*| \end{cases}"
        r"\quad (|u_0| \ne |v_0|)"
    )
    return check_claims("diagonal linear model, α → 0 staircase", statement, claims)


def _resolve_log_alpha(alpha, log_alpha) -> np.ndarray:
    if (alpha is None) == (log_alpha is None):
        raise ValueError("give exactly one of alpha and log_alpha")
    if log_alpha is None:
        alpha = np.asarray(alpha, dtype=float)
        if np.any(~(alpha > 0)) or np.any(~np.isfinite(alpha)):
            raise ValueError("alpha must be positive and finite")
        return np.log(alpha)
    log_alpha = np.asarray(log_alpha, dtype=float)
    if np.any(~np.isfinite(log_alpha)):
        raise ValueError("log_alpha must be finite")
    return log_alpha


def _asinh_of_ratio(abs_beta_star: np.ndarray, log_abs_c: np.ndarray) -> np.ndarray:
    """asinh(2|β*|/C) ≥ 0 from log C, without forming C."""
    with np.errstate(divide="ignore"):
        log_x = np.log(2.0 * abs_beta_star) - log_abs_c
    moderate = np.arcsinh(np.exp(np.minimum(log_x, _ASINH_LOG_SWITCH)))
    huge = np.maximum(log_x, _ASINH_LOG_SWITCH) + _LOG2
    return np.where(log_x > _ASINH_LOG_SWITCH, huge, moderate)


def diagonal_linear_beta(t, beta_star, u0, v0, alpha=None, *, log_alpha=None):
    """Exact β(t) of the diagonal linear model with orthonormal design (unscaled time t ≥ 0).

    Solves du/dt = v(β* − uv), dv/dt = u(β* − uv), (u, v)(0) = α(u0, v0), coordinate-wise with numpy
    broadcasting over all arguments. Give ``alpha`` (> 0) or ``log_alpha`` (any finite float, for α below
    the float64 range). Requires |u0| ≠ |v0| (Assumption 4.2).

    Works in log space and never forms α, C or A, so it is finite for every finite log α and t ∈ [0, ∞].
    Accuracy (against the SymPy form at 80 digits): relative error ≲ 1e-15·(1 + |log α| + ρt), e.g.
    ≤ 1e-12 at α = 1e-300 and ≤ 3e-11 at log α = −1e4 while β moves, and a few ulp on the active plateau
    β ≈ β*; plus an absolute error ≲ 1e-13·α²|u0² − v0²| where β crosses 0. Values below the float64
    range (|β| < 1e-308, e.g. the plateau α² u0 v0 at α = 1e-300) underflow to 0.
    """
    log_alpha = _resolve_log_alpha(alpha, log_alpha)
    t, beta_star, u0, v0, log_alpha = np.broadcast_arrays(
        *(np.asarray(x, dtype=float) for x in (t, beta_star, u0, v0, log_alpha))
    )
    if np.any(~(t >= 0)):
        raise ValueError("t must be >= 0")
    if np.any(np.abs(u0) == np.abs(v0)):
        raise ValueError("degenerate initialisation |u0| == |v0| (Assumption 4.2): the closed form needs c != 0")
    # β(−β*, u0, −v0) = −β(β*, u0, v0): solve for |β*| with ζ0 → 1/ζ0 where β* < 0, then flip the sign.
    sign = np.where(beta_star < 0, -1.0, 1.0)
    abs_beta_star = np.abs(beta_star)
    log_abs_c = 2.0 * log_alpha + np.log(np.abs(u0 + v0)) + np.log(np.abs(u0 - v0))
    # log ζ0 = log|u0 + v0| − log|u0 − v0| = 2 atanh(r), r = v0/u0 or u0/v0 (whichever has |r| < 1).
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = np.where(np.abs(v0) < np.abs(u0), v0 / u0, u0 / v0)
    log_zeta0 = sign * 2.0 * np.arctanh(ratio)
    a = _asinh_of_ratio(abs_beta_star, log_abs_c)  # log A ≥ 0
    with np.errstate(divide="ignore"):
        log_two_beta_star = np.log(2.0 * abs_beta_star)
        log_rho = 0.5 * np.logaddexp(2.0 * log_two_beta_star, 2.0 * log_abs_c)  # ρ² = 4β*² + C²
        log_c_times_a = np.logaddexp(log_two_beta_star, log_rho)  # C A = 2|β*| + ρ, no cancellation
        rho_t = np.exp(log_rho + np.log(t))
        log_one_minus_decay = np.log(-np.expm1(-rho_t))
        # ψ = log(ζ/A) = log[ζ0 + ζ0 E/A² + (1 − E)/A] − log[ζ0 (1 − E) + A E + 1/A], O(1) once active.
        # (Terms ordered so that ζ0 = A = 1 gives the same rounding above and below: ψ = 0 exactly.)
        psi = np.logaddexp(
            np.logaddexp(log_zeta0, log_one_minus_decay - a), log_zeta0 - 2.0 * a - rho_t
        ) - np.logaddexp(np.logaddexp(-a, log_zeta0 + log_one_minus_decay), a - rho_t)
        log_zeta = a + psi
        # |β| = (C/4) e^{|log ζ|} (1 − e^{−2|log ζ|}), with C e^{log ζ} = C A e^{ψ} formed without log C.
        log_abs_beta = (
            np.where(log_zeta >= 0, log_c_times_a + psi, log_abs_c - log_zeta)
            - 2.0 * _LOG2
            + np.log(-np.expm1(-2.0 * np.abs(log_zeta)))
        )
    return (sign * np.sign(log_zeta) * np.exp(log_abs_beta))[()]


def diagonal_linear_beta_rescaled(tau, beta_star, u0, v0, alpha=None, log_alpha=None):
    """β at rescaled time τ = t / log(1/α) (needs α < 1); see :func:`diagonal_linear_beta`."""
    log_alpha = _resolve_log_alpha(alpha, log_alpha)
    if np.any(log_alpha >= 0):
        raise ValueError("rescaled time needs alpha < 1 (log_alpha < 0)")
    return diagonal_linear_beta(np.asarray(tau, dtype=float) * -log_alpha, beta_star, u0, v0, log_alpha=log_alpha)


def diagonal_linear_staircase(tau, beta_star):
    """α → 0 limit of β(τ): 0 for τ < 1/|β*|, β* for τ ≥ 1/|β*| (right-continuous; 0 if β* = 0).

    At τ = 1/|β*| exactly the limit depends on u0, v0; the right-continuous value is a convention.
    """
    tau, beta_star = np.broadcast_arrays(np.asarray(tau, dtype=float), np.asarray(beta_star, dtype=float))
    with np.errstate(invalid="ignore"):
        active = np.abs(beta_star) * tau >= 1.0
    return np.where(active, beta_star, 0.0)[()]

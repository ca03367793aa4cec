"""Depth-L diagonal networks ``β = w_1 ⊙ ⋯ ⊙ w_L`` and deep linear modes (docs/depth.md): the balanced law, its
clock, the depth-L time until active, the conservation laws, Saxe et al.'s per-mode closed forms (ICLR 2014; InRank
Theorem 2, paper 004) and Woodworth et al.'s tied trajectory (COLT 2020).

Sign convention as everywhere: ``g = −∇_β L``, so gradient flow reads ``dw_l/dt = g ⊙ Π_{k≠l} w_k``.
"""

from __future__ import annotations

import functools

import mpmath
import numpy as np
import sympy

from ._record import Derivation, check_claims

_DEPTHS = (2, 3, 4, 5, 6)


def _layers(depth: int):
    return sympy.symbols(f"w1:{depth + 1}", real=True)


def derive_depth_conservation() -> Derivation:
    """``d(w_l² − w_k²)/dt = 2 g (w_l Π_{j≠l} w_j − w_k Π_{j≠k} w_j) = 2 g (β − β) = 0`` for every pair of layers,
    per coordinate (L = 2 … 6)."""
    g = sympy.Symbol("g", real=True)
    claims = {}
    for depth in _DEPTHS:
        w = _layers(depth)
        dw = [g * sympy.Mul(*(w[j] for j in range(depth) if j != l)) for l in range(depth)]
        for l in range(1, depth):
            claims[f"L = {depth}: d(w_{l + 1}² − w_1²)/dt = 0"] = 2 * w[l] * dw[l] - 2 * w[0] * dw[0]
    statement = r"\frac{d}{dt}\left(w_{l,i}^2 - w_{k,i}^2\right) = 0\quad (\dot w_l = g \odot \prod_{k\ne l} w_k)"
    return check_claims("depth-L conservation laws", statement, claims)


def derive_balanced_law() -> Derivation:
    """Balanced layers ``w_l = σ_l a`` (``a = |w_l|`` for every l) stay balanced, and ``a`` obeys
    ``da/dt = s g a^{L−1}`` with ``s = Π σ_l``; exactly ``a(t)^{−(L−2)} = a(0)^{−(L−2)} − (L−2) s G(t)`` for L ≥ 3 and
    ``a(t) = a(0) e^{s G(t)}`` for L = 2, ``G = ∫_0^t g``."""
    g, a = sympy.symbols("g a", real=True)
    t = sympy.Symbol("t", real=True)
    claims = {}
    for depth in _DEPTHS:
        for signs in ((1,) * depth, (-1,) + (1,) * (depth - 1), (-1, -1) + (1,) * (depth - 2)):
            s = sympy.Mul(*signs)
            for l in range(depth):
                # σ_l da/dt = g Π_{k≠l} σ_k a  ⇔  da/dt = s g a^{L-1} (σ_l² = 1)
                rhs = g * sympy.Mul(*(signs[k] * a for k in range(depth) if k != l))
                claims[f"L = {depth}, signs {signs}, layer {l + 1}"] = signs[l] * s * g * a ** (depth - 1) - rhs
    L = sympy.Symbol("L", integer=True, positive=True)
    a0, s = sympy.symbols("a0 s", positive=True)
    G = sympy.Function("G")(t)
    a_t = (a0 ** -(L - 2) - (L - 2) * s * G) ** (-1 / (L - 2))
    claims["L ≥ 3: a(t) solves da/dt = s G'(t) a^{L-1}"] = sympy.simplify(a_t.diff(t) - s * G.diff(t) * a_t ** (L - 1))
    claims["a(0) = a0 (G(0) = 0)"] = a_t.subs(G, 0) - a0
    a2 = a0 * sympy.exp(s * G)
    claims["L = 2: a(t) = a0 e^{s G}"] = a2.diff(t) - s * G.diff(t) * a2
    statement = (
        r"|w_{l,i}| = a_i\ \forall l:\ \dot a_i = s_i g_i a_i^{L-1},\quad"
        r"a_i(t)^{-(L-2)} = a_i(0)^{-(L-2)} - (L-2) s_i \int_0^t g_i"
    )
    return check_claims("balanced depth-L law", statement, claims)


def derive_depth_clock() -> Derivation:
    """The clock ``c = (α/a)^{L−2}`` in ``τ = t α^{L−2}`` moves linearly, ``dc/dτ = −(L−2) s g``, from
    ``c(0) = (a⁰)^{−(L−2)}`` (``a(0) = α a⁰``); with g frozen, the exact balanced solution blows up at
    ``τ* = c(0)/((L−2) s g)`` whatever α (the depth-L time until active), and a coordinate at any ``a = O(1)`` has
    ``c → 0`` as α → 0 (a coordinate that leaves the support starts its clock from 0)."""
    L = sympy.Symbol("L", integer=True, positive=True)
    alpha, a0, s, g, tau, a1 = sympy.symbols("alpha a0 s g tau a1", positive=True)
    a = sympy.Function("a")(tau)
    # da/dτ = α^{-(L-2)} da/dt = α^{-(L-2)} s g a^{L-1}
    c = (alpha / a) ** (L - 2)
    dc = c.diff(tau).subs(a.diff(tau), alpha ** -(L - 2) * s * g * a ** (L - 1))
    a_frozen = alpha * (a0 ** -(L - 2) - (L - 2) * s * g * tau) ** (-1 / (L - 2))
    blow_up = a0 ** -(L - 2) / ((L - 2) * s * g)
    claims = {
        "dc/dτ = -(L-2) s g": sympy.simplify(dc + (L - 2) * s * g),
        "c(0) = (a0)^{-(L-2)}": sympy.simplify((alpha / (alpha * a0)) ** (L - 2) - a0 ** -(L - 2)),
        "frozen g: the exact a(τ) solves da/dτ = α^{-(L-2)} s g a^{L-1}": sympy.simplify(
            a_frozen.diff(tau) - alpha ** -(L - 2) * s * g * a_frozen ** (L - 1)
        ),
        "frozen g: c(τ) = c(0) - (L-2) s g τ": sympy.simplify(
            (alpha / a_frozen) ** (L - 2) - (a0 ** -(L - 2) - (L - 2) * s * g * tau)
        ),
        "blow-up time τ* = c(0)/((L-2) s g), free of α": (a0 ** -(L - 2) - (L - 2) * s * g * blow_up),
        "L = 3: c → 0 as α → 0 at fixed a": sympy.limit((alpha / a1) ** 1, alpha, 0),
        "L = 4: c → 0 as α → 0 at fixed a": sympy.limit((alpha / a1) ** 2, alpha, 0),
    }
    statement = (
        r"c_i = (\alpha / a_i)^{L-2},\ \tau = t\,\alpha^{L-2}:\ \frac{dc_i}{d\tau} = -(L-2)\, s_i g_i,\quad"
        r"\Delta_k(i) = \frac{c_i^k}{(L-2)\, s_i g_i(\theta^k)}\ (s_i g_i > 0)"
    )
    return check_claims("depth-L clock and time until active", statement, claims)


@functools.cache
def _saxe_integrand():
    y, p = sympy.symbols("y p", positive=True)
    n = sympy.Symbol("n", integer=True, nonnegative=True)
    return y, p, n


def derive_saxe_depth() -> Derivation:
    """Saxe's per-mode law ``dσ/dt = L σ^{2−2/L} (s − σ)`` (a balanced aligned mode, or a balanced depth-L diagonal
    coordinate with ``g = s − β``: ``σ = a^L``) and its closed forms: L = 2,
    ``t = ln[σ(s − σ₀)/(σ₀(s − σ))]/(2s)``; L ≥ 3, ``p = 2 − 2/L``,
    ``t = s^{−p}[F(σ/s) − F(σ₀/s)]/L`` with ``F(y) = y^{1−p} ₂F₁(1, 1−p; 2−p; y)/(1−p)`` (``F' = y^{−p}/(1−y)``,
    checked on the series), and the learning time from ``σ₀ = (α a⁰)^L`` is ``α^{−(L−2)} c⁰/((L−2) s) (1 + o(1))``."""
    L = sympy.Symbol("L", integer=True, positive=True)
    a, s, sig, sig0 = sympy.symbols("a s sigma sigma0", positive=True)
    t2 = sympy.log(sig * (s - sig0) / (sig0 * (s - sig))) / (2 * s)
    y, p, n = _saxe_integrand()
    # ₂F₁(1, 1−p; 2−p; y) = Σ_n (1)_n (1−p)_n / ((2−p)_n n!) y^n: each coefficient is (1−p)/(n+1−p), so
    # F(y) = Σ_n y^{n+1−p}/(n+1−p) and F'(y) = Σ_n y^{n−p} = y^{−p}/(1−y).
    coefficient = sympy.rf(1, n) * sympy.rf(1 - p, n) / (sympy.rf(2 - p, n) * sympy.factorial(n))
    term = y ** (n + 1 - p) / (n + 1 - p)
    alpha, a0 = sympy.symbols("alpha a0", positive=True)
    leading = ((alpha * a0) ** L / s) ** (1 - (2 - 2 / L)) / (1 - (2 - 2 / L))  # F(σ₀/s) ≈ y^{1−p}/(1−p)
    t_learn = -(s ** -(2 - 2 / L)) * leading / L
    claims = {
        "σ = a^L, da/dt = (s - σ) a^{L-1}: dσ/dt = L σ^{2-2/L}(s - σ)": sympy.powsimp(
            L * a ** (L - 1) * (s - a**L) * a ** (L - 1) - L * (a**L) ** ((2 * L - 2) / L) * (s - a**L), force=True
        ),
        "L = 2: dt/dσ = 1/(2σ(s - σ))": sympy.simplify(t2.diff(sig) - 1 / (2 * sig * (s - sig))),
        "L = 2: t(σ0) = 0": t2.subs(sig, sig0),
        "₂F₁ coefficients (1-p)/(n+1-p)": sympy.gammasimp(sympy.combsimp(coefficient - (1 - p) / (n + 1 - p))),
        "d/dy of the n-th term of F: y^{n-p}": sympy.simplify(term.diff(y) - y ** (n - p)),
        "L ≥ 3: dt/dσ = σ^{-p}/(L(s - σ)) from F' = y^{-p}/(1-y)": sympy.simplify(
            (s ** -(2 - 2 / L)) * (sig / s) ** -(2 - 2 / L) / (1 - sig / s) / s / L
            - sig ** -(2 - 2 / L) / (L * (s - sig))
        ),
        "learning time α^{-(L-2)} (a0)^{-(L-2)}/((L-2) s)": sympy.simplify(
            sympy.powsimp(
                sympy.expand_power_base(t_learn - alpha ** -(L - 2) * a0 ** -(L - 2) / ((L - 2) * s), force=True),
                force=True,
            )
        ),
    }
    statement = (
        r"\dot\sigma = L\sigma^{2-2/L}(s-\sigma):\ t(\sigma) = \frac{s^{-p}}{L}\left[F(\sigma/s) - F(\sigma_0/s)\right],"
        r"\ F(y) = \frac{y^{1-p}}{1-p}\,{}_2F_1(1, 1-p; 2-p; y),\ p = 2 - \tfrac 2L"
    )
    return check_claims("Saxe's per-mode law at depth L (InRank Thm 2)", statement, claims)


def derive_woodworth_tied() -> Derivation:
    """Tied diagonal linear regression ``β = u^{⊙L} − v^{⊙L}`` from ``u = v = α`` (Woodworth et al.): with
    ``dμ/dt = (y − Xβ)/n`` and ``g = Xᵀ dμ/dt``, ``du/dt = L u^{L−1} g`` and ``dv/dt = −L v^{L−1} g`` integrate to
    ``β(t) = α^L h_L(α^{L−2} L (L−2) Xᵀμ(t))``, ``h_L(z) = (1 − z)^{−L/(L−2)} − (1 + z)^{−L/(L−2)}``."""
    L = sympy.Symbol("L", integer=True, positive=True)
    alpha = sympy.Symbol("alpha", positive=True)
    t = sympy.Symbol("t", real=True)
    m = sympy.Function("m")(t)  # m = (Xᵀμ)_i, so dm/dt = g_i
    u = alpha * (1 - alpha ** (L - 2) * L * (L - 2) * m) ** (-1 / (L - 2))
    v = alpha * (1 + alpha ** (L - 2) * L * (L - 2) * m) ** (-1 / (L - 2))
    z = alpha ** (L - 2) * L * (L - 2) * m
    h = (1 - z) ** (-L / (L - 2)) - (1 + z) ** (-L / (L - 2))
    claims = {
        "du/dt = L u^{L-1} g": sympy.simplify(u.diff(t) - L * u ** (L - 1) * m.diff(t)),
        "dv/dt = -L v^{L-1} g": sympy.simplify(v.diff(t) + L * v ** (L - 1) * m.diff(t)),
        "u(0) = v(0) = α": sympy.simplify((u - alpha).subs(m, 0)) + sympy.simplify((v - alpha).subs(m, 0)),
        "β = u^L - v^L = α^L h_L(z)": sympy.simplify(
            sympy.powsimp(sympy.expand_power_base(u**L - v**L - alpha**L * h, force=True), force=True)
        ),
    }
    statement = (
        r"\beta(t) = \alpha^L h_L\!\left(\alpha^{L-2} L(L-2) X^\top\mu(t)\right),\ "
        r"h_L(z) = (1-z)^{-\frac{L}{L-2}} - (1+z)^{-\frac{L}{L-2}},\ \dot\mu = (y - X\beta)/n"
    )
    return check_claims("Woodworth et al.'s tied depth-L trajectory", statement, claims)


# --- numerical oracles ---------------------------------------------------------------------------------------------


def saxe_time(sigma, s, sigma0, depth: int) -> np.ndarray:
    """The time ``t`` at which a mode of ``dσ/dt = L σ^{2−2/L}(s − σ)`` from ``σ₀`` reaches ``σ``
    (``0 < σ₀, σ < s``; both below s), by the closed forms of :func:`derive_saxe_depth` (mpmath's ₂F₁ for L ≥ 3)."""
    sigma, s, sigma0 = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (sigma, s, sigma0)))
    if np.any(~(sigma > 0)) or np.any(~(sigma0 > 0)) or np.any(~(sigma < s)) or np.any(~(sigma0 < s)):
        raise ValueError("saxe_time needs 0 < sigma0, sigma < s")
    if depth == 2:
        out = (np.log(sigma / sigma0) + np.log1p(-sigma0 / s) - np.log1p(-sigma / s)) / (2.0 * s)
        return out[()]
    p = 2.0 - 2.0 / depth
    out = np.empty(sigma.shape)
    with mpmath.workdps(30):

        def F(y):
            y = mpmath.mpf(y)
            return y ** (1 - p) * mpmath.hyp2f1(1, 1 - p, 2 - p, y) / (1 - p)

        for k in np.ndindex(sigma.shape):
            sk = mpmath.mpf(s[k])
            out[k] = float(sk**-p * (F(sigma[k] / s[k]) - F(sigma0[k] / s[k])) / depth)
    return out[()]


def woodworth_h(z, depth: int) -> np.ndarray:
    """``h_L(z) = (1 − z)^{−L/(L−2)} − (1 + z)^{−L/(L−2)}`` for ``|z| < 1`` (L ≥ 3)."""
    z = np.asarray(z, dtype=float)
    e = -depth / (depth - 2)
    return (1.0 - z) ** e - (1.0 + z) ** e


def woodworth_tied_beta(t, X, y, alpha: float, depth: int, *, rtol: float = 1e-12):
    """``β(t)`` of tied diagonal linear regression (square loss ``(1/2n)‖y − Xβ‖²``, ``β = u^L − v^L``, ``u = v = α``
    at t = 0) through the n-dimensional ODE ``dμ/dt = (y − Xβ)/n``, ``β = α^L h_L(α^{L−2} L(L−2) Xᵀμ)`` (DOP853)."""
    from scipy.integrate import solve_ivp

    X, y = np.asarray(X, dtype=float), np.asarray(y, dtype=float)
    n = X.shape[0]
    k = alpha ** (depth - 2) * depth * (depth - 2)

    def beta(mu):
        return alpha**depth * woodworth_h(k * (X.T @ mu), depth)

    def rhs(_, mu):
        return (y - X @ beta(mu)) / n

    t = np.atleast_1d(np.asarray(t, dtype=float))
    sol = solve_ivp(rhs, (0.0, t[-1]), np.zeros(n), method="DOP853", rtol=rtol, atol=1e-14, t_eval=t)
    if not sol.success:
        raise RuntimeError(sol.message)
    return np.stack([beta(mu) for mu in sol.y.T])

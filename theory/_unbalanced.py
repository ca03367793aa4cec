"""Unbalanced starts of depth-L diagonal networks (docs/depth.md, *The clock*): the conservation laws reduce a
coordinate's L layers to its smallest one, whose clock is a quadrature that crosses 0 when the start is unbalanced.

One coordinate, layers ``w_l`` from ``w_l(0) = α W0_l``, ``m`` the smallest layer (``|W0_m| ≤ |W0_l|``),
``C_l = W0_l² − W0_m² ≥ 0`` and ``σ_l = sign W0_l`` (``l ≠ m``: these layers never reach 0, so their signs stay).
With ``r = w_m``, ``ρ = r/α``, ``σ_o = Π_{l≠m} σ_l`` and ``τ = t α^{L−2}``:

    w_l = σ_l (r² + α² C_l)^{1/2},   dρ/dτ = σ_o g Π_{l≠m} (ρ² + C_l)^{1/2},
    c(ρ) = (L−2) ∫_{|ρ|}^∞ Π_{l≠m} (x² + C_l)^{−1/2} dx,   dc/dτ = −(L−2) s g   (s = σ_o sign ρ = sign β),

so the clock moves linearly as in the balanced case (where ``c = |ρ|^{−(L−2)}``). Against the gradient
(``s g < 0``) ``|ρ|`` falls, crosses 0 when every ``C_l > 0`` and the coordinate wakes with the opposite sign once
``c`` has covered ``c^max = (L−2) ∫_{−∞}^{∞} Π (x² + C_l)^{−1/2} dx``.
"""

from __future__ import annotations

import mpmath
import sympy

from ._record import Derivation, check_claims


def derive_unbalanced_clock() -> Derivation:
    """The reduction of an unbalanced coordinate to its smallest layer, its clock and the crossing time, checked at
    L = 3 and L = 4 (the layers' flow, the clock's linearity), for L = 3 … 6 at ``C = 0`` (the balanced clock), and
    in closed form at L = 3 with ``C_2 = C_3 = C``: ``c(ρ) = atan(√C/ρ)/√C``, ``c^max = π/√C``."""
    alpha, g, t = sympy.symbols("alpha g t", positive=True)
    x, rho = sympy.symbols("x rho", positive=True)
    claims: dict[str, sympy.Basic] = {}
    for L in (3, 4):
        C = sympy.symbols(f"C1:{L}", positive=True)
        sig = sympy.symbols(f"sigma1:{L}")  # ±1: σ² = 1 substituted below
        r = sympy.Function("r")(t)
        others = [sig[k] * sympy.sqrt(r**2 + alpha**2 * C[k]) for k in range(L - 1)]
        sigma_o = sympy.Mul(*sig)
        dr = g * sympy.Mul(*others)  # dw_m/dt = g Π_{l≠m} w_l
        unit = {s**2: 1 for s in sig}
        for k in range(L - 1):  # dw_l/dt = g Π_{j≠l} w_j for every other layer
            rest = [others[j] for j in range(L - 1) if j != k]
            lhs = others[k].diff(t).subs(r.diff(t), dr)
            claims[f"L = {L}: w_{k + 1} = σ (r² + α² C)^(1/2) follows the flow"] = sympy.simplify(
                sympy.expand(lhs - g * r * sympy.Mul(*rest)).subs(unit)
            )
        # ρ = r/α, τ = t α^{L−2}: dρ/dτ = α^{−(L−1)} dr/dt
        drho = (dr / alpha ** (L - 1)).subs(r, alpha * rho)
        want = sigma_o * g * sympy.Mul(*[sympy.sqrt(rho**2 + c) for c in C])
        claims[f"L = {L}: dρ/dτ = σ_o g Π (ρ² + C)^(1/2)"] = sympy.simplify(sympy.expand(drho - want).subs(unit))
        integrand = sympy.Mul(*[1 / sympy.sqrt(x**2 + c) for c in C])
        clock = (L - 2) * sympy.Integral(integrand, (x, rho, sympy.oo))
        # ρ > 0 (s = σ_o): dc/dτ = c'(ρ) dρ/dτ
        claims[f"L = {L}: dc/dτ = −(L−2) σ_o g"] = sympy.simplify(
            sympy.expand(clock.diff(rho) * want + (L - 2) * sigma_o * g).subs(unit)
        )
    for L in range(3, 7):
        balanced = (L - 2) * sympy.integrate(x ** -(L - 1), (x, rho, sympy.oo))
        claims[f"L = {L}, C = 0: c = ρ^(−(L−2)), the balanced clock"] = sympy.simplify(balanced - rho ** -(L - 2))
    C = sympy.Symbol("C", positive=True)
    c3 = sympy.integrate(1 / (x**2 + C), (x, rho, sympy.oo))
    claims["L = 3, C_2 = C_3 = C: c(ρ) = atan(√C/ρ)/√C"] = sympy.simplify(
        c3 - sympy.atan(sympy.sqrt(C) / rho) / sympy.sqrt(C)
    )
    claims["L = 3, C_2 = C_3 = C: c(0⁺) = c^max/2"] = sympy.limit(c3, rho, 0, "+") - sympy.pi / (2 * sympy.sqrt(C))
    y = sympy.Symbol("y", real=True)
    claims["L = 3, C_2 = C_3 = C: c^max = π/√C"] = sympy.simplify(
        sympy.integrate(1 / (y**2 + C), (y, -sympy.oo, sympy.oo)) - sympy.pi / sympy.sqrt(C)
    )
    statement = (
        r"w_l = \sigma_l (r^2 + \alpha^2 C_l)^{1/2},\ \frac{d\rho}{d\tau} = \sigma_o g \prod_{l\ne m}(\rho^2 + C_l)^{1/2},"
        r"\ c(\rho) = (L-2)\int_{|\rho|}^\infty \prod_{l\ne m}(x^2 + C_l)^{-1/2}dx,\ \frac{dc}{d\tau} = -(L-2)\, s\, g"
    )
    return check_claims("unbalanced depth-L clock", statement, claims)


def _integrand(C):
    return lambda x: mpmath.fprod(1 / mpmath.sqrt(x * x + c) for c in C)


def unbalanced_clock(rho: float, C) -> float:
    """``c(ρ)/(L−2) = ∫_{|ρ|}^∞ Π_l (x² + C_l)^{−1/2} dx`` in 30-digit arithmetic, for ``L − 1 = len(C)`` other
    layers."""
    with mpmath.workdps(30):
        return float(mpmath.quad(_integrand(C), [abs(rho), abs(rho) + 1, mpmath.inf]))


def crossing_clock(C) -> float:
    """``c^max/(L−2) = ∫_{−∞}^∞ Π_l (x² + C_l)^{−1/2} dx``: the clock a crossing coordinate covers before it wakes
    with the opposite sign (finite when every ``C_l > 0``)."""
    with mpmath.workdps(30):
        return float(2 * mpmath.quad(_integrand(C), [0, 1, mpmath.inf]))

"""Mode dynamics of a two-layer linear network with orthogonal inputs (Saxe et al. 2014; InRank
Theorem 2, paper 004 eq. 4 and appendix A eqs. 11–14, with the time constant τ = 1)."""

from __future__ import annotations

import functools

import numpy as np
import scipy.special
import sympy

from ._record import Derivation, check_claims


@functools.cache
def saxe_mode_expression() -> tuple[sympy.Expr, tuple[sympy.Symbol, ...]]:
    """u(t) = s e^{2st} / (e^{2st} − 1 + s/u0) as a SymPy expression and its symbols (t, s, u0)."""
    t = sympy.Symbol("t", nonnegative=True)
    s, u0 = sympy.symbols("s u0", positive=True)
    growth = sympy.exp(2 * s * t)
    return s * growth / (growth - 1 + s / u0), (t, s, u0)


def derive_saxe_mode() -> Derivation:
    """da/dt = b(s − ab), db/dt = a(s − ab) with a = b gives du/dt = 2u(s − u) for u = ab (eq. 11–12),
    solved by the sigmoid u(t) = s e^{2st}/(e^{2st} − 1 + s/u0) (eq. 14 without the − u0 of D_t).

    This is the diagonal linear coordinate (β* = s) on the degenerate line u0 = v0 (c = 0): the
    closed form's z-equation at c = 0 reproduces the same sigmoid.
    """
    mode, (t, s, u0) = saxe_mode_expression()
    a_of_t, strength = sympy.Function("a")(t), sympy.Function("u")(t)
    reduced = sympy.diff(a_of_t * a_of_t, t).subs(sympy.Derivative(a_of_t, t), a_of_t * (s - a_of_t**2))
    solved = sympy.dsolve(
        sympy.Eq(strength.diff(t), 2 * strength * (s - strength)), strength, ics={strength.subs(t, 0): u0}
    ).rhs

    # Riccati solution of the diagonal linear model at c = 0, β* = s > 0: z± = 4s, 0 and z0 = 4u0.
    decay = sympy.exp(-2 * s * t)
    z_plus, z0 = 4 * s, 4 * u0
    z_at_c_zero = z0 * z_plus / (z0 * (1 - decay) + z_plus * decay)
    claims = {
        "a = b, u = ab: du/dt = 2u(s - u)": reduced - 2 * a_of_t**2 * (s - a_of_t**2),
        "du/dt = 2u(s - u)": mode.diff(t) - 2 * mode * (s - mode),
        "u(0) = u0": mode.subs(t, 0) - u0,
        "dsolve agrees": solved - mode,
        "diagonal linear closed form at c = 0, β = z/4": z_at_c_zero / 4 - mode,
    }
    statement = r"\dot u = 2u(s - u),\ u(0) = u_0\ \Rightarrow\ u(t) = \frac{s e^{2st}}{e^{2st} - 1 + s/u_0}"
    return check_claims("two-layer linear mode (Saxe et al.; InRank Thm 2)", statement, claims)


def saxe_mode(t, s, u0):
    """Mode strength u(t) = s e^{2st}/(e^{2st} − 1 + s/u0) for s > 0, u0 > 0, t ≥ 0 (broadcasting).

    Evaluated without overflow: s·expit(2st − log(s/u0 − 1)) when u0 < s, the plain form otherwise.
    InRank's D_t singular value (eq. 4) is ``saxe_mode(t, s, u0) - u0``.
    """
    t, s, u0 = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (t, s, u0)))
    if np.any(~(s > 0)) or np.any(~(u0 > 0)):
        raise ValueError("saxe_mode needs s > 0 and u0 > 0")
    if np.any(~(t >= 0)):
        raise ValueError("t must be >= 0")
    below = u0 < s
    with np.errstate(divide="ignore", invalid="ignore"):
        rising = s * scipy.special.expit(2.0 * s * t - (np.log(s - u0) - np.log(u0)))
        falling = s / (1.0 - (1.0 - s / u0) * np.exp(-2.0 * s * t))
    return np.where(below, rising, falling)[()]

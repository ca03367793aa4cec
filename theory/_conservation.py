"""Conservation law and the sum/difference coordinates w = u + v, w̄ = u − v (paper Lemma 4.1, eq. 6,
appendix C.3–C.4; docs/math.md, *Small initialisation and the conservation law*)."""

from __future__ import annotations

import sympy

from ._record import Derivation, check_claims


def _diagonal_flow() -> tuple[tuple[sympy.Symbol, ...], tuple[sympy.Expr, ...], tuple[sympy.Expr, ...]]:
    """Gradient flow of a generic smooth loss L(β) with β = u ⊙ v, for p = 2 coordinates.

    Returns the state (u1, v1, u2, v2), the velocity field −∇_θ L(u ⊙ v) and g = −∇_β L at β = u ⊙ v.
    L is an undefined SymPy function of (β1, β2), so the result holds for every twice differentiable
    h and loss ℓ (L depends on θ only through β).
    """
    u1, v1, u2, v2 = state = sympy.symbols("u1 v1 u2 v2", real=True)
    beta1, beta2 = sympy.symbols("beta1 beta2", real=True)
    loss = sympy.Function("L")
    at_theta = {beta1: u1 * v1, beta2: u2 * v2}
    g = tuple(-sympy.diff(loss(beta1, beta2), b).subs(at_theta) for b in (beta1, beta2))
    velocity = tuple(-sympy.diff(loss(u1 * v1, u2 * v2), x) for x in state)
    return state, velocity, g


def _along_flow(quantity: sympy.Expr, state, velocity) -> sympy.Expr:
    """d/dt of ``quantity`` along the flow (its Lie derivative)."""
    return sum(sympy.diff(quantity, x) * dx for x, dx in zip(state, velocity))


def derive_conservation_law() -> Derivation:
    """Lemma 4.1: du/dt = v ⊙ g, dv/dt = u ⊙ g, hence d/dt (u_i² − v_i²) = 0 for any smooth h."""
    state, velocity, g = _diagonal_flow()
    (u1, v1, u2, v2), (du1, dv1, du2, dv2) = state, velocity
    claims = {
        "du_1/dt = v_1 g_1": du1 - v1 * g[0],
        "du_2/dt = v_2 g_2": du2 - v2 * g[1],
        "dv_1/dt = u_1 g_1": dv1 - u1 * g[0],
        "dv_2/dt = u_2 g_2": dv2 - u2 * g[1],
        "d/dt(u_1^2 - v_1^2) = 0": _along_flow(u1**2 - v1**2, state, velocity),
        "d/dt(u_2^2 - v_2^2) = 0": _along_flow(u2**2 - v2**2, state, velocity),
    }
    statement = (
        r"\dot u = v \odot g,\ \dot v = u \odot g,\ g = -\nabla_\beta L(u \odot v)"
        r"\ \Rightarrow\ \frac{d}{dt}\left(u_i^2 - v_i^2\right) = 0"
    )
    return check_claims("conservation law (Lemma 4.1)", statement, claims)


def derive_sum_difference_dynamics() -> Derivation:
    """Eq. 6 / appendix C.4: dw/dt = w g, dw̄/dt = −w̄ g, w w̄ constant, d(log w)/dτ = log(1/α) g."""
    state, velocity, g = _diagonal_flow()
    u1, v1 = state[:2]
    w, w_bar = u1 + v1, u1 - v1

    # Rescaled time τ = t / log(1/α): W(τ) = w(τ ℓ) with ℓ = log(1/α) > 0 and dw/dt = w(t) g(t).
    tau, ell = sympy.symbols("tau ell", positive=True)
    w_of_t, g_of_t = sympy.Function("w"), sympy.Function("g")
    dlogw_dtau = sympy.diff(sympy.log(w_of_t(tau * ell)), tau)
    dlogw_dtau = dlogw_dtau.replace(
        lambda e: isinstance(e, sympy.Subs),
        lambda e: e.expr.subs(
            sympy.Derivative(w_of_t(e.variables[0]), e.variables[0]),
            w_of_t(e.variables[0]) * g_of_t(e.variables[0]),
        ).subs(e.variables[0], e.point[0]),
    )

    claims = {
        "dw/dt = w g": _along_flow(w, state, velocity) - w * g[0],
        "dw̄/dt = -w̄ g": _along_flow(w_bar, state, velocity) + w_bar * g[0],
        "d(w w̄)/dt = 0": _along_flow(w * w_bar, state, velocity),
        "d(log w)/dτ = log(1/α) g": dlogw_dtau - ell * g_of_t(tau * ell),
        "u = (w + w̄)/2": (w + w_bar) / 2 - u1,
        "v = (w - w̄)/2": (w - w_bar) / 2 - v1,
        "β = u v = (w² - w̄²)/4": (w**2 - w_bar**2) / 4 - u1 * v1,
    }
    statement = (
        r"w = u + v,\ \bar w = u - v:\ \dot w = w g,\ \dot{\bar w} = -\bar w g,\ "
        r"\frac{d}{dt}(w \bar w) = 0,\ \frac{d \log w}{d\tau} = \log(1/\alpha)\, g \ (\tau = t/\log(1/\alpha)),\ "
        r"u = \tfrac{w + \bar w}{2},\ v = \tfrac{w - \bar w}{2},\ \beta = \tfrac{w^2 - \bar w^2}{4}"
    )
    return check_claims("sum/difference dynamics (eq. 6, App. C.4)", statement, claims)

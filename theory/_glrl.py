"""Greedy low-rank learning (GLRL; Li, Luo & Lyu, ICLR 2021) in rescaled time: factorised weights
``W = U Vᵀ`` from small initialisation ``α (U⁰, V⁰)`` (docs/math.md, *Full weights: the greedy low-rank limit*).

Sign convention as for diagonal weights: ``G = −∇_W L``, so gradient flow reads ``dU/dt = G V``,
``dV/dt = Gᵀ U``, and ``τ = t / log(1/α)``.

- (a) Near a saddle ``W̄`` a sleeping pair of columns ``x = (u, v)`` (of size ``α^e``) follows the linear flow
  ``dx/dt = A x``, ``A = [[0, G], [Gᵀ, 0]]``, ``G = G(W̄)`` (the correction is cubic in x). A's
  eigenvalues are ``±σ_i(G)``, with eigenvectors ``(a_i, ±b_i)`` from the singular pairs of G, so the
  fastest sleeping direction grows at rate ``σ_1(G)``, and in rescaled time its log-scale
  ``e = log_α |x|`` decreases at ``σ_1(G)``: it escapes (reaches size O(1)) when ``e`` reaches 0.
- (b) Bookkeeping: the sleeping columns of a factor form a matrix ``S`` of size ``(m + n) × s``; list
  its log-scale singular values ``e_1 ≤ e_2 ≤ …`` (all 1 at τ = 0). On a plateau the minors of ``S``
  grow by the sums of A's eigenvalues (Cauchy–Binet), so when ``S``'s leading subspaces are in general
  position with respect to A's eigenvectors, ``e_i`` decreases at the i-th largest eigenvalue of A:
  ``σ_i(G)``. Escape happens when ``e_1`` reaches 0; that direction leaves the list. For matrix
  factorisation (``L = ½‖W − M‖²``) every saddle is a truncated SVD of M and the modes never move, which
  makes the rule exact there and gives ``T_r = 1/σ_r(M)``. For other models the rule is a conjecture
  (it assumes the general position above; it fails where the modes stay aligned and change order,
  e.g. a 1×1 factor whose gradient changes sign: use a diagonal model there).
- (c) Invariants: ``UᵀU − VᵀV`` is conserved by the flow (the matrix version of paper Lemma 4.1), so
  factors that start at ``O(α)`` stay balanced, ``UᵀU = VᵀV``, in the limit.
- (d) Orientation: for a square factor of full width the balanced columns span the graph ``V = O U`` of an
  orthogonal O, and ``sign det W = det O``. A plateau grows the graph of ``O_+`` (``a_i ↦ b_i``, the learned
  ``p_i ↦ q_i``), ``det O_+ = sign det(W̄ + G)``. Where ``det(O_+ᵀ O) = −1`` the sleeping block holds a pure
  shrinking mode ``(x, −O_+ x)``: its growing components have rank one less, and (Cauchy–Binet) the last
  exponent increases at the smallest ``σ``. A direction that shrinks back to the scale of the start turns
  (``b = min(e, 2 − e)``, as ``w`` and ``w̄`` trade places for a diagonal weight) and ``sign det W`` flips.
  :func:`linear_sleeping_log_scales` computes the exact log scales of the linear flow with piecewise
  constant G in high precision, the oracle for this rule.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import mpmath
import numpy as np
import sympy

from ._record import Derivation, check_claims


def _generic_loss_flow(m: int, n: int, k: int):
    """Gradient flow of a generic smooth ``L(W)``, ``W = U Vᵀ`` with U of shape (m, k), V of shape (n, k).

    Returns ``U, V, G, velocity_U, velocity_V``: ``G = −∂L/∂W`` at ``W = U Vᵀ`` (L an undefined SymPy
    function of the entries of W, so the result holds for every smooth model and loss) and the gradient
    flow ``−∂L/∂U``, ``−∂L/∂V``.
    """
    U = sympy.Matrix(m, k, lambda i, j: sympy.Symbol(f"u{i}{j}", real=True))
    V = sympy.Matrix(n, k, lambda i, j: sympy.Symbol(f"v{i}{j}", real=True))
    w = sympy.Matrix(m, n, lambda i, j: sympy.Symbol(f"w{i}{j}", real=True))
    loss = sympy.Function("L")(*w)
    product = U * V.T
    at = dict(zip(w, product))
    G = sympy.Matrix(m, n, lambda i, j: -sympy.diff(loss, w[i, j]).subs(at))
    loss_uv = loss.subs(at)
    vel_u = sympy.Matrix(m, k, lambda i, j: -sympy.diff(loss_uv, U[i, j]))
    vel_v = sympy.Matrix(n, k, lambda i, j: -sympy.diff(loss_uv, V[i, j]))
    return U, V, G, vel_u, vel_v


def _entrywise(label: str, matrix: sympy.Matrix) -> dict[str, sympy.Expr]:
    """One claim per entry of ``matrix`` (each must vanish), labelled ``label[i,j]``."""
    return {f"{label} [{i},{j}]": matrix[i, j] for i in range(matrix.rows) for j in range(matrix.cols)}


def _positive(expr: sympy.Expr) -> sympy.Basic:
    """``expr > 0`` with numerator and denominator expanded, so that SymPy decides it from the symbols' signs."""
    numerator, denominator = sympy.fraction(sympy.together(expr))
    return sympy.expand(numerator) * sympy.expand(denominator) > 0


def _trig_expanded(expr: sympy.Expr, angles) -> sympy.Expr:
    """``expr`` as a polynomial in the cosines and sines of ``angles``, ``sin² = 1 − cos²``: 0 iff it vanishes
    (much faster than ``simplify`` on products of rotations)."""
    expr = sympy.expand(sympy.expand_trig(expr))
    return sympy.expand(expr.subs({sympy.sin(a) ** 2: 1 - sympy.cos(a) ** 2 for a in angles}))


def _rotation(angle: sympy.Symbol) -> sympy.Matrix:
    return sympy.Matrix([[sympy.cos(angle), -sympy.sin(angle)], [sympy.sin(angle), sympy.cos(angle)]])


def derive_factorized_conservation() -> Derivation:
    """(c) ``dU/dt = G V``, ``dV/dt = Gᵀ U`` and ``d/dt (UᵀU − VᵀV) = 0`` for any smooth ``L(U Vᵀ)``."""
    U, V, G, vel_u, vel_v = _generic_loss_flow(2, 1, 2)  # W of shape (2, 1), two columns: Uᵀ U is 2×2
    balance = U.T * U - V.T * V
    rate = sympy.zeros(2, 2)
    for x, dx in zip(list(U) + list(V), list(vel_u) + list(vel_v)):
        rate += balance.diff(x) * dx
    claims = _entrywise("dU/dt = G V", vel_u - G * V) | _entrywise("dV/dt = Gᵀ U", vel_v - G.T * U)
    claims |= _entrywise("d/dt (UᵀU - VᵀV) = 0", rate)
    statement = (
        r"\dot U = G V,\ \dot V = G^\top U,\ G = -\nabla_W L(UV^\top)\ \Rightarrow\ "
        r"\frac{d}{dt}\big(U^\top U - V^\top V\big) = 0"
    )
    return check_claims("factorised weights: flow and balance (conservation law)", statement, claims)


def derive_saddle_escape() -> Derivation:
    """(a) The sleeping flow near a saddle is ``dx/dt = A x`` up to cubic terms; A's modes are
    ``(a_i, ±b_i)`` at rates ``±σ_i(G)``; along the top mode ``log_α|x|`` decreases at ``σ_1`` in τ.
    """
    # The field of one sleeping column pair (u, v) at W = W̄ + u vᵀ, for a generic loss, is
    # G(W̄ + u vᵀ) v: its derivative at (u, v) = 0 is that of G(W̄) v (the linear flow with G frozen).
    U, V, G, vel_u, vel_v = _generic_loss_flow(2, 1, 2)
    small = list(U[:, 1]) + list(V[:, 1])
    sleeping = dict.fromkeys(small, 0)
    frozen = G.subs(sleeping)  # G(W̄), W̄ = u_0 v_0ᵀ the active column pair
    field = list(vel_u[:, 1]) + list(vel_v[:, 1])
    linear = list(frozen * V[:, 1]) + list(frozen.T * U[:, 1])
    jacobian_gap = sympy.Matrix(
        [[sympy.diff(f - lin, x).subs(sleeping) for x in small] for f, lin in zip(field, linear)]
    )

    # Modes of A = [[0, G], [Gᵀ, 0]] for G = P diag(σ1, σ2) Qᵀ (any 2×2 G, by the SVD).
    s1, s2, phi, psi = sympy.symbols("sigma1 sigma2 phi psi", real=True)
    P, Q = _rotation(phi), _rotation(psi)
    g = P * sympy.diag(s1, s2) * Q.T
    block = sympy.BlockMatrix([[sympy.zeros(2), g], [g.T, sympy.zeros(2)]]).as_explicit()
    claims = _entrywise("linearised field: ∂/∂x [f(x) - G(W̄) x] = 0 at x = 0", jacobian_gap)
    for i, s in enumerate((s1, s2)):
        for sign, label in ((1, "+"), (-1, "-")):
            mode = sympy.Matrix.vstack(P[:, i], sign * Q[:, i])
            claims |= _entrywise(
                f"A (a_{i + 1}, {label}b_{i + 1}) = {label}σ_{i + 1} (a_{i + 1}, {label}b_{i + 1})",
                block * mode - sign * s * mode,
            )

    # Along the top mode, x(t) = α^{e0} e^{σ t} x̂: log_α |x| at t = τ log(1/α) is e0 − σ τ.
    tau, sigma, e0 = sympy.symbols("tau sigma e_0", positive=True)
    alpha = sympy.Symbol("alpha", positive=True)
    t = tau * sympy.log(1 / alpha)
    size = alpha**e0 * sympy.exp(sigma * t)
    exponent = sympy.expand_log(sympy.log(size), force=True) / sympy.log(alpha)
    claims |= {
        "log_α |x(τ log 1/α)| = e0 - σ τ": exponent - (e0 - sigma * tau),
        "escape (exponent 0) after Δ = e0/σ": exponent.subs(tau, e0 / sigma),
    }
    statement = (
        r"\dot x = A x + O(|x|^3),\ A = \begin{pmatrix} 0 & G \\ G^\top & 0 \end{pmatrix},\ "
        r"A\,(a_i, \pm b_i) = \pm\sigma_i(G)\,(a_i, \pm b_i),\ "
        r"\log_\alpha |x(\tau\log\tfrac1\alpha)| = e_0 - \sigma_1 \tau"
    )
    return check_claims("saddle escape at rate σ_1(G) (GLRL phase A)", statement, claims)


def derive_sleeping_bookkeeping() -> Derivation:
    """(b) The i×i minors of ``e^{tA} S`` grow by the sums of i eigenvalues of A (Cauchy–Binet), so the
    i-th log-scale singular value of a sleeping block in general position decreases at the i-th largest
    eigenvalue of A; sorted exponents stay sorted, and the leading one reaches 0 first.
    """
    t = sympy.Symbol("t", positive=True)
    lam = sympy.symbols("lambda1:4", real=True)
    S = sympy.Matrix(3, 2, lambda i, j: sympy.Symbol(f"s{i}{j}", real=True))
    grown = sympy.diag(*(sympy.exp(x * t) for x in lam)) * S
    claims = {}
    for i, j in ((0, 1), (0, 2), (1, 2)):
        minor = grown.extract([i, j], [0, 1]).det()
        claims[f"2×2 minor ({i + 1},{j + 1}) of e^(tΛ) S = e^((λ{i + 1}+λ{j + 1}) t) × minor of S"] = (
            minor - sympy.exp((lam[i] + lam[j]) * t) * S.extract([i, j], [0, 1]).det()
        )
    # Sorted exponents e1 ≤ e2, sorted rates r1 ≥ r2 ≥ 0: e_i − r_i Δ stays sorted; e1 reaches 0 first.
    e1, d, delta = sympy.symbols("e1 d Delta", positive=True)
    r2, dr = sympy.symbols("r2 dr", positive=True)
    e2, r1 = e1 + d, r2 + dr
    claims |= {
        "sorted exponents stay sorted: e2 - r2 Δ - (e1 - r1 Δ) > 0": _positive((e2 - r2 * delta) - (e1 - r1 * delta)),
        "the leading exponent reaches 0 first: e2 - r2 e1/r1 > 0": _positive(e2 - r2 * e1 / r1),
    }
    statement = (
        r"\det_{IJ}\big(e^{t\Lambda} S\big) = e^{t\sum_{i \in I}\lambda_i} \det_{IJ} S\ \Rightarrow\ "
        r"e_i(\tau) = e_i(T_k) - (\tau - T_k)\,\lambda_i(A_k),\quad T_{k+1} = T_k + \min_j e_{j,1}/\sigma_1(G_j)"
    )
    return check_claims("log-scale bookkeeping of sleeping directions (GLRL)", statement, claims)


def derive_sleeping_orientation() -> Derivation:
    """(d) The orientation ``sign det W`` of a balanced square factor, that of a saddle's growing directions,
    and the shrinking direction the conservation law forces where they differ (2×2 sleeping block; the
    reflection ``R = O_+ᵀ O`` has eigenvalue −1 in every dimension where ``det R = −1``)."""
    phi, psi, theta = sympy.symbols("phi psi theta", real=True)
    s1, s2, w1 = sympy.symbols("sigma1 sigma2 s1", positive=True)
    X = sympy.Matrix(2, 2, lambda i, j: sympy.Symbol(f"x{i}{j}", real=True))
    P, Q = _rotation(phi), _rotation(psi)
    claims = {}
    # Balanced columns (u, O u) of a square factor: det(U Vᵀ) = det(O) det(U)², so sign det W = det O.
    for label, O in (("rotation", _rotation(theta)), ("reflection", _rotation(theta) * sympy.diag(1, -1))):
        claims[f"det(U (O U)ᵀ) = det O · det(U)², O a {label}"] = (X * (O * X).T).det() - O.det() * X.det() ** 2
    # A saddle: W̄ = s p qᵀ, G = σ a bᵀ with p ⊥ a, q ⊥ b (G vanishes on the learned directions).
    for e1 in (1, -1):
        for e2 in (1, -1):
            Pe, Qe = P * sympy.diag(1, e1), Q * sympy.diag(1, e2)
            W = w1 * Pe[:, 0] * Qe[:, 0].T
            G = s2 * Pe[:, 1] * Qe[:, 1].T
            O_plus = Qe * Pe.T  # p ↦ q, a ↦ b
            claims[f"det(W̄ + G) = det(O_+) s σ ({e1}, {e2})"] = (W + G).det() - O_plus.det() * w1 * s2
    # The sleeping block [X; O X] against the modes (p_i, ±q_i)/√2 of A, G = P diag(σ1, σ2) Qᵀ, O = O_+ R.
    modes = sympy.Matrix.hstack(
        *[sympy.Matrix.vstack(P[:, i], sign * Q[:, i]) / sympy.sqrt(2) for sign in (1, -1) for i in range(2)]
    )
    O_plus = Q * P.T
    reflection, rotation = _rotation(theta) * sympy.diag(1, -1), _rotation(theta)
    claims["det(I + R) = 0 for a reflection R"] = (sympy.eye(2) + reflection).det()
    claims["det(I + R) = 2 + 2 cos θ for a rotation R"] = (sympy.eye(2) + rotation).det() - 2 - 2 * sympy.cos(theta)
    coefficients = {
        label: modes.T * sympy.Matrix.vstack(X, O_plus * R * X)
        for label, R in (("reflection", reflection), ("rotation", rotation))
    }
    angles = (phi, psi, theta)
    flipped, turned = coefficients["reflection"], coefficients["rotation"]
    minors = {
        "reflection: the growing minor (+σ1, +σ2) vanishes": flipped.extract([0, 1], [0, 1]).det(),
        "reflection: the minor (+σ1, −σ2) = det X (1 + cos(2φ − θ))": flipped.extract([0, 3], [0, 1]).det()
        - X.det() * (1 + sympy.cos(2 * phi - theta)),
        "rotation: the growing minor (+σ1, +σ2) = det X (1 + cos θ)": turned.extract([0, 1], [0, 1]).det()
        - X.det() * (1 + sympy.cos(theta)),
    }
    claims |= {label: _trig_expanded(minor, angles) for label, minor in minors.items()}
    # Exponents, by Cauchy–Binet: e1 falls at σ1, e1 + e2 at σ1 − σ2 (the largest sum with a nonvanishing minor).
    tau, e1, e2 = sympy.symbols("tau e1 e2", real=True)
    first, both = e1 - s1 * tau, e1 + e2 - (s1 - s2) * tau
    claims["reflection: the second exponent rises at σ2"] = (both - first) - (e2 + s2 * tau)
    # A diagonal weight (1×1): w = α^b, w̄ = c α^(2−b), β = uv = (w² − w̄²)/4; |β| ≈ α^(2 min(b, 2−b)).
    alpha, c, b = sympy.symbols("alpha c b", positive=True)
    w, wbar = alpha**b, c * alpha ** (2 - b)
    beta = (w**2 - wbar**2) / 4
    claims["β = α^(2b) (1 − c² α^(4(1−b)))/4 (b < 1: the factor → 1)"] = sympy.expand(
        beta - alpha ** (2 * b) * (1 - c**2 * alpha ** (4 - 4 * b)) / 4, power_exp=True
    )
    claims["β = −c² α^(2(2−b)) (1 − α^(4(b−1))/c²)/4 (b > 1)"] = sympy.expand(
        beta + c**2 * alpha ** (4 - 2 * b) * (1 - alpha ** (4 * b - 4) / c**2) / 4, power_exp=True
    )
    statement = (
        r"V = OU \Rightarrow \operatorname{sign}\det W = \det O,\ \det O_+ = \operatorname{sign}\det(ar W + G),\ "
        r"\det(O_+^	op O) = -1 \Rightarrow \dot e_s = +\sigma_s,\ b = \min(e, 2 - e)"
    )
    return check_claims("orientation of the sleeping directions (a shrinking one where it differs)", statement, claims)


def linear_sleeping_log_scales(gradients, durations, u0, v0, log_alpha: float, times) -> np.ndarray:
    """The exact log scales ``b_i = log σ_i(W) / (2 log α)`` (ascending, one per column of ``u0``) of ``W = U Vᵀ``
    at rescaled ``times`` for the linear flow ``dZ/dt = A_k Z``, ``Z = [U; V]``, ``A_k = [[0, G_k], [G_kᵀ, 0]]``
    with ``G_k`` constant on the k-th interval of rescaled length ``durations[k]`` (the last extends beyond), from
    ``Z(0) = α [u0; v0]``.

    The sleeping directions of a greedy plateau follow this flow; it is solved in closed form,
    ``exp(sA) = [[I + P (cosh sΣ − I) Pᵀ, P sinh(sΣ) Qᵀ], [Q sinh(sΣ) Pᵀ, I + Q (cosh sΣ − I) Qᵀ]]`` for
    ``G = P Σ Qᵀ``, in enough digits (mpmath) that no singular value is lost to rounding.
    """
    L = -float(log_alpha)
    gradients = [np.asarray(g, dtype=float) for g in gradients]
    times = np.asarray(times, dtype=float)
    top = max(float(np.linalg.norm(g, 2)) for g in gradients)
    span = 2 * L * (2 + 2 * top * float(np.max(times)))  # the range of log σ(W) to resolve, in nats
    with mpmath.workdps(int(span / math.log(10)) + 40):
        alpha = mpmath.exp(mpmath.mpf(log_alpha))
        m, width = u0.shape
        z = mpmath.matrix(np.concatenate([u0, v0]).tolist()) * alpha
        starts = np.concatenate([[0.0], np.cumsum(durations)])
        factors = [_closed_form_step(g) for g in gradients]
        out, now, k = [], 0.0, 0
        for tau in times:
            while k + 1 < len(gradients) and tau >= starts[k + 1]:
                z = factors[k](L * (starts[k + 1] - now)) * z
                now, k = starts[k + 1], k + 1
            zt = factors[k](L * (tau - now)) * z
            w = zt[:m, :] * zt[m:, :].T
            sv = sorted(mpmath.svd_r(w, compute_uv=False), reverse=True)[:width]  # W has rank ≤ the width
            out.append([float(mpmath.log(x) / (2 * mpmath.mpf(log_alpha))) for x in sv])
        return np.array(out)


def _closed_form_step(g: np.ndarray):
    """``s ↦ exp(sA)`` for ``A = [[0, G], [Gᵀ, 0]]``, from the SVD of G in the working precision."""
    m, n = g.shape
    P, S, Qt = mpmath.svd_r(mpmath.matrix(g.tolist()))
    Q = Qt.T

    def step(s):
        r = len(S)
        cosh = mpmath.diag([mpmath.cosh(s * S[i]) - 1 for i in range(r)])
        sinh = mpmath.diag([mpmath.sinh(s * S[i]) for i in range(r)])
        out = mpmath.eye(m + n)
        top, off, bottom = P * cosh * P.T, P * sinh * Q.T, Q * cosh * Q.T
        for i in range(m):
            for j in range(m):
                out[i, j] += top[i, j]
            for j in range(n):
                out[i, m + j] = off[i, j]
                out[m + j, i] = off[i, j]
        for i in range(n):
            for j in range(n):
                out[m + i, m + j] += bottom[i, j]
        return out

    return step


def derive_matrix_factorization_stages() -> Derivation:
    """Matrix factorisation ``L = ½‖U Vᵀ − M‖²``, ``M = diag(s1, s2, s3)`` with ``s1 > s2 > s3 > 0``
    (every M reduces to this by rotating U and V): the saddles are the truncated SVDs, and the
    bookkeeping gives ``T_r = 1/s_r``. With U, V aligned with M's singular vectors the flow splits into
    diagonal linear coordinates with ``β* = s_i``, whose staircase jumps at ``1/s_i`` exactly.
    """
    s = sympy.symbols("s1:4", positive=True)
    M = sympy.diag(*s)
    claims = {}

    # Saddles: the balanced truncated SVDs are stationary, with G(W̄_r) = the discarded part of M.
    for r in range(4):
        root = sympy.diag(*(sympy.sqrt(s[i]) if i < r else 0 for i in range(3)))
        W = root * root.T
        G = M - W
        claims |= _entrywise(
            f"r = {r}: G V = 0 and Gᵀ U = 0 at U = V = diag(√s_1..√s_r, 0)", sympy.Matrix.hstack(G * root, G.T * root)
        )
        claims |= _entrywise(
            f"r = {r}: G(W̄_r) = diag(0.., s_{r + 1}, ..)", G - sympy.diag(*(s[i] if i >= r else 0 for i in range(3)))
        )

    # Bookkeeping: exponents e_i = 1 at τ = 0; at stage r the sorted rates are s_{r+1}, s_{r+2}, …
    # (the singular values of G(W̄_r)) and the sorted sleeping exponents are those of modes r+1, r+2, ….
    tau = sympy.Symbol("tau", positive=True)
    exponents, time = [sympy.Integer(1)] * 3, sympy.Integer(0)
    for r in range(3):
        rates = s[r:]
        step = exponents[0] / rates[0]
        time = time + step
        exponents = [e - rate * step for e, rate in zip(exponents, rates)][1:]
        claims[f"T_{r + 1} = 1/s_{r + 1}"] = time - 1 / s[r]
        for i, e in enumerate(exponents):
            claims[f"after T_{r + 1}: e_{r + 2 + i} = 1 - s_{r + 2 + i} T_{r + 1}"] = e - (1 - s[r + 1 + i] * time)
    claims["mode i's exponent 1 - s_i τ reaches 0 at τ = 1/s_i"] = sympy.solve(1 - s[0] * tau, tau)[0] - 1 / s[0]

    # Aligned start U = diag(u), V = diag(v): du_i/dt = v_i (s_i - u_i v_i), dv_i/dt = u_i (s_i - u_i v_i).
    u = sympy.symbols("u1:4", real=True)
    v = sympy.symbols("v1:4", real=True)
    U, V = sympy.diag(*u), sympy.diag(*v)
    G = M - U * V.T
    claims |= _entrywise(
        "aligned start: dU/dt = diag(v (s - uv))", G * V - sympy.diag(*(v[i] * (s[i] - u[i] * v[i]) for i in range(3)))
    )
    claims |= _entrywise(
        "aligned start: dV/dt = diag(u (s - uv))",
        G.T * U - sympy.diag(*(u[i] * (s[i] - u[i] * v[i]) for i in range(3))),
    )

    # Local minimum at the rank (2×2, rank 1): the Hessian of ½‖u vᵀ − diag(s1, s2)‖² at the balanced
    # top mode has eigenvalues {0 (the rescaling u → cu, v → v/c), 2 s1, s1 − s2, s1 + s2}: positive off the
    # rescaling iff s1 > s2; at the other mode, s2 − s1 < 0 (a saddle of the rank-1 problem).
    x = sympy.symbols("x1:5", real=True)
    a, b = sympy.Matrix(x[:2]), sympy.Matrix(x[2:])
    loss = sum(z**2 for z in a * b.T - sympy.diag(s[0], s[1])) / 2
    hess = sympy.hessian(loss, x)
    top = hess.subs({x[0]: sympy.sqrt(s[0]), x[1]: 0, x[2]: sympy.sqrt(s[0]), x[3]: 0})
    other = hess.subs({x[0]: 0, x[1]: sympy.sqrt(s[1]), x[2]: 0, x[3]: sympy.sqrt(s[1])})
    lam = sympy.Symbol("lambda")
    expected = sympy.expand(lam * (lam - 2 * s[0]) * (lam - (s[0] - s[1])) * (lam - (s[0] + s[1])))
    claims["rank 1: Hessian at the top mode has eigenvalues 0, 2s1, s1 - s2, s1 + s2"] = sympy.expand(
        top.charpoly(lam).as_expr() - expected
    )
    claims["rank 1: the second mode is not a local minimum (eigenvalue s2 - s1)"] = (
        other - (s[1] - s[0]) * sympy.eye(4)
    ).det()
    statement = (
        r"L = \tfrac12\|UV^\top - M\|_F^2:\ \bar W_r = \sum_{i \le r} \sigma_i a_i b_i^\top,\ "
        r"G(\bar W_r) = \sum_{i > r} \sigma_i a_i b_i^\top,\ T_r = 1/\sigma_r(M)"
    )
    return check_claims("matrix factorisation: truncated SVDs at T_r = 1/σ_r", statement, claims)


class FactorizationStages(NamedTuple):
    """Stage times ``T_0 = 0 < T_1 < …`` and saddles ``W̄_r`` (the rank-r truncated SVDs, ``W̄_0 = 0``)."""

    times: np.ndarray
    saddles: np.ndarray


def matrix_factorization_stages(M, width: int | None = None) -> FactorizationStages:
    """The greedy low-rank limit of ``L = ½‖U Vᵀ − M‖²_F`` with factors of ``width`` columns
    (default ``min(M.shape)``): ``T_r = 1/σ_r(M)`` and ``W̄_r`` the truncated SVD, for every nonzero
    ``σ_r`` with ``r ≤ width``. Needs distinct nonzero singular values (else the escape direction is
    not unique).
    """
    M = np.asarray(M, dtype=float)
    if M.ndim != 2:
        raise ValueError(f"M must be a matrix; got shape {M.shape}.")
    width = min(M.shape) if width is None else int(width)
    if width < 1:
        raise ValueError(f"width must be at least 1; got {width}.")
    left, sigma, right = np.linalg.svd(M)
    rank = int(min(width, np.sum(sigma > 1e-12 * max(sigma[0], 1e-300))))
    if np.any(np.diff(sigma[: rank + (rank < sigma.size)]) == 0):
        raise ValueError("the singular values of M must be distinct (up to the width) for a unique path.")
    saddles = np.zeros((rank + 1,) + M.shape)
    for r in range(1, rank + 1):
        saddles[r] = (left[:, :r] * sigma[:r]) @ right[:r]
    return FactorizationStages(np.concatenate([[0.0], 1.0 / sigma[:rank]]), saddles)

"""Deep linear networks ``W = W_L ⋯ W_1`` (docs/deep-linear.md): the conservation laws of the layer flow, Saxe's
modes as its aligned balanced solutions, and the bounded variables of the α-free flow whose blow-up is the first
stage time of the greedy low-rank limit.

Sign convention as everywhere: ``G = −∇_W L``, so gradient flow reads ``dW_l/dt = W_{>l}ᵀ G W_{<l}ᵀ``.
"""

from __future__ import annotations

import sympy

from ._record import Derivation, check_claims


def _matrix(name: str, rows: int, cols: int) -> sympy.Matrix:
    return sympy.Matrix(rows, cols, lambda i, j: sympy.Symbol(f"{name}{i}{j}", real=True))


def _velocities(layers, G):
    """``(W_{>l}ᵀ G W_{<l}ᵀ)_l`` (empty products are identities)."""
    out = []
    for l in range(len(layers)):
        above = sympy.eye(G.shape[0])
        for w in reversed(layers[l + 1 :]):
            above = above * w
        below = sympy.eye(G.shape[1])
        for w in layers[:l]:
            below = w * below
        out.append(above.T * G * below.T)
    return out


def derive_deep_linear_conservation() -> Derivation:
    """``d/dt (W_{l+1}ᵀ W_{l+1} − W_l W_lᵀ) = 0`` along ``dW_l/dt = W_{>l}ᵀ G W_{<l}ᵀ`` for any G (Arora, Cohen &
    Hazan 2018), on generic layers of widths 3 → 2 → 2 → 2 (L = 3), and the velocities are ``−∂L/∂W_l`` of any
    ``L(W)`` (checked as ``∂⟨G, W⟩/∂W_l`` with G held fixed)."""
    layers = [_matrix("a", 2, 3), _matrix("b", 2, 2), _matrix("c", 2, 2)]
    G = _matrix("g", 2, 3)
    v = _velocities(layers, G)
    claims = {}
    for l in range(2):
        drift = v[l + 1].T * layers[l + 1] + layers[l + 1].T * v[l + 1] - v[l] * layers[l].T - layers[l] * v[l].T
        claims[f"d/dt(W_{l + 2}ᵀW_{l + 2} − W_{l + 1}W_{l + 1}ᵀ) = 0"] = sympy.expand(drift) == sympy.zeros(2, 2)
    pairing = sum(G.multiply_elementwise(layers[2] * layers[1] * layers[0]))
    for l, w in enumerate(layers):
        gradient = sympy.Matrix(w.shape[0], w.shape[1], lambda i, j: sympy.diff(pairing, w[i, j]))
        claims[f"W_{l + 1}'s velocity is ∂⟨G, W⟩/∂W_{l + 1}"] = sympy.expand(gradient - v[l]) == sympy.zeros(*w.shape)
    statement = (
        r"\frac{d}{dt}\left(W_{l+1}^\top W_{l+1} - W_l W_l^\top\right) = 0,\quad \dot W_l = W_{>l}^\top G W_{<l}^\top"
    )
    return check_claims("deep linear conservation laws", statement, claims)


def derive_aligned_modes() -> Derivation:
    """Balanced layers aligned with a whitened task, ``W_l = diag(a)`` and ``G = diag(s) − W``, stay so: the matrix
    flow is ``da_r/dt = (s_r − a_r^L) a_r^{L−1}`` per mode, Saxe's ``dσ/dt = L σ^{2−2/L}(s − σ)`` for ``σ = a^L``
    (whose closed form is ``derive_saxe_depth``), at L = 3, 4 with two modes."""
    claims = {}
    for depth in (3, 4):
        a = sympy.symbols("a1 a2", positive=True)
        s = sympy.symbols("s1 s2", positive=True)
        layers = [sympy.diag(*a) for _ in range(depth)]
        G = sympy.diag(*s) - sympy.diag(*(x**depth for x in a))
        want = sympy.diag(*((si - x**depth) * x ** (depth - 1) for si, x in zip(s, a)))
        for l, v in enumerate(_velocities(layers, G)):
            claims[f"L = {depth}: W_{l + 1}'s velocity is diag((s − a^L) a^(L−1))"] = sympy.expand(
                v - want
            ) == sympy.zeros(2, 2)
    statement = r"W_l = \mathrm{diag}(a),\ G = \mathrm{diag}(s) - W:\ \dot a_r = (s_r - a_r^L)\, a_r^{L-1}"
    return check_claims("aligned balanced modes of a deep linear network", statement, claims)


def derive_blow_up_variables() -> Derivation:
    """For a field ``F`` homogeneous of degree ``L − 1`` (the α-free flow ``F(Ŵ)_l = Ŵ_{>l}ᵀ G_0 Ŵ_{<l}ᵀ``),
    ``Ŵ = e^ρ Θ`` with ``dΘ/ds = F(Θ) − ⟨Θ, F(Θ)⟩Θ``, ``dρ/ds = ⟨Θ, F(Θ)⟩`` and ``dτ/ds = e^{−(L−2)ρ}`` solves
    ``dŴ/dτ = F(Ŵ)`` (checked on the scalar layers of L = 3, 4, where ``F`` is the velocity of ``w_l``), so the blow-up
    time is ``∫_0^∞ e^{−(L−2)ρ} ds``; with ``⟨Θ, F(Θ)⟩ → λ`` the tail after ``s`` is ``e^{−(L−2)ρ(s)}/((L−2)λ)``."""
    claims = {}
    g, rho, lam, s = sympy.symbols("g rho lambda s", real=True)
    for depth in (3, 4):
        theta = sympy.symbols(f"t1:{depth + 1}", real=True)

        def F(w, depth=depth):
            return [g * sympy.Mul(*(w[k] for k in range(depth) if k != l)) for l in range(depth)]

        f = F(theta)
        inner = sum(t * x for t, x in zip(theta, f))
        dtheta = [x - inner * t for t, x in zip(theta, f)]
        for l in range(depth):
            # dŴ_l/dτ = (dρ/ds Θ_l + dΘ_l/ds) e^ρ / (dτ/ds)
            lhs = (inner * theta[l] + dtheta[l]) * sympy.exp(rho) / sympy.exp(-(depth - 2) * rho)
            rhs = F([sympy.exp(rho) * t for t in theta])[l]
            claims[f"L = {depth}: layer {l + 1} solves dŴ/dτ = F(Ŵ)"] = sympy.simplify(lhs - rhs)
        tail = sympy.integrate(sympy.exp(-(depth - 2) * (rho + lam * s)), (s, 0, sympy.oo), conds="none")
        claims[f"L = {depth}: the tail ∫ e^(−(L−2)(ρ + λ s)) ds"] = sympy.simplify(
            tail - sympy.exp(-(depth - 2) * rho) / ((depth - 2) * lam)
        )
    statement = (
        r"\hat W = e^{\rho}\Theta:\ \Theta' = F(\Theta) - \langle\Theta, F(\Theta)\rangle\Theta,\ "
        r"\rho' = \langle\Theta, F(\Theta)\rangle,\ T_1 = \int_0^\infty e^{-(L-2)\rho}\, ds"
    )
    return check_claims("the first escape of a deep linear network as a blow-up", statement, claims)


def _product(layers):
    out = layers[0]
    for w in layers[1:]:
        out = w * out
    return out


def _linear_part(A, X, target):
    """The derivative at the layers ``A`` in the direction ``X`` of the field ``(W_{>l}ᵀ (target − W) W_{<l}ᵀ)_l``:
    each layer's factors replaced by ``X`` one at a time, and ``−A_{>l}ᵀ (Σ_j A_L ⋯ X_j ⋯ A_1) A_{<l}ᵀ``."""
    L = len(A)
    G = target - _product(A)
    dW = sum((_product([X[i] if i == j else A[i] for i in range(L)]) for j in range(L)), sympy.zeros(*G.shape))
    out = []
    for l in range(L):
        v = _velocities(A, -dW)[l]
        for j in range(L):
            if j != l:
                v += _velocities([X[i] if i == j else A[i] for i in range(L)], G)[l]
        out.append(v)
    return out


def derive_sleeping_layers() -> Derivation:
    """The structure the greedy limit's later stages rest on (docs/deep-linear.md, *The greedy limit*), at L = 3, 4 on
    spaces of dimension 3 with one learned direction ``e_1`` in each: balanced rank-one layers ``A_l = c E₁₁`` at a
    stationary point of ``½‖W − M‖²`` (``M₁₁ = c^L``, ``M``'s other entries in the first row and column 0, so
    ``G(A) = M − c^L E₁₁`` is off ``e_1``), and sleeping layers ``S`` in units of α:

    - the α-free flow ``S_{>l}ᵀ G(A) S_{<l}ᵀ`` of layers off ``e_1`` (the "off" block: first row and column 0) stays
      off ``e_1``;
    - with ``W_l = A_l + α S_l`` and ``S`` off ``e_1``, the exact field's change ``F(A + αS) − F(A)`` has the off block
      ``α^{L−1} S_{>l}ᵀ (G(A) − α^L S_L ⋯ S_1) S_{<l}ᵀ``: ``S`` moves by the α-free flow in ``τ = t α^{L−2}``, to
      ``O(α^L)``;
    - the field's linear part at ``A`` (the directions that relax at rates of order one in t) has a zero off block for
      every ``S`` at the stationary point, and for an ``S`` off ``e_1`` at any ``G = N − W`` (along a jump): the off
      block is moved only by the α-free flow."""
    claims = {}
    c, alpha = sympy.symbols("c alpha", positive=True)
    E = sympy.zeros(3, 3)
    E[0, 0] = 1

    def off(X):
        return X[1:, 1:]

    def sleeping(name):
        X = _matrix(name, 3, 3)
        X[0, :] = sympy.zeros(1, 3)
        X[:, 0] = sympy.zeros(3, 1)
        return X

    for depth in (3, 4):
        A = [c * E for _ in range(depth)]
        M = sleeping("m")
        M[0, 0] = c**depth
        N = _matrix("n", 3, 3)
        S = [sleeping(f"s{l}_") for l in range(depth)]
        P_S = _product(S)

        def field(layers, target):
            return _velocities(layers, target - _product(layers))

        free = _velocities(S, M - c**depth * E)
        claims[f"L = {depth}: the α-free flow of S off e₁ stays off e₁"] = all(
            sympy.expand(v[0, :]) == sympy.zeros(1, 3) and sympy.expand(v[:, 0]) == sympy.zeros(3, 1) for v in free
        )
        moved = field([a + alpha * s for a, s in zip(A, S)], M)
        at_A = field(A, M)
        exact = _velocities(S, M - c**depth * E - alpha**depth * P_S)
        claims[f"L = {depth}: off e₁, F(A + αS) − F(A) = α^(L−1) × the α-free flow with G(A) − α^L S_L⋯S_1"] = all(
            sympy.expand(off(m - a - alpha ** (depth - 1) * x)) == sympy.zeros(2, 2)
            for m, a, x in zip(moved, at_A, exact)
        )
        general = [_matrix(f"x{l}_", 3, 3) for l in range(depth)]
        for name, target, direction in (("every S at the stationary point", M, general), ("S off e₁ at any G", N, S)):
            claims[f"L = {depth}: the linear part at A has a zero off block, {name}"] = all(
                sympy.expand(off(v)) == sympy.zeros(2, 2) for v in _linear_part(A, direction, target)
            )
    statement = (
        r"W_l = A_l + \alpha S_l:\ \mathrm{off}\,[F(A+\alpha S) - F(A)]_l = "
        r"\alpha^{L-1} S_{>l}^\top (G(A) - \alpha^L S_L \cdots S_1) S_{<l}^\top,\ \mathrm{off}\, DF(A)[S] = 0"
    )
    return check_claims("the sleeping layers of a deep linear network off the learned directions", statement, claims)

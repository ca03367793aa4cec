"""The state of a factorised flow, ``Z = [U; V] = Q diag(e^ρ) R̃`` per weight matrix, its vector field, and the
gauge fixed after every step (docs/math.md, *Full weights: the exact flow*).

For each weight matrix, ``Z = [U; V]`` solves the linear equation ``dZ/dt = A Z`` with the symmetric
``A = [[0, G], [Gᵀ, 0]]``, ``G = −∇_W L``, and conserves ``C = Zᵀ J Z = UᵀU − VᵀV`` (``J = diag(I, −I)``).
The flow carries the continuous QR factorisation ``Z = Q diag(e^ρ) R̃`` (Dieci, Russell & Van Vleck):
``Q`` with orthonormal columns, log scales ``ρ``, ``R̃`` unit upper triangular,

    Q' = A Q − Q T,   ρ' = diag(B),   R̃' = (E ∘ 2 triu(B, 1)) R̃,
    B = Qᵀ A Q,   T = diag(B) + 2 triu(B, 1),   E_ij = e^{ρ_j − ρ_i},

which never forms ``e^ρ`` where it matters: ``ρ`` lies in ``[2 log α, O(1)]`` and the state needs ``log α``
only. After every step the gauge is fixed: columns are kept sorted by ``ρ`` (so that ``E`` stays bounded)
by a rotation ``Z → Z O`` that leaves ``W = U Vᵀ`` unchanged, and ``QᵀJQ = diag(e^{−ρ}) R̃⁻ᵀ C R̃⁻¹
diag(e^{−ρ})`` is restored from the conserved ``C``, exactly where rounding would lose it.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from .._solver import WrappedSolver
from ._model import FactorizedModel

SWAP_MARGIN = 1.0  # swap two columns once the lower one's log scale is this far above the upper one's


class Factor(eqx.Module):
    Q: jax.Array  # (m + n, k), orthonormal columns
    rho: jax.Array  # (k,), log scales
    R: jax.Array  # (k, k), unit upper triangular
    C: jax.Array  # (k, k), the conserved C̄ = C / α² = ZᵀJZ / α² (constant but for the sorting's rotations)


def factor_weights(f: Factor, m: int) -> jax.Array:
    """``W = U Vᵀ = Q_t diag(e^ρ) R̃ R̃ᵀ diag(e^ρ) Q_bᵀ`` (0 where below the float64 range)."""
    M = jnp.exp(f.rho)[:, None] * f.R
    return (f.Q[:m] @ M) @ (f.Q[m:] @ M).T


def imbalance(f: Factor, log_alpha, m: int) -> jax.Array:
    """``K − QᵀJQ`` with ``K = e^{2 log α} diag(e^{−ρ}) R̃⁻ᵀ C̄ R̃⁻¹ diag(e^{−ρ})``, what ``QᵀJQ`` is by the
    conservation law (docs/math.md). Where ``K`` is below rounding of O(1) numbers, ``Q`` has lost it."""
    k = f.rho.shape[0]
    Rinv = jax.scipy.linalg.solve_triangular(f.R, jnp.eye(k), lower=False, unit_diagonal=True)
    scale = jnp.exp(jnp.minimum(2.0 * log_alpha - f.rho[:, None] - f.rho[None, :], 40.0))  # |K| ≤ 1: never large
    K = scale * (Rinv.T @ f.C @ Rinv)
    Qt, Qb = f.Q[:m], f.Q[m:]
    return 0.5 * (K + K.T) - (Qt.T @ Qt - Qb.T @ Qb)


def vector_field(t, y: tuple[Factor, ...], args):
    """``d(Q, ρ, R̃)/dt`` of ``dZ/dt = A Z`` for every factor (the module docstring), in unscaled time."""
    del t
    model = args.model
    Gs = model.G(tuple(factor_weights(f, m) for f, (m, _) in zip(y, model.shapes)))
    return tuple(factor_field(f, G, args.log_alpha, m) for f, G, (m, _) in zip(y, Gs, model.shapes))


def factor_field(f: Factor, G, log_alpha, m: int) -> Factor:
    """``d(Q, ρ, R̃)/dt`` of one factor for a given ``G``, at ``Q + δQ``, ``δQ = [Q_t ΔK/2; −Q_b ΔK/2]``, the
    first-order move that gives ``QᵀJQ`` its exact value (``ΔK = imbalance``); the terms linear in ``δQ`` are added
    apart, so a ``ΔK`` below rounding still drives the flow."""
    dK = imbalance(f, log_alpha, m)
    dQ = jnp.concatenate([f.Q[:m] @ dK, -(f.Q[m:] @ dK)]) * 0.5

    def apply(Q):
        return jnp.concatenate([G @ Q[m:], G.T @ Q[:m]])

    AQ, AdQ = apply(f.Q), apply(dQ)
    B = f.Q.T @ AQ + (dQ.T @ AQ + f.Q.T @ AdQ)
    B = 0.5 * (B + B.T)
    upper = jnp.triu(B, 1)
    T = jnp.diag(jnp.diag(B)) + 2.0 * upper
    E = jnp.exp(jnp.minimum(jnp.triu(f.rho[None, :] - f.rho[:, None], 1), 60.0))  # e^{ρ_j − ρ_i}, bounded if sorted
    dQdt = AQ - f.Q @ T + (AdQ - dQ @ T)
    return Factor(Q=dQdt, rho=jnp.diag(B), R=(E * 2.0 * upper) @ f.R, C=jnp.zeros_like(f.C))


def _swap(f: Factor, i) -> Factor:
    """Exchange the order of columns ``i, i+1`` (docs/math.md): ``Z → Z O`` with the rotation ``O`` that makes
    ``R̃`` triangular again after ``Q``'s columns ``i, i+1`` are swapped; ``W`` does not change."""
    k = f.rho.shape[0]
    r = f.R[i, i + 1]
    s = jnp.sqrt(1.0 + r * r)
    rows = jnp.arange(k)
    # O acts on columns i, i+1 of Z (and of R̃ above row i): (c_i, c_{i+1}) ← (r c_i − c_{i+1}, c_i + r c_{i+1}) / s.
    O = jnp.eye(k).at[i, i].set(r / s).at[i + 1, i].set(-1.0 / s).at[i, i + 1].set(1.0 / s).at[i + 1, i + 1].set(r / s)
    Ri, Rj = f.R[i], f.R[i + 1]
    R = f.R @ O  # rows above i: rotated columns i, i+1
    new_i = jnp.where(rows > i + 1, -s * Rj, 0.0).at[i].set(1.0).at[i + 1].set(-r)
    new_j = jnp.where(rows > i + 1, Ri / s, 0.0).at[i + 1].set(1.0)
    R = R.at[i].set(new_i).at[i + 1].set(new_j)
    rho = f.rho.at[i].set(f.rho[i + 1] - 0.5 * jnp.log1p(r * r)).at[i + 1].set(f.rho[i] + 0.5 * jnp.log1p(r * r))
    Q = f.Q.at[:, i].set(-f.Q[:, i + 1]).at[:, i + 1].set(f.Q[:, i])
    return Factor(Q=Q, rho=rho, R=R, C=O.T @ f.C @ O)


def sort_pass(f: Factor) -> tuple[Factor, jax.Array]:
    """One pass of adjacent swaps wherever ``ρ_{i+1}`` exceeds ``ρ_i`` by more than ``½ log(1 + R̃_{i,i+1}²)``
    (what the swap moves) plus a margin; returns whether any was made."""

    def body(i, carry):
        f, changed = carry
        r = f.R[i, i + 1]
        do = f.rho[i + 1] - f.rho[i] > 0.5 * jnp.log1p(r * r) + SWAP_MARGIN
        pick = lambda a, b: jnp.where(do, a, b)
        return jax.tree_util.tree_map(pick, _swap(f, i), f), changed | do

    k = f.rho.shape[0]
    return jax.lax.fori_loop(0, k - 1, body, (f, jnp.array(False)))


def restore(f: Factor, log_alpha, m: int) -> Factor:
    """``Q ← polar([Q_t (I + ΔK/2); Q_b (I − ΔK/2)])``: ``QᵀJQ`` restored from the conserved ``C`` to first
    order (``ΔK = imbalance``, small after every step) and the columns orthonormal again."""
    dK = imbalance(f, log_alpha, m)
    eye = jnp.eye(f.rho.shape[0])
    Q = jnp.concatenate([f.Q[:m] @ (eye + 0.5 * dK), f.Q[m:] @ (eye - 0.5 * dK)])
    return eqx.tree_at(lambda g: g.Q, f, polar(Q))


def polar(Q) -> jax.Array:
    """The orthonormal polar factor ``U Vᵀ`` of ``Q = U Σ Vᵀ``, by the SVD. Where LAPACK's SVD fails to converge
    (JAX returns NaN; a matrix whose singular values all cluster at 1, as here, is where divide and conquer can) and
    ``Q`` is finite: by Newton–Schulz, ``X ← X (3I − XᵀX) / 2``, whose defect ``‖XᵀX − I‖`` falls as ``¾ δ²`` per
    iteration (five take a defect of 0.1 below rounding). The SVD stays the rule: the flows at ``log α = −1e4`` hold
    ``QᵀJQ`` below rounding and follow the rounding of the restore (Newton–Schulz alone, equal to it within 1e-12,
    stops the closed-form test there)."""
    u, _, vt = jnp.linalg.svd(Q, full_matrices=False)
    P = u @ vt
    failed = ~jnp.all(jnp.isfinite(P)) & jnp.all(jnp.isfinite(Q))
    return jax.lax.cond(failed, newton_schulz, lambda Q: P, Q)


def newton_schulz(Q, iterations: int = 5) -> jax.Array:
    """The polar factor of a nearly orthonormal ``Q`` by ``X ← X (3I − XᵀX) / 2`` (``polar``)."""
    eye = jnp.eye(Q.shape[1], dtype=Q.dtype)
    X = Q
    for _ in range(iterations):
        X = X @ (1.5 * eye - 0.5 * (X.T @ X))
    return X


class Args(eqx.Module):
    model: FactorizedModel
    log_alpha: jax.Array


class Gauge(WrappedSolver):
    """Wraps a solver: after each step, sorts the columns and restores ``QᵀJQ`` (the module docstring).

    A step after a swap re-evaluates its first stage, as after a jump: the stored last stage of a
    first-same-as-last method is the vector field in the old gauge.
    """

    def init(self, terms, t0, t1, y0, args):
        return self.solver.init(terms, t0, t1, y0, args), jnp.array(False)

    def step(self, terms, t0, t1, y0, args: Args, solver_state, made_jump):
        inner, swapped = solver_state
        y1, y_error, dense_info, inner, result = self.solver.step(
            terms, t0, t1, y0, args, inner, jnp.logical_or(made_jump, swapped)
        )
        factors, any_swap = [], jnp.array(False)
        for f, (m, _) in zip(y1, args.model.shapes):
            f, changed = sort_pass(f)
            factors.append(restore(f, args.log_alpha, m))
            any_swap = any_swap | changed
        return tuple(factors), y_error, dense_info, (inner, any_swap), result


def initial_state(us, vs) -> tuple[Factor, ...]:
    """The state of ``Z(0) = [Ū; V̄]`` at ``α = 1`` (add ``log α`` to ``ρ``), with ``C̄ = ŪᵀŪ − V̄ᵀV̄``, per factor.

    Columns are first ordered by a pivoted QR, so that the log scales start sorted; reordering the columns of
    ``Z`` leaves ``W = U Vᵀ`` unchanged.
    """
    factors = []
    for u, v in zip(us, vs):
        z = np.concatenate([u, v])
        _, _, perm = scipy.linalg.qr(z, mode="economic", pivoting=True)
        z = z[:, perm]
        q, r = np.linalg.qr(z)
        sign = np.where(np.diag(r) < 0, -1.0, 1.0)
        q, r = q * sign, r * sign[:, None]
        d = np.diag(r)
        m = u.shape[0]
        C = z[:m].T @ z[:m] - z[m:].T @ z[m:]
        factors.append(Factor(Q=q, rho=np.log(d), R=np.triu(r / d[:, None]), C=C))
    return tuple(factors)

"""The implicit block of a split step (``_split``): the leading columns of every factor, their Jacobian, and Kværnø's
L-stable ESDIRK step on them (docs/math.md, *The split integrator*)."""

from __future__ import annotations

from collections.abc import Callable

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jax.flatten_util import ravel_pytree

from ._explicit import LeapTolerances
from ._qr import Factor, factor_field, factor_weights

WIDTH = 4  # the implicit block: the leading min(k, WIDTH) columns of every factor (fewer on wide factors: widths)
_BLOCK_ENTRIES = 320  # ... at most this many entries a factor where it can (one column at least)
_WAKE = 3.0  # a column is active (implicit) from ρ_i + max ρ ≥ −Γ − this
_JVP_BATCH = 16  # its columns, this many Jacobian-vector products at a time (on the d = 50 head: 0.19 s for 508
# columns, one at a time 0.39 s; 64 at a time 0.27 s)
_KVAERNO5 = dfx.Kvaerno5.tableau
_GAMMA = float(_KVAERNO5.a_diagonal[1])
_NEWTON_ITERATIONS = 16  # a stage not converged in this many Newton iterations rejects the step (with 6, until
# 2026-11-30, the d = 50 head's long split steps failed where a few more iterations converge: at τ = 1.92 a step of
# 25 converged with 10 allowed, one of 40 with 16; the whole flow at log α = −1e4 took 9,465 steps and 268 s, with 10
# 7,160 steps and 205 s, with 16 6,301 steps and 197 s)
_NEWTON_TOL = 0.1  # ... converged: its update's RMS below this fraction of the tolerance


def widths(y) -> tuple[int, ...]:
    """The block width of every factor of the state ``y``: ``p_j = min(k_j, WIDTH)`` columns, fewer where a column's
    entries (``m_j + n_j + 1 + k_j``) would take the block past ``_BLOCK_ENTRIES`` (its LU and Jacobian cost its size
    cubed and squared: on the d = 50 head, 2 columns a factor took the stiff phase in 2.6 s where 4 took 4.8)."""
    return tuple(
        max(1, min(f.rho.shape[-1], WIDTH, _BLOCK_ENTRIES // (f.Q.shape[-2] + 1 + f.rho.shape[-1]))) for f in y
    )


def jac_size(y) -> int:
    """The size of the block's Jacobian: ``Σ_j p_j (m_j + n_j) + p_j + p_j k_j`` (its ``Q``, ``ρ`` and rows of ``R̃``)."""
    return sum(p * f.Q.shape[-2] + p + p * f.rho.shape[-1] for f, p in zip(y, widths(y)))


def near_awake(f: Factor, tol: LeapTolerances) -> jax.Array:
    return f.rho + jnp.max(f.rho) >= -tol.gap - _WAKE


def fits(y, tol: LeapTolerances, width) -> jax.Array:
    """Whether every column near waking lies in the block."""
    out = jnp.array(True)
    for f, p in zip(y, width):
        out = out & ~jnp.any(near_awake(f, tol) & (jnp.arange(f.rho.shape[0]) >= p))
    return out


def _crossed(active) -> jax.Array:
    """The active rows of ``R̃`` with an active column after them: their entries in the later columns move at the
    block's rates (``M_il`` carries ``e^{ρ_l − ρ_i}``); the others' barely move and are held."""
    later = jnp.cumsum(active[::-1].astype(int))[::-1] - active.astype(int)
    return active & (later > 0)


def _moving_rows(active, k: int) -> jax.Array:
    """Which entries of the block's rows of ``R̃`` (``p × k``) move: the active columns' of the active rows, and every
    later column's of the crossed rows (``_crossed``), inactive columns inside the block included."""
    p = active.size
    columns = jnp.concatenate([active, jnp.zeros(k - p, bool)])
    return active[:, None] & (columns[None, :] | _crossed(active)[:, None])


class Block(eqx.Module):
    """The implicit block of a split step: the leading ``p_j`` columns of every factor (``Q``, ``ρ``, ``R̃``) as one
    vector ``x0``, those within ``_WAKE`` of waking ``active`` (``moving``: their entries in ``x0``), the others held.

    ``G`` at a block state comes from its ``W`` plus the rest of ``W``, held. Every column of ``Z`` carries
    ``e^{ρ_i} R̃_ij`` along the block's ``Q_i`` (``Z_j = Σ_{i≤j} Q_i e^{ρ_i} R̃_ij``), which moves with ``Q_i`` and
    ``ρ_i``, while ``R̃_ij`` itself moves at ``e^{ρ_l − ρ_i}`` of the block's rates (the continuous QR's ``R̃``
    field, ``l > i``: slow while the later columns sleep, at the block's own rates once a second one is awake): so
    the block's state holds its rows of ``R̃`` in *all* columns, its ``W`` is ``Q_t diag(e^ρ) R̃ R̃ᵀ diag(e^ρ)
    Q_bᵀ`` over them, and the rest of ``W`` lies below ``e^{−Γ}``. (Without those rows, a learned mode whose mass
    sits partly in columns outside the block had that part held over the step: 8.5e-8 in ``W`` for one step of 0.005
    where the error estimates saw 3e-10, tests/factorized/test_split.py; with them held, the d = 50 head at τ = 1.4,
    two columns awake, held its split steps to 0.18, now 0.62.)"""

    x0: jax.Array
    active: tuple[jax.Array, ...]
    moving: jax.Array
    blocks: tuple[Factor, ...]
    rest: tuple[jax.Array, ...]
    model: object
    log_alpha: jax.Array
    unravel: Callable = eqx.field(static=True)  # x → the blocks' (Q, ρ, R̃)

    @classmethod
    def of(cls, y, model, log_alpha, tol: LeapTolerances, width) -> Block:
        blocks = tuple(Factor(Q=f.Q[:, :p], rho=f.rho[:p], R=f.R[:p, :], C=f.C[:p, :p]) for f, p in zip(y, width))
        active = tuple(near_awake(f, tol)[:p] for f, p in zip(y, width))
        x0, unravel = ravel_pytree(tuple((b.Q, b.rho, b.R) for b in blocks))

        moving = tuple(
            (jnp.broadcast_to(a, b.Q.shape), a, _moving_rows(a, b.R.shape[1])) for a, b in zip(active, blocks)
        )
        moving = ravel_pytree(moving)[0]
        held = cls(x0, active, moving, blocks, (), model, log_alpha, unravel)
        rest = tuple(factor_weights(f, m) - w for f, w, (m, _) in zip(y, held.weights(blocks), model.shapes))
        return eqx.tree_at(lambda b: b.rest, held, rest)

    def factors(self, x) -> tuple[Factor, ...]:
        """The block's factors at ``x``: their ``R̃`` the block's rows in every column (``p × k``)."""
        return tuple(Factor(Q=Q, rho=r, R=R, C=b.C) for (Q, r, R), b in zip(self.unravel(x), self.blocks))

    def weights(self, fs) -> tuple[jax.Array, ...]:
        """``W`` of the block's columns ``fs`` with their rows of ``R̃`` in every column."""
        return tuple(factor_weights(b, m) for b, (m, _) in zip(fs, self.model.shapes))

    def G_at(self, x) -> tuple[jax.Array, ...]:
        return self.model.G(tuple(w + v for w, v in zip(self.rest, self.weights(self.factors(x)))))

    def field(self, x) -> jax.Array:
        """The block's vector field, its active entries' alone (0 elsewhere): the continuous QR's of its square part,
        and its rows of ``R̃`` in the later columns moved by the same ``M = E ∘ 2 triu(B)`` (``R̃' = M R̃``, the
        rows below the block's adding ``e^{ρ_l − ρ_i}`` of that)."""
        out = []
        for b, G, a, (m, _) in zip(self.factors(x), self.G_at(x), self.active, self.model.shapes):
            p = a.size
            R = b.R[:, :p]
            v = factor_field(eqx.tree_at(lambda f: f.R, b, R), G, self.log_alpha, m)
            M = jsl.solve_triangular(R.T, v.R.T, lower=True, unit_diagonal=True).T  # v.R = M R
            R_field = jnp.concatenate([v.R, M @ b.R[:, p:]], 1) * _moving_rows(a, b.R.shape[1])
            out.append((v.Q * a[None, :], v.rho * a, R_field))
        return ravel_pytree(tuple(out))[0]


def jacobian(field, x, moving) -> jax.Array:
    """The Jacobian of ``field`` at ``x`` in the ``moving`` entries' columns (one Jacobian-vector product each, in
    batches of ``_JVP_BATCH``; the field does not move the others, whose columns stay 0)."""
    order = jnp.argsort(~moving, stable=True)  # the moving entries first
    n = jnp.sum(moving)

    def batch(b, J):
        k = b * _JVP_BATCH + jnp.arange(_JVP_BATCH)
        valid = k < n
        columns = order[jnp.minimum(k, x.size - 1)]
        tangents = jnp.where(valid[:, None], jax.nn.one_hot(columns, x.size, dtype=x.dtype), 0.0)
        block = jax.vmap(lambda e: jax.jvp(field, (x,), (e,))[1])(tangents)
        return J.at[:, jnp.where(valid, columns, x.size)].set(block.T, mode="drop")

    return jax.lax.fori_loop(0, (n + _JVP_BATCH - 1) // _JVP_BATCH, batch, jnp.zeros((x.size, x.size)))


def largest_eigenvalue(J, iterations: int = 30) -> jax.Array:
    """``|λ|_max`` of ``J`` by the power method (the block's eigenvalues are real), from a fixed start."""
    v = jnp.ones(J.shape[0]) / jnp.sqrt(J.shape[0])

    def body(_, c):
        v, _ = c
        w = J @ v
        n = jnp.linalg.norm(w)
        return w / jnp.where(n > 0, n, 1.0), n

    return jnp.maximum(jax.lax.fori_loop(0, iterations, body, (v, jnp.array(0.0)))[1], 1e-12)


def iteration_matrix(J, h) -> jax.Array:
    """``(I − hγJ)⁻¹``, the matrix of Newton's iterations of an ESDIRK step of length ``h`` (``γ`` the tableau's
    diagonal). Kept as an inverse: the steps reuse it while their length stays near ``h``, and a product with it
    costs a sixth of the two triangular solves of an LU (d = 50 head, 604 entries: 0.14 ms against 0.89)."""
    return jnp.linalg.inv(jnp.eye(J.shape[0]) - (h * _GAMMA) * J)


def dense_output(x0, x1, F0, F1, h, J, inverse, h_inverse) -> Callable:
    """The block's state at ``t + c h`` in a step from ``x0`` to ``x1`` (the field ``F0``, ``F1`` there): the cubic
    Hermite interpolant, ``x0 + c Δ + (c³ − 2c² + c) φ(hF0 − Δ) + (c³ − c²) φ(hF1 − Δ)`` with ``Δ = x1 − x0``, its
    slopes' departures from the chord filtered by ``φ(z) = (1 − 2γz) / (1 − γz)²`` at ``z = h'J`` (``inverse``:
    ``(I − h'γJ)⁻¹``, ``h' = h_inverse``). ``φ(z) = 1 + O(z²)``, so the interpolant keeps its order 4 on the slow
    components, and ``φ(z) → −2/(γz)`` for large ``|z|``: a stiff component's departure ``δ`` from its slow manifold
    (at the tolerance) no longer puts ``hλδ`` into the interpolant, which the raw slopes spread over the step (on the
    d = 50 head at τ = 1.45 and h = 1.1, ``hλ = 270``: ``G`` at the Gauss points 3.4e-5 off a fine solve with them,
    3.9e-7 with these, and the Magnus steps' error norm, which ``G``'s wiggle set, 66 times smaller)."""
    chord = x1 - x0
    departures = jnp.stack([h * F0 - chord, h * F1 - chord], axis=1)
    s0, s1 = (inverse @ (inverse @ (departures - (2.0 * h_inverse * _GAMMA) * (J @ departures)))).T
    return lambda c: x0 + c * chord + (c**3 - 2 * c**2 + c) * s0 + (c**3 - c**2) * s1


def esdirk(field, x0, F0, inverse, h, tol: LeapTolerances, moving):
    """One step of Kværnø's ESDIRK method of order 5 (its embedded order 4: diffrax's ``Kvaerno5`` tableau; L-stable,
    stiffly accurate) on the block, each implicit stage by Newton's iterations with ``inverse``, ``(I − h'γJ)⁻¹`` at
    a length ``h'`` near ``h`` (``iteration_matrix``), from the tableau's predictor, until their update is a tenth of
    the tolerance. Returns ``x1``, the field there, the squared scaled error (over the entries ``moving``), whether
    every stage converged and the field's evaluations."""
    tab, gamma = _KVAERNO5, _GAMMA
    scale = lambda x: tol.atol + tol.rtol * jnp.abs(x)  # noqa: E731
    ks, ok, count = [F0], jnp.array(True), jnp.array(0)
    for i in range(1, tab.num_stages):
        base = x0 + h * sum(a * k for a, k in zip(tab.a_lower[i - 1], ks))
        guess = x0 + h * sum(a * k for a, k in zip(tab.a_predictor[i - 1], ks))

        def newton(c, base=base):
            Y, _, n, _ = c
            dY = inverse @ (base + (h * gamma) * field(Y) - Y)
            size = jnp.sqrt(jnp.sum(jnp.where(moving, dY / scale(Y), 0.0) ** 2) / jnp.maximum(jnp.sum(moving), 1))
            return Y + dY, size, n + 1, size

        # once a stage has failed, the step's others are not iterated (it is rejected)
        start = jnp.where(ok, 0, _NEWTON_ITERATIONS)
        Y, size, n, _ = jax.lax.while_loop(
            lambda c: (c[2] < _NEWTON_ITERATIONS) & ~(c[1] <= _NEWTON_TOL), newton, (guess, jnp.inf, start, jnp.inf)
        )
        ok, count = ok & (size <= _NEWTON_TOL), count + n - start
        ks.append((Y - base) / (h * gamma))
    x1 = Y  # stiffly accurate: the last stage is the step
    # the embedded estimate filtered by (I − hγJ)⁻¹ (Shampine 1980, as RADAU5): the stiff components that the L-stable
    # step damps do not count as error
    err = inverse @ (h * sum(e * k for e, k in zip(tab.b_error, ks)))
    err_sq = jnp.sum(jnp.where(moving, err / (tol.atol + tol.rtol * jnp.maximum(jnp.abs(x0), jnp.abs(x1))), 0.0) ** 2)
    return x1, field(x1), err_sq, ok, count + 1

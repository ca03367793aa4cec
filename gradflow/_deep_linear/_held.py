"""The split's plateaus held (docs/deep-linear.md, *Held plateaus*): where ``α^{L−2} < HELD`` the plateaus of the split
``W_l = A_l + α S_l`` are solved in ``τ`` with ``A`` at rest, not in ``t`` with ``A`` moving.

A plateau lasts ``α^{−(L−2)}`` in ``t``: below ``α^{L−2} ≈ 1e-16`` the rounding of ``A``'s residual velocity, acting on
the sleeping blocks over that long, stalled the split in ``t``. Held, the plateau is the split's equation for ``S``
alone, ``dS/dτ = (F(A + αS) − F(A)) / α^{L−1}``, with ``G(W_A)`` kept to its sleeping block
(:class:`gradflow._deep_linear._split_fields.SleepingPart`), in three steps:

- *Gauge.* A jump leaves the blocks of ``S`` between a learned and a sleeping direction of a hidden space with
  entries of order ``1e3`` that only rotate the hidden bases (``S_j ∋ X A_j``, ``S_{j+1} ∋ A_{j+1} Xᵀ``): they join
  the sleeping blocks to the learned ones, whose relaxation is ``α^{−(L−2)}`` fast in ``τ``. :func:`ungauge` turns the
  hidden frames by ``R_j = exp(α Z_j)`` (``Z_j`` antisymmetric, mixing the learned and sleeping directions of space
  ``j``) chosen by least squares to remove them; ``W`` is unchanged (to rounding), ``A`` is kept, and ``S`` takes
  ``(R_lᵀ A_l R_{l−1} − A_l)/α`` from a series in ``α``, without cancellation.
- *Reduced coordinates.* The learned ``k×k`` blocks of ``S`` hold one fast direction and the gauge of the learned
  layers (``S_l^{kk} → S_l^{kk} + Y_l A_l − A_l Y_{l−1}``, which leaves ``W`` unchanged to first order) in the same
  entries: eliminating the fast one in Newton's matrix left the rounding of ``α^{−(L−2)}``-sized entries in the
  gauge's, and Newton diverged. So they enter only through the product's first-order change ``c = Σ_l A_{>l}
  S_l^{kk} A_{<l}``, carried by the top layer (``S_L^{kk} = S0_L^{kk} + c A_{<L}^{−1}``), with the gauge frozen: the
  true velocity is orthogonal to the gauge (the loss depends on ``W`` only), and what freezing drops changes ``W`` at
  second order in α.
- *Solve.* Kvaerno5 with Newton's method at every iterate (:func:`gradflow._solver.stiff_solve`): the blocks of
  ``S`` that meet a learned subspace are stiff at rates from ``1`` to ``α^{−(L−2)}`` that change with the state, and
  SciPy's Radau, whose Newton keeps one Jacobian per step, diverged on them at L = 6. A chunk ends where the sleeping
  blocks' top mode has grown :func:`growth`-fold (the next starts its own clock, so that the approach to a blow-up is
  resolved in local ``τ`` even where it is narrower than ``τ``'s ulp) or has reached the escape scale ``e``.
"""

from __future__ import annotations

import math

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._solver import Solve, solve_in_segments, stiff_solve
from ._split_fields import SleepingPart, fields

HELD = 1e-12
"""Plateaus are held where ``α^{L−2} < HELD``; above, the split solves them in ``t``, which it can down to ``1e-16``
(the two agree there: docs/deep-linear.md, *Held plateaus*)."""

SHRINK = 1e6
"""A held chunk ends where the sleeping blocks' top mode has grown ``SHRINK^{1/(L−2)}``-fold since it began
(:func:`growth`): on the blow-up's power law ``‖S‖ ∝ (T − τ)^{−1/(L−2)}`` the time left to it has then shrunk
``SHRINK``-fold, which the chunk's clock still resolves (at L = 6 a growth of 1e3, ``1e12`` in time, left steps below
100 ulps of ``τ``)."""

JUMP_SPAN = 1e8
"""The escaping mode moves into ``A`` at ``α‖S‖ = e ≥ JUMP_SPAN^{−1/(L−2)}``: its jump, solved in ``t`` from there,
then lasts at most about ``JUMP_SPAN`` in ``t`` (at ``e = √α`` and L = 6, α = 1e-10 it was ``1e20``, and the steps
fell below ``t``'s ulp)."""

STEP_TOLERANCE = 0.1
"""A held chunk's step tolerances are this fraction of the split's: Kvaerno5's embedded error estimate on the sleeping
blocks approaching a blow-up is optimistic. On the rotated task's first plateau (L = 5, Gaussian start, ``atol =
1e-8``) ``log σ`` at ``τ = 0.3`` (the blow-up at 0.34) was 2.9e-6 off a DOP853 solve at 1e-13 with the split's own
tolerances (22 steps), 4.4e-7 at this fraction (32 steps) and 3.6e-8 at 1e-2 (47 steps; Radau in ``t``: 2.6e-8 in 75),
but at 1e-2 the plateau after the last jump (L = 5, α = 1e-10) did not finish in 5 minutes: the rounding of the stiff
blocks' velocity is above that tolerance."""


def growth(depth: int) -> float:
    """How much the sleeping blocks' top mode grows in a held chunk: ``SHRINK^{1/(L−2)}``."""
    return SHRINK ** (1.0 / (depth - 2))


def chunk_unit(left: float, previous: float | None) -> float:
    """The unit of a held chunk's clock: ``τ`` itself (at most what is ``left`` to the last output) for a plateau's
    first chunk; after a chunk that lasted ``previous`` and ended on a growth (:func:`growth`), ``previous / SHRINK``,
    the time the next growth takes on the blow-up's power law."""
    return min(left, 1.0 if previous is None else previous / SHRINK)


def escape_scale(log_alpha: float, depth: int) -> float:
    """``e``, the size ``α‖S‖`` of the sleeping blocks' top mode where it moves into ``A``: ``max(√α,
    JUMP_SPAN^{−1/(L−2)})``."""
    return max(math.exp(0.5 * log_alpha), JUMP_SPAN ** (-1.0 / (depth - 2)))


def sleeping_size(S, k: int) -> float:
    """The largest spectral norm of the layers' sleeping blocks (rows and columns from ``k`` on)."""
    return max(np.linalg.norm(np.asarray(s)[k:, k:], 2) for s in S)


def _phi(M):
    """``(e^M − I) M^{−1}`` by its series (``M`` small)."""
    out, term = np.eye(len(M)), np.eye(len(M))
    for n in range(2, 40):
        term = term @ M / n
        out = out + term
        if np.abs(term).max() <= 1e-17 * np.abs(out).max():
            break
    return out


def ungauge(A, S, frames, k: int, alpha: float):
    """``(S, frames)`` with the hidden frames turned by ``R_j = exp(α Z_j)`` to remove the rotations from ``S``'s
    mixed blocks (module docstring): ``Z_j``'s block ``X_j`` minimises ``‖S_j^{sk} − X_j A_j‖² + ‖S_{j+1}^{ks} −
    A_{j+1} X_jᵀ‖²``. With ``N_j = (R_j − I)/α``, ``S_l → R_lᵀ S_l R_{l−1} + N_lᵀ A_l + A_l N_{l−1} + α N_lᵀ A_l
    N_{l−1}``."""
    L = len(A)
    N = [np.zeros((len(f),) * 2) for f in frames]
    for j in range(1, L):
        C = np.concatenate([A[j - 1][:k, :k], A[j][:k, :k].T], axis=1)
        B = np.concatenate([S[j - 1][k:, :k], S[j][:k, k:].T], axis=1)
        X = np.linalg.solve(C @ C.T, C @ B.T).T
        Z = np.zeros_like(N[j])
        Z[k:, :k], Z[:k, k:] = X, -X.T
        N[j] = Z @ _phi(alpha * Z)
    turned = []
    for l in range(L):
        R_out, R_in = np.eye(len(N[l + 1])) + alpha * N[l + 1], np.eye(len(N[l])) + alpha * N[l]
        moved = N[l + 1].T @ A[l] + A[l] @ N[l] + alpha * N[l + 1].T @ A[l] @ N[l]  # (R_outᵀ A R_in − A)/α
        turned.append(R_out.T @ S[l] @ R_in + moved)
    return turned, [f @ (np.eye(len(n)) + alpha * n) for f, n in zip(frames, N)]


def _off_learned(shape, k: int) -> np.ndarray:
    mask = np.ones(shape, bool)
    mask[:k, :k] = False
    return mask


class Reduced(eqx.Module):
    """The held plateau's coordinates ``z = [c, S off the learned blocks]`` (module docstring) about ``S0``."""

    S0: tuple
    A: tuple
    k: int = eqx.field(static=True)

    def layers(self, z):
        """The layers of ``S`` at ``z``."""
        k = self.k
        c = z[: k * k].reshape(k, k)
        below = jnp.eye(k)
        for a in self.A[:-1]:
            below = a[:k, :k] @ below
        out, i = [], k * k
        for l, s0 in enumerate(self.S0):
            mask = _off_learned(s0.shape, k)
            n = int(mask.sum())
            s = s0.at[mask].set(z[i : i + n])
            i += n
            if l == len(self.S0) - 1:
                s = s.at[:k, :k].add(jnp.linalg.solve(below.T, c.T).T)  # c A_{<L}^{−1}
            out.append(s)
        return out

    def velocity(self, dS):
        """``dz`` of the layers' velocities ``dS``: ``dc = Σ_l A_{>l} dS_l^{kk} A_{<l}`` and the rest."""
        k, L = self.k, len(self.A)
        dc = jnp.zeros((k, k))
        for l in range(L):
            above, below = jnp.eye(k), jnp.eye(k)
            for a in self.A[l + 1 :]:
                above = above @ a[:k, :k]
            for a in self.A[:l]:
                below = a[:k, :k] @ below
            dc = dc + above @ dS[l][:k, :k] @ below
        return jnp.concatenate([dc.ravel()] + [d[_off_learned(d.shape, k)] for d in dS])


def coordinates(S, k: int) -> np.ndarray:
    """``z`` of ``S`` about itself (``c = 0``)."""
    return np.concatenate([np.zeros(k * k)] + [np.asarray(s)[_off_learned(s.shape, k)] for s in S])


class HeldArgs(eqx.Module):
    reduced: Reduced
    gradient: SleepingPart
    log_alpha: jax.Array
    level: jax.Array  # the chunk ends where α‖S_ss‖ reaches it
    unit: jax.Array  # the chunk's clock: s = (τ − τ_0) / unit


def held_velocity(s, z, args: HeldArgs):
    """``dz/ds``: the split's ``dS/dt`` with ``A`` at rest and ``G(W_A)`` kept to its sleeping block, over
    ``α^{L−2}`` (``dS/dτ``), in the reduced coordinates, times the chunk's unit of ``τ``."""
    return args.unit * _velocity_in_tau(args, z)


def _velocity_in_tau(args: HeldArgs, z):
    reduced = args.reduced
    S = reduced.layers(z)
    shapes = tuple(s.shape for s in S)
    y = jnp.concatenate([a.ravel() for a in reduced.A] + [s.ravel() for s in S])
    dS = fields(y, args.gradient, args.log_alpha, shapes)[y.size // 2 :] * jnp.exp(-(len(S) - 2) * args.log_alpha)
    sizes = np.cumsum([0] + [s.size for s in S])
    return reduced.velocity([dS[a:b].reshape(s.shape) for a, b, s in zip(sizes[:-1], sizes[1:], S)])


def _grown(t, y, args: HeldArgs, **kwargs):
    S = args.reduced.layers(y)
    k = args.reduced.k
    size = jnp.max(jnp.stack([jnp.linalg.norm(s[k:, k:], 2) for s in S]))
    return size * jnp.exp(args.log_alpha) - args.level


def _solve_of(args: HeldArgs, out_ts, rtol: float, atol: float) -> Solve:
    return stiff_solve(
        held_velocity,
        args,
        out_ts,
        rtol=rtol,
        atol=atol,
        step_fraction=STEP_TOLERANCE,
        event=dfx.Event(_grown),
        underflow_floor=0.0,
    )


@eqx.filter_jit
def _start(args, z0, out_ts, rtol, atol):
    return _solve_of(args, out_ts, rtol, atol).start(z0)


@eqx.filter_jit
def _advance(args, seg, budget, out_ts, rtol, atol):
    return _solve_of(args, out_ts, rtol, atol).advance(seg, budget)


def held_chunk(A, S, frames, k, gradient, log_alpha, out_ts, *, level, unit, rtol, atol, max_steps, progress):
    """One held chunk from ``S`` (``A``, ``frames``: the plateau's; ``gradient`` in the frames) to ``out_ts[-1]`` or
    to where ``α‖S_ss‖`` reaches ``level``, whichever comes first (``out_ts``: ``τ`` from the chunk's start, negative
    for earlier outputs). Returns ``(S at each output it reached or None, S at the end, the τ it lasted, whether the level was reached, diffrax's
    result, whether Ctrl-C stopped it, steps)``.

    Its clock is ``s = τ / unit`` (:func:`chunk_unit`): near a blow-up a chunk lasts far less than ``τ``'s ulp. Its
    first steps, on the fast blocks' relaxation to where the held plateau slaves them (``G(W_A)``'s residual dropped),
    may be below ``eps``: the underflow guard's floor is 0."""
    reduced = Reduced(tuple(jnp.asarray(s) for s in S), tuple(jnp.asarray(a) for a in A), k)
    args = HeldArgs(reduced, SleepingPart(gradient, k), jnp.asarray(log_alpha), jnp.asarray(level), jnp.asarray(unit))
    z0 = jnp.asarray(coordinates(S, k))
    out_ts = jnp.asarray(np.asarray(out_ts) / unit)
    seg = _start(args, z0, out_ts, rtol, atol)
    seg, result, stopped = solve_in_segments(
        lambda s, b: _advance(args, s, b, out_ts, rtol, atol),
        seg,
        out_ts[-1],
        max_steps=max_steps,
        progress=lambda s: progress(s * unit),
    )
    layers = lambda z: [np.array(s) for s in reduced.layers(jnp.asarray(z))]  # noqa: E731
    ys = np.asarray(seg.ys)
    reached = (np.asarray(out_ts) >= 0) & np.all(np.isfinite(ys), axis=1)  # earlier times belong to earlier chunks
    outputs = [layers(y) if ok else None for y, ok in zip(ys, reached)]
    grown = bool(result == dfx.RESULTS.event_occurred)
    return outputs, layers(seg.y), float(seg.t) * unit, grown, result, bool(stopped), int(np.asarray(seg.stats)[1])

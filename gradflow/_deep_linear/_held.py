"""The split's plateaus held (docs/deep-linear.md, *Held plateaus*): where ``α^{L−2} < HELD`` the plateaus of the split
``W_l = A_l + α S_l`` are solved in ``τ`` with ``A`` at rest, not in ``t`` with ``A`` moving.

A plateau lasts ``α^{−(L−2)}`` in ``t``: below ``α^{L−2} ≈ 1e-16`` the rounding of ``A``'s residual velocity, acting on
the sleeping blocks over that long, stalled the split in ``t``. Held, the plateau is the split's equation for ``S``
alone, ``dS/dτ = (F(A + αS) − F(A)) / α^{L−1}``, with ``G(W_A)`` kept to its sleeping block
(:class:`gradflow._deep_linear._split_fields.SleepingPart`), made solvable as follows:

- *Gauge.* A jump leaves the blocks of ``S`` between a learned and a sleeping direction of a hidden space with
  entries of order ``1e3`` that only rotate the hidden bases (``S_j ∋ X A_j``, ``S_{j+1} ∋ A_{j+1} Xᵀ``): they join
  the sleeping blocks to the learned ones, whose relaxation is ``α^{−(L−2)}`` fast in ``τ``. :func:`ungauge` turns the
  hidden frames by ``R_j = exp(α Z_j)`` (``Z_j`` antisymmetric, mixing the learned and sleeping directions of space
  ``j``) chosen by least squares to remove them; ``W`` is unchanged (to rounding), ``A`` is kept, and ``S`` takes
  ``(R_lᵀ A_l R_{l−1} − A_l)/α`` from a series in ``α``, without cancellation.
- *Reduced coordinates.* The blocks of ``W`` that meet a learned subspace relax at rates up to ``α^{−(L−2)}`` in
  ``τ``; in the entries of ``S`` they are spread over every layer, beside the learned layers' gauge (``S_l^{kk} →
  S_l^{kk} + Y_l A_l − A_l Y_{l−1}``, which leaves ``W`` unchanged to first order) and the hidden spaces' mixed blocks,
  whose couplings to them reach ``α^{−(L−1)}`` (``3e27`` in ``τ`` at L = 6, α = 1e-9) and cancel to rates of order
  one. Newton's matrix, formed in those entries, lost the slow directions to that cancellation, and the steps
  shrank as α fell (L = 6: 7,726 steps on the plateau after the first jump at α = 1e-8, 26,048 at 1e-9, unfinished
  at 1e-10). So those blocks are coordinates themselves: ``D = (W − W_A)/α``'s learned and mixed blocks, exactly,
  in place of the bottom layer's learned rows, the top layer's learned columns and the top layer's learned block,
  which :class:`Reduced` solves for from ``D``; the other learned blocks are frozen (the gauge: the true velocity
  is orthogonal to it, the loss depending on ``W`` only, and what freezing drops changes ``W`` at second order in
  α). The largest slow rate is then ``2e3`` (L = 6, α = 1e-9), and each chunk starts with ``D`` where its velocity
  vanishes (:func:`slaved`).
- *Alignment.* Toward an escape the sleeping blocks' top chain grows to ``e/α`` beside a rest of order one;
  :func:`align` turns the sleeping subspaces at every chunk so that the chain has entries of its own, and the
  escape (gradflow/_deep_linear/_split.py) moves exactly those into ``A``.
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
from ._model import product
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

STEP_TOLERANCE = 0.01
"""A held chunk's step tolerances are this fraction of the split's: Kvaerno5's embedded error estimate on the sleeping
blocks approaching a blow-up is optimistic. On the rotated task's first plateau (L = 5, Gaussian start, ``atol =
1e-8``) ``log σ`` at ``τ = 0.3`` (the blow-up at 0.34) was 2.9e-6 off a DOP853 solve at 1e-13 with the split's own
tolerances (22 steps), 4.4e-7 at a tenth (32 steps) and 3.6e-8 at this fraction (47 steps; Radau in ``t``: 2.6e-8 in
75); through every jump (L = 5, α = 1e-10, to ``τ = 12``) 4.4e-7 from the split at α = 1e-11 and ``atol = 1e-10`` in
the median at a tenth (2,060 steps), 5.4e-8 at this fraction (2,819). Until 2026-12-01 it was a tenth: at this
fraction the plateau after the last jump did not finish in 5 minutes, in the coordinates :class:`Reduced` replaced."""


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


def _basis_from(b: np.ndarray) -> np.ndarray:
    """An orthogonal matrix whose first column is the unit vector ``b`` (a Householder reflection)."""
    sign = -1.0 if b[0] < 0 else 1.0
    v = b.copy()
    v[0] += sign
    return -sign * (np.eye(len(b)) - 2.0 * np.outer(v, v) / (v @ v))


def align(S, frames, k: int):
    """``(S, frames)`` with the sleeping part of every space turned so that the sleeping blocks' top chain (``b_0``
    the top right singular vector of ``S_L^{ss} ⋯ S_1^{ss}``, ``b_l ∝ S_l^{ss} b_{l−1}``) is the first sleeping axis.
    Toward an escape that chain grows to ``e/α`` (``1e8`` at L = 6, α = 1e-10) beside a rest of order one; in entries
    shared with it the rest keeps only ``eps e/α`` (2e-8 there, at ``atol = 1e-8``), in entries of its own all of its
    digits, and it leaves them for the next plateau's sleeping blocks once the chain is moved into ``A``."""
    sleeping = [np.asarray(s)[k:, k:] for s in S]
    if min(x.size for x in sleeping) == 0:  # every mode learned
        return S, frames
    chain = sleeping[0]
    for x in sleeping[1:]:
        chain = x @ chain
    b = [np.linalg.svd(chain)[2][0]]
    for x in sleeping:
        image = x @ b[-1]
        norm = np.linalg.norm(image)
        if norm == 0.0:
            return S, frames
        b.append(image / norm)
    turns = []
    for f, direction in zip(frames, b):
        R = np.eye(len(f))
        R[k:, k:] = _basis_from(direction)
        turns.append(R)
    turned = [turns[l + 1].T @ np.asarray(s) @ turns[l] for l, s in enumerate(S)]
    return turned, [f @ R for f, R in zip(frames, turns)]


PRODUCT_ITERATIONS = 8
"""The most fixed-point sweeps of :meth:`Reduced.layers`: each shrinks the error of the entries it solves for by at
most about ``α‖S‖``, at most the escape scale ``e ≤ 1e-2`` (:func:`escape_scale`), so eight leave it below ``eps``
(measured: one sweep takes an error of order one to 1e-11 at α = 1e-10, two to ``eps``;
``tests/deep_linear/test_held.py``)."""


def product_sweeps(log_alpha: float, depth: int) -> int:
    """The sweeps of :meth:`Reduced.layers` at this scale: one more than take ``e^n`` below ``eps`` (``e`` the escape
    scale), at most :data:`PRODUCT_ITERATIONS`: where the plateaus are held, 4 at L = 3, 5 at L = 4, 7 at L = 5 and 8
    at L = 6."""
    e = escape_scale(log_alpha, depth)
    return min(PRODUCT_ITERATIONS, math.ceil(math.log(np.finfo(float).eps) / math.log(e)) + 1)


def _carried(shape, k: int, layer: int, depth: int) -> np.ndarray:
    """The entries of ``S_l`` that :class:`Reduced` carries as they are: off the learned ``k×k`` block, and off the
    bottom layer's learned rows and the top layer's learned columns (solved for from ``D``)."""
    mask = np.ones(shape, bool)
    mask[:k, :k] = False
    if layer == 0:
        mask[:k, k:] = False
    if layer == depth - 1:
        mask[k:, :k] = False
    return mask


def _product(layers, size: int):
    """``W_L ⋯ W_1`` of ``layers`` (:func:`gradflow._deep_linear._model.product`), the identity of order ``size`` if
    there are none."""
    return product(layers) if layers else jnp.eye(size)


class Reduced(eqx.Module):
    """The held plateau's coordinates ``z = [D^{kk}, D^{ks}, D^{sk}, the other entries of S]`` about ``S0`` (module
    docstring): ``D = (W − W_A)/α``'s blocks that meet a learned subspace, exactly (every order in α), in place of the
    bottom layer's learned rows, the top layer's learned columns and the learned blocks of ``S``, which are frozen at
    ``S0`` but for the top layer's."""

    S0: tuple
    A: tuple
    log_alpha: jax.Array
    k: int = eqx.field(static=True)
    sweeps: int = eqx.field(static=True, default=PRODUCT_ITERATIONS)

    @property
    def fast_size(self) -> int:
        """The number of ``D``'s coordinates: ``k² + k(n − k) + (m − k)k``."""
        k, m, n = self.k, self.S0[-1].shape[0], self.S0[0].shape[1]
        return k * k + k * (n - k) + (m - k) * k

    def layers(self, z):
        """The layers of ``S`` at ``z``: the carried entries as they are, and ``S_1^{ks}``, ``S_L^{sk}``, ``S_L^{kk}``
        from ``D`` (each linear in it given the others, so solved for by ``sweeps`` fixed-point sweeps):
        ``D^{ks} = W_{>1}^{kk} S_1^{ks} + W_{>1}^{ks} S_1^{ss}``, ``D^{sk} = S_L^{sk} W_{<L}^{kk} + S_L^{ss} W_{<L}^{sk}``
        and ``D^{kk} = S_L^{kk} W_{<L}^{kk} + A_L^{kk} E + S_L^{ks} W_{<L}^{sk}``, with ``E = (W_{<L} − A_{<L})^{kk}/α``
        built by its recursion, so that nothing cancels."""
        k, L = self.k, len(self.A)
        alpha = jnp.exp(self.log_alpha)
        m, n = self.S0[-1].shape[0], self.S0[0].shape[1]
        sizes = np.cumsum([0, k * k, k * (n - k), (m - k) * k])
        D_kk, D_ks, D_sk = (
            z[a:b].reshape(shape) for a, b, shape in zip(sizes[:-1], sizes[1:], [(k, k), (k, n - k), (m - k, k)])
        )
        S, i = [], sizes[-1]
        for l, s0 in enumerate(self.S0):
            mask = _carried(s0.shape, k, l, L)
            S.append(s0.at[mask].set(z[i : i + int(mask.sum())]))
            i += int(mask.sum())
        for _ in range(self.sweeps):
            above = _product([a + alpha * s for a, s in zip(self.A[1:], S[1:])], S[0].shape[0])  # W_{>1}
            S[0] = S[0].at[:k, k:].set(jnp.linalg.solve(above[:k, :k], D_ks - above[:k, k:] @ S[0][k:, k:]))
            below, E = jnp.eye(n), jnp.zeros((n, n))  # W_{<L} and (W_{<L} − A_{<L})/α
            for a, s in zip(self.A[:-1], S[:-1]):
                below, E = (a + alpha * s) @ below, s @ below + a @ E
            top, lower = S[-1], below[:k, :k].T
            sk = jnp.linalg.solve(lower, (D_sk - top[k:, k:] @ below[k:, :k]).T).T
            kk = jnp.linalg.solve(lower, (D_kk - self.A[-1][:k, :k] @ E[:k, :k] - top[:k, k:] @ below[k:, :k]).T).T
            S[-1] = top.at[k:, :k].set(sk).at[:k, :k].set(kk)
        return S

    def velocity(self, S, dS):
        """``dz`` of the layers' velocities ``dS`` at ``S``: ``dD = Σ_l W_{>l} dS_l W_{<l}``'s blocks that meet a
        learned subspace, and the carried entries of ``dS``."""
        k, L = self.k, len(self.A)
        alpha = jnp.exp(self.log_alpha)
        W = [a + alpha * s for a, s in zip(self.A, S)]
        m, n = W[-1].shape[0], W[0].shape[1]
        dD = sum(_product(W[l + 1 :], m) @ dS[l] @ _product(W[:l], n) for l in range(L))
        carried = [d[_carried(d.shape, k, l, L)] for l, d in enumerate(dS)]
        return jnp.concatenate([dD[:k, :k].ravel(), dD[:k, k:].ravel(), dD[k:, :k].ravel()] + carried)


def coordinates(A, S, k: int, log_alpha: float) -> np.ndarray:
    """``z`` of ``S`` (:class:`Reduced`), ``D`` built by its recursion ``D_{<l+1} = S_l W_{<l} + A_l D_{<l}``."""
    alpha, L = math.exp(log_alpha), len(S)
    below, D = np.eye(S[0].shape[1]), np.zeros((S[0].shape[1],) * 2)
    for a, s in zip(A, S):
        below, D = (a + alpha * s) @ below, s @ below + a @ D
    carried = [np.asarray(s)[_carried(s.shape, k, l, L)] for l, s in enumerate(S)]
    return np.concatenate([D[:k, :k].ravel(), D[:k, k:].ravel(), D[k:, :k].ravel()] + carried)


class HeldArgs(eqx.Module):
    reduced: Reduced
    gradient: SleepingPart
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
    log_alpha = reduced.log_alpha
    dS = fields(y, args.gradient, log_alpha, shapes)[y.size // 2 :] * jnp.exp(-(len(S) - 2) * log_alpha)
    sizes = np.cumsum([0] + [s.size for s in S])
    return reduced.velocity(S, [dS[a:b].reshape(s.shape) for a, b, s in zip(sizes[:-1], sizes[1:], S)])


def _grown(t, y, args: HeldArgs, **kwargs):
    S = args.reduced.layers(y)
    k = args.reduced.k
    size = jnp.max(jnp.stack([jnp.linalg.norm(s[k:, k:], 2) for s in S]))
    return size * jnp.exp(args.reduced.log_alpha) - args.level


def _solve_of(args: HeldArgs, out_ts, rtol: float, atol: float, free: bool) -> Solve:
    return stiff_solve(
        held_velocity,
        args,
        out_ts,
        rtol=rtol,
        atol=atol,
        step_fraction=STEP_TOLERANCE,
        event=dfx.Event(_grown),
        underflow_floor=0.0,
        matrix_free=free,
    )


RELAX_ITERATIONS = 10
"""At most this many Newton iterations of :func:`slaved` (on nearly linear equations it stops after two or three)."""

RELAX_RANK = 1e-13
"""Directions of ``D`` whose rate is below this fraction of the fastest are not slaved by :func:`slaved`."""


@eqx.filter_jit
def _fast_part(args: HeldArgs, z):
    """The velocity of ``D`` (the first coordinates) and its Jacobian in ``D``."""
    n = args.reduced.fast_size

    def velocity(D):
        return _velocity_in_tau(args, jnp.concatenate([D, z[n:]]))[:n]

    return velocity(z[:n]), jax.jacfwd(velocity)(z[:n])


def slaved(args: HeldArgs, z, *, rtol: float, atol: float) -> np.ndarray:
    """``z`` with ``D`` moved to where its velocity vanishes (Newton's method in ``D`` alone, least squares below
    :data:`RELAX_RANK`): the blocks of ``W`` that meet a learned subspace relax at rates up to ``α^{−(L−2)}`` in ``τ``,
    and a chunk starts where they have. Dropping that transient moves the rest of ``z`` by ``O(α^{L−2})``; integrating
    it, Kvaerno5's first stage predicted from velocities of ``1e22`` (L = 6, α = 1e-8) and Newton diverged at any step."""
    z = np.array(z)
    n = args.reduced.fast_size
    for _ in range(RELAX_ITERATIONS):
        velocity, jacobian = (np.asarray(x) for x in _fast_part(args, jnp.asarray(z)))
        step = np.linalg.lstsq(jacobian, velocity, rcond=RELAX_RANK)[0]
        z[:n] -= step
        if np.all(np.abs(step) <= 1e-3 * (atol + rtol * np.abs(z[:n]))):
            break
    return z


@eqx.filter_jit
def _start(args, z0, out_ts, rtol, atol, free):
    return _solve_of(args, out_ts, rtol, atol, free).start(z0)


@eqx.filter_jit
def _advance(args, seg, budget, out_ts, rtol, atol, free):
    return _solve_of(args, out_ts, rtol, atol, free).advance(seg, budget)


def held_chunk(
    A, S, frames, k, gradient, log_alpha, out_ts, *, level, unit, rtol, atol, max_steps, progress, matrix_free=False
):
    """One held chunk from ``S`` (``A``, ``frames``: the plateau's; ``gradient`` in the frames) to ``out_ts[-1]`` or
    to where ``α‖S_ss‖`` reaches ``level``, whichever comes first (``out_ts``: ``τ`` from the chunk's start, negative
    for earlier outputs). Returns ``(S at each output it reached or None, S at the end, the τ it lasted, whether the
    level was reached, diffrax's result, whether Ctrl-C stopped it, steps)``; Newton's equations by GMRES on
    Jacobian-vector products where ``matrix_free`` (``gradflow._solver.StageNewton``).

    Its clock is ``s = τ / unit`` (:func:`chunk_unit`): near a blow-up a chunk lasts far less than ``τ``'s ulp. It
    starts with the fast blocks where the held plateau slaves them (:func:`slaved`; ``G(W_A)``'s residual dropped).
    Their velocity keeps the rounding of rates up to ``α^{−(L−2)}`` (``2e4`` at L = 6, α = 1e-10, where ``D`` is
    held to ``1e-12``), from which diffrax's first step may be below ``eps``: the underflow guard's floor is 0 (the
    controller then grows the step tenfold a step)."""
    sweeps = product_sweeps(log_alpha, len(A))
    reduced = Reduced(tuple(map(jnp.asarray, S)), tuple(map(jnp.asarray, A)), jnp.asarray(log_alpha), k, sweeps)
    args = HeldArgs(reduced, SleepingPart(gradient, k), jnp.asarray(level), jnp.asarray(unit))
    z0 = jnp.asarray(slaved(args, coordinates(A, S, k, log_alpha), rtol=rtol, atol=atol))
    out_ts = jnp.asarray(np.asarray(out_ts) / unit)
    seg = _start(args, z0, out_ts, rtol, atol, matrix_free)
    seg, result, stopped = solve_in_segments(
        lambda s, b: _advance(args, s, b, out_ts, rtol, atol, matrix_free),
        seg,
        out_ts[-1],
        max_steps=max_steps,
        progress=lambda s: progress(s * unit),
    )
    ys = np.asarray(seg.ys)
    reached = (np.asarray(out_ts) >= 0) & np.all(np.isfinite(ys), axis=1)  # earlier times belong to earlier chunks
    rows = np.concatenate([ys[reached], np.asarray(seg.y)[None]])
    stacked = [np.asarray(s) for s in jax.vmap(reduced.layers)(jnp.asarray(rows))]  # the layers at every row at once
    layers = [[s[i] for s in stacked] for i in range(len(rows))]
    kept = iter(layers[:-1])
    outputs = [next(kept) if ok else None for ok in reached]
    grown = bool(result == dfx.RESULTS.event_occurred)
    return outputs, layers[-1], float(seg.t) * unit, grown, result, bool(stopped), int(np.asarray(seg.stats)[1])

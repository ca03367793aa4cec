"""The split integrator of a factorised flow: implicit steps on the awake columns, exact exponential (Magnus) steps
on the sleeping ones (docs/math.md, *Full weights: the exact flow*, *The split integrator*).

After a jump the awake columns relax with rates up to ~100 while the sleeping columns, almost the whole state, follow
the linear flow ``Z_s' = A(t) Z_s``: explicit steps sit at their stability limit for the whole relaxation. A *split
step* of length ``h``

- takes the leading ``p`` columns of every factor (``width``; those within ``_block._WAKE`` of waking are *active*, the
  others in the block held) by Kværnø's L-stable ESDIRK method of order 5 (``_block.esdirk``; its error by the embedded
  order-4 formula), Newton's iterations with the dense Jacobian of that block alone (the matrix ``(I − h'γJ)⁻¹``
  kept for the steps within ``_NEWTON_BAND`` of ``h'``), ``G`` computed from its ``W`` plus the sleeping columns'
  part of ``W`` held (below ``e^{−Γ}``);
- moves every column by the commutator-free fourth-order Magnus method (Blanes & Moan 2006),
  ``Z ← exp(h(a A₁ + b A₂)) exp(h(b A₁ + a A₂)) Z``, ``A_i = A(t + c_i h)`` at the Gauss points from the
  block step's cubic Hermite interpolant with its stiff slopes filtered (``_block.dense_output``), each factor
  ``exp(h Ã)`` from the SVD of its ``G̃`` (``_leap.exp_apply``) in pieces with ``h σ̃ ≤ 6`` (discrete QR steps, log
  scales accumulated), the awake columns last (their nonlinear flow is the block's: no column is orthonormalised
  against their linear one), its error by step doubling;
- keeps the active columns of the block step and their rows of ``R̃`` (moved or held there), the rest of the Magnus
  step, restores ``QᵀJQ = K`` on the active columns in place (``_restore_active``), takes the held columns' part
  along them off by a discrete QR step, lets the held ones absorb the rest of the restoring move and orthonormalises
  them against the active ones (``_leap.restore_held``), and sorts the columns.

The integrator is the leaps' (``_leap``) with split steps where explicit steps sit at their stability limit: from
the ``_ENTER``-th accepted Tsit5 step in a row with ``h λ ≥ STIFF`` (``_explicit._stiffness``) or polishing, while
the split step pays for its Jacobian (it is longer than the stable explicit step ``STIFF / λ_max`` times the ratio of
their costs) and the columns near waking fit in the block, nearly at rest too (the L-stable block damps the
relaxation there as polishing does, so that a leap follows); explicit steps again after a leap (a jump follows). A
stay in split mode that stops paying ends with a back-off of ``_BACKOFF`` explicit steps at the limit, which polish
as the leaps' do; where the awake columns nearly rest, split steps take the slow tail of the relaxation (which
polishing follows at half steps) once its amplitude has fallen as far as the last split step's error asks
(``_resume_below``).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp

from ._block import Block, dense_output, esdirk, fits, iteration_matrix, jacobian, largest_eigenvalue, near_awake
from ._explicit import STIFF, LeapState, LeapTolerances, unsorted
from ._leap import advance as leap_advance
from ._leap import (
    awake,
    exp_apply,
    exp_piece,
    leap_from,
    leap_or_polish,
    nearly_resting,
    next_output,
    polished_step,
    restore_held,
)
from ._qr import SWAP_MARGIN, Args, Factor, imbalance, sort_pass, vector_field

_ENTER = 3  # split steps from this many accepted explicit steps in a row at their stability limit ...
_BACKOFF = 200  # ... and this many more after leaving split mode (its steps no longer paid)
_SAFETY, _GROW, _SHRINK = 0.9, 3.0, 0.2
_REUSE = 32  # accepted split steps on one Jacobian at most (``_block.jacobian``; Newton's iterations that fail renew it
# first; on the d = 50 head at log α = −1e4 the whole flow took 322.5 s with 8, 289.9 s with 16, 278.1 s with 32,
# 288.2 s with 64)
_PIECE = 6.0  # the longest exponential piece, h σ_1 (rounding ε e^{h σ_1} ≈ 1e-13, far below the tolerance that
# the step doubling measures; the leaps' 18 puts it at 1e-8)
_MAX_PIECES = 1000  # more pieces than this in one exponential: the step is rejected (G far above the flow's scale)
_GAUSS = (0.5 - math.sqrt(3.0) / 6.0, 0.5 + math.sqrt(3.0) / 6.0)
_MAGNUS = (0.25 - math.sqrt(3.0) / 6.0, 0.25 + math.sqrt(3.0) / 6.0)  # Blanes & Moan's a, b
_NODES = tuple(0.5 * (i + g) for i in (0, 1) for g in _GAUSS) + _GAUSS  # the Gauss points of both halves, and of h
_RESUME, _RESUME_LENGTH = 0.5, 1.2  # near rest, split steps enter again once a first step of _RESUME_LENGTH times the
# paying length is predicted an error norm of _RESUME (``_resume_below``)
_NEWTON_SHRINK = 0.5  # Newton's iterations failed (``_block.esdirk``): where the Jacobian was fresh, the next try
# is this much shorter (as RADAU5; the error's 0.2 made the d = 50 head's split steps fail at h, retry at 0.2 h, grow
# back past h and fail again, each failure renewing the Jacobian); where it was reused, the same length on a fresh one
_NEWTON_BAND = 1.25  # Newton's matrix (I − h'γJ)⁻¹ serves the steps of length h'/1.25 to 1.25 h' (on the stiff modes
# its iterations then contract by 0.25 at worst): on the d = 50 head 91 % of the split steps are within 25 % of the
# last one's length, and forming the matrix (22 ms, 604 entries) cost more than the rest of a step
_STEP_COST = 3.0  # a split step's cost in explicit steps, its Jacobian apart (Newton's iterations, the Magnus steps'
# twelve exponentials), measured on a reused Jacobian: 4.2 on the d = 6 head, 6.5 on d = 20 heads, 3.0–4.1 on the
# d = 50 head (46 ms against Tsit5's 15 ms; 30 against 7.3 on one BLAS thread; 24 with Newton's matrix reused, as
# since 2026-11-30 most steps do, where each step had factorised its own). Until 2026-11-30 it
# was 10, which kept split steps out of tails where they were 5–12 times the explicit steps' length
# (docs/benchmarks.md, *Full weights: how the cost grows with log(1/α)*)


def _room(y, f, tol: LeapTolerances) -> jax.Array:
    """How long, at the log scales' present rates, no held column comes within a unit of ``−Γ`` and no held column
    outgrows the one before it by the sorting gauge's margin (the rounding of a faster direction in the earlier
    column would grow with it)."""
    out = jnp.array(jnp.inf)
    for yf, vf in zip(y, f):
        held = ~near_awake(yf, tol)
        top = jnp.argmax(yf.rho)
        grow = jnp.where(held, vf.rho + vf.rho[top], 0.0)
        room = -tol.gap - 1.0 - (yf.rho + yf.rho[top])
        out = jnp.minimum(out, jnp.min(jnp.where(grow > 0, room / jnp.where(grow > 0, grow, 1.0), jnp.inf)))
        gain = jnp.where(held[1:], vf.rho[1:] - vf.rho[:-1], 0.0)
        gap = jnp.maximum(yf.rho[:-1] - yf.rho[1:], 0.0) + SWAP_MARGIN  # beyond any present excess (as _leap)
        out = jnp.minimum(
            out, jnp.min(jnp.where(gain > 0, gap / jnp.where(gain > 0, gain, 1.0), jnp.inf), initial=jnp.inf)
        )
    return out


def _exp(f: Factor, G, h, m: int) -> Factor:
    """``Z → exp(h Ã) Z`` for ``Ã = [[0, G], [Gᵀ, 0]]`` in pieces of ``h σ_1(G) ≤ _PIECE``, each a discrete QR step
    (``_leap.exp_piece``)."""
    svd = jnp.linalg.svd(G, full_matrices=False)
    n = jnp.maximum(jnp.ceil(h * svd[1][0] / _PIECE), 1.0)
    # a rejected block step's dense output can put G, hence n, anywhere up to overflow: such a step is rejected
    # (non-finite log scales) instead of taking billions of pieces, which hung the solve in one segment
    many = ~(n <= _MAX_PIECES)
    n = jnp.where(many, 1.0, n)
    g = jax.lax.fori_loop(0, n.astype(int), lambda _, g: exp_piece(g, exp_apply(g.Q, svd, h / n, m)), f)
    return eqx.tree_at(lambda g: g.rho, g, jnp.where(many, jnp.nan, g.rho))


def _permuted(f: Factor, order) -> Factor:
    """The columns of ``f`` in the ``order`` given, ``R̃`` kept to its upper triangle (a discrete QR step needs it
    triangular; the rows moved past later columns lose their entries there)."""
    return Factor(Q=f.Q[:, order], rho=f.rho[order], R=jnp.triu(f.R[order][:, order]), C=f.C[order][:, order])


def _restore_active(f: Factor, active, log_alpha, m: int) -> Factor:
    """``QᵀJQ = K`` restored on the ``active`` columns (to first order, as ``_qr.restore``) and those columns made
    orthonormal (``Q_a ← Q_a (I − ½ (Q_aᵀQ_a − I))``), the other columns left as they are: a change of the active
    columns of the block step would excite their stiff relaxation again."""
    both = active[:, None] & active[None, :]
    dK = jnp.where(both, imbalance(f, log_alpha, m), 0.0)
    eye = jnp.eye(f.rho.shape[0])
    Q = jnp.concatenate([f.Q[:m] @ (eye + 0.5 * dK), f.Q[m:] @ (eye - 0.5 * dK)])
    Q = Q - 0.5 * Q @ jnp.where(both, Q.T @ Q - eye, 0.0)
    return eqx.tree_at(lambda g: g.Q, f, Q)


def _error_sq(a, b, tol: LeapTolerances, where) -> jax.Array:
    """``Σ ((a − b) / (atol + rtol max(|a|, |b|)))²`` over the entries ``where``."""
    e = (a - b) / (tol.atol + tol.rtol * jnp.maximum(jnp.abs(a), jnp.abs(b)))
    return jnp.sum(jnp.where(where, e, 0.0) ** 2)


def split_step(s: LeapState, t_end, args: Args, tol: LeapTolerances, width, speed) -> LeapState:
    """One split step (the module docstring) of ``h_split`` (on entering, twice the length from which it pays, or
    ``_RESUME_LENGTH`` times it where ``_resume_below`` let it enter),
    clipped to ``t_end`` and to ``_room``; error control as for the explicit steps, on the RMS of each part over
    the entries it moves: the block's embedded error and the Magnus steps' step doubling, both O(h⁵). ``speed``: the
    awake columns' (``_leap.leap_or_polish``)."""
    model, la = args.model, args.log_alpha
    shapes = model.shapes

    block = Block.of(s.y, model, la, tol, width)
    x0, active, moving = block.x0, block.active, block.moving

    # the block's Jacobian, for Newton's iterations: afresh on entering, after _REUSE accepted steps and where Newton's
    # iterations did not converge
    fresh = (s.jac_age < 0) | (s.jac_age >= _REUSE) | (s.stiff == _ENTER)
    n_moving = jnp.sum(moving)
    F0 = block.field(x0)

    def renew():
        J = jacobian(block.field, x0, moving)
        return J, largest_eigenvalue(J)

    J, lam = jax.lax.cond(fresh, renew, lambda: (s.jac, s.jac_lambda))  # λ_max with it: 2.4 ms at d = 50
    # a split step pays where it is longer than the stable explicit step (``STIFF / λ_max`` of the block) times the
    # ratio of their costs: _STEP_COST explicit steps, plus the Jacobian's Jacobian-vector products (six to an explicit
    # step's evaluations of G) shared by the steps that reuse it; on entering it tries twice that (1.2 times where
    # ``_resume_below`` let it enter near rest)
    stable = STIFF / lam
    worth = (n_moving / (6.0 * _REUSE) + _STEP_COST) * stable
    entering = jnp.where(jnp.isfinite(s.resume_below), _RESUME_LENGTH, 2.0) * worth
    target = jnp.where(s.stiff == _ENTER, entering, s.h_split)
    room = _room(s.y, s.f, tol)
    to_end = t_end - s.t <= jnp.minimum(target, room)
    h = jnp.where(to_end, t_end - s.t, jnp.minimum(target, room))
    t1 = jnp.where(to_end, t_end, s.t + h)
    # Newton's matrix, reused while the step's length stays within _NEWTON_BAND of the one it was formed at
    refresh = fresh | ~(jnp.abs(jnp.log(h / s.newton_h)) <= math.log(_NEWTON_BAND))  # NaN: to form
    newton_matrix = jax.lax.cond(refresh, lambda: iteration_matrix(J, h), lambda: s.newton_matrix)
    newton_h = jnp.where(refresh, h, s.newton_h)
    x1, F1, err_block, newton_ok, block_evaluations = esdirk(block.field, x0, F0, newton_matrix, h, tol, moving)

    dense = dense_output(x0, x1, F0, F1, h, J, newton_matrix, newton_h)

    def magnus(f, G_of, start, length, m):  # Blanes & Moan's CF4 over [t + start h, t + (start + length) h]
        g1, g2 = G_of(start + _GAUSS[0] * length), G_of(start + _GAUSS[1] * length)
        return _exp(_exp(f, b * g1 + a * g2, length * h, m), a * g1 + b * g2, length * h, m)

    a, b = _MAGNUS
    Gs = dict(zip(_NODES, (block.G_at(dense(c)) for c in _NODES)))

    # Magnus on every factor, by step doubling, the active columns then taken from the block step.
    y1, err_magnus = [], jnp.array(0.0)
    for j, (f, blk, act, p, (m, _)) in enumerate(zip(s.y, block.factors(x1), active, width, shapes)):
        G_of = lambda c, j=j: Gs[c][j]
        held = ~jnp.zeros(f.rho.shape[0], bool).at[:p].set(act)
        # the awake columns, whose nonlinear flow only the block follows, go last through the Magnus steps, and the
        # others are orthonormalised against the block's: moved by exp(hÃ) ahead of them, a column in G's null space
        # took up ε e^{h σ_1} of the top direction, which the QR passed to the sleeping columns (on a d = 20 head
        # near rest, an error norm of 1,700 at h = 34 and log scales off by 24 at h = 60); held in place instead,
        # as in the leaps, a moving column left them an O(h²) error (25 times the step's on the d = 50 head)
        order = jnp.argsort(~held & awake(f, tol), stable=True)
        back, fo = jnp.argsort(order), _permuted(f, order)
        whole = _permuted(magnus(fo, G_of, 0.0, 1.0, m), back)
        halves = _permuted(magnus(magnus(fo, G_of, 0.0, 0.5, m), G_of, 0.5, 0.5, m), back)
        for x, y, where in ((halves.Q, whole.Q, held[None, :]), (halves.rho, whole.rho, held),
                            (halves.R, whole.R, held[:, None] & held[None, :])):  # fmt: skip
            err_magnus += _error_sq(x, x + (y - x) / 15.0, tol, where)
        Q = halves.Q.at[:, :p].set(jnp.where(act[None, :], blk.Q, halves.Q[:, :p]))
        rho = halves.rho.at[:p].set(jnp.where(act, blk.rho, halves.rho[:p]))
        R = halves.R.at[:p].set(jnp.where(act[:, None], blk.R, halves.R[:p]))  # the active rows, moved or held
        a_full = ~held
        g = _restore_active(Factor(Q=Q, rho=rho, R=R, C=f.C), a_full, la, m)
        # the sleeping columns' part along the block's columns is theirs: a discrete QR step takes it off (their log
        # scales and rows of R̃ with it), the active columns' own left as the block put them
        d = exp_piece(g, g.Q)
        g = Factor(Q=d.Q, rho=jnp.where(a_full, g.rho, d.rho), R=jnp.where(a_full[:, None], g.R, d.R), C=g.C)
        y1.append(restore_held(g, a_full, la, m))

    # each part's RMS over the entries it moves: over the whole state, the block's few hundred would be diluted by the
    # tens of thousands the Magnus steps move, and its error, which the held columns then feel, let grow tenfold
    size = sum(leaf.size for leaf in jax.tree_util.tree_leaves(s.y))
    norms = jnp.sqrt(jnp.stack([err_block / jnp.maximum(n_moving, 1), err_magnus / (size - n_moving)]))
    norms = jnp.where(jnp.isfinite(norms), norms, jnp.inf)
    norms = jnp.where(newton_ok, norms, jnp.inf)
    accept = jnp.sqrt(jnp.sum(norms**2)) <= 1.0
    # the ESDIRK's embedded error is O(h⁵), and so is the step doubling's of CF4
    factor = _SAFETY * jnp.maximum(jnp.max(norms), 1e-10) ** (-1 / 5)
    # Newton's iterations that failed on a reused Jacobian try again at the same length on a fresh one (on the d = 50
    # head, 123 of 170 tries again on the same Jacobian with Newton's matrix formed at their length failed too); on a
    # fresh one, at half the length, keeping it (the state has not moved)
    factor = jnp.clip(factor, _SHRINK, jnp.where(accept, _GROW, 1.0))
    factor = jnp.where(newton_ok, factor, jnp.where(fresh, _NEWTON_SHRINK, 1.0))
    clipped = h < target
    h_next = jnp.where(accept & clipped, jnp.maximum(h * factor, target), h * factor)

    def take():
        y = tuple(jax.lax.cond(unsorted(f), lambda f: sort_pass(f)[0], lambda f: f, f) for f in y1)
        return y, vector_field(t1, y, args), t1

    y, f, t = jax.lax.cond(accept, take, lambda: (s.y, s.f, s.t))
    leave = ~(h_next >= worth)  # back to explicit steps (also where λ_max or the step is not finite)
    stuck = h_next <= 1e-12 * jnp.maximum(1.0, jnp.abs(s.t))
    # a step rejected for its error keeps the Jacobian (the Newton iterations only need it to converge)
    jac_age = jnp.where(fresh, 0, s.jac_age) + accept.astype(int)
    jac_age = jnp.where(newton_ok, jac_age, jnp.where(fresh, 0, -1))
    evaluations = jnp.where(fresh, n_moving, 0) + block_evaluations + len(_NODES) + accept.astype(int)
    # on leaving, back to explicit steps, and _BACKOFF more steps at the limit before trying again (re-entering three
    # steps later after a few rejected tries took 519 split steps, 639 rejected, for 50 units of t on the d = 50 head
    # at τ = 1.4); their count of steps at the limit starts afresh, so that they polish as the leaps' do (held below 0
    # through the back-off, as until 2026-11-30, it kept them from polishing: the paper-size flow at log α = −1000
    # took 3,737 steps, the leaps 1,465, its explicit steps holding the stiff relaxation at the tolerance for thousands
    # of steps)
    return dataclasses.replace(
        s,
        y=y,
        f=f,
        t=t,
        h_split=h_next,
        steps=s.steps + 1,
        splits=s.splits + 1,
        rejected=s.rejected + (~accept).astype(int),
        evaluations=s.evaluations + evaluations,
        stiff=jnp.where(leave, 0, _ENTER + 1),
        backoff=jnp.where(leave, _BACKOFF, s.backoff),
        resume_below=jnp.where(leave, _resume_below(speed, tol, jnp.max(norms), h, worth), s.resume_below),
        result=dfx.RESULTS.where(stuck, dfx.RESULTS.dt_min_reached, s.result),
        jac=J,
        jac_lambda=lam,
        jac_age=jac_age,
        newton_matrix=newton_matrix,
        newton_h=newton_h,
    )


def _resume_below(speed, tol: LeapTolerances, error, h, worth) -> jax.Array:
    """Where split mode is left with the awake columns nearly resting, the speed below which a split step of
    ``_RESUME_LENGTH`` times the paying length ``worth`` would pass (its error norm at most ``_RESUME``; split mode
    enters again with that step): near rest the error is that of following the relaxation's slow tail, and falls
    with its amplitude, ∝ ``speed``, and grows like ``h⁵``. Elsewhere (``inf``) the back-off alone decides. (Until
    2026-11-30 split steps entered again three explicit steps after every failed try: on the d = 6 head at
    log α = −1e4, 18 tries in a row failed through one tail, each with a fresh Jacobian and an error 0.84 times the
    last, as the slowest mode decayed.)"""
    ratio = _RESUME * (h / (_RESUME_LENGTH * worth)) ** 5 / error
    ok = nearly_resting(speed, tol) & jnp.isfinite(ratio) & (ratio > 0)
    return jnp.where(ok, speed * jnp.minimum(ratio, 1.0), jnp.inf)


def choose(s: LeapState, t_end, tol: LeapTolerances, width, *, dense: bool):
    """What to take next (0: a leap, 1: a split step, 2: an explicit step), whether an explicit step polishes, and
    the awake columns' speed. Split steps enter from the ``_ENTER``-th step in a row at the stability limit where
    the columns near waking fit in the block: near rest once the speed is below ``resume_below``, elsewhere once
    the back-off is over."""
    leap, polish, speed = leap_or_polish(s, t_end, tol, dense=dense)
    ready = jnp.where(nearly_resting(speed, tol), speed <= s.resume_below, s.backoff == 0)
    split = (s.stiff >= _ENTER) & ready & fits(s.y, tol, width)
    return jnp.where(leap, 0, jnp.where(split, 1, 2)), polish, speed


def _step(s: LeapState, out_ts, t_stop, args: Args, tol: LeapTolerances, *, width, dense: bool) -> LeapState:
    """A leap where the awake columns rest (as ``_leap``), else a split step where explicit steps have been at their
    stability limit and the columns near waking fit in the block (to the next output time at most: it has no dense
    output), else an explicit step; the leap and the explicit step to ``t_stop`` at most."""
    t_end = next_output(s, out_ts, t_stop)
    which, polish, speed = choose(s, t_end, tol, width, dense=dense)
    return jax.lax.switch(
        which,
        [
            lambda: leap_from(s, out_ts, t_stop, args, tol),
            lambda: split_step(s, t_end, args, tol, width, speed),
            lambda: _explicit(s, t_stop, args, tol, polish),
        ],
    )


def _explicit(s: LeapState, t_stop, args: Args, tol: LeapTolerances, polish) -> LeapState:
    """An explicit step whose count of steps at the stability limit stops at ``_ENTER``, where a split step enters
    (its Jacobian afresh, twice the length from which it pays): ``_ENTER + 1`` marks split mode, which polishing
    steps past ``_ENTER`` (``choose``) must not reach."""
    e = polished_step(s, t_stop, args, tol, polish)
    return eqx.tree_at(lambda s: s.stiff, e, jnp.minimum(e.stiff, _ENTER))


def advance(state: LeapState, budget, args: Args, out_ts, tol: LeapTolerances, width, *, dense: bool = False):
    """``_leap.advance`` with split steps (the module docstring); ``width``: the block width of every factor."""
    return leap_advance(state, budget, args, out_ts, tol, step=functools.partial(_step, width=width), dense=dense)

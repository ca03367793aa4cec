"""Plateau leaps: the exact flow of a factorised model at any ``log α`` at a cost that does not grow with
``log(1/α)`` (docs/math.md, *Full weights: the exact flow*, *Plateau leaps*).

Explicit steps (``_explicit``) follow the flow where it moves: the jumps and the relaxation after them. On a
plateau the awake columns (those that reach into ``W``) rest at a saddle and hold ``G``, hence
``A = [[0, G], [Gᵀ, 0]]``, constant; the sleeping columns then follow the linear flow ``Z_s' = A Z_s`` exactly,
whatever its length: a *leap* applies ``exp(hA)`` from the SVD of ``G`` in pieces (a discrete QR step with the log
scales accumulated, Dieci & Van Vleck) while they turn, and moves their log scales alone, ``ρ_s += Δ ρ_s'``, once
they have settled onto their directions of growth. A leap ends where a sleeping column comes near enough to ``W``
to move it, so the ``O(log(1/α))`` steps that the plateaus cost an explicit (stability-limited) method shrink to a
few leaps.

``start`` and ``advance`` have the shape of ``gradflow._solver.Solve``'s: ``advance(state, budget)`` takes at most
``budget`` more explicit steps and leaps, so that ``gradflow._solver.run_segments`` runs it in bounded segments.
"""

from __future__ import annotations

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp

from ._explicit import STOPS, Dense, LeapState, LeapTolerances, explicit, unsorted
from ._qr import SWAP_MARGIN, Args, Factor, factor_weights, imbalance, restore, sort_pass, vector_field

PIECE = 18.0  # the longest exponential piece, h σ_1(G): the rounding it amplifies, ε e^{h σ_1}, stays near 1e-8
_NEAR = 1e2  # awake columns slower than this × atol (where stability-limited steps leave them) are polished ...
_POLISH_ROOM = 20.0  # ... where a leap of at least this many steps would follow
_STALLED = 3  # with dense output, also after this many accepted explicit steps in a row at their stability limit ...
_STALLED_NEAR = 1e4  # ... where the awake columns move slower than this × atol (not through an escape or a jump)
_WINDOW = 32  # polishing goes on while every window of this many polishing steps halves the awake columns' speed ...
_DRIFT_BACKOFF = 200  # ... else they drift (a slow valley, which polishing does not damp): no polishing for this
# many explicit steps (on the d = 50 head at log α = −1e4, thousands of half steps at a speed held near 700 atol)

# --------------------------------------------------------------------------------------------------
# Which columns are awake, and whether they rest.


def awake(f: Factor, tol: LeapTolerances) -> jax.Array:
    """The columns that reach into ``W = Q_t diag(e^ρ) R̃ R̃ᵀ diag(e^ρ) Q_bᵀ``: ``ρ_i + max ρ ≥ −Γ`` (with half a
    unit of margin: a leap stops with a waking column at ``−Γ``)."""
    return f.rho + jnp.max(f.rho) >= -tol.gap - 0.5


def _max_abs(x, where) -> jax.Array:
    return jnp.max(jnp.where(where, jnp.abs(x), 0.0))


def _awake_speed(y, f, tol: LeapTolerances) -> jax.Array:
    """The largest velocity of the awake columns' ``Q``, ``ρ`` and rows of ``R̃``."""
    out = jnp.array(0.0)
    for yf, vf in zip(y, f):
        a = awake(yf, tol)
        out = jnp.maximum(out, jnp.maximum(_max_abs(vf.Q, a[None, :]), _max_abs(vf.rho, a)))
        out = jnp.maximum(out, _max_abs(vf.R, a[:, None]))
    return out


def _settled(y, f, tol: LeapTolerances) -> jax.Array:
    """Whether the sleeping columns rest too, but for their log scales (which then grow at constant rates)."""
    ok = jnp.array(True)
    for yf, vf in zip(y, f):
        s = ~awake(yf, tol)
        ok = ok & (jnp.maximum(_max_abs(vf.Q, s[None, :]), _max_abs(vf.R, s[:, None])) <= tol.quiet)
    return ok


def _positive_ratio(room, rate) -> jax.Array:
    """``min room / rate`` over the entries with ``rate > 0`` (``inf`` if none, or none at all: a single column)."""
    return jnp.min(jnp.where(rate > 0, room / jnp.where(rate > 0, rate, 1.0), jnp.inf), initial=jnp.inf)


def _asleep_for(f: Factor, rate, tol: LeapTolerances) -> jax.Array:
    """How long the sleeping columns of a factor stay below ``ρ_i + max ρ = −Γ`` if their log scales grow at
    ``rate`` (the top column's rate adds where it sleeps too)."""
    s = ~awake(f, tol)
    top = jnp.argmax(f.rho)
    grow = jnp.where(s, rate + jnp.where(s[top], rate[top], 0.0), 0.0)
    return _positive_ratio(-tol.gap - (f.rho + f.rho[top]), grow)


# --------------------------------------------------------------------------------------------------
# Leaps.


class _FrozenG(eqx.Module):
    """A model whose ``G`` is held at ``Gs``: the flow within a leap."""

    Gs: tuple[jax.Array, ...]
    shapes: tuple = eqx.field(static=True)

    def G(self, Ws):
        del Ws
        return self.Gs


def _log_abs_imbalance(f: Factor, log_alpha) -> jax.Array:
    """``log |K_ij|`` of ``K = QᵀJQ = e^{2 log α} diag(e^{−ρ}) R̃⁻ᵀ C̄ R̃⁻¹ diag(e^{−ρ})`` (docs/math.md)."""
    k = f.rho.shape[0]
    Rinv = jax.scipy.linalg.solve_triangular(f.R, jnp.eye(k), lower=False, unit_diagonal=True)
    return 2.0 * log_alpha - f.rho[:, None] - f.rho[None, :] + jnp.log(jnp.abs(Rinv.T @ f.C @ Rinv))


def _extrapolation_length(y, f, gnorms, log_alpha, tol: LeapTolerances) -> jax.Array:
    """How long the settled flow keeps its form ``ρ_s' = const``, all else constant (docs/math.md, *Plateau
    leaps*): until a sleeping column reaches ``−Γ``, a shrinking column's ``QᵀJQ`` (which turns ``Q`` at the
    rate ``‖G‖ |K|``) has grown by the quiet threshold, or two log scales cross."""
    out = jnp.array(jnp.inf)
    for yf, vf, gnorm in zip(y, f, gnorms):
        v = jnp.where(awake(yf, tol), 0.0, vf.rho)
        out = jnp.minimum(out, _asleep_for(yf, v, tol))
        room = jnp.log1p(tol.quiet / (gnorm * jnp.exp(_log_abs_imbalance(yf, log_alpha)) + 1e-300))
        out = jnp.minimum(out, _positive_ratio(room, -(v[:, None] + v[None, :])))
        out = jnp.minimum(out, _positive_ratio(yf.rho[:-1] - yf.rho[1:] + SWAP_MARGIN, v[1:] - v[:-1]))
    return out


def exp_apply(Q, svd, h, m: int):
    """``exp(hA) Q`` for ``A = [[0, G], [Gᵀ, 0]]``, ``G = P diag(s) Ψᵀ`` (docs/math.md, *Plateau leaps*):
    ``[Q_t + P((cosh hs − 1) PᵀQ_t + sinh(hs) ΨᵀQ_b); Q_b + Ψ(sinh(hs) PᵀQ_t + (cosh hs − 1) ΨᵀQ_b)]``."""
    P, s, Psi_t = svd
    a, b = P.T @ Q[:m], Psi_t @ Q[m:]
    ch = (2.0 * jnp.sinh(0.5 * h * s) ** 2)[:, None]
    sh = jnp.sinh(h * s)[:, None]
    return jnp.concatenate([Q[:m] + P @ (ch * a + sh * b), Q[m:] + Psi_t.T @ (sh * a + ch * b)])


def _moved(f: Factor, svd, h, held, m: int):
    """``Qh = [Q_a, exp(hA) Q_s]`` (the ``held`` columns kept) and how far it would take a column past the one
    before it: the largest ``ν_{i+1} − ν_i − margin`` (beyond any such excess of ``ρ``), ``ν = ρ + log ‖Qh_i‖``."""
    Qh = jnp.where(held[None, :], f.Q, exp_apply(f.Q, svd, h, m))
    nu = f.rho + jnp.log(jnp.linalg.norm(Qh, axis=0))
    past = nu[1:] - nu[:-1] - jnp.maximum(f.rho[1:] - f.rho[:-1], 0.0) - SWAP_MARGIN
    return Qh, jnp.max(past, initial=0.0)


def exp_piece(f: Factor, Qh) -> Factor:
    """``Z = Q diag(e^ρ) R̃ → Qh diag(e^ρ) R̃`` re-factored (a discrete QR step): ``Qh = Q' R'``, ``ρ += log diag R'``,
    ``R̃ → (R'/diag R') ∘ e^{ρ_l − ρ_i} R̃``. Rounding puts ``ε e^{h σ_1}`` of the fastest direction into every column
    of ``Qh``, harmless as long as no column outgrows the ones before it (``_moved``)."""
    Qn, Rn = jnp.linalg.qr(Qh)
    sign = jnp.where(jnp.diag(Rn) < 0, -1.0, 1.0)
    Qn, Rn = Qn * sign, Rn * sign[:, None]
    d = jnp.diag(Rn)
    scale = jnp.exp(jnp.minimum(jnp.triu(f.rho[None, :] - f.rho[:, None]), 60.0))  # e^{ρ_l − ρ_i}, l ≥ i
    S = jnp.triu(Rn / d[:, None]) * scale
    return Factor(Q=Qn, rho=f.rho + jnp.log(d), R=jnp.triu(S @ f.R), C=f.C)


def _sort_fully(f: Factor) -> Factor:
    """Passes of the sorting gauge until the log scales are in order (a piece may reorder several columns)."""

    def body(c):
        f, _, passes = c
        f, changed = sort_pass(f)
        return f, changed, passes + 1

    k = f.rho.shape[0]
    return jax.lax.while_loop(lambda c: c[1] & (c[2] < k), body, (f, unsorted(f), 0))[0]


def restore_held(f: Factor, held, log_alpha, m: int) -> Factor:
    """``_qr.restore`` with the ``held`` (awake, leading) columns kept: ``Q_s ← Q_s + JQ_a ΔK_as + JQ_s ΔK_ss / 2``
    gives ``QᵀJQ`` its value ``K`` to first order, then ``Q_s`` is orthonormalised against ``Q_a``. Holding
    ``Q_a`` while ``exp(hA)`` moves ``Q_s`` leaves ``Q_aᵀJQ_s`` off by the awake columns' residual speed over σ;
    it is the sleeping columns that absorb it, so that the awake ones stay at rest."""
    dK = imbalance(f, log_alpha, m)
    M = jnp.where(held[None, :], 0.0, jnp.where(held[:, None], dK, 0.5 * dK))
    Q = f.Q + jnp.concatenate([f.Q[:m] @ M, -(f.Q[m:] @ M)])
    Qn, Rn = jnp.linalg.qr(Q)
    return eqx.tree_at(lambda g: g.Q, f, Qn * jnp.where(jnp.diag(Rn) < 0, -1.0, 1.0))


class _Leap(eqx.Module):
    y: tuple[Factor, ...]
    t: jax.Array
    stops: tuple[Factor, ...]
    n_stops: jax.Array
    pieces: jax.Array
    go_on: jax.Array


def leap_from(state: LeapState, out_ts, t_stop, args: Args, tol: LeapTolerances) -> LeapState:
    """The flow with ``G`` held at its value now (the awake columns rest): the sleeping columns move by
    ``exp(hA)`` in pieces (``h σ_1 ≤ 18``, no column past the one before it) while they turn, and by
    extrapolating their log scales once settled; until ``t_stop``, until a sleeping column nears ``−Γ`` (closer
    than an explicit step would take it), or until it has reached ``STOPS`` output times. A piece ends on every
    output time ``out_ts`` it reaches; the states there go to ``stops``, for ``advance`` to record. The count of
    explicit steps at their stability limit starts again from 0: what follows a leap is a jump, not the relaxation
    that count was of (with dense output it would have the jump polished at its first steps' size)."""
    shapes = args.model.shapes
    last = len(out_ts) - 1
    Gs = args.model.G(tuple(factor_weights(yf, m) for yf, (m, _) in zip(state.y, shapes)))
    svds = tuple(jnp.linalg.svd(G, full_matrices=False) for G in Gs)
    sigma = jnp.max(jnp.stack([s[0] for _, s, _ in svds]))
    frozen = Args(model=_FrozenG(Gs, shapes), log_alpha=args.log_alpha)
    was_awake = tuple(awake(yf, tol) for yf in state.y)

    def target(n_stops):
        """Where a piece must end at the latest: the next output time, or ``t_stop``."""
        return jnp.minimum(out_ts[jnp.minimum(state.next + n_stops, last)], t_stop)

    def plan(y, t, t_end):
        """The frozen vector field, whether to extrapolate, and how far."""
        f = vector_field(t, y, frozen)
        piece = PIECE / jnp.maximum(sigma, 1e-300)  # ρ grows at most at σ_1 (twice that for ρ_i + max ρ)
        piece = jnp.minimum(piece, jnp.min(jnp.stack([_asleep_for(yf, jnp.full_like(yf.rho, sigma), tol) for yf in y])))
        extrapolation = _extrapolation_length(y, f, tuple(s[0] for _, s, _ in svds), args.log_alpha, tol)
        extrapolate = _settled(y, f, tol) & (extrapolation >= piece)
        return f, extrapolate, jnp.minimum(jnp.where(extrapolate, extrapolation, piece), t_end - t)

    def body(c: _Leap):
        t_end = target(c.n_stops)
        f, extrapolate, span = plan(c.y, c.t, t_end)

        def by_extrapolation():
            rho = lambda yf, vf: yf.rho + span * jnp.where(awake(yf, tol), 0.0, vf.rho)
            return span, tuple(eqx.tree_at(lambda g: g.rho, yf, rho(yf, vf)) for yf, vf in zip(c.y, f))

        def by_exponential():
            def moved(h):
                out = [_moved(yf, svd, h, a, m) for yf, svd, a, (m, _) in zip(c.y, svds, was_awake, shapes)]
                return h, tuple(q for q, _ in out), jnp.max(jnp.stack([p for _, p in out]))

            def shorter(m):  # ν grows about ∝ h once the columns have turned
                h, _, past = m
                return moved(h * jnp.clip(0.9 * SWAP_MARGIN / (SWAP_MARGIN + past), 0.01, 0.9))

            h, Qhs, _ = jax.lax.while_loop(lambda m: m[2] > 0, shorter, moved(span))
            return h, tuple(exp_piece(yf, Qh) for yf, Qh in zip(c.y, Qhs))

        h, y = jax.lax.cond(extrapolate, by_extrapolation, by_exponential)
        y = tuple(restore_held(_sort_fully(yf), a, args.log_alpha, m) for yf, a, (m, _) in zip(y, was_awake, shapes))
        t = jnp.where(h == t_end - c.t, t_end, c.t + h)
        next_ = state.next + c.n_stops
        at_output = (next_ <= last) & (t == out_ts[jnp.minimum(next_, last)])
        stops = jax.tree_util.tree_map(
            lambda a, x: a.at[c.n_stops].set(jnp.where(at_output, x, a[c.n_stops])), c.stops, y
        )
        n_stops = c.n_stops + at_output.astype(c.n_stops.dtype)
        t_end = target(n_stops)
        _, _, span = plan(y, t, t_end)
        woke = jnp.any(jnp.stack([jnp.any(awake(yf, tol) != a) for yf, a in zip(y, was_awake)]))
        go_on = (t < t_stop) & ~woke & (span >= jnp.minimum(state.dt, t_end - t)) & (n_stops < STOPS)
        return _Leap(y=y, t=t, stops=stops, n_stops=n_stops, pieces=c.pieces + 1, go_on=go_on)

    start = _Leap(state.y, state.t, state.stops, jnp.zeros_like(state.n_stops), jnp.array(0), jnp.array(True))
    c = jax.lax.while_loop(lambda c: c.go_on, body, start)
    return eqx.tree_at(
        lambda s: (
            s.y,
            s.f,
            s.t,
            s.stops,
            s.n_stops,
            s.leaps,
            s.pieces,
            s.evaluations,
            s.stiff,
            s.backoff,
            s.resume_below,
            s.polished,
        ),
        state,
        (
            c.y,
            vector_field(c.t, c.y, args),
            c.t,
            c.stops,
            c.n_stops,
            state.leaps + 1,
            state.pieces + c.pieces,
            state.evaluations + 2,
            jnp.zeros_like(state.stiff),  # a jump follows: the steps at the stability limit are counted afresh
            jnp.zeros_like(state.backoff),  # ... and split steps may enter its relaxation
            jnp.full_like(state.resume_below, jnp.inf),  # ... with no wait for a tail (``_split._resume_below``)
            jnp.zeros_like(state.polished),  # ... and polishing may start again at once
        ),
    )


# --------------------------------------------------------------------------------------------------
# The solve, in segments.


def leap_or_polish(s: LeapState, t_end, tol: LeapTolerances, *, dense: bool = False):
    """Whether to leap (the awake columns rest and no sleeping column wakes within an explicit step), whether an
    explicit step should polish (a long leap would follow, and the awake columns nearly rest or, with ``dense``
    output, the explicit steps have sat at their stability limit: docs/math.md, *Plateau leaps*, resting; not in a
    back-off after a window of polishing that did not halve their speed, ``polished_step``), and their speed
    (``_split`` asks whether they nearly rest, ``nearly_resting``)."""
    speed = _awake_speed(s.y, s.f, tol)
    room = jnp.min(jnp.stack([_asleep_for(yf, vf.rho, tol) for yf, vf in zip(s.y, s.f)]))
    room = jnp.minimum(room, t_end - s.t)
    leap = (speed <= tol.rest) & (room >= jnp.minimum(s.dt, t_end - s.t))
    long_leap = room >= _POLISH_ROOM * s.dt
    polish = nearly_resting(speed, tol) & long_leap
    if dense:  # no output time cuts a step short, which stepping onto them did now and then, damping the relaxation
        polish = polish | ((s.stiff >= _STALLED) & (speed <= _STALLED_NEAR * tol.atol) & long_leap)
    return leap, polish & (s.polished >= 0), speed


def nearly_resting(speed, tol: LeapTolerances) -> jax.Array:
    """Whether the awake columns move slower than ``_NEAR`` atol, where stability-limited steps leave them."""
    return speed <= _NEAR * tol.atol


def polished_step(s: LeapState, t_stop, args: Args, tol: LeapTolerances, polish) -> LeapState:
    """An explicit step (``_explicit.explicit``, polishing where ``polish``) that counts the polishing steps in
    windows of ``_WINDOW``: a window that does not halve the awake columns' speed found a drift, not the stiff
    relaxation polishing damps, and ``_DRIFT_BACKOFF`` steps at full length follow before polishing again (an
    explicit step off polishing ends a window; a leap, a back-off)."""
    e = explicit(s, t_stop, args, tol, polish)
    accepted = e.rejected == s.rejected
    start = s.polished == 0
    since = jnp.where(start, _awake_speed(s.y, s.f, tol), s.polish_from)
    halved = _awake_speed(e.y, e.f, tol) <= 0.5 * since
    count = jnp.where(s.polished + 1 < _WINDOW, s.polished + 1, jnp.where(halved, 0, -_DRIFT_BACKOFF))
    off = jnp.where(s.polished < 0, s.polished + 1, 0)
    polished = jnp.where(accepted, jnp.where(polish, count, off), s.polished)
    polish_from = jnp.where(accepted & polish & start, since, s.polish_from)
    return eqx.tree_at(lambda s: (s.polished, s.polish_from), e, (polished, polish_from))


def _step(s: LeapState, out_ts, t_stop, args: Args, tol: LeapTolerances, *, dense: bool) -> LeapState:
    """A leap where the awake columns rest and no sleeping column wakes within an explicit step, else an explicit
    step (a polishing one where ``leap_or_polish`` says); both to ``t_stop`` at most, recording the output times
    ``out_ts`` they reach or pass."""
    leap, polish, _ = leap_or_polish(s, next_output(s, out_ts, t_stop), tol, dense=dense)
    return jax.lax.cond(
        leap, lambda: leap_from(s, out_ts, t_stop, args, tol), lambda: polished_step(s, t_stop, args, tol, polish)
    )


def next_output(s: LeapState, out_ts, t_stop) -> jax.Array:
    """The next output time (``t_stop`` at most): whether to leap is decided up to it, as when every output time
    ends a step (a leap that passes it goes on while no sleeping column nears waking)."""
    return jnp.minimum(out_ts[jnp.minimum(s.next, len(out_ts) - 1)], t_stop)


def advance(
    state: LeapState, budget, args: Args, out_ts, tol: LeapTolerances, step=_step, *, dense: bool = False
) -> LeapState:
    """``state`` after at most ``budget`` more steps and leaps towards ``out_ts[-1]`` (unscaled time), recording
    ``y`` at every output time it reaches or passes; ``step(state, out_ts, t_stop, args, tol, dense=dense)`` takes
    one (a leap or an explicit step to ``t_stop`` at most: the last output time if ``dense``, else the next one; or
    what ``_split`` chooses). Stops early, with ``result`` set, where the step size falls below the resolution of
    ``t``."""
    last = len(out_ts) - 1
    spent = state.steps + state.leaps + budget

    def running(s: LeapState):
        return (s.next <= last) & (s.result == dfx.RESULTS.successful) & (s.steps + s.leaps < spent)

    def body(s: LeapState):
        t_stop = out_ts[last] if dense else out_ts[jnp.minimum(s.next, last)]
        return _record(step(s, out_ts, t_stop, args, tol, dense=dense), args, out_ts)

    return jax.lax.while_loop(running, body, state)


def _record(s: LeapState, args: Args, out_ts) -> LeapState:
    """``s`` with every output time up to ``s.t`` recorded: first those a leap reached (its ``stops``), then those
    inside the last explicit step, from its dense output (the conserved ``QᵀJQ`` restored, as after a step), and the
    one at ``s.t`` as ``s.y``."""
    last = len(out_ts) - 1

    def stop(j, ys):
        return jax.tree_util.tree_map(lambda a, x: a.at[s.next + j].set(x[j]), ys, s.stops)

    s = eqx.tree_at(
        lambda s: (s.ys, s.next, s.n_stops),
        s,
        (jax.lax.fori_loop(0, s.n_stops, stop, s.ys), s.next + s.n_stops, jnp.zeros_like(s.n_stops)),
    )

    def passed(s: LeapState):
        return (s.next <= last) & (out_ts[jnp.minimum(s.next, last)] <= s.t)

    def one(s: LeapState):
        t = out_ts[s.next]

        def interpolated():
            y = s.dense.at(t)
            return tuple(restore(f, args.log_alpha, m) for f, (m, _) in zip(y, args.model.shapes))

        y = jax.lax.cond(s.dense.inside(t), interpolated, lambda: s.y)
        ys = jax.tree_util.tree_map(lambda a, x: a.at[s.next].set(x), s.ys, y)
        return eqx.tree_at(lambda s: (s.ys, s.next), s, (ys, s.next + 1))

    return jax.lax.while_loop(passed, one, s)


def start(y0, args: Args, out_ts, jac_size: int = 0) -> LeapState:
    """The carried state at ``t = 0`` from ``y0``, with ``y0`` recorded at the output times ``≤ 0`` (and room for a
    Jacobian of ``jac_size²`` numbers, for ``_split``)."""
    f = vector_field(0.0, y0, args)
    speed = jnp.max(jnp.stack([jnp.max(jnp.abs(leaf)) for leaf in jax.tree_util.tree_leaves(f)]))
    at_start = out_ts <= 0.0
    ys = jax.tree_util.tree_map(lambda x: jnp.where(at_start.reshape((-1,) + (1,) * x.ndim), x, jnp.inf), y0)
    zero = jnp.array(0)
    return LeapState(
        y=y0,
        f=f,
        t=jnp.zeros(()),
        dt=1e-2 / jnp.maximum(speed, 1e-6),
        dense=Dense.empty(y0),
        stops=jax.tree_util.tree_map(lambda x: jnp.zeros((STOPS,) + x.shape, x.dtype), y0),
        n_stops=zero,
        ys=ys,
        next=jnp.sum(at_start).astype(zero.dtype),
        steps=zero,
        rejected=zero,
        leaps=zero,
        pieces=zero,
        evaluations=zero + 1,
        result=dfx.RESULTS.successful,
        h_split=jnp.zeros(()),
        splits=zero,
        stiff=zero,
        backoff=zero,
        resume_below=jnp.asarray(jnp.inf),
        jac=jnp.zeros((jac_size, jac_size)),
        jac_age=zero - 1,
        jac_lambda=jnp.zeros(()),
        newton_matrix=jnp.zeros((jac_size, jac_size)),
        newton_h=jnp.asarray(jnp.nan),
        polished=zero,
        polish_from=jnp.zeros(()),
    )

"""The state of the leap integrator (``_leap``) and its explicit steps: Tsit5 with error control on the continuous-QR
state of ``_qr``, the gauge fixed after every accepted step (docs/math.md, *Full weights: the exact flow*, *Plateau
leaps*).

The steps are diffrax's Tsit5 with its ``PIDController``'s error norm, written out so that they share one carried
state with the leaps: the leaps choose, step by step, between an explicit step and a leap. An explicit step does not
stop at the output times: it passes them, and the outputs inside it come from Tsit5's dense output (``Dense``).
"""

from __future__ import annotations

import math

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx

from ._qr import SWAP_MARGIN, Args, Factor, restore, sort_pass, vector_field

_TABLEAU = dfx.Tsit5.tableau  # first same as last: the last stage is the vector field at the new state
_ERROR_EXPONENT = 1.0 / 5.0  # the local error of the embedded order-4 solution is O(h^5)
_SAFETY, _GROW, _SHRINK = 0.9, 10.0, 0.2
_QUIET = 1.0  # columns count as still where they move slower than this × (atol + rtol) per unit time
_REST = 1e-3  # a leap needs the awake columns slower than this × the quiet threshold: it holds them, and their
# residual speed over their relaxation rate, an error of G, biases the sleeping columns' rates for the whole leap
# (with 1.0, log|β| of a 1×1 weight was off by 1e-3 after t = 1e4 at log α = −1e4; with 1e-3, by 1e-6)
_GAP_MARGIN = 2.0  # Γ = log(1 / quiet threshold) + this: a column below e^{−Γ} in W does not move the flow
_POLISH = 0.5  # a polishing step is this fraction of dt (docs/math.md, Plateau leaps: resting, at the tolerance)
STIFF = 3.0  # h λ (``_stiffness``) of an explicit step at its stability limit
STOPS = 32  # the output times one leap records at most (it ends at the last): the outputs pass the step's branch in
# this buffer, not in the whole record of outputs, which XLA would copy through the branch at every step


class LeapTolerances(eqx.Module):
    """The tolerances of the leap integrator: ``rtol``, ``atol`` as in ``simulate_flow``."""

    rtol: float
    atol: float

    @property
    def quiet(self) -> float:
        """The speed below which the awake columns count as at rest."""
        return _QUIET * (self.atol + self.rtol)

    @property
    def rest(self) -> float:
        """The speed below which the awake columns count as at rest, so that a leap may hold them."""
        return _REST * self.quiet

    @property
    def gap(self) -> float:
        """``Γ``: a sleeping column with ``ρ_i + max ρ < −Γ`` (its reach into ``W``) moves the rest of the flow
        slower than the quiet threshold."""
        return -math.log(self.quiet) + _GAP_MARGIN


class Dense(eqx.Module):
    """The last accepted explicit step's dense output (diffrax's Tsit5 interpolant, of order 4 like the step's error
    estimate): the step from ``y0`` at ``t0`` to ``t1``, and ``k``, its seven stages' vector fields times the step
    (leaves with a leading axis of 7)."""

    t0: jax.Array
    t1: jax.Array
    y0: tuple[Factor, ...]
    k: tuple[Factor, ...]

    @classmethod
    def empty(cls, y) -> Dense:
        """No step yet: an empty interval."""
        stages = jax.tree_util.tree_map(lambda x: jnp.zeros((len(_TABLEAU.c) + 1,) + x.shape, x.dtype), y)
        return cls(t0=jnp.zeros(()), t1=jnp.zeros(()), y0=y, k=stages)

    def inside(self, t) -> jax.Array:
        """Whether ``t`` lies strictly inside the step (where the step's end state is not already the answer)."""
        return (self.t0 < t) & (t < self.t1)

    def at(self, t) -> tuple[Factor, ...]:
        """The interpolated state at ``t`` in ``[t0, t1]``."""
        return dfx.Tsit5.interpolation_cls(t0=self.t0, t1=self.t1, y0=self.y0, y1=self.y0, k=self.k).evaluate(t)


class LeapState(eqx.Module):
    """What the leap integrator carries between segments: the state ``y`` at unscaled time ``t``, the vector field
    ``f`` there, the next explicit step ``dt``, the last explicit step's dense output, the outputs so far (``ys``:
    ``+inf`` at the output times not reached; ``next``: the first of those), the counts and the result
    (``successful`` while the solve can go on)."""

    y: tuple[Factor, ...]
    f: tuple[Factor, ...]
    t: jax.Array
    dt: jax.Array
    dense: Dense
    ys: tuple[Factor, ...]
    next: jax.Array
    steps: jax.Array  # explicit steps, accepted and rejected
    rejected: jax.Array
    leaps: jax.Array
    pieces: jax.Array  # exponentials exp(hA) and extrapolations of the log scales, within leaps (no G)
    evaluations: jax.Array  # of G (each vector field evaluates it once; a Jacobian counts its columns)
    result: dfx.RESULTS
    h_split: jax.Array  # the next split step (``_split``); unused by the leaps alone
    splits: jax.Array  # split steps, accepted and rejected (counted in ``steps`` too)
    stiff: jax.Array  # consecutive accepted explicit steps at their stability limit (``_split``: split steps from 3)
    backoff: jax.Array  # ``_split``: explicit steps at the limit still to take before split steps may enter again
    resume_below: jax.Array  # ``_split``: near rest, split steps enter again once the awake speed is below this
    jac: jax.Array  # the awake block's Jacobian for the split steps (0 × 0 for the leaps alone)
    jac_age: jax.Array  # accepted split steps since it was computed (−1: to compute)
    jac_lambda: jax.Array  # its largest eigenvalue's modulus (the stable explicit step: ``_split``)
    newton_matrix: jax.Array  # ``(I − hγ jac)⁻¹`` at ``h = newton_h``, for Newton's iterations of the split steps
    newton_h: jax.Array  # ... (``_block.iteration_matrix``; NaN: to form)
    polished: jax.Array  # polishing steps in the present window (``_leap.polished_step``); below 0, a back-off
    polish_from: jax.Array  # the awake columns' speed where that window began
    stops: tuple[Factor, ...]  # the states at the output times the last step reached (a leap's; leading axis STOPS)
    n_stops: jax.Array  # how many of ``stops`` hold such states, not yet recorded in ``ys``

    @property
    def stats(self) -> jax.Array:
        """``(steps, accepted, rejected, leaps, pieces, evaluations, splits)`` on the last axis, where ``steps``
        counts the explicit and split steps and the leaps (what ``max_steps`` caps)."""
        steps = self.steps + self.leaps
        counts = (steps, steps - self.rejected, self.rejected, self.leaps, self.pieces, self.evaluations, self.splits)
        return jnp.stack(counts, axis=-1)


def _axpy(y, ks, coeffs, h):
    """``y + h Σ_j coeffs[j] ks[j]`` over the state's leaves."""
    return jax.tree_util.tree_map(lambda y0, *k: y0 + h * sum(c * kj for c, kj in zip(coeffs, k)), y, *ks)


def _rk_step(t, y, f0, h, args: Args):
    """One Tsit5 step from ``y`` (where the vector field is ``f0``): the new state, the vector field there, the
    local error estimate, ``h λ`` (below) and the stages' vector fields times ``h`` (for the dense output)."""
    ks, yi, stages = [f0], y, [y]
    for c, a in zip(_TABLEAU.c, _TABLEAU.a_lower):
        yi = _axpy(y, ks, a, h)
        stages.append(yi)
        ks.append(vector_field(t + c * h, yi, args))
    err = jax.tree_util.tree_map(lambda *k: h * sum(b * kj for b, kj in zip(_TABLEAU.b_error, k)), *ks)
    k = jax.tree_util.tree_map(lambda *kj: h * jnp.stack(kj), *ks)
    return yi, ks[-1], err, h * _stiffness(stages[-2], yi, ks[-2], ks[-1]), k


def _stiffness(y6, y7, k6, k7) -> jax.Array:
    """``‖k7 − k6‖ / ‖y7 − y6‖``: the last two stages are at the same time (``c = 1``), so this estimates the
    dominant eigenvalue's modulus, and ``h λ`` above ``STIFF`` puts the step at the edge of Tsit5's region of
    stability on the real axis (``≈ −3.5``; Hairer & Wanner, IV.2, as DOPRI5 detects stiffness)."""
    sq = lambda tree: sum(jnp.sum(leaf**2) for leaf in jax.tree_util.tree_leaves(tree))
    dy = sq(jax.tree_util.tree_map(jnp.subtract, y7, y6))
    dk = sq(jax.tree_util.tree_map(jnp.subtract, k7, k6))
    return jnp.sqrt(dk / jnp.where(dy > 0, dy, 1.0)) * (dy > 0)


def _error_norm(y0, y1, err, tol: LeapTolerances) -> jax.Array:
    """The RMS of the error over ``atol + rtol |y|`` (diffrax's ``PIDController``); ``inf`` if not finite."""
    scale = lambda a, b, e: e / (tol.atol + tol.rtol * jnp.maximum(jnp.abs(a), jnp.abs(b)))
    norm = optx.rms_norm(jax.tree_util.tree_map(scale, y0, y1, err))
    return jnp.where(jnp.isfinite(norm), norm, jnp.inf)


def unsorted(f: Factor) -> jax.Array:
    """Whether a pass of the sorting gauge would swap columns (``sort_pass``'s test). The pass costs ``k`` swaps of
    ``O(k³)`` each even where it swaps none: the most of a step at ``k = 50``."""
    r = jnp.diagonal(f.R, 1)
    return jnp.any(f.rho[1:] - f.rho[:-1] > 0.5 * jnp.log1p(r * r) + SWAP_MARGIN)


def fix_gauge(y, args: Args):
    """The sorting gauge and ``QᵀJQ`` restored after a step (as ``_qr.Gauge``); whether columns swapped."""
    out, swapped = [], jnp.array(False)
    for f, (m, _) in zip(y, args.model.shapes):
        f, changed = jax.lax.cond(unsorted(f), sort_pass, lambda f: (f, jnp.array(False)), f)
        out.append(restore(f, args.log_alpha, m))
        swapped = swapped | changed
    return tuple(out), swapped


def explicit(state: LeapState, t_stop, args: Args, tol: LeapTolerances, polish) -> LeapState:
    """One Tsit5 step of ``dt`` (clipped to ``t_stop``, the last output time; the outputs it passes come from its
    dense output) or, to ``polish`` awake columns that nearly rest, of ``dt / 2``: a step at the stability limit
    keeps the stiff relaxation at the tolerance, a shorter one damps it, so that a leap can follow."""
    target = jnp.where(polish, _POLISH * state.dt, state.dt)
    h = jnp.minimum(target, t_stop - state.t)
    t1 = jnp.where(h < target, t_stop, state.t + h)
    y1, f1, err, h_lambda, k = _rk_step(state.t, state.y, state.f, h, args)
    norm = _error_norm(state.y, y1, err, tol)
    accept = norm <= 1.0
    factor = jnp.clip(_SAFETY * jnp.maximum(norm, 1e-10) ** -_ERROR_EXPONENT, _SHRINK, jnp.where(accept, _GROW, 1.0))
    # a clipped step does not shorten the next one, and a polishing step leaves it as it was
    dt = jnp.where(accept & (h < target), jnp.maximum(h * factor, state.dt), h * factor)
    dt = jnp.where(accept & polish, state.dt, dt)

    def take():
        y, swapped = fix_gauge(y1, args)
        f = jax.lax.cond(swapped, lambda: vector_field(t1, y, args), lambda: f1)  # f1 is the old gauge's
        return y, f, t1, swapped.astype(int), Dense(t0=state.t, t1=t1, y0=state.y, k=k)

    y, f, t, again, dense = jax.lax.cond(accept, take, lambda: (state.y, state.f, state.t, 0, state.dense))
    stuck = dt <= 1e-12 * jnp.maximum(1.0, jnp.abs(state.t))  # below the resolution of t
    # at the stability limit: h λ near its edge, or a polishing step (which the stability limit calls for); a
    # rejected polishing step was limited by accuracy, not stability: the flow still moves, and the count ends
    at_limit = accept & ((h_lambda >= STIFF) | polish)
    stiff = jnp.where(at_limit, state.stiff + 1, jnp.where(accept | polish, 0, state.stiff))
    backoff = jnp.where(at_limit, jnp.maximum(state.backoff - 1, 0), state.backoff)
    return eqx.tree_at(
        lambda s: (s.y, s.f, s.t, s.dt, s.dense, s.steps, s.rejected, s.evaluations, s.result, s.stiff, s.backoff),
        state,
        (
            y,
            f,
            t,
            dt,
            dense,
            state.steps + 1,
            state.rejected + (~accept).astype(int),
            state.evaluations + len(_TABLEAU.c) + again,
            dfx.RESULTS.where(stuck, dfx.RESULTS.dt_min_reached, state.result),
            stiff,
            backoff,
        ),
    )

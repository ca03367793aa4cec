"""The diagonal flow's solvers (docs/api-flow.md, *How the flow is solved*): an L-stable ESDIRK method whose stage
equations are solved by a chord iteration with a kept low-rank Jacobian, and the switch to an explicit order-8 method
inside the jumps.

The flow is stiff for small α: awake coordinates relax at rate O(1) in ``t`` while a run lasts ``O(log(1/α))``. On
the plateaus it is solved with ``diffrax.Kvaerno5`` whose stage equations are solved by a chord iteration with a
low-rank Jacobian that is kept from step to step and recomputed only when the iteration stops converging. The
Jacobian of ``y ↦ g(β(y))`` is ``−∇²L · diag(u² + v²)``: its columns are negligible except for the coordinates
with ``u_i² + v_i²`` of order one, so the ``jacobian_rank`` largest of those columns give it to working accuracy.
Inside the jumps (time scale O(1) in ``t``), wherever the step lies in its stability interval, a step is taken
with the explicit order-8 method ``diffrax.Dopri8`` instead, and the output times are read off the dense output.
"""

from __future__ import annotations

from collections.abc import Callable

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import optimistix as optx

from .._solver import WrappedSolver
from ._field import ASLEEP, LowRankJacobian, acceleration, jacobian, log_size


class _ChordState(eqx.Module):
    gh: jax.Array  # γ·h: the implicit stage is f = vf(y_partial + γ h f)
    cols: jax.Array  # J[:, idx]
    lu: tuple[jax.Array, jax.Array]
    tol: jax.Array  # on the stage value γ h f, in log w
    diffsize: jax.Array
    diffsize_prev: jax.Array
    step: jax.Array
    result: optx.RESULTS


class _LowRankChord(optx.AbstractRootFinder):
    """Chord iteration for the ESDIRK stage equation ``f − vf(y_partial + γ h f) = 0``.

    The Newton matrix ``I − γ h J`` uses the cached low-rank ``J`` (Woodbury), so an iteration costs
    one vector-field evaluation. The stopping rule is Hairer & Wanner's (Solving ODEs II, §IV.8) on
    the stage value ``γ h f`` (in ``log w``): converged when the contraction-corrected update is
    below ``atol`` (a fraction of the step tolerance), or below the rounding floor of ``γ h f``
    (``y`` is stored to ``|y| ≈ |log α|`` ulps, and ``f`` inherits ``‖J‖`` times that); failed as soon
    as the updates stop contracting or cannot converge within ``max_iters``, so that the caller
    refreshes the Jacobian. ``rtol`` scales the rounding floor.
    """

    rtol: float
    atol: float
    max_iters: int = eqx.field(static=True)
    jac: LowRankJacobian | None = None
    norm: Callable = optx.rms_norm

    def init(self, fn, y, args, options, f_struct, aux_struct, tags):
        del fn, f_struct, aux_struct, tags
        if "init_state" in options:  # diffrax's per-step Newton matrix (as for diffrax.VeryChord)
            return options["init_state"]
        # diffrax's implicit-stage arguments: (stage_index, diagonal, vf, prod, t, y_partial, args, control).
        diagonal, y_partial, flow_args, control = args[1], args[5], args[6], args[7]
        gh = jnp.asarray(diagonal * control, dtype=y.dtype)
        idx = self.jac.idx
        cols = self.jac.hess_cols * jnp.exp(log_size(y_partial + gh * y, flow_args)[idx])
        small = jnp.eye(idx.shape[0], dtype=y.dtype) - gh * cols[idx, :]
        eps = jnp.finfo(y.dtype).eps
        floor = self.rtol * eps * jnp.max(jnp.abs(y_partial)) * jnp.max(jnp.abs(cols)) * jnp.abs(gh)
        return _ChordState(
            gh=gh,
            cols=cols,
            lu=jsl.lu_factor(small),
            tol=jnp.maximum(self.atol, floor),
            diffsize=jnp.array(jnp.inf, dtype=y.dtype),
            diffsize_prev=jnp.array(jnp.inf, dtype=y.dtype),
            step=jnp.array(0),
            result=optx.RESULTS.successful,
        )

    def step(self, fn, y, args, options, state: _ChordState, tags):
        del options, tags
        fx, aux = fn(y, args)
        diff = fx + state.gh * (state.cols @ jsl.lu_solve(state.lu, fx[self.jac.idx]))
        new_y = y - diff
        size = self.norm(state.gh * diff) / state.tol
        new_state = eqx.tree_at(
            lambda s: (s.diffsize, s.diffsize_prev, s.step), state, (size, state.diffsize, state.step + 1)
        )
        return new_y, new_state, aux

    def terminate(self, fn, y, args, options, state: _ChordState, tags):
        del fn, y, args, options, tags
        rate = state.diffsize / state.diffsize_prev
        remaining = self.max_iters - state.step
        tiny = state.diffsize < _FIRST  # first update already negligible
        converged = tiny | ((state.step >= 2) & (rate < 1) & (rate / (1 - rate) * state.diffsize < 1))
        slow = (rate >= 1) | ~(rate**remaining / (1 - rate) * state.diffsize < 1)  # also catches NaN
        hopeless = (state.step >= 2) & ~converged & slow
        hopeless = hopeless | ((state.step >= 1) & ~jnp.isfinite(state.diffsize))
        result = optx.RESULTS.where(hopeless, optx.RESULTS.nonlinear_divergence, state.result)
        return converged | hopeless, result

    def postprocess(self, fn, y, aux, args, options, state, tags, result):
        return y, aux, {}


class _JacobianReuse(WrappedSolver):
    """Wraps an ESDIRK solver using ``_LowRankChord``: keeps the Jacobian between steps.

    A step is first tried with the cached Jacobian; if a stage iteration fails, the Jacobian is
    recomputed at the step's start and the step is retried. The cache lives in the solver state,
    so it is kept on accepted steps only.
    """

    rank: int = eqx.field(static=True)

    def init(self, terms, t0, t1, y0, args):
        return self.solver.init(terms, t0, t1, y0, args), jacobian(y0, args, self.rank)

    def _with(self, jac):
        return eqx.tree_at(lambda s: s.root_finder.jac, self.solver, jac, is_leaf=lambda x: x is None)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        inner_state, jac = solver_state
        out = self._with(jac).step(terms, t0, t1, y0, args, inner_state, made_jump)

        def retry(_):
            fresh = jacobian(y0, args, self.rank)
            return self._with(fresh).step(terms, t0, t1, y0, args, inner_state, made_jump), fresh

        failed = out[4] != dfx.RESULTS.successful
        out, jac = jax.lax.cond(failed, retry, lambda _: (out, jac), None)
        y1, y_error, dense_info, inner_state, result = out
        return y1, y_error, dense_info, (inner_state, jac), result


class SwitchingSolver(WrappedSolver):
    """Kvaerno5 with the cached Jacobian (``_JacobianReuse``) where the flow is stiff, Dopri8 where it is not.

    Each step is taken explicitly when the proposed ``h`` lies inside Dopri8's stability interval,
    ``h ρ ≤ _STABLE`` with ``ρ = max(0, −λ_min(J))`` the stiffness of ``J = ∂g/∂β · diag(u² + v²)``
    (real eigenvalues: ``J`` is similar to ``diag(√s) ∂g/∂β diag(√s)``, symmetric), estimated from the cached
    Hessian columns and the current ``s = u² + v²``; otherwise implicitly. Inside a jump (time scale O(1) in
    ``t``, not stiff) the order-8 method takes steps about 2.5× longer than the order-5 one, each cheaper than
    an implicit step; on plateaus (``h`` up to ``O(log(1/α))``) Kvaerno5 steps over the relaxed, stiff
    coordinates. The cache is refreshed when a coordinate wakes that it has no column for, so ``ρ`` never
    misses an awake coordinate. Both methods are FSAL and share their state ``f(y0)``; Dopri8's error
    estimate (order 8) is reported as ``E^(5/8)`` so that the step-size controller, set for Kvaerno5's
    order 5, proposes Dopri8's optimal step ``∝ E^(−1/8)``. The dense output is Dopri8's own interpolant
    after an explicit step and the quintic Hermite interpolant of ``y, y', y''`` after an implicit one (one
    Jacobian-vector product at each end, only for steps across an output time), so the output times need not
    be step ends.
    """

    explicit: dfx.Dopri8
    rtol: float
    atol: float

    @property
    def interpolation_cls(self):  # pyright: ignore
        return _SwitchingInterpolation

    def init(self, terms, t0, t1, y0, args):
        return self.solver.init(terms, t0, t1, y0, args)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        inner_state, jac = solver_state
        rank = self.solver.rank
        log_scale = log_size(y0, args)
        top = jax.lax.top_k(log_scale, rank)[0][-1]
        covered = jnp.zeros(y0.shape, bool).at[jac.idx].set(jac.awake)
        unseen = jnp.any((log_scale > ASLEEP) & (log_scale >= top) & ~covered)
        jac = jax.lax.cond(unseen, lambda: jacobian(y0, args, rank), lambda: jac)
        explicit = (t1 - t0) * _stiffness(jac, log_scale) <= _STABLE

        def take_explicit(_):
            y1, y_error, dense, inner, result = self.explicit.step(terms, t0, t1, y0, args, inner_state, made_jump)
            scale = self.atol + self.rtol * jnp.maximum(jnp.abs(y0), jnp.abs(y1))
            error = optx.rms_norm(y_error / scale)
            order = self.solver.error_order(terms) / self.explicit.error_order(terms)
            y_error = y_error * jnp.where(error > 0, error ** (order - 1), 1.0)
            return y1, y_error, dense["k"], inner, result, jac

        def take_implicit(_):
            y1, y_error, dense, (inner, fresh), result = self.solver.step(
                terms, t0, t1, y0, args, (inner_state, jac), made_jump
            )
            h = t1 - t0
            k0, k1 = dense["k"][0], dense["k"][-1]  # h f(y0), h f(y1): the FSAL stages
            inside = True if args.out_ts is None else jnp.any((args.out_ts > t0) & (args.out_ts < t1))
            q0, q1 = jax.lax.cond(
                inside,
                lambda: (h * acceleration(y0, k0, args), h * acceleration(y1, k1, args)),
                lambda: (jnp.zeros_like(y0), jnp.zeros_like(y0)),
            )
            k = jnp.zeros((_DOPRI8_STAGES,) + y0.shape, y0.dtype).at[jnp.arange(4)].set(jnp.stack([k0, k1, q0, q1]))
            return y1, y_error, k, inner, result, fresh

        y1, y_error, k, inner, result, jac = jax.lax.cond(explicit, take_explicit, take_implicit, None)
        return y1, y_error, dict(y0=y0, y1=y1, k=k, explicit=explicit), (inner, jac), result


_DOPRI8_STAGES = len(dfx.Dopri8.tableau.c) + 1  # the rows of Dopri8's k (its dense output), 14


class _QuinticHermite(eqx.Module):
    """The quintic Hermite interpolant on ``[t0, t1]`` of ``y``, ``h y'`` and ``h² y''`` at both ends (error
    ``O(h⁶)``, the order of Kvaerno5's steps)."""

    t0: jax.Array
    t1: jax.Array
    y0: jax.Array
    y1: jax.Array
    k: jax.Array  # rows h y'(t0), h y'(t1), h² y''(t0), h² y''(t1)

    def __call__(self, t):
        s = (t - self.t0) / (self.t1 - self.t0)
        s2, s3 = s * s, s * s * s
        basis = (
            1 - s3 * (10 - 15 * s + 6 * s2),  # y0
            s - s3 * (6 - 8 * s + 3 * s2),  # h y'(t0)
            0.5 * s2 * (1 - s) ** 3,  # h² y''(t0)
            0.5 * s3 * (1 - s) ** 2,  # h² y''(t1)
            -s3 * (4 - 7 * s + 3 * s2),  # h y'(t1)
            s3 * (10 - 15 * s + 6 * s2),  # y1
        )
        return (
            basis[0] * self.y0
            + basis[1] * self.k[0]
            + basis[2] * self.k[2]
            + basis[3] * self.k[3]
            + basis[4] * self.k[1]
            + basis[5] * self.y1
        )


class _SwitchingInterpolation(dfx.AbstractLocalInterpolation):
    """The dense output of a ``SwitchingSolver`` step: Dopri8's order-7 interpolant after an explicit step, the quintic
    Hermite interpolant of ``y, y', y''`` at both ends after an implicit one."""

    t0: jax.Array
    t1: jax.Array
    explicit_path: dfx.AbstractLocalInterpolation
    implicit_path: _QuinticHermite
    explicit: jax.Array

    def __init__(self, *, t0, t1, y0, y1, k, explicit):
        self.t0, self.t1, self.explicit = t0, t1, explicit
        self.explicit_path = dfx.Dopri8.interpolation_cls(t0=t0, t1=t1, y0=y0, y1=y1, k=k)
        self.implicit_path = _QuinticHermite(t0, t1, y0, y1, k[:4])

    def evaluate(self, t0, t1=None, left=True):
        if t1 is not None:
            return self.evaluate(t1) - self.evaluate(t0)
        return jnp.where(self.explicit, self.explicit_path.evaluate(t0), self.implicit_path(t0))


def _stiffness(jac: LowRankJacobian, log_scale) -> jax.Array:
    """``ρ = max(0, −λ_min(diag(√s) H diag(√s)))`` over the cached columns ``H = ∂g/∂β[idx, idx]``."""
    root = jnp.exp(0.5 * log_scale[jac.idx])
    m = root[:, None] * jac.hess_cols[jac.idx, :] * root[None, :]
    return jnp.maximum(0.0, -jnp.linalg.eigvalsh(0.5 * (m + m.T))[0])


def implicit_solver(rank: int, atol: float) -> _JacobianReuse:
    """Kvaerno5 with the cached low-rank Jacobian: the solver of batched runs (under ``vmap`` both branches of
    ``SwitchingSolver`` would run at every step)."""
    root_finder = _LowRankChord(rtol=_ROUNDING, atol=_KAPPA * atol, max_iters=_MAX_ITERS)
    return _JacobianReuse(dfx.Kvaerno5(root_finder=root_finder, root_find_max_steps=_MAX_ITERS), rank=rank)


def switching_solver(rank: int, rtol: float, atol: float) -> SwitchingSolver:
    """Dopri8 inside jumps, Kvaerno5 on plateaus: the solver of single runs."""
    return SwitchingSolver(implicit_solver(rank, atol + rtol), explicit=dfx.Dopri8(), rtol=rtol, atol=atol)


_KAPPA = 0.1  # stage-iteration tolerance as a fraction of the step tolerance (Hairer & Wanner IV.8)
_MAX_ITERS = 7
_ROUNDING = 100.0  # the stage iteration's rounding floor, in units of eps·|y|·‖J‖·γh
_FIRST = 1e-3  # a first stage update below this fraction of the stage tolerance is converged
_STABLE = 0.8 * 5.17  # h ρ below which a step is explicit: Dopri8 is stable on [−5.17, 0] of the real axis

"""The exact gradient flow from small initialisation, in log coordinates (paper appendix C.3–C.4; docs/math.md,
*Rescaled time and log coordinates*).

Gradient flow ``du/dt = v ⊙ g``, ``dv/dt = u ⊙ g`` from ``θ(0) = α (u0, v0)`` keeps ``u_i² − v_i²``
(paper Lemma 4.1). After flipping/swapping signs so that ``u0_i > |v0_i|`` (appendix C.3), ``w = u + v``
and ``w̄ = u − v`` stay positive with ``w ⊙ w̄ = α² (u0² − v0²)``, and ``y = log w`` solves

    dy/dt = g(β),   β = u ⊙ v = (w + w̄)(w − w̄)/4,   w̄ = exp(2 log α + log(u0² − v0²) − y)

(paper eq. 13 in unscaled time ``t = τ log(1/α)``). ``y`` lies in ``[2 log α, O(1)]`` and the state
needs ``log α`` only, never ``α``: scales far below the float64 range are solved exactly. The state
``(log w, log w̄)`` of any recorded time is a ``FlowState``, from which the flow continues exactly.

The flow is stiff for small α: awake coordinates relax at rate O(1) in ``t`` while a run lasts
``O(log(1/α))``. On the plateaus it is solved with an L-stable ESDIRK method (``diffrax.Kvaerno5``) whose
stage equations are solved by a chord iteration with a low-rank Jacobian that is kept from step to step and
recomputed only when the iteration stops converging. The Jacobian of ``y ↦ g(β(y))`` is
``−∇²L · diag(u² + v²)``: its columns are negligible except for the coordinates with ``u_i² + v_i²``
of order one, so the ``jacobian_rank`` largest of those columns give it to working accuracy. Inside the
jumps (time scale O(1) in ``t``), wherever the step lies in its stability interval, a step is taken with the
explicit order-8 method ``diffrax.Dopri8`` instead, and the output times are read off the dense output. The step
size is predicted as well as controlled: from the growth of the error, and from the linear climb of the sleeping
coordinates' ``log(u_i² + v_i²)`` towards their jumps (``_Predictive``).
"""

from __future__ import annotations

from collections.abc import Callable

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import optimistix as optx

from ._checks import check_init, check_int, check_scales, check_times, degenerate_error
from ._config import BATCHING, float64, map_per_core
from ._factorized import FactorizedModel
from ._frame import apply_frame, frame_of, weights
from ._model import DiagonalModel, check_model


class FlowState(eqx.Module):
    """A point ``θ = (u, v)`` of the flow, held exactly in log coordinates (docs/math.md, *Small initialisation
    and the conservation law*).

    In the sign frame ``(swap, sign)`` that makes ``u_n > |v_n|`` (paper appendix C.3), ``w = u_n + v_n`` and
    ``w̄ = u_n − v_n`` are positive and ``w w̄ = u² − v²`` is conserved by the flow; the state keeps
    ``log w`` and ``log w̄``, so weights far below the float64 range (``log w = −1e4``) are exact.
    The weights are

        u_n, v_n = (w + w̄)/2, (w − w̄)/2,
        u = sign · (v_n if swap else u_n),   v = sign · (u_n if swap else v_n).

    A state is a point, not a scale: ``simulate_flow(model, start=state, log_alpha=..., ts=...)``
    starts there, and ``α`` only sets the time unit ``τ = t / log(1/α)`` and ``b = log w / log α``.
    Get one from [`FlowResult.state_at`][gradflow.FlowResult.state_at]. Every field has shape
    ``(p,)``, or ``(B, p)`` for a batch of states (``swap`` and ``sign`` may stay ``(p,)``).

    Attributes:
        log_w: ``log w``, finite.
        log_wbar: ``log w̄``, finite (``−inf``, i.e. ``|u_i| = |v_i|``, is the degenerate case of
            Assumption 4.2).
        swap: bool, whether the frame swaps ``u`` and ``v``.
        sign: ``±1.0``, the sign the frame takes off.
    """

    log_w: np.ndarray
    log_wbar: np.ndarray
    swap: np.ndarray
    sign: np.ndarray

    @property
    def u(self) -> np.ndarray:
        """The weights ``u`` in float64 (0 where below its range)."""
        return weights(self.log_w, self.log_wbar, self.swap, self.sign)[0]

    @property
    def v(self) -> np.ndarray:
        """The weights ``v`` in float64 (0 where below its range)."""
        return weights(self.log_w, self.log_wbar, self.swap, self.sign)[1]

    def perturbed(self, du, dv) -> FlowState:
        """The state of ``θ + (du, dv)``, computed from the exact ``w, w̄``.

        With ``(du_n, dv_n)`` the shift in the frame, ``w' = w + du_n + dv_n`` and ``w̄' = w̄ + du_n − dv_n``;
        the new frame flips the sign where ``w' < 0`` and swaps ``u, v`` where ``w' w̄' < 0``, so that
        ``log w = log|w'|``, ``log w̄ = log|w̄'|``. Coordinates with ``du_i = dv_i = 0`` keep their state
        bit for bit.

        Raises:
            ValueError: ``w'`` or ``w̄'`` is 0, i.e. ``|u_i + du_i| = |v_i + dv_i|`` (Assumption 4.2).
        """
        du = np.broadcast_to(np.asarray(du, dtype=np.float64), np.shape(self.log_w))
        dv = np.broadcast_to(np.asarray(dv, dtype=np.float64), np.shape(self.log_w))
        swap = np.broadcast_to(self.swap, du.shape)
        sign = np.broadcast_to(self.sign, du.shape)
        du_n, dv_n = apply_frame(du, dv, swap, sign)
        moved = (du != 0) | (dv != 0)
        w = np.exp(self.log_w) + (du_n + dv_n)
        wbar = np.exp(self.log_wbar) + (du_n - dv_n)
        bad = moved & ((w == 0) | (wbar == 0))
        if np.any(bad):
            raise degenerate_error(
                "the perturbed weights have |u_i| = |v_i|", np.unique(np.nonzero(bad)[-1]), "Perturb them differently."
            )
        with np.errstate(divide="ignore"):
            log_w = np.where(moved, np.log(np.abs(w)), self.log_w)
            log_wbar = np.where(moved, np.log(np.abs(wbar)), self.log_wbar)
        flip, turn = moved & (w < 0), moved & (w * wbar < 0)
        return FlowState(log_w=log_w, log_wbar=log_wbar, swap=swap ^ turn, sign=np.where(flip, -sign, sign))


class FlowResult(eqx.Module):
    """The gradient flow sampled at rescaled times ``ts``: the exact state and what follows from it.

    As diffrax's ``Solution``: the stored fields are the solution's exact state (``log w``, ``log w̄`` and
    the sign frame, see [`FlowState`][gradflow.FlowState]), the loss, the solver's ``stats`` and its
    ``result``; ``u, v, beta, b, alpha`` are computed from them. All arrays are NumPy (float64 unless
    stated). With a batch of ``B`` runs (``alpha``/``log_alpha`` given as an array, or a batch of start
    states) every field but ``ts`` gains a leading axis of length ``B``. A [`Trajectory`][gradflow.Trajectory].

    Attributes:
        ts: rescaled times ``τ = t / log(1/α)`` from the start, shape ``(m,)``.
        log_w, log_wbar: ``log w`` and ``log w̄``, shape ``(m, p)``: the exact state at every time
            (``+inf``, and the loss NaN, after the time a failed solve stopped at, see ``result``).
        swap, sign: the sign frame ``u0_i > |v0_i|``, shape ``(p,)`` (as in ``FlowState``).
        loss: ``L(θ)``, shape ``(m,)``.
        log_alpha: ``log α``.
        stats: the solver's statistics: ``num_steps``, ``num_accepted_steps``, ``num_rejected_steps``
            (arrays) and ``max_steps`` (the cap it ran under, ``None`` for none).
        result: ``"successful"``, ``"max_steps_reached"`` or ``"solver_failed"`` (the step size fell below
            the float64 resolution of ``t``, or a stage iteration failed; see ``message``) (a str array of shape
            ``()`` or ``(B,)``); with ``throw=True`` (the default) only successful results are returned.
        message: what went wrong, where (``""`` when successful), in the shape of ``result``.
    """

    ts: np.ndarray
    log_w: np.ndarray
    log_wbar: np.ndarray
    swap: np.ndarray
    sign: np.ndarray
    loss: np.ndarray
    log_alpha: np.ndarray
    stats: dict
    result: np.ndarray
    message: np.ndarray

    @property
    def u(self) -> np.ndarray:
        """The weights ``u``, shape ``(m, p)``; 0 where below the float64 range."""
        return self._weights()[0]

    @property
    def v(self) -> np.ndarray:
        """The weights ``v``, shape ``(m, p)``; 0 where below the float64 range."""
        return self._weights()[1]

    @property
    def beta(self) -> np.ndarray:
        """``β = u ⊙ v``, shape ``(m, p)``."""
        u, v = self._weights()
        return u * v

    @property
    def b(self) -> np.ndarray:
        """Log-scale weights ``b = log w / log α`` (docs/math.md, *Rescaled time and log coordinates*), exact at
        every scale, shape ``(m, p)``."""
        return self.log_w / self.log_alpha[..., None, None]

    @property
    def alpha(self) -> np.ndarray:
        """``α``; 0.0 where below the float64 range."""
        return np.exp(self.log_alpha)

    def _weights(self):
        return weights(self.log_w, self.log_wbar, self.swap[..., None, :], self.sign[..., None, :])

    def state_at(self, k: int) -> FlowState:
        """The exact state at the recorded time ``ts[k]`` (a batch of states for a batched result).

        ``simulate_flow(model, start=flow.state_at(k), log_alpha=flow.log_alpha, ts=flow.ts[k:] - flow.ts[k])``
        continues the flow: its times are measured from ``ts[k]``.
        """
        m = len(self.ts)
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not -m <= k < m:
            raise IndexError(f"k must be an integer index into the {m} recorded times; got {k!r}.")
        return FlowState(log_w=self.log_w[..., k, :], log_wbar=self.log_wbar[..., k, :], swap=self.swap, sign=self.sign)


# --------------------------------------------------------------------------------------------------
# The vector field in log coordinates.


class _Args(eqx.Module):
    model: DiagonalModel
    log_wwbar: jax.Array  # log(w w̄) = log(u² − v²) after the normalisation, conserved; > −inf by Assumption 4.2
    out_ts: jax.Array | None = None  # the output times in t: only steps across one need their dense output


def _weights(y, args: _Args):
    """``(w, w̄)`` from ``y = log w``; ``w̄ = (w w̄) / w`` is formed in log space."""
    return jnp.exp(y), jnp.exp(args.log_wwbar - y)


def _beta(y, args: _Args):
    w, wbar = _weights(y, args)
    return 0.25 * (w + wbar) * (w - wbar)


def _vector_field(t, y, args: _Args):
    """``dy/dt = g(β)`` (paper eq. 13 in unscaled time)."""
    del t
    return args.model.g(_beta(y, args))


# --------------------------------------------------------------------------------------------------
# A chord root finder with a cached low-rank Jacobian, and the solver wrapper that keeps it.


class _LowRankJacobian(eqx.Module):
    """Columns ``idx`` of the loss Hessian ``∂g/∂β`` (shape ``(p, r)``).

    The Jacobian of the vector field is ``J = ∂g/∂β · diag(u² + v²)``: its columns ``idx`` are
    these times the current ``u_i² + v_i²``, which change by many orders of magnitude while a
    coordinate wakes up, whereas ``∂g/∂β`` changes slowly.
    """

    idx: jax.Array
    hess_cols: jax.Array
    awake: jax.Array  # bool (r,): the columns computed (the others are left at 0)


def _log_scale(y, args: _Args):
    """``log(u² + v²) = log((w² + w̄²)/2)``, the log of ``∂β/∂y``."""
    return jnp.logaddexp(2.0 * y, 2.0 * (args.log_wwbar - y)) - jnp.log(2.0)


def _jacobian(y, args: _Args, rank: int) -> _LowRankJacobian:
    """The ``rank`` columns of ``∂g/∂β`` at ``β(y)`` for the coordinates of largest ``u_i² + v_i²``.

    Columns of sleeping coordinates (``u_i² + v_i² < e^_ASLEEP``: their columns of ``J`` are negligible) are
    left at 0 and not computed, so a refresh costs one Jacobian-vector product per awake coordinate.
    """
    log_scale, idx = jax.lax.top_k(_log_scale(y, args), rank)
    beta = _beta(y, args)

    def column(i, awake):
        e = jax.nn.one_hot(i, y.shape[0], dtype=y.dtype)
        return jax.lax.cond(awake, lambda: jax.jvp(args.model.g, (beta,), (e,))[1], lambda: jnp.zeros_like(y))

    awake = log_scale > _ASLEEP
    cols = jax.lax.map(lambda a: column(*a), (idx, awake))
    return _LowRankJacobian(idx=idx, hess_cols=cols.T, awake=awake)


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
    jac: _LowRankJacobian | None = None
    norm: Callable = optx.rms_norm

    def init(self, fn, y, args, options, f_struct, aux_struct, tags):
        del fn, f_struct, aux_struct, tags
        if "init_state" in options:  # diffrax's per-step Newton matrix (as for diffrax.VeryChord)
            return options["init_state"]
        # diffrax's implicit-stage arguments: (stage_index, diagonal, vf, prod, t, y_partial, args, control).
        diagonal, y_partial, flow_args, control = args[1], args[5], args[6], args[7]
        gh = jnp.asarray(diagonal * control, dtype=y.dtype)
        idx = self.jac.idx
        cols = self.jac.hess_cols * jnp.exp(_log_scale(y_partial + gh * y, flow_args)[idx])
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


class WrappedSolver(dfx.AbstractAdaptiveSolver, dfx.AbstractWrappedSolver):
    """A solver around ``solver`` that keeps its term structure, interpolation, orders and vector field;
    subclasses change ``init`` and ``step``."""

    solver: dfx.AbstractSolver

    @property
    def term_structure(self):
        return self.solver.term_structure

    @property
    def interpolation_cls(self):  # pyright: ignore
        return self.solver.interpolation_cls

    @property
    def root_finder(self):
        return self.solver.root_finder

    def order(self, terms):
        return self.solver.order(terms)

    def error_order(self, terms):
        return self.solver.error_order(terms)

    def func(self, terms, t0, y0, args):
        return self.solver.func(terms, t0, y0, args)


class _JacobianReuse(WrappedSolver):
    """Wraps an ESDIRK solver using ``_LowRankChord``: keeps the Jacobian between steps.

    A step is first tried with the cached Jacobian; if a stage iteration fails, the Jacobian is
    recomputed at the step's start and the step is retried. The cache lives in the solver state,
    so it is kept on accepted steps only.
    """

    rank: int = eqx.field(static=True)

    def init(self, terms, t0, t1, y0, args):
        return self.solver.init(terms, t0, t1, y0, args), _jacobian(y0, args, self.rank)

    def _with(self, jac):
        return eqx.tree_at(lambda s: s.root_finder.jac, self.solver, jac, is_leaf=lambda x: x is None)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        inner_state, jac = solver_state
        out = self._with(jac).step(terms, t0, t1, y0, args, inner_state, made_jump)

        def retry(_):
            fresh = _jacobian(y0, args, self.rank)
            return self._with(fresh).step(terms, t0, t1, y0, args, inner_state, made_jump), fresh

        failed = out[4] != dfx.RESULTS.successful
        out, jac = jax.lax.cond(failed, retry, lambda _: (out, jac), None)
        y1, y_error, dense_info, inner_state, result = out
        return y1, y_error, dense_info, (inner_state, jac), result


class _Switching(WrappedSolver):
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
        log_scale = _log_scale(y0, args)
        top = jax.lax.top_k(log_scale, rank)[0][-1]
        covered = jnp.zeros(y0.shape, bool).at[jac.idx].set(jac.awake)
        unseen = jnp.any((log_scale > _ASLEEP) & (log_scale >= top) & ~covered)
        jac = jax.lax.cond(unseen, lambda: _jacobian(y0, args, rank), lambda: jac)
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
                lambda: (h * _acceleration(y0, k0, args), h * _acceleration(y1, k1, args)),
                lambda: (jnp.zeros_like(y0), jnp.zeros_like(y0)),
            )
            k = jnp.zeros((_DOPRI8_STAGES,) + y0.shape, y0.dtype).at[jnp.arange(4)].set(jnp.stack([k0, k1, q0, q1]))
            return y1, y_error, k, inner, result, fresh

        y1, y_error, k, inner, result, jac = jax.lax.cond(explicit, take_explicit, take_implicit, None)
        return y1, y_error, dict(y0=y0, y1=y1, k=k, explicit=explicit), (inner, jac), result


def _acceleration(y, hf, args: _Args):
    """``h y'' = J (h y')`` at ``y``, from ``hf = h y'``: ``J = ∂g/∂β · diag(u² + v²)``, one Jacobian-vector
    product of g."""
    return jax.jvp(args.model.g, (_beta(y, args),), (jnp.exp(_log_scale(y, args)) * hf,))[1]


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
    """The dense output of a ``_Switching`` step: Dopri8's order-7 interpolant after an explicit step, the quintic
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


def _stiffness(jac: _LowRankJacobian, log_scale) -> jax.Array:
    """``ρ = max(0, −λ_min(diag(√s) H diag(√s)))`` over the cached columns ``H = ∂g/∂β[idx, idx]``."""
    root = jnp.exp(0.5 * log_scale[jac.idx])
    m = root[:, None] * jac.hess_cols[jac.idx, :] * root[None, :]
    return jnp.maximum(0.0, -jnp.linalg.eigvalsh(0.5 * (m + m.T))[0])


# --------------------------------------------------------------------------------------------------
# Step-size underflow: the one way a run without a step cap cannot go on.


class _WrappedController(dfx.AbstractAdaptiveStepSizeController):
    """A step-size controller that adapts the steps of an inner one, ``controller``, whose tolerances and norm it
    reports as its own."""

    controller: eqx.AbstractVar[dfx.AbstractAdaptiveStepSizeController]

    @property
    def rtol(self):
        return self.controller.rtol

    @property
    def atol(self):
        return self.controller.atol

    @property
    def norm(self):  # pyright: ignore[reportIncompatibleMethodOverride]
        return self.controller.norm


class _UnderflowGuard(_WrappedController):
    """Wraps an adaptive controller; stops the solve (``dt_min_reached``) when the step it proposes is below the
    float64 resolution of ``t`` (``dt < _UNDERFLOW · eps · max(|t|, 1)``): the solve cannot go on (Hairer & Wanner,
    Solving ODEs II, §IV.8, "step size too small").

    After a rejected step the next step may not be longer (Hairer, Nørsett & Wanner, Solving ODEs I, §II.4): the
    controller would otherwise grow it again and step back into the failure (on the toy and the dense head, 20 %
    fewer rejected steps and 3–5 % fewer steps in all). A proposed step that would end less than ``_SNAP`` of its
    length before an output time in ``step_ts`` is stretched onto it: otherwise the remainder is a sliver step
    (down to one ulp of ``t``) from which the controller, growing the step at most ``_FACTORMAX``-fold per step,
    needs dozens of steps to recover, and which this guard would take for an underflow. It does not change the
    steps otherwise.
    """

    controller: dfx.AbstractAdaptiveStepSizeController
    step_ts: jax.Array | None = None

    def wrap(self, direction):
        return _UnderflowGuard(self.controller.wrap(direction), self.step_ts)

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        t1, state = self.controller.init(terms, t0, t1, y0, dt0, args, func, error_order)
        return t1, (state, jnp.array(False))

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state):
        state, rejected = controller_state
        keep, next_t0, next_t1, made_jump, state, result = self.controller.adapt_step_size(
            t0, t1, y0, y1_candidate, args, y_error, error_order, state
        )
        next_t1 = jnp.where(keep & rejected, jnp.minimum(next_t1, next_t0 + (t1 - t0)), next_t1)
        if self.step_ts is not None:
            target = self.step_ts[jnp.minimum(jnp.searchsorted(self.step_ts, next_t1), len(self.step_ts) - 1)]
            sliver = (target > next_t1) & (target - next_t1 < _SNAP * (next_t1 - next_t0))
            next_t1 = jnp.where(sliver, target, next_t1)
        eps = jnp.finfo(jnp.result_type(next_t0)).eps
        tiny = next_t1 - next_t0 < _UNDERFLOW * eps * jnp.maximum(jnp.abs(next_t0), 1.0)
        result = dfx.RESULTS.where(tiny, dfx.RESULTS.dt_min_reached, result)
        return keep, next_t0, next_t1, made_jump, (state, ~keep), result


class _Predictive(_WrappedController):
    """The step-size controller of a single run: the integral controller ``controller`` with two predictions that
    it cannot make from the last error alone.

    - Gustafsson's predictive step (Hairer & Wanner, Solving ODEs II, §IV.8; Gustafsson, ACM TOMS 20, 1994): from
      the second accepted step on, the step after an accepted step ``n`` is also at most
      ``safety · h_n (h_n / h_{n−1}) (1 / E_n)^(1/k) (E_{n−1} / E_n)^(1/k)``, with ``E`` the scaled errors of the
      last two accepted steps (``E_{n−1}`` floored at ``_HISTORY_FLOOR``) and ``k`` the error order. It
      extrapolates the error's growth from step to step: at a jump's onset the error grows several-fold per step
      at a fixed ``h``, and the integral controller, which expects the error of the last step again, fails every
      other step there.
    - The wake horizon: on a plateau ``log w`` moves at the constant speed ``g(θ^k)`` (docs/math.md, *Algorithm 1:
      the greedy limit*), so a sleeping coordinate's ``ℓ_i = log(u_i² + v_i²)`` grows linearly up to its jump;
      a step whose stages carry it past ``ℓ_i ≈ 0`` overflows (explicit) or fails its stage iteration
      (implicit). The next step is capped so that no stage of it (they reach ``_REACH · h``) carries a sleeping
      coordinate (``ℓ_i < _AWAKE``), at the speed ``ℓ_i`` had over the last step, past ``_LAND``, nor by more
      than ``_ONSET`` once it is past ``_LAND``. A run then lands on a jump's onset in one step, instead of
      growing its step into the jump and shrinking it after each failure.

    Both only shorten the step that ``controller`` proposes, after accepted steps. As the horizon keeps steps out
    of the jumps, ``controller`` may grow the step ``_FACTORMAX_PREDICTED``-fold per step (on the plateaus) instead
    of ``_FACTORMAX``.
    """

    controller: dfx.PIDController

    def wrap(self, direction):
        return _Predictive(self.controller.wrap(direction))

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        t1, state = self.controller.init(terms, t0, t1, y0, dt0, args, func, error_order)
        one = jnp.ones((), jnp.result_type(t1))
        return t1, (state, one, one, jnp.array(False))

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state):
        state, h_prev, err_prev, started = controller_state
        keep, next_t0, next_t1, made_jump, state, result = self.controller.adapt_step_size(
            t0, t1, y0, y1_candidate, args, y_error, error_order, state
        )
        c, h = self.controller, t1 - t0
        scale = c.atol + c.rtol * jnp.maximum(jnp.abs(y0), jnp.abs(y1_candidate))
        err = c.norm(y_error / scale)
        err = jnp.where(jnp.isfinite(err) & (err > 0), err, 1.0)  # only read after an accepted step
        gustafsson = c.safety * (h / h_prev) * ((err_prev / err) / err) ** (1 / error_order)
        gustafsson = jnp.clip(gustafsson, c.factormin, c.factormax)
        next_t1 = jnp.where(keep & started, jnp.minimum(next_t1, next_t0 + h * gustafsson), next_t1)

        ell0, ell1 = _log_scale(y0, args), _log_scale(y1_candidate, args)
        speed = (ell1 - ell0) / h
        waking = (ell1 < _AWAKE) & (speed > 0)
        room = jnp.maximum(_LAND - ell1, _ONSET)
        horizon = jnp.min(jnp.where(waking, room / (_REACH * jnp.where(waking, speed, 1.0)), jnp.inf))
        next_t1 = jnp.where(keep, jnp.minimum(next_t1, next_t0 + horizon), next_t1)

        h_prev = jnp.where(keep, h, h_prev)
        err_prev = jnp.where(keep, jnp.maximum(err, _HISTORY_FLOOR), err_prev)
        return keep, next_t0, next_t1, made_jump, (state, h_prev, err_prev, started | keep), result


def solve_onto(vector_field, solver, y0, args, out_ts, controller, max_steps, *, dense=False):
    """Solve ``dy/dt = vector_field(t, y, args)`` from ``t = 0`` to ``out_ts[-1]``, with ``controller`` guarded
    against step-size underflow. Returns ``ys`` at ``out_ts``, the diffrax result and the step counts
    ``(steps, accepted, rejected)``.

    With ``dense=False`` the solver steps exactly onto every output time (for solvers whose dense output is
    less accurate than their steps); with ``dense=True`` it steps freely and ``ys`` comes from the solver's
    dense output (``_Switching``'s order-7 interpolant inside jumps).
    """
    guarded = _UnderflowGuard(controller, out_ts[-1:] if dense else out_ts)
    sol = dfx.diffeqsolve(
        dfx.ODETerm(vector_field),
        solver,
        t0=jnp.zeros_like(out_ts[-1]),
        t1=out_ts[-1],
        dt0=None,
        y0=y0,
        args=args,
        saveat=dfx.SaveAt(ts=out_ts),
        stepsize_controller=guarded if dense else dfx.ClipStepSizeController(guarded, step_ts=out_ts),
        max_steps=max_steps,
        throw=False,
    )
    stats = (sol.stats["num_steps"], sol.stats["num_accepted_steps"], sol.stats["num_rejected_steps"])
    return sol.ys, sol.result, stats


# --------------------------------------------------------------------------------------------------
# The solve.


def _default_solver(rank: int, atol: float) -> _JacobianReuse:
    """Kvaerno5 with the cached low-rank Jacobian: the solver of batched runs (under ``vmap`` both branches of
    ``_Switching`` would run at every step)."""
    root_finder = _LowRankChord(rtol=_ROUNDING, atol=_KAPPA * atol, max_iters=_MAX_ITERS)
    return _JacobianReuse(dfx.Kvaerno5(root_finder=root_finder, root_find_max_steps=_MAX_ITERS), rank=rank)


def _switching_solver(rank: int, rtol: float, atol: float) -> _Switching:
    """Dopri8 inside jumps, Kvaerno5 on plateaus: the solver of single runs."""
    return _Switching(_default_solver(rank, atol + rtol), explicit=dfx.Dopri8(), rtol=rtol, atol=atol)


_KAPPA = 0.1  # stage-iteration tolerance as a fraction of the step tolerance (Hairer & Wanner IV.8)
_MAX_ITERS = 7
_FACTORMAX = 3.0  # step growth per step: larger steps overshoot into jumps, wasting Jacobians
_FACTORMAX_PREDICTED = 10.0  # the same under ``_Predictive``, whose wake horizon keeps the steps out of the jumps
_ROUNDING = 100.0  # the stage iteration's rounding floor, in units of eps·|y|·‖J‖·γh
_FIRST = 1e-3  # a first stage update below this fraction of the stage tolerance is converged
_UNDERFLOW = 100.0  # steps below this many ulps of t cannot go on
_SNAP = 0.1  # a step ending this fraction of its length or less before an output time is stretched onto it
_ASLEEP = np.log(1e-10)  # log(u_i² + v_i²) below which a coordinate's Jacobian column is not computed
_STABLE = 0.8 * 5.17  # h ρ below which a step is explicit: Dopri8 is stable on [−5.17, 0] of the real axis
_HISTORY_FLOOR = 1e-2  # the previous error in Gustafsson's step is at least this (as in Hairer & Wanner's RADAU5)
_AWAKE = -5.0  # log(u_i² + v_i²) from which a coordinate is in its jump, not sleeping
_LAND = -20.0  # a step lands a waking coordinate's log(u_i² + v_i²) here (β_i ≈ 1e-9) …
_ONSET = 8.0  # … and moves it by at most this much more per step
_REACH = float(np.max(dfx.Kvaerno5.tableau.c))  # a step's stages reach t0 + 1.23 h (Kvaerno5; Dopri8's, t0 + h)


@eqx.filter_jit
def _solve(model, y0, log_wwbar, log_alpha, ts, rtol, atol, *, solver, max_steps, batched):
    def one(y0, log_wwbar, la):
        L = -la
        args = _Args(model=model, log_wwbar=log_wwbar, out_ts=ts * L)
        dense = isinstance(solver, _Switching)
        if dense:
            pid = _Predictive(dfx.PIDController(rtol=rtol, atol=atol, factormax=_FACTORMAX_PREDICTED))
        else:
            pid = dfx.PIDController(rtol=rtol, atol=atol, factormax=_FACTORMAX)
        ys, result, stats = solve_onto(_vector_field, solver, y0, args, ts * L, pid, max_steps, dense=dense)
        w, wbar = _weights(ys, args)
        u, v = 0.5 * (w + wbar), 0.5 * (w - wbar)
        loss = jax.vmap(model.loss_of_beta)(u * v)
        return ys, log_wwbar - ys, loss, result, stats

    if batched:
        return jax.vmap(one)(y0, log_wwbar, log_alpha)
    return one(y0, log_wwbar, log_alpha)


def check_state(start, p: int):
    """Validate a start state; return ``(log w, log w̄, swap, sign)`` as arrays of ``log w``'s shape."""
    if not isinstance(start, FlowState):
        raise TypeError(f"start must be a gradflow.FlowState (e.g. flow.state_at(k)); got {type(start).__name__}.")
    log_w = np.asarray(start.log_w, dtype=np.float64)
    if log_w.ndim not in (1, 2) or log_w.shape[-1] != p or log_w.size == 0:
        raise ValueError(f"start.log_w must have shape (p,) or (B, p) with p = {p}; got {log_w.shape}.")
    log_wbar = np.asarray(start.log_wbar, dtype=np.float64)
    if log_wbar.shape != log_w.shape:
        raise ValueError(f"start.log_wbar must have the shape of start.log_w, {log_w.shape}; got {log_wbar.shape}.")
    for name, x in (("log_w", log_w), ("log_wbar", log_wbar)):
        if np.any(np.isnan(x) | (x == np.inf)):
            raise ValueError(f"start.{name} contains NaN or +inf.")
        if np.any(x == -np.inf):
            raise degenerate_error(
                f"start.{name} is -inf (|u_i| = |v_i|)",
                np.unique(np.nonzero(x == -np.inf)[-1]),
                "The log-coordinate flow cannot represent it; start from a state with |u_i| ≠ |v_i|.",
            )
    swap, sign = np.asarray(start.swap), np.asarray(start.sign, dtype=np.float64)
    for name, x in (("swap", swap), ("sign", sign)):
        if x.shape not in (log_w.shape, (p,)):
            raise ValueError(f"start.{name} must have shape {log_w.shape} or ({p},); got {x.shape}.")
    if swap.dtype != bool:
        raise ValueError(f"start.swap must be a boolean array; got dtype {swap.dtype}.")
    if not np.all(np.abs(sign) == 1):
        raise ValueError("start.sign must hold only +1.0 and -1.0.")
    return log_w, log_wbar, np.broadcast_to(swap, log_w.shape), np.broadcast_to(sign, log_w.shape)


@float64
def simulate_flow(
    model: DiagonalModel,
    *,
    ts,
    u0=None,
    v0=None,
    start: FlowState | None = None,
    alpha=None,
    log_alpha=None,
    rtol: float = 0.0,
    atol: float = 1e-8,
    max_steps: int | None = None,
    jacobian_rank: int | None = None,
    batching: str = "auto",
    throw: bool = True,
) -> FlowResult:
    """Solve the gradient flow from ``θ(0) = α (u0, v0)`` (or from ``start``) exactly, at rescaled times ``ts``.

    Integrates ``d(log w)/dτ = log(1/α) g(β)`` (paper appendix C.3–C.4, eq. 13; docs/math.md, *Rescaled time and
    log coordinates*) with an L-stable implicit method on the plateaus and an explicit order-8 one inside the
    jumps, reading ``ts`` off the dense output (a batch under ``vmap``: the implicit method throughout, stepping
    exactly onto every ``ts``). Works for every scale: ``log_alpha`` may be far below the float64 range (−1e4), and the
    cost barely grows with ``log(1/α)``.

    Args:
        model: the model and data.
        ts: rescaled times ``τ = t / log(1/α)`` from the start, 1-D, increasing, ``ts[0] ≥ 0``.
        u0, v0: initialisation directions, shape ``(p,)``, with ``|u0_i| ≠ |v0_i|`` (Assumption 4.2; a
            near-degenerate gap is an ``AssumptionWarning``, see docs/math.md).
        start: instead of ``u0, v0``, the exact state to start from, e.g. ``flow.state_at(k)``: a
            [`FlowState`][gradflow.FlowState], or a batch of them (solved together, one compilation).
            ``ts`` then counts from that state, and ``α`` sets only the time unit and ``b = log w / log α``;
            ``simulate_flow(model, start=flow.state_at(k), log_alpha=flow.log_alpha, ts=flow.ts[k:] - flow.ts[k])``
            continues ``flow``.
        alpha: the scale, in (0, 1), or a 1-D array of scales (a batch of runs, one compilation; see
            ``batching``); with a batch of start states, one scale per state.
        log_alpha: ``log α`` (< 0) instead of ``alpha``, scalar or 1-D array.
        rtol, atol: the local error of each step in ``log w`` is kept below ``atol + rtol |log w|``.
            ``atol`` is the relative accuracy of the weights ``u, v``; a nonzero ``rtol`` loosens the
            control of sleeping coordinates (``|log w| ≈ b log(1/α)``) and so of the times they wake.
        max_steps: the most solver steps (accepted and rejected) before giving up; ``None`` (the default):
            no cap, the solve runs until ``ts[-1]`` or until it cannot go on (its step size falls below the
            float64 resolution of ``t``, which it reports). Give a number to bound a run's cost: a step costs
            13 evaluations of ``g`` (explicit) or about 20 (implicit) (docs/benchmarks.md).
        jacobian_rank: how many Jacobian columns (those of the largest ``u_i² + v_i²``; sleeping
            coordinates' are skipped) the implicit stages use; default ``min(p, 64)``, or ``min(p, 16)`` for
            a batch (under ``vmap`` every column is computed at every step). Raise it if more coordinates
            are awake at once.
        batching: how a batch of runs is solved. ``"separate"``: each run alone, as a single run is, as
            many at once as the machine has cores. ``"vmap"``: all together in one vmapped solve, the implicit
            method throughout, in lock-step (every run takes as many steps as the longest) and with the
            Jacobian columns recomputed at every step; it pays only on an accelerator, where the runs of a
            step cost one. ``"auto"`` (the default): ``"vmap"`` on a GPU or TPU, ``"separate"`` on the CPU,
            where it is 24× faster on the dense attention head (docs/benchmarks.md, *Batches of runs on the
            CPU*).
        throw: as in diffrax: raise a ``RuntimeError`` if a run does not reach ``ts[-1]``. With
            ``throw=False`` the result comes back with the failure in ``result`` and ``message``, and
            the state after the time it stopped at is ``+inf``.

    Returns:
        A [`FlowResult`][gradflow.FlowResult].

    Raises:
        ValueError: bad shapes, non-finite values, a degenerate ``|u0_i| = |v0_i|`` (or ``−inf`` in a
            start state), α outside (0, 1), both or neither of ``alpha``/``log_alpha``, both or neither
            of ``u0, v0``/``start``, a batch of states and of scales of different sizes, or ``ts`` not
            increasing from ``τ ≥ 0``.
        RuntimeError: with ``throw=True``, the solver did not reach ``ts[-1]`` (the message says where it
            stopped and why).

    A [`FactorizedModel`][gradflow.FactorizedModel] (``u0, v0`` tuples of factors) gets its own exact flow and
    a [`FactorizedFlowResult`][gradflow.FactorizedFlowResult] (docs/math.md, *Full weights: the exact flow*).
    """
    if isinstance(model, FactorizedModel):
        from ._rank_flow import rank_flow  # the factorised engine builds on this module

        kw = dict(
            start=start, alpha=alpha, log_alpha=log_alpha, jacobian_rank=jacobian_rank, batching=batching, throw=throw
        )
        return rank_flow(model, ts=ts, u0=u0, v0=v0, rtol=rtol, atol=atol, max_steps=max_steps, **kw)
    check_model(model)
    log_a, batched = check_scales(alpha, log_alpha)
    if start is None:
        if u0 is None or v0 is None:
            raise ValueError(
                "give the initialisation directions u0 and v0 (θ(0) = α (u0, v0)), or start (a FlowState)."
            )
        u0, v0 = check_init(u0, v0, model.p, model.names, stacklevel=3)
        y0, log_wwbar, swap, sign = initial_state(u0, v0, log_a)
    else:
        if u0 is not None or v0 is not None:
            raise ValueError("give either u0 and v0 (the flow from α (u0, v0)) or start (a FlowState), not both.")
        y0, log_wbar, swap, sign = check_state(start, model.p)
        log_wwbar = y0 + log_wbar
        if y0.ndim == 2 and batched and y0.shape[0] != log_a.shape[0]:
            raise ValueError(
                f"got a batch of {y0.shape[0]} start states and {log_a.shape[0]} scales; give one scale "
                "per state, or a single scale."
            )
        batched = batched or y0.ndim == 2
    if batched:
        n = max(np.shape(log_a)[:1] + np.shape(y0)[:-1])
        y0, log_wwbar, swap, sign = (np.broadcast_to(x, (n, model.p)) for x in (y0, log_wwbar, swap, sign))
        log_a = np.broadcast_to(log_a, (n,))
    ts = check_times(ts)
    max_steps = None if max_steps is None else check_int(max_steps, "max_steps")
    if not (rtol >= 0 and atol >= 0 and rtol + atol > 0):
        raise ValueError(f"rtol and atol must be >= 0 and not both 0; got rtol={rtol!r}, atol={atol!r}.")
    vmapped = vmap_batches(batching) and batched
    rank = default_rank(model.p, vmapped) if jacobian_rank is None else int(jacobian_rank)
    if not 1 <= rank <= model.p:
        raise ValueError(f"jacobian_rank must lie in [1, p={model.p}]; got {jacobian_rank!r}.")
    solver = _default_solver(rank, atol + rtol) if vmapped else _switching_solver(rank, rtol, atol)

    def solve(y0, log_wwbar, log_a, batched):
        return _solve(
            model,
            y0,
            log_wwbar,
            log_a,
            jnp.asarray(ts),
            rtol,
            atol,
            solver=solver,
            max_steps=max_steps,
            batched=batched,
        )

    if batched and not vmapped:
        out = solve_separately(lambda j: solve(y0[j], log_wwbar[j], log_a[j], False), len(y0))
    else:
        out = solve(jnp.asarray(y0), jnp.asarray(log_wwbar), jnp.asarray(log_a), batched)
    result = flow_result(out, ts, log_a, swap, sign, max_steps)
    failed = np.flatnonzero(np.ravel(result.result) != "successful")
    if throw and failed.size:
        raise RuntimeError(str(np.ravel(result.message)[failed[0]]))
    return result


def vmap_batches(batching: str) -> bool:
    """Whether a batch of runs is solved under ``vmap`` (``batching="vmap"``, or ``"auto"`` off the CPU) rather
    than run by run (see ``simulate_flow``'s ``batching``)."""
    if batching not in BATCHING:
        raise ValueError(f"batching must be one of {BATCHING}; got {batching!r}.")
    return batching == "vmap" or (batching == "auto" and jax.default_backend() != "cpu")


def solve_separately(solve_one: Callable, runs: int):
    """``solve_one(j)`` for every run ``j`` of a batch, one per core (``map_per_core``); the outputs stacked as a
    ``vmap``-ed solve's."""
    outs = map_per_core(solve_one, range(runs))
    return jax.tree_util.tree_map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *outs)


def default_rank(p: int, batched: bool) -> int:
    """The default ``jacobian_rank``: ``min(p, 64)``, or ``min(p, 16)`` for a batch of runs (under ``vmap``
    the lazy Jacobian refresh becomes a refresh at every step, whose cost grows with the rank)."""
    return min(p, 16 if batched else 64)


def initial_state(u0, v0, log_a) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(log w, log(w w̄), swap, sign)`` of ``θ(0) = α (u0, v0)`` for checked ``u0, v0``, at each ``log α`` of ``log_a``.

    In the frame where ``u0_i > |v0_i|``: ``log w = log α + log(u0 + v0)`` and
    ``log(w w̄) = 2 log α + log(u0² − v0²)`` (docs/math.md, *Rescaled time and log coordinates*).
    """
    swap, sign = frame_of(u0, v0)
    un, vn = apply_frame(u0, v0, swap, sign)
    log_a = np.asarray(log_a, dtype=np.float64)
    y0 = log_a[..., None] + np.log(un + vn)
    log_wwbar = 2.0 * log_a[..., None] + (np.log(un - np.abs(vn)) + np.log(un + np.abs(vn)))
    return y0, log_wwbar, swap, sign


def flow_result(out, ts, log_a, swap, sign, max_steps) -> FlowResult:
    """The :class:`FlowResult` of the solver's output ``out`` (one run or a batch), with ``result``/``message``."""
    log_w, log_wbar, loss, solver_result, stats = jax.tree_util.tree_map(np.asarray, out)
    result, message = _status(solver_result, log_w, ts, log_a, max_steps)
    return FlowResult(
        ts=ts,
        log_w=log_w,
        log_wbar=log_wbar,
        swap=np.array(swap),
        sign=np.array(sign),
        loss=loss,
        log_alpha=np.array(log_a),
        stats=dict(num_steps=stats[0], num_accepted_steps=stats[1], num_rejected_steps=stats[2], max_steps=max_steps),
        result=result,
        message=message,
    )


def _status(solver_result, log_w, ts, log_a, max_steps) -> tuple[np.ndarray, np.ndarray]:
    """Each run's ``result`` and ``message``, from diffrax's result (read through diffrax's public API)."""
    ok = np.asarray(solver_result == dfx.RESULTS.successful)
    hit = np.asarray(solver_result == dfx.RESULTS.max_steps_reached)
    stuck = np.asarray(solver_result == dfx.RESULTS.dt_min_reached)
    result = np.where(ok, "successful", np.where(hit, "max_steps_reached", "solver_failed"))
    message = np.full(result.shape, "", dtype=object)
    for k in np.ndindex(result.shape):
        if ok[k]:
            continue
        done = np.all(np.isfinite(log_w[k]), axis=-1)
        reached = ts[np.flatnonzero(done)[-1]] if done.any() else 0.0
        where = f"log α = {log_a[k]:.6g}: the flow stopped after τ = {reached:.6g} (ts[-1] = {ts[-1]:.6g})"
        if hit[k]:
            message[k] = (
                f"simulate_flow hit max_steps={max_steps} at {where}. Raise max_steps, loosen atol, or shorten ts."
            )
        elif stuck[k]:
            message[k] = (
                f"simulate_flow cannot go on at {where}: its step size fell below the float64 resolution of t, "
                "so the flow changes faster there than float64 can follow at this atol (a blow-up or a "
                "non-smooth g). Check the model's g near that time, or loosen atol."
            )
        else:
            why = dfx.RESULTS[jax.tree_util.tree_map(lambda x: x[k], solver_result)]  # noqa: B023
            message[k] = (
                f"simulate_flow failed at {where}: {why} Try a larger jacobian_rank, a looser atol, or a larger "
                "max_steps."
            )
    return result, message.astype(str)

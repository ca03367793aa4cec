"""Step-size controllers that adapt the steps of an inner PID controller: the guard against step-size underflow,
the predictive control of a single run (Gustafsson's step and an engine's horizon), and the step budget of a solve
run in segments."""

from __future__ import annotations

from collections.abc import Callable

import diffrax as dfx
import equinox as eqx
import jax.numpy as jnp


class WrappedController(dfx.AbstractAdaptiveStepSizeController):
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


class UnderflowGuard(WrappedController):
    """Wraps an adaptive controller; stops the solve (``dt_min_reached``) when the step it proposes is below the
    float64 resolution of ``t`` (``dt < UNDERFLOW · eps · max(|t|, floor)``, ``floor = 1`` unless given): the solve
    cannot go on (Hairer & Wanner, Solving ODEs II, §IV.8, "step size too small"). A solve whose first step may be
    below ``eps`` (the deep linear split's held plateaus: diffrax sizes it from a velocity that carries the rounding of
    rates up to ``1e41``) takes ``floor = 0``.

    After a rejected step the next step may not be longer (Hairer, Nørsett & Wanner, Solving ODEs I, §II.4): the
    controller would otherwise grow it again and step back into the failure (on the toy and the dense head, 20 %
    fewer rejected steps and 3–5 % fewer steps in all). A proposed step that would end less than ``SNAP`` of its
    length before an output time in ``step_ts`` is stretched onto it: otherwise the remainder is a sliver step
    (down to one ulp of ``t``) from which the controller, growing the step a bounded factor per step, needs dozens
    of steps to recover, and which this guard would take for an underflow. It does not change the steps otherwise.
    """

    controller: dfx.AbstractAdaptiveStepSizeController
    step_ts: jnp.ndarray | None = None
    floor: float = eqx.field(static=True, default=1.0)

    def wrap(self, direction):
        return UnderflowGuard(self.controller.wrap(direction), self.step_ts, self.floor)

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
            sliver = (target > next_t1) & (target - next_t1 < SNAP * (next_t1 - next_t0))
            next_t1 = jnp.where(sliver, target, next_t1)
        eps = jnp.finfo(jnp.result_type(next_t0)).eps
        tiny = next_t1 - next_t0 < UNDERFLOW * eps * jnp.maximum(jnp.abs(next_t0), self.floor)
        result = dfx.RESULTS.where(tiny, dfx.RESULTS.dt_min_reached, result)
        return keep, next_t0, next_t1, made_jump, (state, ~keep), result


class PredictiveController(WrappedController):
    """The step-size controller of a single run: the integral controller ``controller`` with two predictions that
    it cannot make from the last error alone.

    - Gustafsson's predictive step (Hairer & Wanner, Solving ODEs II, §IV.8; Gustafsson, ACM TOMS 20, 1994): from
      the second accepted step on, the step after an accepted step ``n`` is also at most
      ``safety · h_n (h_n / h_{n−1}) (1 / E_n)^(1/k) (E_{n−1} / E_n)^(1/k)``, with ``E`` the scaled errors of the
      last two accepted steps (``E_{n−1}`` floored at ``HISTORY_FLOOR``) and ``k`` the error order. It
      extrapolates the error's growth from step to step: at a jump's onset the error grows several-fold per step
      at a fixed ``h``, and the integral controller, which expects the error of the last step again, fails every
      other step there.
    - The engine's horizon: ``horizon(h, y0, y1, args)``, the longest next step that the engine foresees from the
      accepted step ``y0 → y1`` of length ``h`` (``inf`` for no limit); the diagonal flow's wake horizon lands a
      waking coordinate on its jump's onset (docs/api-flow.md).

    Both only shorten the step that ``controller`` proposes, after accepted steps.
    """

    controller: dfx.PIDController
    horizon: Callable

    def wrap(self, direction):
        return PredictiveController(self.controller.wrap(direction), self.horizon)

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
        next_t1 = jnp.where(keep, jnp.minimum(next_t1, next_t0 + self.horizon(h, y0, y1_candidate, args)), next_t1)
        h_prev = jnp.where(keep, h, h_prev)
        err_prev = jnp.where(keep, jnp.maximum(err, HISTORY_FLOOR), err_prev)
        return keep, next_t0, next_t1, made_jump, (state, h_prev, err_prev, started | keep), result


class StepBudget(WrappedController):
    """Wraps the outermost controller of a solve run in segments (``gradflow._solver._segments``): stops the solve
    once it has taken the steps its budget allows, and starts the next segment's first step where the last one
    stopped.

    It is given its state, ``(state, left, proposed, kept)``: the inner controller's state, the steps left in this
    segment (a traced number, so that a segment's length changes without a new compilation), and the end of the
    next step that the inner controller proposed after the last one, and whether that one was accepted. The step
    that spends the budget ends the solve with ``max_steps_reached`` (diffrax's loop then stops, the step itself
    kept as usual). ``init``, which diffrax calls only for the first step's end when it is given the controller's
    state, starts it at ``tnext``: the next segment takes the very steps an uninterrupted solve would have taken.
    """

    controller: dfx.AbstractAdaptiveStepSizeController
    tnext: jnp.ndarray

    def wrap(self, direction):
        return StepBudget(self.controller.wrap(direction), self.tnext)

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        return self.tnext, None  # diffrax keeps the state it is given

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state):
        state, left, _, _ = controller_state
        keep, next_t0, next_t1, made_jump, state, result = self.controller.adapt_step_size(
            t0, t1, y0, y1_candidate, args, y_error, error_order, state
        )
        left = left - 1
        spent = (left <= 0) & (result == dfx.RESULTS.successful)
        result = dfx.RESULTS.where(spent, dfx.RESULTS.max_steps_reached, result)
        return keep, next_t0, next_t1, made_jump, (state, left, next_t1, keep), result


UNDERFLOW = 100.0  # steps below this many ulps of t cannot go on
SNAP = 0.1  # a step ending this fraction of its length or less before an output time is stretched onto it
HISTORY_FLOOR = 1e-2  # the previous error in Gustafsson's step is at least this (as in Hairer & Wanner's RADAU5)

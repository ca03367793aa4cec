"""Long solves in bounded segments: a diffrax solve that returns to Python every few hundred milliseconds, so that
Ctrl-C stops it within a segment and a progress bar follows it, and that takes the very steps an uninterrupted
solve takes.

A :class:`Solve` describes one solve onto output times; ``start`` and ``advance`` are pure functions for a family
to compile (``vmap``-ed for a batch): ``start(y0)`` is the :class:`Segment` at ``t = 0``, and ``advance(segment,
budget)`` takes at most ``budget`` more steps (none for a budget of 0). :func:`run_segments` is the Python loop that
calls a compiled ``advance`` until every run has finished, failed or spent ``max_steps``, sizing the segments to
``SEGMENT_SECONDS``, showing the progress and stopping at Ctrl-C. Any integrator that can advance its own state by at
most a given number of steps can use the same loop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import diffrax as dfx
import equinox as eqx
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import numpy as np
from diffrax._term import WrapTerm
from tqdm.auto import tqdm

from .._config import stop_requested
from ._controllers import StepBudget, UnderflowGuard

FIRST_STEPS = 8  # the first two segments' steps: the first one compiles, the second one times a step
SEGMENT_SECONDS = 0.5  # the length of a later segment: Ctrl-C stops a solve within about this long
GROWTH = 8  # a segment has at most this many times the steps of the one before
PROGRESS_DELAY = 2.0  # a progress bar shows after this many seconds, so that short solves stay quiet
ETA_SECONDS = 1.0  # the time left is estimated from at least this long a stretch after the first compiled segment


class Segment(eqx.Module):
    """A solve between two segments: what diffrax needs to take the next step as an uninterrupted solve would, and the
    outputs so far.

    ``t`` is the time reached and ``tnext`` the end of the step to take next (diffrax's ``tprev`` and ``tnext``);
    ``ys`` holds the outputs at the output times up to ``t`` and ``+inf`` after; ``stats`` counts the steps taken,
    accepted and rejected; ``result`` is diffrax's result, ``successful`` while the solve can go on.
    """

    t: jax.Array
    tnext: jax.Array
    y: jax.Array
    solver_state: object
    controller_state: object
    made_jump: jax.Array
    ys: jax.Array
    stats: jax.Array
    result: dfx.RESULTS


class Solve(eqx.Module):
    """``dy/dt = vector_field(t, y, args)`` from ``t = 0`` to ``out_ts[-1]`` by ``solver``, with ``controller`` guarded
    against step-size underflow (:class:`UnderflowGuard`), in segments.

    With ``dense=False`` the solver steps exactly onto every output time (for solvers whose dense output is less
    accurate than their steps); with ``dense=True`` it steps freely and the outputs come from its dense output. An
    implicit ``solver`` must carry its root finder's tolerances (diffrax fills in those left to the step-size
    controller only when it initialises the solve itself). ``event`` (a ``diffrax.Event``) ends the solve at the
    step where it fires (result ``event_occurred``); ``underflow_floor`` is :class:`UnderflowGuard`'s ``floor``.
    """

    vector_field: Callable
    solver: dfx.AbstractSolver
    args: object
    out_ts: jax.Array
    controller: dfx.AbstractAdaptiveStepSizeController
    dense: bool = eqx.field(static=True, default=False)
    event: dfx.Event | None = None
    underflow_floor: float = eqx.field(static=True, default=1.0)

    def _terms(self):
        return dfx.ODETerm(self.vector_field)

    def _controller(self):
        guarded = UnderflowGuard(self.controller, self.out_ts[-1:] if self.dense else self.out_ts, self.underflow_floor)
        return guarded if self.dense else dfx.ClipStepSizeController(guarded, step_ts=self.out_ts)

    def start(self, y0) -> Segment:
        """The solve at ``t = 0``, initialised as ``diffrax.diffeqsolve`` initialises it: the controller's first step
        and the solver's state from diffrax's wrapped terms (whose first step differs from a plain ``ODETerm``'s:
        diffrax's initial-step heuristic runs for an ``ODETerm`` only) and the controller wrapped in the time's
        direction. With nothing to solve (``out_ts = [0]``) the outputs are ``y0``."""
        t1 = self.out_ts[-1]
        t0 = jnp.zeros_like(t1)
        direction = jnp.where(t0 < t1, 1, -1)
        terms = WrapTerm(self._terms(), direction)
        error_order = self.solver.error_order(terms)
        tnext, controller_state = (
            self._controller().wrap(direction).init(terms, t0, t1, y0, None, self.args, self.solver.func, error_order)
        )
        tnext = jnp.minimum(tnext, t1)
        return Segment(
            t=t0,
            tnext=tnext,
            y=y0,
            solver_state=self.solver.init(terms, t0, tnext, y0, self.args),
            controller_state=jax.tree_util.tree_map(jnp.asarray, controller_state),  # as advance returns it
            made_jump=jnp.array(False),
            ys=jax.tree_util.tree_map(
                lambda x: jnp.where(t0 < t1, jnp.inf, jnp.broadcast_to(x, (len(self.out_ts),) + x.shape)), y0
            ),
            stats=jnp.zeros(3, int),
            result=dfx.RESULTS.successful,
        )

    def advance(self, seg: Segment, budget) -> Segment:
        """``seg`` after at most ``budget`` more steps (``seg`` itself for a budget of 0).

        One ``diffeqsolve`` from ``seg.t`` to ``out_ts[-1]``, given the solver's and the controller's states and
        started on the step ``seg.tnext`` (:class:`StepBudget`); the output times before ``seg.t`` are moved onto it
        (diffrax takes none before its ``t0``), and only the outputs in ``(seg.t, t reached]`` are kept from it.
        """
        t1 = self.out_ts[-1]
        active = budget > 0
        t0 = jnp.where(active, seg.t, t1)  # a solve from t1 takes no step
        sol = dfx.diffeqsolve(
            self._terms(),
            self.solver,
            t0=t0,
            t1=t1,
            dt0=None,
            y0=seg.y,
            args=self.args,
            saveat=dfx.SaveAt(
                subs=(dfx.SubSaveAt(ts=jnp.maximum(self.out_ts, t0)), dfx.SubSaveAt(t1=True)),
                solver_state=True,
                controller_state=True,
                made_jump=True,
            ),
            stepsize_controller=StepBudget(self._controller(), seg.tnext),
            max_steps=None,
            throw=False,
            solver_state=seg.solver_state,
            controller_state=(seg.controller_state, budget, seg.tnext, jnp.array(True)),
            made_jump=seg.made_jump,
            event=self.event,
        )
        ys, (t_final,), y_final = sol.ys[0], sol.ts[1], jax.tree_util.tree_map(lambda x: x[0], sol.ys[1])
        controller_state, _, proposed, kept = sol.controller_state
        done_before = (self.out_ts <= seg.t) & (seg.stats[1] > 0)  # saved by an earlier accepted step
        new = (self.out_ts <= t_final) & ~done_before
        counts = jnp.stack([sol.stats["num_steps"], sol.stats["num_accepted_steps"], sol.stats["num_rejected_steps"]])
        spent = sol.result == dfx.RESULTS.max_steps_reached  # the budget (max_steps=None: diffrax has no other)
        after = Segment(
            t=t_final,
            tnext=_clip_to_end(t_final, proposed, t1, kept),
            y=y_final,
            solver_state=sol.solver_state,
            controller_state=controller_state,
            made_jump=sol.made_jump,
            ys=jax.tree_util.tree_map(lambda a, b: jnp.where(_expand(new, a), a, b), ys, seg.ys),
            stats=seg.stats + counts,
            result=dfx.RESULTS.where(spent, dfx.RESULTS.successful, sol.result),
        )
        return jax.tree_util.tree_map(lambda a, b: jnp.where(active, a, b), after, seg)


def _expand(mask, like):
    return mask.reshape(mask.shape + (1,) * (like.ndim - mask.ndim))


def _clip_to_end(tprev, tnext, t1, keep):
    """The next step's end as diffrax's loop sets it after a step (``diffrax._integrate._clip_to_end``): onto ``t1``
    from within 100 ulps of it (halfway there after a rejected step)."""
    floor = t1
    for _ in range(100):
        floor = eqxi.prevbefore(floor)
    return jnp.where(tnext > floor, jnp.where(keep, t1, tprev + 0.5 * (t1 - tprev)), tnext)


def segment_status(seg: Segment, t_end) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(steps, t reached, going on)`` per run of ``seg`` (one run or a batch) whose last time is ``t_end``, as
    :func:`run_segments` reads them."""
    t, stats = np.asarray(seg.t), np.asarray(seg.stats)
    going = (t < np.asarray(t_end)) & np.asarray(seg.result == dfx.RESULTS.successful)
    return stats[..., 0], t, going


def strongly_typed(state):
    """``state`` with its weakly typed arrays (Python scalars made arrays by a start) given their dtype for good. A
    step returns them strongly typed, and a compiled ``advance`` whose inputs change type is traced and compiled
    again: the start's weak types made every flow's second segment compile the whole program a second time."""
    return jax.tree_util.tree_map(
        lambda x: jnp.asarray(x, dtype=x.dtype) if isinstance(x, jax.Array) and x.weak_type else x, state
    )


def run_segments(
    advance: Callable,
    state,
    status: Callable,
    *,
    max_steps: int | None,
    progress: Callable | None = None,
):
    """Advance ``state`` segment by segment until no run goes on; returns ``(state, interrupted)``.

    ``advance(state, budget)`` takes at most ``budget[j]`` steps of run ``j`` (an array of the runs' shape; 0: none);
    ``status(state)`` returns NumPy arrays ``(steps, reached, going)``: the steps each run has taken, how far it got
    (for ``progress(reached)``) and whether it goes on. A run goes on until it says otherwise or has taken
    ``max_steps`` steps. The first two segments take ``FIRST_STEPS`` steps (the first one compiles), the next ones
    as many as the last one took in ``SEGMENT_SECONDS`` (at most ``GROWTH`` times as many).

    Ctrl-C (a ``KeyboardInterrupt`` in this thread) or the stop flag of the pool this thread works for
    (``gradflow._config.stop_requested``) ends the loop after the segment under way: ``interrupted`` is then True,
    and ``state`` is the last one reached.
    """
    budget, timed = FIRST_STEPS, False
    state = strongly_typed(state)
    try:
        steps, reached, going = status(state)
        while True:
            if progress is not None:
                progress(reached)
            if max_steps is not None:
                going = going & (steps < max_steps)
            if not going.any():
                return state, False
            if stop_requested():
                return state, True
            left = budget if max_steps is None else np.minimum(budget, max_steps - steps)
            clock = time.perf_counter()
            state = advance(state, np.where(going, left, 0))
            before = steps
            steps, reached, going = status(state)
            seconds = time.perf_counter() - clock
            if timed:
                taken = max(int(np.max(steps - before)), 1)
                budget = int(np.clip(taken * SEGMENT_SECONDS / max(seconds, 1e-6), 1, GROWTH * budget))
            timed = True
    except KeyboardInterrupt:
        return state, True


class TimeLeft:
    """The time left of a solve whose progress goes from 0 to ``total``, from its average rate since its first segment
    ended: ``update(done)`` at each segment's end (the first call before any segment) returns the seconds left, or
    ``None`` where no honest estimate exists yet.

    The first segment's time is mostly compilation, and extrapolating from it (as an average over the whole run or
    tqdm's smoothed rate do) estimates minutes for runs of seconds; so the rate is ``(done − done₁) / (now − t₁)``
    from the first update after progress first moved (``t₁, done₁``: the first segment, compiled), and there is no
    estimate for ``ETA_SECONDS`` after it. The flow's rate in τ varies (it slows in every jump), so this remains an
    average, not a forecast.
    """

    def __init__(self, total: float, *, clock: Callable[[], float] = time.perf_counter):
        self.total = float(total)
        self._clock = clock
        self._first: float | None = None  # done before any segment
        self._origin: tuple[float, float] | None = None  # (time, done) when the first segment ended

    def update(self, done: float) -> float | None:
        now, done = self._clock(), float(done)
        if self._first is None:
            self._first = done
            return None
        if self._origin is None:
            if done > self._first:
                self._origin = (now, done)
            return None
        t1, done1 = self._origin
        if now - t1 < ETA_SECONDS or done <= done1:
            return None
        return max(self.total - done, 0.0) * (now - t1) / (done - done1)


class _Bar(tqdm):
    """tqdm with the time left from :class:`TimeLeft` (``{left}`` in ``bar_format``) instead of its own estimate."""

    def __init__(self, *args, **kwargs):
        self.left: float | None = None
        super().__init__(*args, **kwargs)

    @property
    def format_dict(self):
        shown = super().format_dict
        shown["left"] = "?" if self.left is None else self.format_interval(self.left)
        return shown


class Progress:
    """One tqdm bar for the runs of a solve, at the rescaled time they reached on average: ``run(j, scale)`` is the
    ``progress`` callback of :func:`run_segments` for run ``j`` (or for a batch: ``j`` a slice), whose times are
    ``τ · scale``. Thread-safe: the runs may be solved on several threads."""

    def __init__(self, tau_end: float, runs: int, *, desc: str, enabled: bool):
        self._reached = np.zeros(runs)
        self._lock = threading.Lock()
        self._tau_end = float(tau_end)
        self._left = TimeLeft(self._tau_end)
        self._bar = _Bar(
            total=self._tau_end,
            desc=desc,
            disable=not enabled,
            delay=PROGRESS_DELAY,
            leave=False,
            bar_format="{desc}: {percentage:3.0f}%|{bar}| τ = {n:.4g} of {total:.4g} [{elapsed}<{left}]",
        )

    def run(self, j, scale) -> Callable:
        def update(t):
            with self._lock:
                self._reached[j] = np.minimum(np.asarray(t) / np.asarray(scale), self._tau_end)
                done = float(np.mean(self._reached))
                self._bar.left = self._left.update(done)
                self._bar.update(done - self._bar.n)

        return update

    def close(self) -> None:
        self._bar.close()

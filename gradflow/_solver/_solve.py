"""Batches of runs, and how a solve ended."""

from __future__ import annotations

from collections.abc import Callable

import diffrax as dfx
import jax
import numpy as np

from .._config import BATCHING, PerCore
from .._results import RESULTS
from ._segments import Progress, Segment, run_segments, segment_status


def vmap_batches(batching: str) -> bool:
    """Whether a batch of runs is solved under ``vmap`` (``batching="vmap"``, or ``"auto"`` off the CPU) rather
    than run by run (see ``simulate_flow``'s ``batching``)."""
    if batching not in BATCHING:
        raise ValueError(f"batching must be one of {BATCHING}; got {batching!r}.")
    return batching == "vmap" or (batching == "auto" and jax.default_backend() != "cpu")


def solve_separately(solve_one: Callable, runs: int):
    """``solve_one(j)`` for every run ``j`` of a batch, one per core (``gradflow._config.PerCore``); each returns
    ``(outputs, stopped)`` (``stopped``: whether Ctrl-C stopped it). Returns the outputs stacked as a ``vmap``-ed
    solve's, and ``stopped`` per run.

    Ctrl-C stops every run within a segment (the pool's stop flag), keeping what each reached; one that comes when
    every run has finished is raised.
    """
    with PerCore(runs) as pool:
        futures = [pool.submit(solve_one, j) for j in range(runs)]
        try:
            outs = [future.result() for future in futures]
        except KeyboardInterrupt:
            pool.stop()
            outs = [future.result() for future in futures]
            if not any(stopped for _, stopped in outs):
                raise
    stacked = jax.tree_util.tree_map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *[out for out, _ in outs])
    return stacked, np.array([stopped for _, stopped in outs])


def solve_runs(run: Callable, log_a, tau_end: float, *, batched: bool, separately: bool, progress: bool):
    """The flow of one run or a batch with one progress bar: ``run(j, progress)`` solves run ``j`` alone (``j`` an
    index, for a batch solved ``separately``, one per core by :func:`solve_separately`) or all of them at once
    (``j = None``: the single run, or the ``vmap``-ed batch), with ``progress`` its :class:`Progress` callback.
    ``log_a`` are the runs' scales (the bar shows the rescaled time ``τ = t / log(1/α)`` up to ``tau_end``).
    Returns ``run``'s outputs (stacked, for a batch solved separately) and whether Ctrl-C stopped each run."""
    runs = len(log_a) if batched else 1
    bar = Progress(tau_end, runs, desc=f"simulate_flow{f' ({runs} runs)' if batched else ''}", enabled=progress)
    try:
        if batched and separately:
            return solve_separately(lambda j: run(j, bar.run(j, -log_a[j])), runs)
        return run(None, bar.run(slice(None), -log_a))
    finally:
        bar.close()


def solve_in_segments(advance: Callable, start, t_end, *, max_steps: int | None, progress: Callable | None = None):
    """Advance ``start`` (a :class:`Segment`, or the state of any integrator with ``t``, ``stats``, ``result`` and
    ``ys``) to ``t_end`` by ``advance(state, budget)`` in :func:`run_segments`'s segments. Returns the state reached,
    diffrax's result per run (:func:`segment_result`) and whether Ctrl-C stopped each run."""
    state, interrupted = run_segments(
        advance, start, lambda state: segment_status(state, t_end), max_steps=max_steps, progress=progress
    )
    result, stopped = segment_result(state, t_end, interrupted)
    return state, result, stopped


def segment_result(seg: Segment, t_end, interrupted: bool):
    """diffrax's result of each run of a solve run in segments (``run_segments``), as one uninterrupted
    ``diffeqsolve`` with the same ``max_steps`` gives it (``max_steps_reached`` for a run that stopped short of
    ``t_end`` without failing), and whether Ctrl-C stopped it (``interrupted``: the loop was stopped)."""
    _, _, going = segment_status(seg, t_end)  # stopped short of t_end without failing
    hit = jax.tree_util.tree_map(lambda a, b: np.where(going, a, b), dfx.RESULTS.max_steps_reached, seg.result)
    return hit, interrupted & going


def solve_status(solver_result, finished, ts, log_a, max_steps, stopped, *, what: str, advice: str, ahead=None):
    """Each run's ``result`` (a :class:`~gradflow._results.RESULTS` value) and ``message`` from diffrax's result.

    ``finished``: ``(..., m)`` whether each output time was reached with a finite output (a run the solver finished
    with a hole in it is ``non_finite``, its message naming the times); ``stopped``: whether Ctrl-C stopped each run
    (``interrupted``); ``what`` names the entry point in the messages and ``advice`` says what to try when a stage
    iteration failed. ``ahead(k)``, if given: where the model is not finite at or just ahead of the point where run
    ``k`` stopped (``""``: nowhere), which its message then names as the cause.
    """
    stopped = np.broadcast_to(stopped, np.shape(solver_result == dfx.RESULTS.successful))
    ok = np.asarray(solver_result == dfx.RESULTS.successful) & ~stopped
    hit = np.asarray(solver_result == dfx.RESULTS.max_steps_reached)
    stuck = np.asarray(solver_result == dfx.RESULTS.dt_min_reached)
    failed = np.where(hit, RESULTS.max_steps_reached.value, RESULTS.solver_failed.value)
    failed = np.where(stopped, RESULTS.interrupted.value, failed)
    # a run that reached its last time with an output that is not finite (rounding in an interpolant, say) is no success
    holes = ok & ~np.all(np.asarray(finished), axis=-1)
    result = np.where(ok & ~holes, RESULTS.successful.value, np.where(holes, RESULTS.non_finite.value, failed))
    message = np.full(result.shape, "", dtype=object)
    for k in np.ndindex(result.shape):
        if holes[k]:
            bad = ts[np.flatnonzero(~np.asarray(finished[k]))]
            message[k] = (
                f"{what} reached τ = {ts[-1]:.6g} at log α = {log_a[k]:.6g}, but its outputs at τ = "
                f"{', '.join(f'{t:.6g}' for t in bad[:5])}{' …' if bad.size > 5 else ''} ({bad.size} of {len(ts)}) are "
                "not finite; the others are kept. Record other times, or tighten atol."
            )
        if ok[k]:
            continue
        done = np.asarray(finished[k])
        reached = ts[np.flatnonzero(done)[-1]] if done.any() else 0.0
        where = f"log α = {log_a[k]:.6g}: the flow stopped after τ = {reached:.6g} (ts[-1] = {ts[-1]:.6g})"
        note = "" if stopped[k] or ahead is None else ahead(k)
        if stopped[k]:
            message[k] = f"{what} was interrupted (Ctrl-C) at {where}; the times before are kept."
        elif note:
            message[k] = (
                f"{what} cannot go on at {where}: {note}, so the model's h or loss is not finite there. Check h's "
                "domain (e.g. a log or sqrt of the weights); the times before are kept."
            )
        elif hit[k]:
            message[k] = f"{what} hit max_steps={max_steps} at {where}. Raise max_steps, loosen atol, or shorten ts."
        elif stuck[k]:
            message[k] = (
                f"{what} cannot go on at {where}: its step size fell below the float64 resolution of t, "
                "so the flow changes faster there than float64 can follow at this atol (a blow-up or a "
                "non-smooth g). Check the model's g near that time, or loosen atol."
            )
        else:
            why = dfx.RESULTS[jax.tree_util.tree_map(lambda x: x[k], solver_result)]  # noqa: B023
            message[k] = f"{what} failed at {where}: {why} {advice}"
    return result, message.astype(str)

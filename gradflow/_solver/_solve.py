"""Solving onto output times, batches of runs, and how a solve ended."""

from __future__ import annotations

from collections.abc import Callable

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np

from .._config import BATCHING, map_per_core
from .._results import RESULTS
from ._controllers import UnderflowGuard


def solve_onto(vector_field, solver, y0, args, out_ts, controller, max_steps, *, dense=False):
    """Solve ``dy/dt = vector_field(t, y, args)`` from ``t = 0`` to ``out_ts[-1]``, with ``controller`` guarded
    against step-size underflow. Returns ``ys`` at ``out_ts``, the diffrax result and the step counts
    ``(steps, accepted, rejected)``.

    With ``dense=False`` the solver steps exactly onto every output time (for solvers whose dense output is
    less accurate than their steps); with ``dense=True`` it steps freely and ``ys`` comes from the solver's
    dense output.
    """
    guarded = UnderflowGuard(controller, out_ts[-1:] if dense else out_ts)
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


def solve_status(solver_result, finished, ts, log_a, max_steps, *, what: str, advice: str):
    """Each run's ``result`` (a :class:`~gradflow._results.RESULTS` value) and ``message`` from diffrax's result.

    ``finished``: ``(..., m)`` whether each output time was reached; ``what`` names the entry point in the messages
    and ``advice`` says what to try when a stage iteration failed.
    """
    ok = np.asarray(solver_result == dfx.RESULTS.successful)
    hit = np.asarray(solver_result == dfx.RESULTS.max_steps_reached)
    stuck = np.asarray(solver_result == dfx.RESULTS.dt_min_reached)
    failed = np.where(hit, RESULTS.max_steps_reached.value, RESULTS.solver_failed.value)
    result = np.where(ok, RESULTS.successful.value, failed)
    message = np.full(result.shape, "", dtype=object)
    for k in np.ndindex(result.shape):
        if ok[k]:
            continue
        done = np.asarray(finished[k])
        reached = ts[np.flatnonzero(done)[-1]] if done.any() else 0.0
        where = f"log α = {log_a[k]:.6g}: the flow stopped after τ = {reached:.6g} (ts[-1] = {ts[-1]:.6g})"
        if hit[k]:
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

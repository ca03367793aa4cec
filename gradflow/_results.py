"""How a computation ended: one enumeration of results with their messages, and ``throw`` handled once.

As diffrax's ``RESULTS``: every result object of gradflow (a flow, a gradient-descent run, a greedy path, a
comparison) carries
a ``result`` — a value of :class:`RESULTS`, stored as its string so that it reads and saves as plain text — and a
``message`` that says what went wrong and where (``""`` when successful). :func:`finish` raises the first failure
when the caller asked for ``throw=True``, and :class:`Interrupted` (a ``KeyboardInterrupt``, whatever ``throw``) with
the result when Ctrl-C stopped the computation.
"""

from __future__ import annotations

import enum

import numpy as np


class RESULTS(str, enum.Enum):
    """The ways a computation ends, with what each means (``.meaning``) and whether it is a failure."""

    successful = "successful"
    max_steps_reached = "max_steps_reached"
    solver_failed = "solver_failed"
    max_stages = "max_stages"
    phase_b_failed = "phase_b_failed"
    no_minimiser = "no_minimiser"
    non_finite = "non_finite"
    run_failed = "run_failed"
    single_scale = "single_scale"
    interrupted = "interrupted"

    @property
    def meaning(self) -> str:
        return _MEANINGS[self]

    @property
    def failed(self) -> bool:
        """Whether the computation stopped short of what was asked (``max_stages`` is a cap the caller set, and a
        comparison at a single scale has no rates to fit by the caller's choice)."""
        return self not in (RESULTS.successful, RESULTS.max_stages, RESULTS.single_scale)

    def __str__(self) -> str:
        return self.value


_MEANINGS = {
    RESULTS.successful: "the computation reached its end",
    RESULTS.max_steps_reached: "the solver took its max_steps steps before the last output time",
    RESULTS.solver_failed: "the solver could not go on (its step size fell below the float64 resolution of t, or a "
    "stage iteration failed)",
    RESULTS.max_stages: "the greedy path stopped at max_stages activations",
    RESULTS.phase_b_failed: "a phase (B) of the greedy limit did not reach a stationary point",
    RESULTS.no_minimiser: "a phase (B) of the greedy limit runs off to infinity: on that stage's support the loss "
    "decreases towards its infimum only as the weights grow without bound (e.g. cross-entropy on separable data; with "
    "full weights, also along a curved valley where the factors' norm grows without slowing)",
    RESULTS.non_finite: "the loss, its gradient or the weights became NaN or infinite (the message says where)",
    RESULTS.run_failed: "a run of the comparison did not reach its last time or is not finite there, so its "
    "distances from then on are NaN or infinite",
    RESULTS.single_scale: "the comparison has one scale α: its distances are computed, its rates (fits over ≥ 2 "
    "distinct α) are NaN",
    RESULTS.interrupted: "Ctrl-C (SIGINT) stopped the computation; what it had finished is kept (a flow up to the "
    "time it reached, a greedy path up to its last finished stage)",
}


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped a computation: a ``KeyboardInterrupt`` that carries what the computation had finished.

    ``result`` is the flow up to the time each run reached (later times ``+inf``, as for a failure) or the greedy
    path up to its last finished stage, with ``result == "interrupted"`` where Ctrl-C stopped it. Raised whatever
    ``throw`` says: Ctrl-C stops the program, unless the caller catches it::

        try:
            flow = gradflow.simulate_flow(model, u0=u0, v0=v0, ts=ts, log_alpha=-1e4)
        except gradflow.Interrupted as stop:
            flow = stop.result
    """

    def __init__(self, message: str, result):
        super().__init__(message)
        self.result = result


def failures(result) -> np.ndarray:
    """The flat indices of the failed entries of ``result`` (a string or an array of them)."""
    flat = np.ravel(np.asarray(result, dtype=str))
    return np.flatnonzero([RESULTS(r).failed for r in flat])


def finish(out, *, throw: bool, prefix: str = "", hint: str = ""):
    """``out`` (anything with ``result`` and ``message``), or with ``throw=True`` a ``RuntimeError`` with the first
    failed entry's message, after ``prefix`` (who failed) and before ``hint`` (what to do about it). An interrupted
    entry raises :class:`Interrupted` with ``out``, whatever ``throw``."""
    results = np.ravel(np.asarray(out.result, dtype=str))
    if np.any(results == RESULTS.interrupted.value):
        k = int(np.argmax(results == RESULTS.interrupted.value))
        raise Interrupted(prefix + str(np.ravel(np.asarray(out.message, dtype=object))[k]), out)
    failed = failures(out.result)
    if throw and failed.size:
        raise RuntimeError(prefix + str(np.ravel(np.asarray(out.message, dtype=object))[failed[0]]) + hint)
    return out

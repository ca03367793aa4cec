"""The checks of a diagonal model's flow: the scales float64 resolves (docs/floating-point.md, *Scales far below
float64*) and the initialisation directions against the paper's Assumption 4.2 (see ``gradflow._kit._checks``:
degenerate and near-degenerate initialisations)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .._kit._checks import (
    NEAR_DEGENERATE,
    check_log_range,
    check_vector,
    degenerate_error,
    describe_coordinates,
    warn_near_degenerate,
)


def check_init(u0, v0, p: int, names: Sequence[str] | None = None):
    """The initialisation directions ``(u0, v0)``: shape ``(p,)``, finite, and not degenerate (see ``gradflow._kit._checks``).

    Raises a ``ValueError`` where ``|u0_i| = |v0_i|`` and emits an ``AssumptionWarning`` (at the user's line) where
    the relative gap is at most ``NEAR_DEGENERATE``. Returns ``(u0, v0)`` as float64.
    """
    u0 = check_vector(u0, p, "u0")
    v0 = check_vector(v0, p, "v0")
    au, av = np.abs(u0), np.abs(v0)
    gap = np.abs(au - av)
    exact = np.flatnonzero(gap == 0)
    if exact.size:
        raise degenerate_error(
            "|u0_i| = |v0_i|", exact, "Perturb u0 there by a relative amount of order one, e.g. u0[i] *= 1.1.", names
        )
    rel = gap / np.maximum(au, av)
    near = np.flatnonzero(rel <= NEAR_DEGENERATE)
    if near.size:
        warn_near_degenerate(
            f"||u0_i| − |v0_i|| is at most {NEAR_DEGENERATE:g} of max(|u0_i|, |v0_i|) at {describe_coordinates(near, names)}. "
            "The flow is exact, but one of w_i, w̄_i starts at α·gap",
            float(np.min(rel[near])),
            "Perturb u0 there for a gap of order one.",
        )
    return u0, v0


def check_resolved(log_a, ts, *, rtol: float, atol: float, names=("alpha", "log_alpha")) -> None:
    """Refuse, with the supported range in the message, the scales ``log α`` whose flow float64 cannot resolve at the
    tolerances and output times ``ts`` (or None) it cannot step to.

    The state of diagonal weights reaches ``2 |log α|`` (``log w ∈ [2 log α, O(1)]``), so gradflow takes
    ``log α ≥ −max_state(rtol, atol) / 2`` (:func:`max_state`), and ``ts[-1] · log(1/α) ≤ T_MAX``.
    ``names`` are the arguments' names in the messages (the scales given as ``alpha`` or ``log_alpha``).
    """
    check_log_range(log_a, ts, rtol=rtol, atol=atol, names=names, reach=2.0, state="log w", flow="the flow")

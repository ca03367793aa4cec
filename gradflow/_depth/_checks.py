"""The scales float64 resolves in a depth-L diagonal network's flow (docs/depth.md, *The exact flow*)."""

from __future__ import annotations

import numpy as np

from .._kit._checks import EPS, check_long_times, check_tolerances, max_state


def check_resolved(log_a, ts, *, rtol: float, atol: float, names=("alpha", "log_alpha")) -> None:
    """Refuse, with the supported range in the message, the scales ``log α`` whose flow float64 cannot resolve at the
    tolerances and output times ``ts`` (or None) it cannot step to.

    The flow's state in log coordinates (the awake ``log a`` and, at ``L = 2``, ``log |w_l| ≈ log α + log |u0|``)
    reaches ``|log α|``, so gradflow takes ``log α ≥ −max_state(rtol, atol)``; the clocks of sleeping coordinates
    are of order one at every α. The times are checked as at ``L = 2``, where ``τ = t / log(1/α)``
    (``ts[-1] · log(1/α) ≤ T_MAX``). ``names`` are the arguments' names in the messages.
    """
    check_tolerances(rtol, atol)
    log_a = np.atleast_1d(np.asarray(log_a, dtype=np.float64))
    lowest = -max_state(rtol, atol)
    below = log_a < lowest
    if np.any(below):
        la = float(log_a[below][0])
        raise ValueError(
            f"{names[1]} = {la:.6g} is below what float64 resolves at atol = {atol:g}, rtol = {rtol:g}: the depth "
            f"flow's state log a reaches |log α| = {-la:.3g}, which float64 resolves to {EPS * -la:.2g} "
            f"(eps·|log a|), more than a tenth of atol + rtol. gradflow takes log α ≥ {lowest:.3g} at these "
            "tolerances (the range grows with atol + rtol) (docs/floating-point.md, Scales far below float64)."
        )
    check_long_times(log_a, ts)

"""The scales float64 resolves in a depth-L diagonal network's flow (docs/depth.md, *The exact flow*)."""

from __future__ import annotations

from .._kit._checks import check_log_range


def check_resolved(log_a, ts, *, rtol: float, atol: float, names=("alpha", "log_alpha")) -> None:
    """Refuse, with the supported range in the message, the scales ``log α`` whose flow float64 cannot resolve at the
    tolerances and output times ``ts`` (or None) it cannot step to.

    The flow's state in log coordinates (the awake ``log a`` and, at ``L = 2``, ``log |w_l| ≈ log α + log |u0|``)
    reaches ``|log α|``, so gradflow takes ``log α ≥ −max_state(rtol, atol)``; the clocks of sleeping coordinates
    are of order one at every α. The times are checked as at ``L = 2``, where ``τ = t / log(1/α)``
    (``ts[-1] · log(1/α) ≤ T_MAX``). ``names`` are the arguments' names in the messages.
    """
    check_log_range(log_a, ts, rtol=rtol, atol=atol, names=names, reach=1.0, state="log a", flow="the depth flow")

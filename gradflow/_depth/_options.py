"""The options of the exact flow of a depth-L diagonal network, passed as ``simulate_flow(..., solver=DepthSolver())``."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class DepthSolver:
    """How [`simulate_flow`][gradflow.simulate_flow] solves the flow of a [`DepthModel`][gradflow.DepthModel]
    (docs/depth.md, *The exact flow*): clocks on plateaus, ``log a`` in jumps, switched by events. It has no tunable
    yet (the tolerances are ``simulate_flow``'s ``rtol``/``atol``); ``DepthSolver()`` is the default."""

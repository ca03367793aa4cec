"""The options of the exact flow of a diagonal model, passed as ``simulate_flow(..., solver=DiagonalSolver(...))``."""

from __future__ import annotations

import dataclasses

from .._kit._checks import check_int


@dataclasses.dataclass(frozen=True)
class DiagonalSolver:
    """How [`simulate_flow`][gradflow.simulate_flow] solves the flow of a
    [`DiagonalModel`][gradflow.DiagonalModel] (docs/math.md, *Rescaled time and log coordinates*).

    Attributes:
        jacobian_rank: how many Jacobian columns (those of the largest ``u_i² + v_i²``; sleeping coordinates' are
            skipped) the implicit stages use, in ``[1, p]``; None (the default): ``min(p, 64)``, or ``min(p, 16)``
            for a batch solved under ``vmap`` (every column is then computed at every step). Raise it if more
            coordinates are awake at once.
    """

    jacobian_rank: int | None = None

    def __post_init__(self):
        if self.jacobian_rank is not None:
            check_int(self.jacobian_rank, "jacobian_rank")

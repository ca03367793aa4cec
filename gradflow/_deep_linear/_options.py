"""The options of the exact flow of a deep linear network, passed as ``simulate_flow(..., solver=DeepLinearSolver())``."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class DeepLinearSolver:
    """How [`simulate_flow`][gradflow.simulate_flow] solves the flow of a
    [`DeepLinearModel`][gradflow.DeepLinearModel] (docs/deep-linear.md, *The exact flow*): the layers in units of
    α, ``Ŵ_l = W_l / α``, in the rescaled time, by Kvaerno5 (L-stable). It has no tunable yet (the tolerances are
    ``simulate_flow``'s ``rtol``/``atol``); ``DeepLinearSolver()`` is the default."""

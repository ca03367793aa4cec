"""The options of the exact flow of a factorised model, passed as
``simulate_flow(..., solver=FactorizedSolver(...))``."""

from __future__ import annotations

import dataclasses

from ._flow import METHODS


@dataclasses.dataclass(frozen=True)
class FactorizedSolver:
    """How [`simulate_flow`][gradflow.simulate_flow] solves the flow of a
    [`FactorizedModel`][gradflow.FactorizedModel] (docs/math.md, *Full weights: the exact flow*).

    Attributes:
        method: the integrator. ``"leap"``: explicit steps where the flow moves, leaps along the plateaus, whose
            cost does not grow with ``log(1/α)`` (docs/math.md, *Plateau leaps*); ``"tsit5"``: explicit steps
            throughout, their number ∝ ``log(1/α)``; ``"kvaerno5"``: L-stable, with a dense Jacobian of the state;
            ``"split"``: the leaps, with implicit steps on the awake columns and Magnus steps on the sleeping ones
            where explicit steps sit at their stability limit (docs/math.md, *The split integrator*); ``"auto"``
            (the default): ``"split"`` where a factor has ``m + n ≥ 64`` (heads of ``d ≥ 32``, whose relaxations
            after the jumps can be stiff and long), else ``"leap"`` (there the split takes fewer steps but about
            the leaps' seconds at small α, more at moderate α, and its program compiles longer). A leap counts as a
            step for ``max_steps``; ``simulate_flow(solver="leap")``, a string, is the deprecated spelling of
            ``solver=FactorizedSolver(method="leap")``.

        dense_output: for the leaps (``"leap"``, ``"split"``): ``True`` (the default), the explicit steps and leaps
            pass the output times, whose states come from Tsit5's dense output (order 4, as its error estimate), so
            that the number of steps does not grow with the number of output times (1.6–7.3 times fewer steps on the
            paper-size demo's grid; docs/benchmarks.md, *Full weights: cost against the number of output times*);
            ``False``, every output time ends a step or a leap. The solvers of Diffrax (``"tsit5"``,
            ``"kvaerno5"``) step onto every output time.

    The flow's range of scales is that of the log scales of the factors, ``ρ ∈ [2 log α, O(1)]``:
    ``2 |log α| 2⁻⁵² ≤ atol + 2 rtol |log α|`` (``|log α| ≤ 2.25e7`` at ``atol = 1e-8``).
    """

    method: str = "auto"
    dense_output: bool = True

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}; got {self.method!r}.")
        if not isinstance(self.dense_output, bool):
            raise ValueError(f"dense_output must be True or False; got {self.dense_output!r}.")

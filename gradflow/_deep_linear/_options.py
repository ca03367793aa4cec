"""The options of the exact flow of a deep linear network, passed as ``simulate_flow(..., solver=DeepLinearSolver())``."""

from __future__ import annotations

import dataclasses

NEWTONS = ("auto", "dense", "matrix_free")


@dataclasses.dataclass(frozen=True)
class DeepLinearSolver:
    """How [`simulate_flow`][gradflow.simulate_flow] solves the flow of a
    [`DeepLinearModel`][gradflow.DeepLinearModel] (docs/deep-linear.md, *The exact flow*): the layers in units of
    α, ``Ŵ_l = W_l / α``, in the rescaled time, by Kvaerno5 (L-stable); the tolerances are ``simulate_flow``'s
    ``rtol``/``atol``.

    Attributes:
        newton: how Newton's equations for the implicit stages are solved. ``"dense"``: LU of the dense Jacobian of
            every layer entry (``N²`` memory and ``N³/3`` work for ``N`` entries; the split of the layers, at scales
            between the direct integration's range and the small-α path's, by SciPy's Radau with twice as many);
            ``"matrix_free"``: GMRES on Jacobian-vector products (``O(N)`` memory, each iteration about one
            evaluation of the field; the split by Kvaerno5 instead of Radau; docs/deep-linear.md,
            *Newton's equations at size*); ``"auto"`` (the default): matrix-free above 256 entries, where it is the
            faster. The small-α path does not read it.
    """

    newton: str = "auto"

    def __post_init__(self):
        if self.newton not in NEWTONS:
            raise ValueError(f"newton must be one of {NEWTONS}; got {self.newton!r}.")

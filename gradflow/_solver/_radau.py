"""SciPy's Radau IIA (order 5) with a floor on Newton's tolerance, for solves in NumPy."""

from __future__ import annotations

from scipy.integrate import Radau

NEWTON_TOL_FLOOR = 1e-3
"""Newton's iterations on the collocation stages stop once their predicted remaining update is at most
``max(min(0.03, rtol^{1/2}), NEWTON_TOL_FLOOR)`` of the step's tolerance (in the norm of ``atol + rtol |y|``): Hairer's
default (Hairer & Wanner, *Solving ODEs II*, §IV.8; SciPy's) down to ``rtol = 1e-6``, this floor below it."""


class RadauNewtonFloor(Radau):
    """``scipy.integrate.Radau`` with Newton's tolerance at least :data:`NEWTON_TOL_FLOOR` of the step's
    (``solve_ivp(..., method=RadauNewtonFloor)``). SciPy's ``min(0.03, rtol^{1/2})`` asks for ``1e-4`` of it at
    ``rtol = 1e-8``: wherever the velocity's rounding, carried by long steps, reaches that level, Newton stops
    contracting and the step is halved and the Jacobian recomputed, again and again. On the deep linear split's long
    plateaus (docs/deep-linear.md, *Between the two ranges*: the cross-entropy task at L = 3, α = 1e-8, to τ = 30),
    5,068 of 7,930 collocation solves failed that way; with the floor the run takes 874 steps in 10 s instead of
    3,129 in 45 s, its ``log σ`` as far from a run at ``atol = 1e-9`` (6.4e-8)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.newton_tol = max(self.newton_tol, NEWTON_TOL_FLOOR)

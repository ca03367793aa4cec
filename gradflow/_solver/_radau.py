"""SciPy's Radau IIA (order 5) with a floor on Newton's tolerance, for solves in NumPy."""

from __future__ import annotations

import warnings

import numpy as np
from scipy.integrate import Radau
from scipy.linalg import LinAlgWarning

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

    def _step_impl(self):
        """SciPy's step, without the warnings of a trial step whose Newton iterates diverge (an overflow in their norm,
        an iteration matrix singular at a long step): SciPy rejects that step and retries it shorter. On the deep
        linear split at L = 6 (the aligned task of benchmarks/bench_deep_linear.py, α = 1e-6) they were printed
        during a run that ends 3e-11 from the exact ``log s``."""
        with np.errstate(over="ignore", invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", LinAlgWarning)
            return super()._step_impl()

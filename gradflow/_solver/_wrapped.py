"""A solver that wraps another and changes only its steps."""

from __future__ import annotations

import diffrax as dfx


class WrappedSolver(dfx.AbstractAdaptiveSolver, dfx.AbstractWrappedSolver):
    """A solver around ``solver`` that keeps its term structure, interpolation, orders and vector field;
    subclasses change ``init`` and ``step``."""

    solver: dfx.AbstractSolver

    @property
    def term_structure(self):
        return self.solver.term_structure

    @property
    def interpolation_cls(self):  # pyright: ignore
        return self.solver.interpolation_cls

    @property
    def root_finder(self):
        return self.solver.root_finder

    def order(self, terms):
        return self.solver.order(terms)

    def error_order(self, terms):
        return self.solver.error_order(terms)

    def func(self, terms, t0, y0, args):
        return self.solver.func(terms, t0, y0, args)

"""A solver that wraps another: everything but its steps is the inner solver's."""

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np

from gradflow._solver import WrappedSolver


class _Counted(WrappedSolver):
    """Tsit5's steps, each one counted in the solver state (a wrapper that changes its state, not its steps)."""

    def init(self, terms, t0, t1, y0, args):
        return self.solver.init(terms, t0, t1, y0, args), jnp.zeros((), int)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        state, count = solver_state
        y1, y_error, dense, state, result = self.solver.step(terms, t0, t1, y0, args, state, made_jump)
        return y1, y_error, dense, (state, count + 1), result


def test_a_wrapped_solver_is_its_inner_solver_but_for_its_steps():
    """Orders, term structure, interpolation and vector field are Tsit5's (the root finder Kvaerno5's), and a step through the wrapper is
    Tsit5's (``dy/dt = −y``: the same value and error estimate, bit for bit), counted."""
    inner = dfx.Tsit5()
    wrapped = _Counted(inner)
    term = dfx.ODETerm(lambda t, y, args: -y)
    assert (wrapped.order(term), wrapped.error_order(term)) == (inner.order(term), inner.error_order(term)) == (5, 5)
    assert wrapped.term_structure == inner.term_structure and wrapped.interpolation_cls is inner.interpolation_cls
    implicit = dfx.Kvaerno5()
    assert _Counted(implicit).root_finder is implicit.root_finder
    with jax.enable_x64(True):
        y = jnp.array([1.0, 2.0])
        assert np.array_equal(wrapped.func(term, 0.0, y, None), -y)
        state = wrapped.init(term, 0.0, 0.5, y, None)
        ours = wrapped.step(term, 0.0, 0.5, y, None, state, False)
        theirs = inner.step(term, 0.0, 0.5, y, None, inner.init(term, 0.0, 0.5, y, None), False)
    assert all(np.array_equal(a, b) for a, b in zip(ours[:2], theirs[:2])) and int(ours[3][1]) == 1
    np.testing.assert_allclose(ours[0], np.exp(-0.5) * np.array([1.0, 2.0]), rtol=1e-5)  # one step of 0.5

"""Newton's method for the stages of diffrax's diagonally implicit Runge–Kutta solvers, stopped on the stage's state."""

from __future__ import annotations

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx
from jax.flatten_util import ravel_pytree

from ._krylov import gmres
from ._segments import Solve

ROOT_TOL = 0.1
""":class:`StageNewton` stops at this fraction of the step's tolerances."""

KRYLOV_FRACTION = 1e-3
"""A matrix-free :class:`StageNewton` solves each update to this fraction of the right-hand side or of the stop's
scale (the rms of the scaled residual), whichever is larger."""
KRYLOV_DIMENSION = 60  # GMRES's largest space before it restarts
KRYLOV_RESTARTS = 4

_PID = dict(pcoeff=0.3, icoeff=0.3)  # the PI coefficients diffrax advises for implicit solvers


class StageNewton(optx.Newton):
    """Newton's method (the exact Jacobian at every iterate) for diffrax's implicit stage ``f = vf(y_p + γ h f)``,
    whose unknown is the stage's velocity ``f``, stopped on the updates of the stage's *state* ``y_p + γ h f``
    (Hairer & Wanner, Solving ODEs II, §IV.8): an update ``δf`` counts as ``‖γ h δf / (atol + rtol |y_p + γ h f|)‖``,
    so that ``atol`` and ``rtol`` are a fraction of the step's own tolerances on the state. It has converged once an
    update is at most ``kappa`` (Newton's next one is of its square), or once the updates contract (rate ``θ < 1``)
    to ``θ/(1 − θ)`` times one at most ``kappa``; it has failed once they stop contracting (``θ ≥ 1``) or after
    ``max_steps`` (diffrax's ``root_find_max_steps``).

    optimistix's ``Newton`` asks for the residual ``f − vf(y_p + γ h f)`` below ``atol`` (its Cauchy test) and for
    the update of ``f`` below ``atol + rtol |f|``: both in the units of the velocity, which carries ``‖J‖`` ulps of
    ``y`` wherever ``y`` holds a stiff mode. On a deep linear network's settled modes (L = 4, α = 3e-4, ``‖J‖ ≈
    2.3e8``, the velocity's rounding 2.3e-5 rms) a tolerance of 3.3e-6 in ``f`` failed every step from ``h = 3e-8``
    (``γ h ‖J‖ ≈ 2``) to ``1e-2``, and the flow stalled; stopped on the state, every one of them converges. An update
    of the state is rounded to ``eps / rtol`` of its scale, far below ``kappa`` for ``rtol ≫ 1e-14``.

    With ``matrix_free=True`` each update is solved by GMRES on Jacobian-vector products (``jax.linearize`` of the
    stage's residual) instead of LU of the dense Jacobian: ``O(N)`` memory for ``N`` unknowns instead of ``N²``, and
    each iteration the cost of one product (about one evaluation of the field) instead of ``N³/3``. The update is
    solved in the stop's units (:meth:`_matrix_free_step`), to :data:`KRYLOV_FRACTION` of them: an inexact Newton
    (Dembo, Eisenstat & Steihaug 1982) whose updates contract as the exact one's while the linear residual is small
    beside the nonlinear one.
    """

    cauchy_termination: bool = False
    matrix_free: bool = eqx.field(default=False, static=True)

    def step(self, fn, y, args, options, state, tags):
        if self.matrix_free:
            return self._matrix_free_step(fn, y, args, state)
        new_y, new_state, aux = super().step(fn, y, args, options, state, tags)
        gh, y_partial = _stage(args, y)
        stage = jax.tree_util.tree_map(lambda p, f: p + gh * f, y_partial, new_y)
        scaled = jax.tree_util.tree_map(
            lambda d, s: gh * d / (self.atol + self.rtol * jnp.abs(s)), new_state.diff, stage
        )
        size = jnp.asarray(self.norm(scaled), dtype=new_state.diffsize.dtype)
        return new_y, eqx.tree_at(lambda s: s.diffsize, new_state, size), aux

    def _matrix_free_step(self, fn, y, args, state):
        """Newton's update solved by GMRES (:func:`gradflow._solver._krylov.gmres`) on Jacobian-vector products, in
        units of the stop's scale: with ``D = diag(atol + rtol |y_p + γ h f|) / (γ h)`` the update is ``δf = D x``,
        ``(D⁻¹ J D) x = D⁻¹ r``, so that GMRES's residual is measured as the stop measures the update, and solved to
        :data:`KRYLOV_FRACTION` of it or of the right-hand side."""
        gh, y_partial = _stage(args, y)
        flat, unravel = ravel_pytree(y)
        partial = ravel_pytree(y_partial)[0]

        def residual(f):
            out, aux = fn(unravel(f), args)
            return ravel_pytree(out)[0], aux

        fx, linear, aux = jax.linearize(residual, flat, has_aux=True)
        # an explicit stage (γ = 0) is f = vf(y_p): any scale solves it in one update
        scale = (self.atol + self.rtol * jnp.abs(partial + gh * flat)) / jnp.where(gh > 0, gh, 1)
        b = fx / scale
        tol = KRYLOV_FRACTION * jnp.maximum(jnp.linalg.norm(b), jnp.sqrt(b.size))
        solved = gmres(
            lambda x: linear(scale * x) / scale, b, tol=tol, dimension=KRYLOV_DIMENSION, restarts=KRYLOV_RESTARTS
        )
        diff = scale * solved.x
        new = flat - diff
        size = self.norm(gh * diff / (self.atol + self.rtol * jnp.abs(partial + gh * new)))
        result = optx.RESULTS.where(jnp.isfinite(size), state.result, optx.RESULTS.nonlinear_divergence)
        new_state = type(state)(
            f=None,
            linear_state=None,
            diff=unravel(diff),
            diffsize=jnp.asarray(size, dtype=state.diffsize.dtype),
            diffsize_prev=state.diffsize,
            result=result,
            step=state.step + 1,
        )
        return unravel(new), new_state, aux

    def terminate(self, fn, y, args, options, state, tags):
        del fn, y, args, options, tags
        rate = state.diffsize / state.diffsize_prev
        first = (state.step >= 1) & (state.diffsize <= self.kappa)
        contracted = (state.step >= 2) & (rate < 1) & (state.diffsize * rate / (1 - rate) <= self.kappa)
        converged = first | contracted
        stalled = ((state.step >= 2) & ~(rate < 1)) | ((state.step >= 1) & ~jnp.isfinite(state.diffsize))
        failed = ~converged & stalled
        result = optx.RESULTS.where(failed, optx.RESULTS.nonlinear_divergence, state.result)
        return converged | failed | (state.result != optx.RESULTS.successful), result


def _stage(args, y):
    """``(γ h, y_p)`` from diffrax's implicit-stage arguments ``(stage, γ, vf, prod, t, y_p, args, h)``
    (``diffrax._solver.runge_kutta._implicit_relation_f``)."""
    if not (isinstance(args, tuple) and len(args) == 8):
        raise TypeError("StageNewton solves diffrax's implicit stages in f (an ODETerm's), nothing else.")
    diagonal, y_partial, control = args[1], args[5], args[7]
    dtype = jax.tree_util.tree_leaves(y)[0].dtype
    return jnp.asarray(diagonal * control, dtype=dtype), y_partial


def stiff_solve(
    vector_field, args, out_ts, *, rtol, atol, step_fraction=1.0, event=None, underflow_floor=1.0, matrix_free=False
) -> Solve:
    """A :class:`Solve` by Kvaerno5 (L-stable) with Newton's method at every iterate (:class:`StageNewton`, stopped on
    the stage's state at :data:`ROOT_TOL` of the step's tolerances: a chord, or a stop on the stage's velocity, which
    carries ``‖J‖`` ulps of the stiff entries, failed on the deep linear flows) and diffrax's advised PI controller
    at ``step_fraction`` of ``(atol + rtol, atol)``; ``event`` and ``underflow_floor`` as :class:`Solve`'s."""
    root_finder = StageNewton(
        rtol=ROOT_TOL * (atol + rtol), atol=ROOT_TOL * atol, norm=optx.rms_norm, matrix_free=matrix_free
    )
    pid = dfx.PIDController(rtol=step_fraction * (atol + rtol), atol=step_fraction * atol, **_PID)
    solver = dfx.Kvaerno5(root_finder=root_finder)
    return Solve(vector_field, solver, args, out_ts, pid, event=event, underflow_floor=underflow_floor)

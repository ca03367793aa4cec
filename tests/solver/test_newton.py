"""Newton's method for diffrax's implicit stages, stopped on the stage's state (``StageNewton``): it converges where
the velocity's rounding is above any tolerance on the velocity, and fails where the updates stop contracting."""

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
import pytest

from gradflow._solver import StageNewton

LAMBDA = 1e8  # a stiff relaxation rate
CENTRE = np.array([1e6, -2e6])  # far from 0: the velocity −λ(y − c) carries λ·ulp(y) ≈ 0.01 of rounding


def _relaxation(t, y, args):
    return -LAMBDA * (y - CENTRE)


def _step(root_finder, vector_field, y0, h):
    solver = dfx.Kvaerno5(root_finder=root_finder)
    terms = dfx.ODETerm(vector_field)
    t0, t1 = jnp.zeros(()), jnp.asarray(h)
    return solver.step(terms, t0, t1, y0, None, solver.init(terms, t0, t1, y0, None), jnp.array(False))


@eqx.filter_jit
def _stage_newton_step(y0, h):
    return _step(StageNewton(rtol=1e-9, atol=1e-9), _relaxation, y0, h)


@eqx.filter_jit
def _velocity_newton_step(y0, h):
    return _step(optx.Newton(rtol=1e-9, atol=1e-9), _relaxation, y0, h)


def test_stages_converge_where_the_velocity_is_rounded():
    """``dy/dt = −λ (y − c)`` from ``c`` + 1: every step from ``h = 1e-9`` (``γ h λ = 0.03``) to ``1e-1`` converges, its
    state relaxes towards ``c`` (by ``O(1/(hλ))`` once ``h λ ≫ 1``), its error estimate finite; optimistix's Newton, stopped on the velocity at the same tolerances, fails them all from ``h = 1e-8``
    (the velocity's rounding, ``λ`` ulps of ``y``, is about 1e-2)."""
    with jax.enable_x64(True):
        y0 = jnp.asarray(CENTRE + 1.0)
        for h in 10.0 ** np.arange(-9, 0):
            y1, y_error, _, _, result = _stage_newton_step(y0, h)
            assert result == dfx.RESULTS.successful, h
            gap = np.asarray(y1 - CENTRE)
            assert np.all(np.abs(gap) <= 1.0 + 1e-6), (h, gap)
            if h >= 1e-6:  # L-stable: the offset damped as 1/(h λ)
                assert np.all(np.abs(gap) <= 10 / (h * LAMBDA)), (h, gap)
            assert np.all(np.isfinite(np.asarray(y_error))), h
        failed = [h for h in 10.0 ** np.arange(-8, 0) if _velocity_newton_step(y0, h)[4] != dfx.RESULTS.successful]
        assert len(failed) == 8


def test_updates_that_stop_contracting_fail():
    """Newton on a stage whose field is a cube root, ``f = −λ ∛y`` near ``y = 0``: its iterates move away from the root
    (``θ = 2``), and the iteration stops as diverged, before ``root_find_max_steps``."""

    def cube_root(t, y, args):
        return -LAMBDA * jnp.cbrt(y)

    with jax.enable_x64(True):
        finder = StageNewton(rtol=1e-9, atol=1e-9)
        solver = dfx.Kvaerno5(root_finder=finder, root_find_max_steps=50)
        terms = dfx.ODETerm(cube_root)
        y0, t0, t1 = jnp.array([1e-3]), jnp.zeros(()), jnp.asarray(1.0)
        state = solver.init(terms, t0, t1, y0, None)
        _, _, _, _, result = eqx.filter_jit(solver.step)(terms, t0, t1, y0, None, state, jnp.array(False))
        assert result == dfx.RESULTS.nonlinear_divergence  # not nonlinear_max_steps_reached


def test_refuses_what_is_not_a_stage():
    """The stopping rule reads diffrax's stage arguments ``(stage, γ, vf, prod, t, y_p, args, h)``: a plain root find
    is refused."""
    with jax.enable_x64(True), pytest.raises(TypeError, match="implicit stages"):
        optx.root_find(lambda y, args: y - 1.0, StageNewton(rtol=1e-9, atol=1e-9), jnp.zeros(2), args=None)


def _coupled(t, y, args):
    """A stiff nonlinear system: rates 1, 1e3 and 1e6 mixed by a rotation, plus a quadratic coupling."""
    Q = jnp.array([[0.6, 0.8, 0.0], [-0.8, 0.6, 0.0], [0.0, 0.0, 1.0]])
    rates = jnp.array([1.0, 1e3, 1e6])
    return -Q.T @ (rates * (Q @ y)) + 0.5 * jnp.roll(y, 1) ** 2


@eqx.filter_jit
def _coupled_step(y0, h, matrix_free):
    return _step(StageNewton(rtol=1e-10, atol=1e-10, matrix_free=matrix_free), _coupled, y0, h)


@pytest.mark.parametrize("h", [1e-6, 1e-4, 1e-3])
def test_matrix_free_is_the_dense_newton(h):
    """Newton's updates solved by GMRES on Jacobian-vector products give the step of the dense Jacobian's LU, to
    the stop's tolerance, from steps where the stiff rate is resolved (``h λ = 1``) to ``h λ = 1e3``; Kvaerno5's first
    stage is explicit (``γ = 0``), where the update's scale must not divide by ``γ h``."""
    with jax.enable_x64(True):
        y0 = jnp.array([1.0, -0.5, 0.25])
        dense = _coupled_step(y0, h, False)
        free = _coupled_step(y0, h, True)
        assert dense[4] == dfx.RESULTS.successful and free[4] == dfx.RESULTS.successful
        np.testing.assert_allclose(np.asarray(free[0]), np.asarray(dense[0]), rtol=0, atol=1e-9)
        np.testing.assert_allclose(np.asarray(free[1]), np.asarray(dense[1]), rtol=0, atol=1e-9)

"""Phase (B) of the diagonal greedy limit (gradflow/_diagonal/_phase_b.py, docs/math.md): the Newton polish against
the theory oracle and on the attention head, Assumption 4.3's restricted Hessian against jax.hessian, and the
W-method flow against the logistic closed form."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from diagonal_common import N, P, quiet

import theory
from gradflow import models
from gradflow._diagonal import _phase_b
from gradflow._diagonal._phase_b import reduced_g


def _polish(model, support, beta_start, *, matrix_at=None, steps=20):
    """Run phase (B)'s Newton polish on ``support`` from ``beta_start`` (no coordinate counts as leaving), starting
    from ``∂g/∂β`` at ``matrix_at`` (default: at ``beta_start``, so that the first step is a Newton step)."""
    coords = np.flatnonzero(support)
    red = _phase_b.reduce_support(coords, np.sign(beta_start), model.p)
    y = np.where(red.mask, np.sqrt(np.abs(beta_start[red.index])), 0.0)
    at = np.where(red.mask, (beta_start if matrix_at is None else matrix_at)[red.index], 0.0)

    @eqx.filter_jit
    def run(model, index, mask, signs, y, at, stationary):
        g_on = reduced_g(model, index, mask)
        active = jnp.sum(mask)
        dg = _phase_b._dg(g_on, at, active)
        return _phase_b._newton(g_on, dg, signs, y, mask, jnp.zeros_like(mask), stationary, steps, active)

    with jax.enable_x64(True):
        model = jax.tree_util.tree_map(lambda x: jnp.asarray(x) if eqx.is_array(x) else x, model)
        stationary = 1e-12 * np.max(np.abs(np.asarray(model.g(jnp.zeros(model.p)))))
        y, converged, residuals = run(model, red.index, red.mask, red.signs, y, at, stationary)
    beta = np.zeros(model.p)
    beta[coords] = (red.signs * np.asarray(y) ** 2)[red.mask]
    return beta, bool(converged), np.asarray(residuals), stationary


def test_newton_polish_is_exact_in_one_step_for_an_orthonormal_design():
    """g(β) = β* − β is linear, so Newton's method lands on the stationary point of each stage (known from the
    theory oracle) in one step and stops at the next residual."""
    beta_star = np.array([0.5, -3.0, 0.0, 1.25])
    model = models.diagonal_linear(n=N, p=P, orthonormal=True, beta_star=beta_star, seed=3).model
    order = theory.greedy_orthonormal_stages(beta_star).order
    for k in range(1, order.size + 1):
        support = np.isin(np.arange(P), order[:k])
        start = np.where(support, beta_star * (1 + 0.2 * np.random.default_rng(k).standard_normal(P)), 0.0)
        beta, converged, residuals, stationary = _polish(model, support, start)
        assert converged and residuals[1] <= stationary and np.isnan(residuals[2])
        np.testing.assert_allclose(beta, np.where(support, beta_star, 0.0), rtol=1e-12)


@pytest.fixture(scope="module")
def small_head():
    task = models.diagonal_attention(n=200, tokens=4, dim=3, teacher_nonzero=(2, 2), seed=1)
    return task, quiet(task.model, check_assumptions=False)


def test_newton_polish_converges_on_the_attention_head(small_head):
    """From 1 % off the stationary point. With ∂g/∂β at the start the chord iteration gains at least 10× per step
    (measured: 360×, then ~50×), which at 4 active slots is cheaper than a rebuild. With ∂g/∂β from 30 % off,
    the first step loses (the chord with that matrix diverges), so the matrix is rebuilt there; every step after
    it gains again (measured: 7× from there, then 50× and ~24×)."""
    task, path = small_head
    support, target = path.support[-1], path.beta[-1]
    start = target * (1 + 0.01 * np.cos(np.arange(target.size)))
    for matrix_at, most in ((None, 8), (1.3 * target, 11)):
        beta, converged, residuals, stationary = _polish(task.model, support, start, matrix_at=matrix_at)
        r = residuals[~np.isnan(residuals)]
        assert converged and r.size <= most and r[-1] <= stationary
        np.testing.assert_allclose(beta, target, rtol=1e-9, atol=1e-12)
        gains = r[:-1] / r[1:]
        if matrix_at is None:
            assert np.all(gains >= 10)
        else:
            assert gains[0] < 1 and np.all(gains[1:] >= 5)


def test_restricted_hessian_is_the_hessian_of_the_loss_on_the_support(small_head):
    """Assumption 4.3's Hessian, ``−4 D (∂g/∂β) D − 2 diag(s ⊙ g)``, against ``jax.hessian`` of ``ũ ↦ L(s ⊙ ũ²)``
    at a point that is not stationary (so that the ``g`` term counts), padded slots zero."""
    task, path = small_head
    support = path.support[-1]
    red = _phase_b.reduce_support(np.flatnonzero(support), np.sign(path.beta[-1]), task.model.p)
    y = np.where(red.mask, np.sqrt(np.abs(path.beta[-1][red.index])) * 1.2, 0.0)
    with jax.enable_x64(True):
        model = jax.tree_util.tree_map(lambda x: jnp.asarray(x) if eqx.is_array(x) else x, task.model)
        hess = np.asarray(_phase_b.restricted_hessian(model, red.index, red.mask, red.signs, jnp.asarray(y)))
        k = int(red.mask.sum())

        def loss(u):
            return model.loss_of_beta(jnp.zeros(model.p).at[red.index[:k]].set(red.signs[:k] * u * u))

        expected = np.zeros_like(hess)
        expected[:k, :k] = np.asarray(jax.jit(jax.hessian(loss))(jnp.asarray(y[:k])))  # one program, not op by op
    np.testing.assert_allclose(hess, expected, rtol=1e-10, atol=1e-12 * np.abs(expected).max())


LOGISTIC_BETA = np.array([2.0, 0.5, 1.0, 0.0])  # the last slot is padding


def _logistic_flow(dg0, *, tol, y0, t1, steady=0.0, dt0=0.1):
    """Phase (B)'s flow on an orthonormal design, ``g(β) = β* − β``: with ``s = +1`` each ``z = log y`` solves
    ``dz/dt = β*_i − e^{2z}``. Runs :func:`_phase_b._w_flow` from the matrix ``dg0`` to ``t1`` (or until every
    ``|g_i| ≤ steady``), the last slot padding."""
    mask = jnp.asarray(LOGISTIC_BETA > 0)
    signs = jnp.ones(4)

    @jax.jit
    def run(dg0, z0, tol, t1, steady, dt0):
        def field(z):
            return jnp.where(mask, LOGISTIC_BETA - jnp.where(mask, jnp.exp(2 * z), 0.0), 0.0)

        def stop(z, f):
            return jnp.all(jnp.abs(f) <= steady)

        def dg_of(z):
            return -jnp.eye(4)

        return _phase_b._w_flow(field, dg_of, signs, mask, z0, dg0, stop, dt0, t1, tol, 10_000)

    with jax.enable_x64(True):
        z0 = jnp.where(mask, jnp.log(jnp.asarray(y0, dtype=jnp.float64)), 0.0)
        return jax.tree_util.tree_map(np.asarray, run(jnp.asarray(dg0, dtype=jnp.float64), z0, tol, t1, steady, dt0))


def _logistic_exact(y0, t):
    """``y² = β* / (1 + (β*/y0² − 1) e^{−2β* t})``, the solution of ``dy/dt = y (β* − y²)``, as ``log y``."""
    b = LOGISTIC_BETA[:3]
    return 0.5 * np.log(b / (1 + (b / y0**2 - 1) * np.exp(-2 * b * t)))


@pytest.mark.parametrize("dg0", [-np.eye(4), np.zeros((4, 4)), 3 * np.eye(4) + 0.5])
def test_w_flow_matches_the_logistic_solution_from_any_matrix(dg0):
    """The W-method keeps its order for any matrix ``A``: from the exact ``∂g/∂β = −I``, from 0 and from a wrong
    matrix of the wrong sign (Broyden's update corrects it along the steps), it follows the exact solution from
    y = 1e-5 (the escape of a new coordinate: a straight line in z, then the turn onto the steady state) with the
    global error of order 2 at a local error ``tol`` per step, ``∝ tol^{2/3}`` (measured: 0.17 tol^{2/3})."""
    y0 = np.array([1e-5, 0.3, 2.0, 1.0])
    errors = []
    for tol in (1e-4, 1e-6):
        end = _logistic_flow(dg0, tol=tol, y0=y0, t1=4.0)
        assert end.t == 4.0 and not end.done and end.z[3] == 0.0  # the padded slot stays put
        errors.append(np.max(np.abs(end.z[:3] - _logistic_exact(y0[:3], 4.0))))
        assert errors[-1] <= 0.5 * tol ** (2 / 3)
    assert errors[0] / errors[1] >= 10  # 100^{2/3} = 21.5


def test_w_flow_rejects_an_overflowing_step():
    """A first step of 300 sends the escaping coordinate to ``z ≈ 600``, where ``e^{2z}`` overflows and g is not
    finite: the step is rejected and shortened (never accepted as inf or NaN), and the flow goes on to the same
    accuracy as from a sensible first step."""
    y0 = np.array([1e-5, 0.3, 2.0, 1.0])
    exact = _logistic_exact(y0[:3], 400.0)
    sensible = _logistic_flow(-np.eye(4), tol=1e-4, y0=y0, t1=400.0)
    wild = _logistic_flow(-np.eye(4), tol=1e-4, y0=y0, t1=400.0, dt0=300.0)
    assert wild.t == 400.0 and np.all(np.isfinite(wild.z))
    for end in (sensible, wild):
        assert np.max(np.abs(end.z[:3] - exact)) <= 0.5 * 1e-4 ** (2 / 3)
    assert sensible.steps < wild.steps <= sensible.steps + 10


def test_w_flow_stops_when_steady():
    """``stop`` is checked after accepted steps: with ``|g_i| ≤ 1e-4`` the flow stops at the end of the step during
    which the exact solution gets there (at t = 10.03, set by the slowest coordinate: β* = 0.5, rate 2β* = 1; the
    steps grow as the solution settles)."""
    y0 = np.array([1e-5, 0.3, 2.0, 1.0])
    end = _logistic_flow(-np.eye(4), tol=1e-3, y0=y0, t1=1e6, steady=1e-4)
    assert end.done and end.steps < 40
    assert np.max(np.abs(LOGISTIC_BETA[:3] - np.exp(2 * end.z[:3]))) <= 1e-4
    ts = np.linspace(0, 20, 4001)
    exact = np.array([np.max(np.abs(LOGISTIC_BETA[:3] - np.exp(2 * _logistic_exact(y0[:3], t)))) for t in ts])
    first = ts[np.argmax(exact <= 1e-4)]
    assert first == pytest.approx(10.03, abs=0.01) and end.t - end.h_accepted <= first <= end.t

"""Tests for phase (B) of the greedy low-rank limit without dense Hessians (gradflow/_factorized/_phase_b.py, _gauge.py, _krylov.py): its pieces
against dense linear algebra, and whole paths against the dense method it replaced (a Tsit5 flow until steady, then
Newton's method with the pseudo-inverse of the dense Hessian of all factor entries; the Hessian's smallest eigenvalue
off the gauge from a dense basis), kept here as the reference."""

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dense_reference import dense_loss as _loss
from dense_reference import dense_min_eig_off_gauge

import gradflow
from gradflow import models
from gradflow._factorized import _greedy as factorized_greedy
from gradflow._factorized import _phase_b


@pytest.fixture(autouse=True)
def float64():
    with jax.enable_x64(True):
        yield


def _dense_newton(model, layout, y, mask, support, stationary, steps):
    loss = lambda z: _loss(model, layout, z)  # noqa: E731

    def body(state):
        n, y, _, _ = state
        g = jnp.where(mask, jax.grad(loss)(y), 0.0)
        hess = jnp.where(mask[:, None] & mask[None, :], jax.hessian(loss)(y), 0.0)
        lam, vec = jnp.linalg.eigh(0.5 * (hess + hess.T))
        keep = jnp.abs(lam) > 1e-9 * jnp.max(jnp.abs(lam))
        step = vec @ jnp.where(keep, (vec.T @ g) / jnp.where(keep, lam, 1.0), 0.0)
        converged = _phase_b.residual(layout, y, g, mask, support) <= stationary
        y_next = jnp.where(mask, y - step, 0.0)
        failed = ~converged & ~jnp.all(jnp.isfinite(y_next))
        return n + 1, jnp.where(converged | failed, y, y_next), converged, failed

    def cond(state):
        n, _, converged, failed = state
        return (n < steps) & ~converged & ~failed

    _, y, converged, _ = jax.lax.while_loop(cond, body, (0, y, False, False))
    return y, converged


@eqx.filter_jit
def dense_phase_b(model, layout, starts, mask, thresholds, max_steps, newton_steps):
    """The dense reference: diffrax's Tsit5 until steady (at rtol = min(ode_rtol, steady/100) = 1e-6 for the default
    tolerances), then the pseudo-inverse Newton method on the dense Hessian."""
    steady, stationary, support, _, atol, t1, _, _ = thresholds
    grad = jax.grad(lambda y: _loss(model, layout, y))

    def one(y0):
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(lambda t, y, args: jnp.where(mask, -grad(y), 0.0)),
            diffrax.Tsit5(),
            0.0,
            t1,
            None,
            y0,
            stepsize_controller=diffrax.PIDController(rtol=1e-6, atol=atol),
            event=diffrax.Event(
                lambda t, y, args, **kw: _phase_b.residual(layout, y, grad(y), mask, support) <= steady
            ),
            saveat=diffrax.SaveAt(t1=True),
            max_steps=max_steps,
            throw=False,
        )
        y, converged = _dense_newton(model, layout, sol.ys[-1], mask, support, stationary, newton_steps)
        flow_status = jnp.where(sol.result == diffrax.RESULTS.max_steps_reached, 1, 2)
        status = jnp.where(sol.event_mask, jnp.where(converged, 0, 3), flow_status)
        return y, status, jnp.zeros(4, int), jnp.full((_phase_b.RECORDS, 3), jnp.nan)

    return jax.lax.map(one, starts)


def _greedy_pair(task, monkeypatch):
    """The path from the Hessian-free phase (B), and from the dense reference."""
    path = gradflow.greedy_limit(task.model, u0=task.u0, v0=task.v0)
    monkeypatch.setattr(factorized_greedy, "solve_phase_b", dense_phase_b)
    monkeypatch.setattr(factorized_greedy, "min_eig_off_gauge", dense_min_eig_off_gauge)
    return path, gradflow.greedy_limit(task.model, u0=task.u0, v0=task.v0)


def _assert_same_path(new, dense):
    """Both methods stop at the same stationarity (``‖∂L/∂(u_c, v_c)‖ ≤ 1e-10 G ‖(u_c, v_c)‖``), so their saddles
    agree to about 1e-10 relative and the stage times (first-order insensitive to errors along the rank-r
    manifold) to about as much."""
    assert new.result == dense.result == "successful"
    np.testing.assert_array_equal(new.ranks, dense.ranks)
    np.testing.assert_array_equal(new.activated, dense.activated)
    np.testing.assert_allclose(new.times, dense.times, rtol=0, atol=1e-9)
    for w_new, w_dense in zip(new.W, dense.W):
        for k in range(1, new.num_stages + 1):
            size = np.linalg.norm(w_dense[k], 2)
            assert np.linalg.norm(w_new[k] - w_dense[k], 2) <= 1e-8 * size
    np.testing.assert_allclose(new.loss, dense.loss, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(new.hessian_min_eig, dense.hessian_min_eig, rtol=1e-8)
    np.testing.assert_allclose(new.b, dense.b, rtol=0, atol=1e-9)
    assert new.assumptions_ok.all() and dense.assumptions_ok.all()
    assert np.all(new.stationarity <= 1e-10) and np.all(new.epsilon_discrepancy <= 1e-6)


@pytest.mark.slow
@pytest.mark.parametrize(
    "task",
    [
        models.attention_full(n=50, tokens=4, dim=3, teacher_kq=(1, 0.5), teacher_vo=(1, 0.5)),
        models.attention_full(n=50, tokens=4, dim=6, teacher_kq=(1, 0.5), teacher_vo=(1, 0.5)),
        models.matrix_sensing(m=5, n=4, measurements=40, singular_values=(3.0, 2.0, 1.0), seed=0),
    ],
    ids=["head-d3", "head-d6", "sensing"],
)
def test_matches_the_dense_method(task, monkeypatch):
    """The same path as the dense method, on heads with d = 3 and 6 (whose later phases (B) turn stiff) and on
    matrix sensing."""
    _assert_same_path(*_greedy_pair(task, monkeypatch))


def test_flow_through_stiffness():
    """On L = ½ yᵀ A y with A's eigenvalues 1 and 1e-6 the flow is steady (|f| ≤ 1e-9) only at t ≈ 7e6, about 2e6
    steps for Tsit5 at its stability limit; once Tsit5 is stiff exprb32, exact on a quadratic, takes over and gets
    there in a few dozen steps, on the exact solution e^{−At} y0."""
    A = np.diag([1.0, 1e-6])
    mask = jnp.ones(2, bool)
    y0 = np.array([1.0, 1.0])
    end = _phase_b.flow(
        lambda y: -jnp.asarray(A) @ y,
        mask,
        jnp.asarray(y0),
        lambda y, f: jnp.max(jnp.abs(f)) <= 1e-9,
        0.1,
        1e9,
        1e-4,
        1e-9,
        2048,
        loss=lambda y: 0.5 * y @ jnp.asarray(A) @ y,
    )
    assert end.steady and 0 < end.exponential_steps < end.steps < 100
    np.testing.assert_allclose(end.y, np.exp(-np.diag(A) * float(end.t)) * y0, rtol=1e-3, atol=1e-12)
    assert float(end.t) >= np.log(1e3) * 1e6  # steady: the slow mode below 1e-3


def test_stiffness_count_survives_steps_inside_the_edge():
    """Hairer's count: at the stability limit accepted steps fall on both sides of the edge (the pattern of the d = 50
    head's fifth phase (B): an edge step, then up to five inside it, rejections in between); the count still
    reaches 15, and only six calm accepted steps in a row clear it."""
    pattern = [(True, True), (False, False), (True, False), (True, False), (False, False), (True, False)] * 15
    stiff, calm = jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32)
    for ok, edge in pattern:
        stiff, calm = _phase_b.stiffness_count(stiff, calm, jnp.array(ok), jnp.array(edge))
    assert int(stiff) == 15 and int(calm) == 3
    for _ in range(2):  # five calm steps in a row
        stiff, calm = _phase_b.stiffness_count(stiff, calm, jnp.array(True), jnp.array(False))
    assert int(stiff) == 15 and int(calm) == 5
    stiff, calm = _phase_b.stiffness_count(stiff, calm, jnp.array(True), jnp.array(False))
    assert int(stiff) == 0


def _checkpoints(norm, loss, points=8):
    """The record of :func:`_phase_b.flow` at ``t = 2^i`` (i ≥ 10), NaN before."""
    t = 2.0 ** np.arange(10, 10 + points)
    record = np.full((_phase_b.RECORDS, 3), np.nan)
    record[10 : 10 + points] = np.stack([t, loss(t), norm(t)], axis=1)
    return record


def test_runs_off_reads_growth_without_slowing():
    """The criterion on flows with known asymptotics: a run-off like log t (cross-entropy on separable data:
    ‖y‖ = log t, L = 1/t) and like √t are caught, with the exponent of their growth per unit log t (0 and 1/2);
    flows converging to a minimum (‖y* − y‖ = t^(−1/2), a quartic minimum, or e^(−t/1000)), the new column's
    exponential escape (‖y‖ = e^(t/1000)), a loss that does not fall or too few checkpoints are not."""
    log_growth = _phase_b.runs_off(_checkpoints(np.log, lambda t: 1 / t))
    assert log_growth is not None and log_growth.exponent == pytest.approx(0.0, abs=1e-9)
    np.testing.assert_allclose(log_growth.t, 2.0 ** np.arange(12, 18))
    assert _phase_b.runs_off(_checkpoints(np.sqrt, lambda t: 1 / t)).exponent == pytest.approx(0.5, abs=1e-9)
    assert _phase_b.runs_off(_checkpoints(lambda t: 3 - t**-0.5, lambda t: t**-2)) is None
    assert _phase_b.runs_off(_checkpoints(lambda t: 3 - np.exp(-t / 1e3), lambda t: np.exp(-t / 500))) is None
    assert _phase_b.runs_off(_checkpoints(lambda t: np.exp(t / 1e3), lambda t: 1 - t / 1e6)) is None
    assert _phase_b.runs_off(_checkpoints(np.log, lambda t: 1 + 0 * t)) is None
    assert _phase_b.runs_off(_checkpoints(np.log, lambda t: 1 / t, points=5)) is None

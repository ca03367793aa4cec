"""The split integrator of the factorised flow (gradflow/_factorized/_split.py; docs/math.md, *The split integrator*):
one split step against the closed form of matrix factorisation (its implicit block on the learned mode, its Magnus
steps on the sleeping ones), and ``solver="split"`` against the closed form, in segments (bit for bit) and with
``max_steps``.

On matrix factorisation of a 4×3 matrix, 21 output times (the leaps' compilation shared with
tests/factorized/test_leap.py). The split program compiles in minutes on a busy 2-core machine: the fast suite keeps
one split step; the solves with split steps (closed form, segments, ``max_steps``, Ctrl-C) are marked slow.
"""

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from aligned_mf import TOL, TS, aligned, logistic

import gradflow
from gradflow import models
from gradflow._factorized import _block, _split
from gradflow._factorized._explicit import LeapTolerances
from gradflow._factorized._flow import _advance, _run, _start
from gradflow._factorized._leap import _awake_speed
from gradflow._factorized._leap import start as leap_start
from gradflow._factorized._model import check_factors
from gradflow._factorized._qr import Args, factor_weights, initial_state, vector_field
from gradflow._factorized._singular import log_singular_values


def _y0(M, u0, v0):
    us, vs = check_factors(u0, v0, models.matrix_factorization_model(M))
    return jax.tree_util.tree_map(jnp.asarray, initial_state(us, vs))


@pytest.mark.parametrize("scale", [1.0, 1e5])
def test_exponential_rejects_a_huge_G(scale):
    """``exp(h Ã) Z`` in pieces of ``h σ₁ ≤ 6``: for a G of the flow's scale the log scales move by at most ``h σ₁``;
    for a G far above it (a rejected block step's dense output, which once hung a solve in billions of pieces)
    the log scales come back NaN, so that the step is rejected, at once."""
    M = np.diag([3.0, 1.5, 0.0])
    with jax.enable_x64(True):
        f = _y0(M, np.eye(3), np.eye(3))[0]
        G = scale * jnp.asarray(M)
        out = jax.jit(_split._exp, static_argnums=3)(f, G, 2.0, 3)
        if scale == 1.0:
            assert np.all(np.isfinite(out.rho)) and np.max(np.abs(out.rho - f.rho)) <= 2.0 * 3.0 + 1e-12
        else:
            assert np.all(np.isnan(out.rho))


def test_a_polishing_step_counts_at_the_stability_limit():
    """A polishing step's count of steps at the stability limit stops at ``_ENTER``, where a split step enters (its
    Jacobian afresh): ``_ENTER + 1`` marks split mode, which a split step entered from a polishing step once took for
    its own, with no length. A step at the limit also counts down a back-off."""
    M = np.diag([3.0, 1.5])
    tol = LeapTolerances(rtol=0.0, atol=1e-8)
    with jax.enable_x64(True):
        args = Args(model=models.matrix_factorization_model(M), log_alpha=jnp.asarray(-2.0))
        s = leap_start(_y0(M, np.eye(2), np.eye(2)), args, jnp.asarray(TS * 2.0), 0)
        s = eqx.tree_at(lambda s: (s.dt, s.stiff, s.backoff), s, (jnp.asarray(1e-3), jnp.asarray(_split._ENTER), 50))
        after = eqx.filter_jit(_split._explicit)(s, 1.0, args, tol, jnp.asarray(True))
        assert int(after.rejected) == 0 and int(after.stiff) == _split._ENTER and int(after.backoff) == 49


def test_explicit_steps_polish_through_a_back_off():
    """After split steps that did not pay, explicit steps back off (``_BACKOFF`` steps at the limit before split steps
    may enter again) and meanwhile polish, as the leaps' do, where three in a row sit at the stability limit and the
    awake columns move slower than ``1e4 atol``; once these nearly rest (slower than ``100 atol``), split steps enter
    again, whose L-stable block damps the rest of the relaxation with long steps. Until 2026-11-30 the back-off was
    kept as a negative count of those steps, which then never reached three: on the paper-size flow at log α = −1000
    the explicit steps held the stiff relaxation at the tolerance for thousands of steps between tries of the split
    (3,737 steps; the leaps 1,465, now 1,239)."""
    M = np.diag([3.0, 1.5])  # every column near waking (log α = −2), and in the block
    tol = LeapTolerances(rtol=0.0, atol=1e-8)
    with jax.enable_x64(True):
        args = Args(model=models.matrix_factorization_model(M), log_alpha=jnp.asarray(-2.0))
        s = leap_start(_y0(M, np.eye(2), np.eye(2)), args, jnp.asarray(TS * 2.0), 0)
        s = eqx.tree_at(lambda s: (s.dt, s.stiff), s, (jnp.asarray(1e-3), jnp.asarray(_split._ENTER)))
        width = _block.widths(s.y)
        for speed, backoff, expected in ((1e-5, 0, 1), (1e-5, _split._BACKOFF, 2), (1e-7, _split._BACKOFF, 1)):
            scale = speed / float(_awake_speed(s.y, s.f, tol))
            moving = eqx.tree_at(
                lambda s: (s.f, s.backoff), s, (jax.tree_util.tree_map(lambda v: scale * v, s.f), backoff)
            )
            chosen, polish, _ = _split.choose(moving, 1.0, tol, width, dense=True)
            assert int(chosen) == expected and bool(polish)


def test_near_rest_split_steps_wait_for_the_tail_that_lets_them_pass():
    """Where split mode was left near rest, split steps enter again only once the awake speed is below
    ``resume_below``: the speed at the failed try times the factor by which its error, ∝ the relaxation's amplitude
    and ``h⁵``, must fall for a first step of ``_RESUME_LENGTH`` times the paying length to pass. Away from rest the
    back-off decides."""
    M = np.diag([3.0, 1.5])
    tol = LeapTolerances(rtol=0.0, atol=1e-8)
    with jax.enable_x64(True):
        args = Args(model=models.matrix_factorization_model(M), log_alpha=jnp.asarray(-2.0))
        s = leap_start(_y0(M, np.eye(2), np.eye(2)), args, jnp.asarray(TS * 2.0), 0)
        assert float(s.resume_below) == np.inf
        s = eqx.tree_at(lambda s: (s.dt, s.stiff), s, (jnp.asarray(1e-3), jnp.asarray(_split._ENTER)))
        width = _block.widths(s.y)
        for speed, below, backoff, expected in (
            (1e-7, 1e-8, 0, 2),  # near rest, not yet slow enough
            (1e-9, 1e-8, 0, 1),
            (1e-5, 1e-8, 0, 1),  # away from rest: the back-off decides
            (1e-5, 1e-8, 5, 2),
        ):
            scale = speed / float(_awake_speed(s.y, s.f, tol))
            moving = eqx.tree_at(
                lambda s: (s.f, s.resume_below, s.backoff),
                s,
                (jax.tree_util.tree_map(lambda v: scale * v, s.f), jnp.asarray(below), backoff),
            )
            assert int(_split.choose(moving, 1.0, tol, width, dense=True)[0]) == expected
        # a try of the paying length ``worth`` whose error norm was 64: a step of _RESUME_LENGTH times it reaches the
        # norm _RESUME (< 1: it passes) at _RESUME / (64 · _RESUME_LENGTH⁵) of the speed; a try that passed bounds
        # nothing below the speed; away from rest, and after a failed Newton iteration (an infinite norm), nothing
        near, far = 1e-7, 1e-3
        assert _split._RESUME < 1.0 and _split._RESUME_LENGTH >= 1.0
        expected = near * _split._RESUME / _split._RESUME_LENGTH**5 / 64
        assert float(_split._resume_below(near, tol, 64.0, 3.0, 3.0)) == pytest.approx(expected)
        assert float(_split._resume_below(near, tol, 64.0, 6.0, 3.0)) == pytest.approx(32 * expected)  # ∝ h⁵
        assert float(_split._resume_below(near, tol, 1e-3, 6.0, 3.0)) == pytest.approx(near)
        assert float(_split._resume_below(far, tol, 64.0, 3.0, 3.0)) == np.inf
        assert float(_split._resume_below(near, tol, np.inf, 3.0, 3.0)) == np.inf


@pytest.mark.slow  # compiles the split step: 20-40 s; the split method is not the default (docs/benchmarks.md)
@pytest.mark.parametrize("h", [0.5, 1.0])
def test_one_split_step_follows_the_closed_form(h):
    """From the state at τ = 0.5 of ``log α = −100`` (t = 50: the first mode learned, at rest; the second sleeping,
    ``log s ≈ −49``, growing at 2σ₂ = 3; the third at rest at α²), one split step of ``h`` (the learned mode by the
    block's implicit step, the others by Magnus steps) lands on every mode's logistic, its error grown by less than the
    tolerance."""
    M, u0, v0, sbar = aligned()
    model = models.matrix_factorization_model(M)
    la, t0 = -100.0, 50.0
    with jax.enable_x64(True):
        out, _ = _run(model, _y0(M, u0, v0), jnp.asarray(la), jnp.asarray(TS), 0.0, 1e-8, solver="leap",
                      batched=False, max_steps=None, progress=None)  # fmt: skip
        y = jax.tree_util.tree_map(lambda a: a[10], out[0])  # τ = 0.5
        args = Args(model=model, log_alpha=jnp.asarray(la))
        state = leap_start(y, args, jnp.asarray([t0]), _block.jac_size(y))
        state = eqx.tree_at(lambda s: (s.t, s.h_split, s.stiff), state, (jnp.asarray(t0), jnp.asarray(h), 4))
        step = jax.jit(lambda s: _split.split_step(s, jnp.asarray(1e9), args, TOL, _block.widths(s.y), jnp.inf))
        after = step(state)
        assert int(after.splits) == 1 and int(after.rejected) == 0 and float(after.t) == t0 + h
        np.testing.assert_allclose(np.asarray(after.f[0].rho), np.asarray(vector_field(0.0, after.y, args)[0].rho))
    log_sv = lambda f: log_singular_values(jax.tree_util.tree_map(lambda a: np.asarray(a)[None], f), 4)[0]
    before = log_sv(y[0]) - logistic(t0, la, sbar)  # the leaps' error so far
    np.testing.assert_allclose(log_sv(after.y[0]) - logistic(t0 + h, la, sbar), before, rtol=0, atol=3e-8)


def _mf_flow(log_alpha, **kw):
    M, u0, v0, _ = aligned()
    return gradflow.simulate_flow(
        models.matrix_factorization_model(M),
        u0=u0,
        v0=v0,
        ts=TS,
        log_alpha=log_alpha,
        solver=gradflow.FactorizedSolver(method="split"),
        **kw,
    )


@pytest.mark.slow
@pytest.mark.parametrize("log_alpha", [-1e4, -50.0])
def test_closed_form_with_split_steps(log_alpha):
    """``solver="split"`` follows every logistic to 1e-9 in log s at ``log α = −1e4`` and −50."""
    _, _, _, sbar = aligned()
    res = _mf_flow(log_alpha)
    assert res.stats["solver"] == "split" and res.result == "successful"
    assert res.stats["num_split_steps"] > 0
    np.testing.assert_allclose(
        res.log_singular_values[0], logistic(TS * -log_alpha, log_alpha, sbar), rtol=1e-9, atol=1e-6
    )


@pytest.mark.slow
def test_split_segments_are_the_solve_and_max_steps():
    """Advanced five steps at a time from Python, the split integrator takes the very steps of one solve (bit for
    bit), split steps included; ``max_steps`` stops it with the outputs reached."""
    M, u0, v0, _ = aligned()
    model = models.matrix_factorization_model(M)
    la, ts = jnp.asarray(-50.0), jnp.asarray(TS)
    static = dict(solver="split", batched=False)
    with jax.enable_x64(True):
        y0 = _y0(M, u0, v0)
        whole, stopped = _run(model, y0, la, ts, 0.0, 1e-8, **static, max_steps=None, progress=None)
        assert not stopped and whole[3] == dfx.RESULTS.successful
        state = _start(model, y0, la, ts, 0.0, 1e-8, **static)
        while state.t < TS[-1] * 50.0 and state.result == dfx.RESULTS.successful:
            before = int(state.steps + state.leaps)
            state = _advance(model, state, jnp.asarray(5), la, ts, 0.0, 1e-8, **static)
            assert int(state.steps + state.leaps) <= before + 5
        assert int(state.splits) > 0
        np.testing.assert_array_equal(np.asarray(state.stats), np.asarray(whole[4]))
        np.testing.assert_array_equal(np.asarray(state.ys[0].rho), np.asarray(whole[0][0].rho))
    part = _mf_flow(-50.0, max_steps=40, throw=False)
    assert part.result == "max_steps_reached" and part.stats["num_steps"] == 40


@pytest.mark.slow
def test_keyboard_interrupt_keeps_the_split_state():
    """Ctrl-C (a ``KeyboardInterrupt`` from the progress callback after two segments) returns the state reached,
    marked stopped, with the outputs so far."""
    M, u0, v0, _ = aligned()
    calls = []

    def progress(reached):
        calls.append(reached)
        if len(calls) > 2:
            raise KeyboardInterrupt

    with jax.enable_x64(True):
        out, stopped = _run(models.matrix_factorization_model(M), _y0(M, u0, v0), jnp.asarray(-50.0), jnp.asarray(TS),
                            0.0, 1e-8, solver="split", batched=False, max_steps=None, progress=progress)  # fmt: skip
    assert stopped and out[3] == dfx.RESULTS.max_steps_reached  # "stopped short", as segment_result reports it
    assert 0 < int(out[4][0]) and not np.isfinite(np.asarray(out[2][-1]))


def test_a_split_step_moves_the_learned_mass_that_columns_outside_the_block_carry():
    """With more columns than the block holds (k = 6 > ``WIDTH``), every column of ``Z`` carries ``e^{ρ_0} R̃_0j``
    along the learned direction, which moves with it: ``W``'s learned part is ``e^{2ρ_0} Σ_j R̃_0j²`` over all
    columns. One split step of 0.005 through the first jump of matrix factorisation (8×7, rank 3, log α = −30,
    t = 9.5) lands on the raw flow ``U' = G V``, ``V' = Gᵀ U`` (DOP853 at rtol 1e-12) to 3.5e-10 in ``W``; holding
    the other columns' part of ``W`` over the step, as the split step did before 2026-11-30, missed it by 8.5e-8 (and
    accepted the step: its error estimates do not see that part)."""
    model, y, after = _split_step_of_rank_three(-30.0, 9.5, 0.005)
    with jax.enable_x64(True):
        np.testing.assert_allclose(factor_weights(after.y[0], 8), _raw_flow(model, y, 0.005), rtol=0, atol=3e-9)


def test_a_long_split_step_leaves_resting_columns_at_rest():
    """On the plateau after the second jump of the same flow (log α = −100, τ = 0.8: two columns awake and nearly at
    rest, the third 41 units of log scale below, in the block but not active), a split step of 10 — twenty times the
    stable explicit step — damps the awake columns' speed, so that a leap can follow, and lands on the raw flow. It
    kicked them to ten times their speed before 2026-11-30, and the d = 20 head at log α = −1e6 took 11,982 steps
    instead of 1,253: the block held the later columns' entries of the crossed rows of ``R̃`` that lie inside it
    (they move at the block's rates), and the Magnus steps, not the block, moved the other awake rows of ``R̃``."""
    model, y, after = _split_step_of_rank_three(-100.0, 80.0, 10.0)
    tol = LeapTolerances(rtol=0.0, atol=1e-8)
    with jax.enable_x64(True):
        active = np.asarray(_block.near_awake(y[0], tol))
        assert active[:2].all() and not active[2:].any()
        before = float(_awake_speed(y, vector_field(0.0, y, Args(model=model, log_alpha=jnp.asarray(-100.0))), tol))
        assert float(_awake_speed(after.y, after.f, tol)) <= 0.1 * before
        np.testing.assert_allclose(factor_weights(after.y[0], 8), _raw_flow(model, y, 10.0), rtol=0, atol=3e-9)


def test_a_long_split_step_keeps_the_awake_columns_out_of_the_sleeping_ones():
    """On the plateau after the first jump of the same flow (log α = −300, t = 110: one column awake and nearly at
    rest in G's null space, the next sleeping along G's top direction, 190 units of log scale below), a split step of
    16 (h σ₁ = 24) is accepted and lands on the raw flow, and the sleeping column grows by exactly ``σ₁(G) h``. Until
    2026-11-30 the Magnus steps moved the awake column too, by ``exp(hÃ)``, which grew its residual ε along the top
    direction by ``e^{h σ₁}`` (the block's nonlinear flow keeps it at rest), and the QR passed that to the sleeping
    column: the step doubling measured an error norm of 1,700 at ``h σ₁ = 20`` on a d = 20 head, and the tails of
    the relaxations were taken in steps of about 10."""
    model, y, after = _split_step_of_rank_three(-300.0, 110.0, 16.0)
    tol = LeapTolerances(rtol=0.0, atol=1e-8)
    with jax.enable_x64(True):
        awake = np.asarray(_block.near_awake(y[0], tol))
        assert awake[0] and not awake[1:].any()
        np.testing.assert_allclose(factor_weights(after.y[0], 8), _raw_flow(model, y, 16.0), rtol=0, atol=3e-9)
        sigma = np.linalg.svd(np.asarray(model.G((factor_weights(y[0], 8),))[0]), compute_uv=False)[0]
        grown = float(after.y[0].rho[1] - y[0].rho[1])
        assert grown == pytest.approx(16.0 * sigma, rel=0, abs=1e-7)


def test_a_split_step_whose_newton_iterations_fail_retries_at_half_its_length():
    """Through the first jump of the same flow (log α = −30, t = 9.5), a split step of 1 — where the block's Newton
    iterations do not converge on a fresh Jacobian — is rejected and tried again half as long (as RADAU5), on the
    same Jacobian (the state has not moved); the same try on a reused Jacobian that fails (its sign flipped) is tried
    again at the same length on a fresh one, whatever the length Newton's matrix was formed at. Until 2026-11-30 the error controller's 0.2 took it and the Jacobian was
    renewed either way: on the d = 50 head's valley split steps failed at h, retried at 0.2 h, grew back past h and
    failed again."""
    model, _, after = _split_step_of_rank_three(-30.0, 9.5, 1.0, accepted=False)
    assert int(after.rejected) == 1 and float(after.t) == 9.5
    assert float(after.h_split) == 0.5 and int(after.jac_age) == 0
    args = Args(model=model, log_alpha=jnp.asarray(-30.0))
    with jax.enable_x64(True):
        step = jax.jit(lambda s: _split.split_step(s, jnp.asarray(1e9), args, TOL, _block.widths(s.y), jnp.inf))
        for formed_at in (1.0, 0.9):
            J = -after.jac
            stale = eqx.tree_at(
                lambda s: (s.jac, s.jac_age, s.newton_matrix, s.newton_h, s.h_split),
                after,
                (J, jnp.asarray(1), _block.iteration_matrix(J, formed_at), jnp.asarray(formed_at), jnp.asarray(1.0)),
            )
            again = step(stale)
            assert int(again.rejected) == 2 and float(again.t) == 9.5
            assert float(again.h_split) == 1.0 and int(again.jac_age) == -1


def test_split_steps_reuse_newtons_matrix_near_the_length_it_was_formed_at():
    """After the accepted step of 10 from t = 80 above, a step of 11 reuses Newton's matrix ``(I − 10γJ)⁻¹`` (its
    iterations converge with it) and lands on the raw flow from t = 80; a step of 13, past the band of 1.25, forms it
    afresh at 13."""
    model, y, after = _split_step_of_rank_three(-100.0, 80.0, 10.0)
    assert float(after.newton_h) == 10.0
    args = Args(model=model, log_alpha=jnp.asarray(-100.0))
    with jax.enable_x64(True):
        step = jax.jit(lambda s: _split.split_step(s, jnp.asarray(1e9), args, TOL, _block.widths(s.y), jnp.inf))
        second = step(eqx.tree_at(lambda s: s.h_split, after, jnp.asarray(11.0)))
        assert int(second.rejected) == 0 and float(second.t) == 101.0 and float(second.newton_h) == 10.0
        np.testing.assert_allclose(factor_weights(second.y[0], 8), _raw_flow(model, y, 21.0), rtol=0, atol=3e-9)
        third = step(eqx.tree_at(lambda s: s.h_split, after, jnp.asarray(13.0)))
        assert float(third.newton_h) == 13.0


def _split_step_of_rank_three(log_alpha, t0, h, *, accepted=True):
    """Matrix factorisation of an 8×7 matrix of rank 3 (singular values 3, 1.5, 0.75) from a Gaussian start with
    six columns (more than the block holds): the state at ``t0`` (the leaps at atol 1e-10) and one split step of
    ``h`` from it, accepted (unless ``accepted`` is false)."""
    rng = np.random.default_rng(1)
    A, B = (np.linalg.qr(rng.standard_normal((m, 3)))[0] for m in (8, 7))
    M = (A * [3.0, 1.5, 0.75]) @ B.T
    u0, v0 = rng.standard_normal((8, 6)), rng.standard_normal((7, 6))
    model = models.matrix_factorization_model(M, width=6)
    with jax.enable_x64(True):
        us, vs = check_factors((u0,), (v0,), model)
        y0 = jax.tree_util.tree_map(jnp.asarray, initial_state(us, vs))
        out, _ = _run(model, y0, jnp.asarray(log_alpha), jnp.asarray([0.0, t0 / -log_alpha]), 0.0, 1e-10,
                      solver="leap", batched=False, max_steps=None, progress=None)  # fmt: skip
        y = jax.tree_util.tree_map(lambda a: a[1], out[0])
        assert int(_block.widths(y)[0]) < y[0].rho.shape[0]
        args = Args(model=model, log_alpha=jnp.asarray(log_alpha))
        state = leap_start(y, args, jnp.asarray([t0]), _block.jac_size(y))
        state = eqx.tree_at(lambda s: (s.t, s.h_split, s.stiff), state, (jnp.asarray(t0), jnp.asarray(h), 4))
        after = jax.jit(lambda s: _split.split_step(s, jnp.asarray(1e9), args, TOL, _block.widths(s.y), jnp.inf))(state)
        if accepted:
            assert int(after.splits) == 1 and int(after.rejected) == 0 and float(after.t) == t0 + h
    return model, y, after


def _raw_flow(model, y, h):
    """``W`` after ``h`` of the raw flow ``U' = G V``, ``V' = Gᵀ U`` from the state ``y`` (DOP853 at rtol 1e-12; in
    float64, which the caller enables)."""
    from scipy.integrate import solve_ivp

    f = y[0]
    Z = np.asarray(f.Q) @ (np.exp(np.asarray(f.rho))[:, None] * np.asarray(f.R))
    G = jax.jit(lambda W: model.G((W,))[0])

    def raw(_, z):
        U, V = z[:48].reshape(8, 6), z[48:].reshape(7, 6)
        g = np.asarray(G(jnp.asarray(U @ V.T)))
        return np.concatenate([(g @ V).ravel(), (g.T @ U).ravel()])

    z = solve_ivp(raw, (0.0, h), np.concatenate([Z[:8].ravel(), Z[8:].ravel()]), "DOP853", rtol=1e-12, atol=1e-14)
    return z.y[:48, -1].reshape(8, 6) @ z.y[48:, -1].reshape(7, 6).T

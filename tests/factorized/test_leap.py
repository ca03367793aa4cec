"""The leap integrator of the factorised flow (gradflow/_factorized/_leap.py; docs/math.md, *Plateau leaps*): the
closed form of matrix factorisation far below float64 (DOP853 at moderate α: tests/factorized/test_flow.py), the
conservation law, a cost that does not grow with log(1/α), solving in bounded segments (max_steps, the stop flag,
Ctrl-C), and the range of log α that float64 resolves.

The default tests share one compilation: matrix factorisation of a 4×3 matrix, 21 output times.
"""

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from aligned_mf import TOL, TS, aligned, logistic
from hypothesis import given, settings
from hypothesis import strategies as st

import gradflow
from gradflow import models
from gradflow._factorized._explicit import LeapTolerances, explicit
from gradflow._factorized._flow import _advance, _run, _start
from gradflow._factorized._leap import (
    _DRIFT_BACKOFF,
    _STALLED,
    _STALLED_NEAR,
    _WINDOW,
    _awake_speed,
    leap_from,
    leap_or_polish,
    polished_step,
)
from gradflow._factorized._leap import start as leap_start
from gradflow._factorized._model import check_factors
from gradflow._factorized._qr import Args, imbalance, initial_state


def _logistic(log_alpha, sbar):
    """The closed form at the output times ``TS`` (``t = τ log(1/α)``)."""
    return logistic(TS * -log_alpha, log_alpha, sbar)


def _mf_flow(log_alpha, **kw):
    M, u0, v0, _ = aligned()
    return gradflow.simulate_flow(models.matrix_factorization_model(M), u0=u0, v0=v0, ts=TS, log_alpha=log_alpha, **kw)


@pytest.mark.parametrize("log_alpha", [-1e7, -1e4, -50.0])
def test_closed_form_far_below_float64(log_alpha):
    """``simulate_flow`` takes the leaps, and every log singular value follows its logistic, down to the
    deepest scale float64 resolves at the default tolerance (``|log α| ≤ 2.25e7``); the jumps at ``T_r = 1/σ_r``."""
    M, _, _, sbar = aligned()
    res = _mf_flow(log_alpha)
    assert res.stats["solver"] == "leap" and res.result == "successful"
    assert res.stats["num_leaps"] > 0
    np.testing.assert_allclose(res.log_singular_values[0], _logistic(log_alpha, sbar), rtol=1e-9, atol=1e-6)
    np.testing.assert_allclose(res.W[0][-1], M, atol=1e-5)


def test_cost_does_not_grow_with_log_alpha():
    """Steps at ``log α = −1e4`` and ``−1e7`` no more than at ``α = 1e-32`` (148 against 180), evaluations
    of ``G`` within 1.5× (Tsit5's grow ∝ ``log(1/α)``). With dense output the relaxation after each jump is
    polished once its steps sit at their stability limit; a count of such steps carried over a leap had the next
    jump polished at its first steps' size (243 steps at −1e4)."""
    runs = [_mf_flow(la).stats for la in (np.log(1e-32), -1e4, -1e7)]
    for stats in runs[1:]:
        assert stats["num_steps"] <= runs[0]["num_steps"]
        assert stats["num_evaluations"] <= 1.5 * runs[0]["num_evaluations"]


FINE = np.linspace(0.0, 1.0, 401)


def _mf_run(ts, dense):
    M, u0, v0, _ = aligned()
    solver = gradflow.FactorizedSolver(dense_output=dense)
    return gradflow.simulate_flow(
        models.matrix_factorization_model(M), u0=u0, v0=v0, ts=ts, log_alpha=-50.0, solver=solver
    )


def test_dense_output_keeps_the_steps_of_a_sparse_grid():
    """Explicit steps pass the output times (Tsit5's dense output): on a grid twenty times finer, 401 times, the
    steps stay those of 21 times (152) and every output follows the closed form as closely."""
    sbar = aligned()[3]
    sparse, dense = _mf_run(TS, True), _mf_run(FINE, True)
    assert dense.stats["num_steps"] <= sparse.stats["num_steps"] + 5
    for res, ts in ((dense, FINE), (sparse, TS)):
        np.testing.assert_allclose(res.log_singular_values[0], logistic(ts * 50.0, -50.0, sbar), rtol=1e-9, atol=1e-6)


@pytest.mark.slow  # its own compilation; the fast twin: test_dense_output_keeps_the_steps_of_a_sparse_grid
def test_a_step_onto_every_output_time_takes_more_steps():
    """``dense_output=False`` steps onto every one of the 401 times: more steps (437 against 152), the same accuracy."""
    sbar = aligned()[3]
    dense, stepped = _mf_run(FINE, True), _mf_run(FINE, False)
    assert dense.stats["num_steps"] + 100 < stepped.stats["num_steps"]
    np.testing.assert_allclose(stepped.log_singular_values[0], logistic(FINE * 50.0, -50.0, sbar), rtol=1e-9, atol=1e-6)


def test_dense_output_polishes_at_the_stability_limit():
    """With dense output an explicit step polishes once the steps have sat at their stability limit, with the awake
    columns slower than ``1e4 atol`` though faster than ``100 atol``: no output time cuts a step short there, as
    stepping onto each did now and then, so nothing else damps a stiff relaxation that the tolerance holds above
    ``100 atol`` (at the paper's size, 3e-6 at ``log α = −1000``: docs/benchmarks.md); stepping onto the output times
    polishes by the speed alone. Not through an escape or a jump (the columns moving at order 1), which polishing
    would follow at half steps (the paper-size flow at log α = −1000: 1,486 steps, 1,440 without)."""
    task = models.matrix_factorization(aligned()[0])
    args = Args(model=task.model, log_alpha=jnp.asarray(-2.0))
    tol = LeapTolerances(rtol=0.0, atol=1e-8)
    s = leap_start(_y0(task), args, jnp.asarray(TS * 2.0))
    s = eqx.tree_at(lambda s: (s.dt, s.stiff), s, (jnp.asarray(1e-3), jnp.asarray(_STALLED)))
    fast = float(_awake_speed(s.y, s.f, tol))
    assert fast > _STALLED_NEAR * tol.atol  # every column awake, and moving
    assert not bool(leap_or_polish(s, 1.0, tol, dense=True)[1])
    slow = eqx.tree_at(lambda s: s.f, s, jax.tree_util.tree_map(lambda v: 1e-5 / fast * v, s.f))
    assert bool(leap_or_polish(slow, 1.0, tol, dense=True)[1]) and not bool(leap_or_polish(slow, 1.0, tol)[1])
    slow = eqx.tree_at(lambda s: s.stiff, slow, jnp.asarray(_STALLED - 1))
    assert not bool(leap_or_polish(slow, 1.0, tol, dense=True)[1])


def test_the_count_at_the_stability_limit_ends_with_a_leap_or_a_rejected_polish():
    """A leap starts the count of steps at the stability limit afresh (a jump follows it); so does a polishing step
    that is rejected (accuracy, not stability, limited it: the flow still moves); any other rejected step keeps it."""
    task = models.matrix_factorization(aligned()[0])
    args = Args(model=task.model, log_alpha=jnp.asarray(-50.0))
    tol = LeapTolerances(rtol=0.0, atol=1e-8)
    s = eqx.tree_at(lambda s: s.stiff, leap_start(_y0(task), args, jnp.asarray(TS * 50.0)), jnp.asarray(5))
    assert int(eqx.filter_jit(leap_from)(s, jnp.asarray(TS * 50.0), 50.0, args, tol).stiff) == 0
    s = eqx.tree_at(lambda s: s.dt, s, jnp.asarray(1e3))  # far too long a step
    for polish, count in ((True, 0), (False, 5)):
        after = eqx.filter_jit(explicit)(s, 1e4, args, tol, jnp.asarray(polish))
        assert int(after.rejected) == int(s.rejected) + 1 and int(after.stiff) == count


def test_polishing_that_does_not_halve_the_speed_backs_off():
    """Polishing goes on while each window of ``_WINDOW`` polishing steps halves the awake columns' speed; a window
    that does not found a drift, which half steps do not damp (the d = 50 head at log α = −1e4 drifted at 700 atol
    for thousands of them: docs/benchmarks.md), and ``_DRIFT_BACKOFF`` full steps follow, polishing held off, before
    the next window; a leap ends a back-off."""
    with jax.enable_x64(True):  # the steps' error control at atol = 1e-8
        task = models.matrix_factorization(aligned()[0])
        args = Args(model=task.model, log_alpha=jnp.asarray(-50.0))
        tol = LeapTolerances(rtol=0.0, atol=1e-8)
        out_ts = jnp.asarray(TS * 50.0)
        s = eqx.tree_at(lambda s: s.dt, leap_start(_y0(task), args, out_ts), jnp.asarray(1e-6))
        step = eqx.filter_jit(polished_step)
        speed = float(_awake_speed(s.y, s.f, tol))
        first = step(s, 1e4, args, tol, jnp.asarray(True))  # a window starts at the speed it starts from
        assert int(first.polished) == 1 and float(first.polish_from) == speed
        last = lambda since: eqx.tree_at(
            lambda s: (s.polished, s.polish_from), s, (jnp.asarray(_WINDOW - 1), jnp.asarray(since))
        )
        assert int(step(last(1e3 * speed), 1e4, args, tol, jnp.asarray(True)).polished) == 0  # halved: a new window
        backing = step(last(speed), 1e4, args, tol, jnp.asarray(True))  # a step of 1e-6 barely slows the columns
        assert int(backing.polished) == -_DRIFT_BACKOFF
        slow = eqx.tree_at(lambda s: s.f, backing, jax.tree_util.tree_map(lambda v: 1e-5 / speed * v, backing.f))
        slow = eqx.tree_at(lambda s: s.stiff, slow, jnp.asarray(_STALLED))
        assert not bool(leap_or_polish(slow, 1.0, tol, dense=True)[1])  # held off, though it would polish
        assert bool(leap_or_polish(eqx.tree_at(lambda s: s.polished, slow, jnp.asarray(0)), 1.0, tol, dense=True)[1])
        assert int(step(backing, 1e4, args, tol, jnp.asarray(False)).polished) == 1 - _DRIFT_BACKOFF
        assert int(eqx.filter_jit(leap_from)(backing, out_ts, 50.0, args, tol).polished) == 0


def _y0(task):
    us, vs = check_factors(task.u0, task.v0, task.model)
    return jax.tree_util.tree_map(jnp.asarray, initial_state(us, vs))


def _states(task, log_alpha):
    """The recorded states of the leap solve (``simulate_flow``'s solve in segments) and its stats."""
    la = jnp.asarray(np.float64(log_alpha))
    out, stopped = _run(
        task.model,
        _y0(task),
        la,
        jnp.asarray(TS),
        0.0,
        1e-8,
        solver="leap",
        batched=False,
        max_steps=None,
        progress=None,
    )
    assert out[3] == dfx.RESULTS.successful and not stopped
    return out[0], out[4]


@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2**16), log_alpha=st.sampled_from([-2.0, -30.0, -300.0]))
def test_conservation_hypothesis(seed, log_alpha):
    """``ZᵀJZ = α² C̄`` at every recorded time, from random factors and teachers, through explicit steps and leaps
    alike: in the scaled form the state holds at every α, ``QᵀJQ = K(ρ, R̃, C̄)`` (docs/math.md), with ``C̄`` changed
    only by the sorting gauge's rotations (its spectrum conserved), and where ``UᵀU − VᵀV`` is within float64's
    reach of ``Z`` (``log α = −2``), in the rebuilt ``Z`` too."""
    task = models.matrix_factorization(m=4, n=3, singular_values=(3.0, 1.5), seed=seed)
    with jax.enable_x64(True):
        ys, _ = _states(task, log_alpha)
        off = jax.vmap(lambda f: imbalance(f, jnp.asarray(np.float64(log_alpha)), 4))(ys[0])
    assert np.max(np.abs(np.asarray(off))) < 10 * TOL.atol
    f = jax.tree_util.tree_map(np.asarray, ys[0])
    us, vs = check_factors(task.u0, task.v0, task.model)
    C0 = us[0].T @ us[0] - vs[0].T @ vs[0]
    want = np.broadcast_to(np.linalg.eigvalsh(C0), (len(TS), 3))
    np.testing.assert_allclose(np.linalg.eigvalsh(f.C), want, atol=1e-12 * np.abs(C0).max())
    if log_alpha == -2.0:
        Z = f.Q @ (np.exp(f.rho)[..., :, None] * f.R)
        U, V = Z[:, :4], Z[:, 4:]
        C = U.transpose(0, 2, 1) @ U - V.transpose(0, 2, 1) @ V
        tol = 1e-7 * np.max(np.sum(Z**2, axis=(1, 2)))
        np.testing.assert_allclose(np.linalg.eigvalsh(C), want * np.exp(2 * log_alpha), atol=tol)


@pytest.mark.slow  # fast twins: tests/solver (the segment loop), test_keyboard_interrupt_ends_the_segment_loop
def test_segments_are_the_solve():
    """The leaps carry their whole state between segments: advanced seven explicit steps or leaps at a time from
    Python (a budget of 0 does nothing), the solve is the one run in ``run_segments``'s segments."""
    M, _, _, _ = aligned()
    task = models.matrix_factorization(M)
    la, ts = jnp.asarray(-1e4), jnp.asarray(TS)
    with jax.enable_x64(True):
        whole, stats = _states(task, -1e4)
        static = dict(solver="leap", batched=False)
        state = _start(task.model, _y0(task), la, ts, 0.0, 1e-8, **static)
        same = _advance(task.model, state, jnp.asarray(0), la, ts, 0.0, 1e-8, **static)
        assert same.t == state.t and int(same.steps + same.leaps) == 0
        while state.t < TS[-1] * 1e4 and state.result == dfx.RESULTS.successful:
            before = int(state.steps + state.leaps)
            state = _advance(task.model, state, jnp.asarray(7), la, ts, 0.0, 1e-8, **static)
            assert int(state.steps + state.leaps) <= before + 7
        assert state.result == dfx.RESULTS.successful and state.leaps > 0
        np.testing.assert_array_equal(np.asarray(state.stats), np.asarray(stats))
    np.testing.assert_allclose(np.asarray(state.ys[0].rho), np.asarray(whole[0].rho), rtol=1e-12)


def test_max_steps_keeps_the_outputs_reached():
    """``max_steps`` (explicit steps and leaps) stops the leaps there: ``max_steps_reached`` and the outputs up to
    the time reached, those of the full solve, later ones ``+inf``."""
    full = _mf_flow(-1e4)
    part = _mf_flow(-1e4, max_steps=60, throw=False)
    assert part.result == "max_steps_reached" and part.stats["num_steps"] == 60
    done = np.isfinite(part.loss)
    assert 0 < done.sum() < len(TS) and not np.isfinite(part.log_singular_values[0][~done]).any()
    np.testing.assert_allclose(part.log_singular_values[0][done], full.log_singular_values[0][done], rtol=1e-12)


@pytest.mark.parametrize("batching", [pytest.param("vmap", marks=pytest.mark.slow), "separate"])
def test_stop_flag_interrupts_the_leaps(monkeypatch, batching):
    """The stop flag that Ctrl-C sets (``gradflow._config.stop_requested``, read by ``run_segments`` between
    segments) ends a leap solve with ``Interrupted``, whose result keeps the outputs reached; a batch too, run by run
    or under ``vmap``."""
    import gradflow._solver._segments as segments

    calls = {"n": 0}

    def stop_after_two():
        calls["n"] += 1
        return calls["n"] > 2  # per run (separate: each thread asks, but the count is shared)

    full = _mf_flow(np.array([-1e4, -50.0]), batching=batching)
    monkeypatch.setattr(segments, "stop_requested", stop_after_two)
    with pytest.raises(gradflow.Interrupted) as stop:
        _mf_flow(np.array([-1e4, -50.0]), batching=batching)
    res = stop.value.result
    assert list(res.result) == ["interrupted"] * 2
    done = np.isfinite(res.loss)
    assert done[:, 0].all() and not done[:, -1].any()
    np.testing.assert_allclose(res.log_singular_values[0][done], full.log_singular_values[0][done], rtol=1e-12)


def test_keyboard_interrupt_ends_the_segment_loop():
    """Ctrl-C (a ``KeyboardInterrupt`` in the loop: here from the progress callback, after two segments) returns the
    leap state reached, marked stopped, with the outputs so far."""
    M, _, _, _ = aligned()
    task = models.matrix_factorization(M)
    calls = {"n": 0}

    def progress(reached):
        calls["n"] += 1
        if calls["n"] > 2:
            raise KeyboardInterrupt

    with jax.enable_x64(True):
        out, stopped = _run(
            task.model, _y0(task), jnp.asarray(np.float64(-1e4)), jnp.asarray(TS), 0.0, 1e-8, solver="leap", batched=False,
            max_steps=None, progress=progress,
        )  # fmt: skip
    assert stopped and out[3] == dfx.RESULTS.max_steps_reached  # "stopped short", as segment_result reports it
    assert 0 < int(out[4][0]) and np.isfinite(np.asarray(out[2][0])) and not np.isfinite(np.asarray(out[2][-1]))


def test_refuses_what_float64_cannot_resolve():
    """Beyond ``2 |log α| 2⁻⁵² > atol + 2 rtol |log α|`` the log scales cannot hold the tolerance: a ``ValueError``
    that states the supported range, before any solve; a looser atol or an rtol reach further."""
    with pytest.raises(ValueError, match=r"beyond what float64 resolves.*\|log α\| ≤ 2\.252e\+07"):
        _mf_flow(-3e7)
    with pytest.raises(ValueError, match="Supported at these tolerances: \\|log α\\| ≤ 2.252e\\+09"):
        _mf_flow(-3e9, atol=1e-6)
    with pytest.raises(ValueError, match="beyond what float64 resolves"):  # any solver
        _mf_flow(np.array([-1.0, -3e7]), solver=gradflow.FactorizedSolver(method="tsit5"))
    with pytest.raises(ValueError, match="too long at log α"):  # and the output times, as for every family
        gradflow.simulate_flow(
            models.matrix_factorization_model(aligned()[0]), u0=aligned()[1], v0=aligned()[2], ts=TS * 1e6,
            log_alpha=-1e7,
        )  # fmt: skip


@pytest.mark.slow
def test_attention_head_matches_tsit5():
    """On a small full-weight attention head (four jumps in τ ∈ [0, 2.5]) the leaps agree with Tsit5 at
    ``log α = −200``, where Tsit5's own error is small, and cost fewer steps."""
    task = models.attention_full(n=30, tokens=4, dim=3, teacher_kq=(1, 0.5), teacher_vo=(1, 0.5))
    ts = np.linspace(0.0, 2.5, 26)
    kw = dict(u0=task.u0, v0=task.v0, ts=ts, log_alpha=-200.0)
    leap, ref = (
        gradflow.simulate_flow(task.model, **kw),
        gradflow.simulate_flow(task.model, **kw, solver=gradflow.FactorizedSolver(method="tsit5")),
    )
    assert leap.stats["num_leaps"] > 0 and leap.stats["num_steps"] < ref.stats["num_steps"]
    for a, b in zip(leap.log_singular_values, ref.log_singular_values):
        np.testing.assert_allclose(a, b, rtol=1e-7, atol=1e-4)


@pytest.mark.slow
def test_batched_over_alpha_is_the_runs_one_by_one():
    las = np.array([-1e4, -50.0])
    ones = [_mf_flow(la) for la in las]
    # "separate" runs the same program run by run: the same numbers. Under vmap XLA may round an operation one ulp
    # differently (measured: 9e-16 at τ = 0.7 of the run at −50), which can turn one step's accept or leap decision
    # and so the step sequence (160 steps against 161); the runs then agree to the solver's accuracy (1e-7 here).
    for batching, rtol in (("vmap", 1e-6), ("separate", 1e-12)):
        batch = _mf_flow(las, batching=batching)
        assert list(batch.result) == ["successful"] * 2
        for i, one in enumerate(ones):
            assert abs(int(batch.stats["num_steps"][i]) - int(one.stats["num_steps"])) <= 2  # at most a step turned
            np.testing.assert_allclose(batch.log_singular_values[0][i], one.log_singular_values[0], rtol=rtol)
            np.testing.assert_allclose(batch.W[0][i], one.W[0], atol=rtol)

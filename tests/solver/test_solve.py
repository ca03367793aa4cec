"""Batches of runs and how a solve ended: ``vmap`` or one run per core, a stopped solve's result per run, and the
result and message of each run."""

from types import SimpleNamespace

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradflow._config import BATCHING
from gradflow._solver import solve_status, vmap_batches
from gradflow._solver._solve import segment_result, solve_separately


def test_vmap_batches_off_the_cpu_or_when_asked():
    assert BATCHING == ("auto", "vmap", "separate")
    assert vmap_batches("vmap") and not vmap_batches("separate")
    assert vmap_batches("auto") == (jax.default_backend() != "cpu")
    with pytest.raises(ValueError, match=r"batching must be one of \('auto', 'vmap', 'separate'\); got 'vmapped'"):
        vmap_batches("vmapped")


def test_runs_solved_separately_are_stacked_as_a_vmapped_solve():
    """Three runs, one per core: their outputs stacked along a first axis, and which of them Ctrl-C stopped."""
    outs, stopped = solve_separately(lambda j: ({"y": np.full(2, float(j)), "n": j}, j == 1), 3)
    assert outs["y"].tolist() == [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]] and outs["n"].tolist() == [0, 1, 2]
    assert stopped.tolist() == [False, True, False]


def test_a_run_stopped_short_of_the_end_reached_its_step_cap_or_was_interrupted():
    """Three runs of a solve in segments to t = 2: one reached it, one stopped at t = 1 without failing (as one
    ``diffeqsolve`` with that ``max_steps`` says: ``max_steps_reached``; interrupted if the loop was), one failed
    at t = 1 (its own result, never interrupted)."""
    outcome = jax.vmap(lambda failed: dfx.RESULTS.where(failed, dfx.RESULTS.dt_min_reached, dfx.RESULTS.successful))
    seg = SimpleNamespace(
        t=np.array([2.0, 1.0, 1.0]), stats=np.zeros((3, 3), int), result=outcome(jnp.array([False, False, True]))
    )
    for interrupted in (False, True):
        result, stopped = segment_result(seg, 2.0, interrupted)
        assert np.asarray(result == dfx.RESULTS.successful).tolist() == [True, False, False]
        assert np.asarray(result == dfx.RESULTS.max_steps_reached).tolist() == [False, True, False]
        assert np.asarray(result == dfx.RESULTS.dt_min_reached).tolist() == [False, False, True]
        assert stopped.tolist() == [False, interrupted, False]


def test_solve_status_says_where_a_run_stopped():
    """Two runs: one reached every output time, one hit its step cap after the second."""
    hit = jnp.array([False, True])
    results = jax.vmap(lambda h: dfx.RESULTS.where(h, dfx.RESULTS.max_steps_reached, dfx.RESULTS.successful))(hit)
    finished = np.array([[True, True, True], [True, True, False]])
    ts, log_a = np.array([0.0, 1.0, 2.0]), np.array([-10.0, -20.0])
    result, message = solve_status(
        results, finished, ts, log_a, 7, np.array([False, False]), what="simulate_flow", advice=""
    )
    assert result.tolist() == ["successful", "max_steps_reached"]
    assert message[0] == "" and message[1] == (
        "simulate_flow hit max_steps=7 at log α = -20: the flow stopped after τ = 1 (ts[-1] = 2). Raise max_steps, "
        "loosen atol, or shorten ts."
    )


def test_solve_status_flags_a_finished_run_with_a_non_finite_output():
    """The solver finished both runs, but the second has one output that is not finite (as a dense output's
    interpolant once gave at the paper's size): ``non_finite``, with the time named, not ``successful``."""
    results = jax.vmap(lambda _: dfx.RESULTS.successful)(jnp.arange(2))
    finished = np.array([[True, True, True], [True, False, True]])
    ts, log_a = np.array([0.0, 1.0, 2.0]), np.array([-10.0, -20.0])
    result, message = solve_status(
        results, finished, ts, log_a, 7, np.array([False, False]), what="simulate_flow", advice=""
    )
    assert result.tolist() == ["successful", "non_finite"]
    assert message[0] == "" and "outputs at τ = 1 (1 of 3) are not finite" in message[1]

"""Solving onto output times in segments: the very steps of one uninterrupted solve, a stop flag, a step cap, and
the progress bar's time left."""

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradflow._config import PerCore
from gradflow._solver import Solve, UnderflowGuard, run_segments, segment_status
from gradflow._solver._segments import strongly_typed


def _decaying(t, y, args):
    return -y * (1.0 + t)


def _decay(ts, atol=1e-10):
    """``dy/dt = −(1 + t) y`` (one vector field for every test: one compilation)."""
    return Solve(_decaying, dfx.Tsit5(), None, ts, dfx.PIDController(rtol=0.0, atol=atol))


def _segmented(solve, y0, budgets):
    """The solve advanced by the given step budgets, then to its end; the start and the budgets typed as
    ``run_segments`` types them (strongly: a weak type would be another program)."""
    seg = strongly_typed(_start(solve, y0))
    for b in budgets:
        seg = _advance(solve, seg, np.asarray(b, dtype=np.int64))
    return _advance(solve, seg, np.asarray(10**6, dtype=np.int64))


@eqx.filter_jit
def _start(solve, y0):
    return solve.start(y0)


@eqx.filter_jit
def _advance(solve, seg, budget):
    return solve.advance(seg, budget)


@pytest.mark.parametrize("budgets", [[], [1], [1, 1, 1, 1], [3, 0, 5, 2]])
def test_segments_take_the_steps_of_one_uninterrupted_solve(budgets):
    """``dy/dt = −(1 + t) y`` onto six output times with Tsit5, in segments of 1 to 5 steps: the same outputs (bit for
    bit) and step counts as one ``diffeqsolve``, and the closed form ``exp(−t − t²/2)`` to the tolerance."""
    with jax.enable_x64(True):
        ts = jnp.linspace(0.0, 2.0, 6)
        solve = _decay(ts)
        seg = _segmented(solve, jnp.ones(1), budgets)
        ref = dfx.diffeqsolve(
            dfx.ODETerm(solve.vector_field),
            dfx.Tsit5(),
            t0=0.0,
            t1=2.0,
            dt0=None,
            y0=jnp.ones(1),
            saveat=dfx.SaveAt(ts=ts),
            stepsize_controller=dfx.ClipStepSizeController(UnderflowGuard(solve.controller, ts), step_ts=ts),
        )
    assert np.asarray(seg.ys).tolist() == np.asarray(ref.ys).tolist()
    assert np.asarray(seg.stats).tolist() == [
        int(ref.stats[k]) for k in ("num_steps", "num_accepted_steps", "num_rejected_steps")
    ]
    np.testing.assert_allclose(np.asarray(seg.ys)[:, 0], np.exp(-np.asarray(ts) - np.asarray(ts) ** 2 / 2), atol=1e-8)
    assert seg.result == dfx.RESULTS.successful


def test_run_segments_keeps_the_outputs_reached_at_a_step_cap_and_at_a_stop():
    """``run_segments`` stops a solve at ``max_steps`` (the outputs reached so far kept, later ones ``+inf``), and at
    its pool's stop flag, as Ctrl-C in the main thread sets it, after the segment under way."""
    with jax.enable_x64(True):
        ts = jnp.linspace(0.0, 2.0, 6)  # the solve of the test above: its program, compiled once
        solve = _decay(ts)
        advance = lambda seg, budget: _advance(solve, seg, budget)  # noqa: E731
        status = lambda seg: segment_status(seg, ts[-1])  # noqa: E731
        seg, interrupted = run_segments(advance, _start(solve, jnp.ones(1)), status, max_steps=20)  # of 67
        assert not interrupted and int(seg.stats[0]) == 20 and 0 < float(seg.t) < 2.0
        ys = np.asarray(seg.ys)[:, 0]
        reached = np.asarray(ts) <= float(seg.t)
        assert 1 < reached.sum() < len(ts)  # outputs past the start reached, and not all
        assert np.all(np.isfinite(ys[reached])) and np.all(ys[~reached] == np.inf)

        def stopped_at_once():
            with PerCore(1) as pool:
                pool.stop()
                return pool.submit(
                    lambda: run_segments(advance, _start(solve, jnp.ones(1)), status, max_steps=None)
                ).result()

        seg, interrupted = stopped_at_once()
    assert interrupted and int(seg.stats[0]) == 0


def test_time_left_ignores_the_compiling_segment():
    """The time left is the average rate since the first segment ended: a first segment of 30 s (compilation) that
    reached τ = 0.1 of 10, then τ moving 2 per second, gives (10 − 2.1) / 2 s, not tqdm's extrapolation of the 30 s;
    no estimate before the first segment, at its end, nor for ETA_SECONDS after it."""
    from gradflow._solver._segments import ETA_SECONDS, TimeLeft

    now = [0.0]
    left = TimeLeft(10.0, clock=lambda: now[0])
    assert left.update(0.0) is None  # before any segment
    now[0] = 30.0
    assert left.update(0.1) is None  # the first (compiled) segment ended
    now[0] += 0.5 * ETA_SECONDS
    assert left.update(0.1 + ETA_SECONDS) is None  # too short a stretch to time
    now[0] = 30.0 + ETA_SECONDS
    assert left.update(0.1 + 2 * ETA_SECONDS) == pytest.approx((10 - 0.1 - 2 * ETA_SECONDS) / 2)
    now[0] += 1.0
    assert left.update(9.9 + 1.0) == 0.0  # past the end (rounding): nothing left, never negative
    stuck = TimeLeft(5.0, clock=lambda: now[0])
    stuck.update(0.0)
    now[0] += 20.0
    assert stuck.update(0.0) is None  # a first segment that did not move: the origin is the next one that does
    now[0] += 2.0
    assert stuck.update(1.0) is None
    now[0] += 2.0
    assert stuck.update(2.0) == pytest.approx(3.0 * 2.0)


def test_progress_bar_shows_the_time_left():
    import io

    from gradflow._solver._segments import _Bar

    bar = _Bar(total=10.0, file=io.StringIO(), bar_format="{n:.3g} of {total:.3g} <{left}")
    assert str(bar) == "0 of 10 <?"
    bar.left = 75.0
    assert str(bar) == "0 of 10 <01:15"
    bar.close()


def test_run_segments_compiles_the_advance_once():
    """A start holding a weakly typed array (``jnp.asarray(0)``: a step count) whose advance returns it strongly typed
    (``+ 1`` of an ``int64`` count) is traced once, not again at the second segment."""
    traces = []

    @jax.jit
    def advance(state, budget):
        traces.append(1)
        steps, x = state
        return steps + jnp.ones((), steps.dtype), x + 1.0  # one step a segment

    def status(state):
        steps = np.atleast_1d(np.asarray(state[0]))
        return steps, steps.astype(float), steps < 3

    start = (jnp.asarray(0), jnp.zeros(()))
    assert start[0].weak_type
    (steps, _), interrupted = run_segments(advance, start, status, max_steps=None)
    assert int(steps) == 3 and not interrupted and len(traces) == 1

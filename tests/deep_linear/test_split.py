"""The deep linear flow between the direct integration's range and the small-α path's (docs/deep-linear.md, *Between
the two ranges*; gradflow/_deep_linear/_split.py): Saxe's closed form through a jump at α = 1e-8, the direct
integration where both run, the small-α path below, a batch across the three ranges, max_steps and Ctrl-C."""

import math

import jax
import numpy as np
import pytest
from deep_linear_common import (
    A0,
    S,
    aligned,
    gap_to_the_limit,
    gaussian,
    labels_task,
    learned_chain,
    rotated,
    split_flow,
    whitened,
)

import gradflow
import theory
from gradflow._deep_linear import _small, _split
from gradflow._solver import _segments


def test_saxes_closed_form_through_the_first_jump_inside_the_gap():
    """Aligned start, L = 3, α = 1e-8 (between the ranges, so ``simulate_flow`` takes the split): ``σ_1`` crosses
    ``s_1/2`` where Saxe's closed form does, to 1e-9 of ``T_1`` (the plateau's length, 3e7 in ``t``, below the
    tolerance, 1e-8; 0.1 of the jump's width ``α^{L−2}/s_1``: measured 7.7e-10 with Radau's Newton tolerance floored
    at 1e-3, 1e-10 with SciPy's 1e-4, in 633 and 646 steps); across the jump Saxe's time of each ``σ_1`` less its ``τ`` is that
    offset to 1e-3 of the width (the jump's shape); ``σ_2``, ``σ_3`` are asleep on their own closed form."""
    depth, alpha = 3, 1e-8
    exact = theory.saxe_time(S[0] / 2, S[0], (alpha * A0[0]) ** depth, depth) * alpha ** (depth - 2)
    width = alpha ** (depth - 2) / S[0]
    ts = np.concatenate([[0.0, 0.5 * exact], exact + width * np.linspace(-3.0, 3.0, 601)])
    flow = gradflow.simulate_flow(whitened(depth), u0=aligned(depth), ts=ts, alpha=alpha)
    assert flow.result == "successful" and "num_frame_turns" in flow.stats  # the split's count
    sigma = np.exp(flow.log_singular_values[2:, 0])
    crossing = np.interp(S[0] / 2, sigma, ts[2:])
    assert abs(crossing - exact) < 1e-9 * exact, (crossing - exact) / width
    across = (sigma > 0.05 * S[0]) & (sigma < 0.95 * S[0])
    saxe = theory.saxe_time(sigma[across], S[0], (alpha * A0[0]) ** depth, depth) * alpha ** (depth - 2)
    offset = saxe - ts[2:][across]
    assert np.ptp(offset) < 1e-3 * width and across.sum() > 50, np.ptp(offset) / width
    # the sleeping modes on their own closed form: a^{−(L−2)} = a0^{−(L−2)} − (L−2) s τ per mode, σ = α^L a^L
    a = (A0[1:] ** (-(depth - 2)) - (depth - 2) * S[1:] * ts[1]) ** (-1.0 / (depth - 2))
    np.testing.assert_allclose(flow.log_singular_values[1, 1:], np.sort(depth * np.log(alpha * a))[::-1], atol=1e-6)


def test_the_split_is_the_direct_flow_where_both_run():
    """Gaussian start on the rotated task, L = 3, α = 1e-3: the split against the direct integration at atol = 1e-10,
    ``W`` to 1e-9 and ``log σ`` to 1e-4 away from the jumps."""
    depth, alpha = 3, 1e-3
    model, W0 = rotated(depth), gaussian(depth)
    ts = np.linspace(0.0, 1.5, 16)
    split = split_flow(model, W0, ts, alpha)
    direct = gradflow.simulate_flow(model, u0=W0, ts=ts, alpha=alpha, atol=1e-10)
    assert split.result == "successful"
    np.testing.assert_allclose(split.W, direct.W, atol=1e-9)
    np.testing.assert_allclose(split.log_singular_values, direct.log_singular_values, atol=1e-4)
    for a, b in zip(split.layers, direct.layers):
        np.testing.assert_allclose(a, b, atol=1e-9)


@pytest.mark.slow
def test_the_split_inside_the_gap_agrees_with_itself_and_the_limit():
    """Gaussian start on the rotated task, L = 3, α = 1e-8 (between the ranges): two tolerances agree to 1e-5 in
    ``log σ``, and with the small-α path (the limit, ``O(α)`` away) to its own accuracy, 1e-3; ``W`` to 1e-9."""
    depth, alpha = 3, 1e-8
    model, W0 = rotated(depth), gaussian(depth)
    ts = np.linspace(0.0, 1.5, 16)
    coarse = gradflow.simulate_flow(model, u0=W0, ts=ts, alpha=alpha)
    fine = gradflow.simulate_flow(model, u0=W0, ts=ts, alpha=alpha, atol=1e-9)
    with jax.enable_x64(True):
        limit = _small.flow(model, W0, ts, math.log(alpha), rtol=0.0, atol=1e-8, max_steps=None, progress=False)
    np.testing.assert_allclose(coarse.log_singular_values, fine.log_singular_values, atol=1e-5)
    np.testing.assert_allclose(coarse.log_singular_values, limit.log_singular_values, atol=1e-3)
    np.testing.assert_allclose(coarse.W, limit.W, atol=1e-9)


def test_the_matrix_free_split_is_the_dense_split():
    """Gaussian start on the rotated task, L = 3, α = 1e-8, through the first jump and a turn of the frames: the chunks
    by Kvaerno5 with a matrix-free Newton and ``G = G0 − W C`` (``RightGradient``) give Radau's with the dense
    Jacobian and ``K``: ``W`` within 1e-12, ``log σ`` within 1e-5 (measured 8e-16 and 2.4e-6; 3.8e-15 and 2.3e-6
    through all three jumps, in 655 steps against Radau's 1,967)."""
    depth, alpha = 3, 1e-8
    model, W0 = rotated(depth), gaussian(depth)
    ts = np.linspace(0.0, 0.5, 6)
    free = split_flow(model, W0, ts, alpha, free=True)
    dense = split_flow(model, W0, ts, alpha)
    assert free.result == dense.result == "successful"
    assert free.stats["num_frame_turns"] >= 1
    np.testing.assert_allclose(free.W, dense.W, atol=1e-12)
    gap = np.abs(free.log_singular_values - dense.log_singular_values)
    assert 0.0 < gap.max() < 1e-5  # two solvers, not one run twice


def test_the_matrix_free_split_keeps_what_it_reached(monkeypatch):
    """The matrix-free split's step budget and Ctrl-C (``gradflow._solver``'s segments): ``max_steps_reached`` and
    ``"interrupted"``, the outputs before kept, those after +inf."""
    depth, alpha = 3, 1e-8
    ts = np.array([0.0, 0.2, 1.0])
    flow = split_flow(whitened(depth), aligned(depth), ts, alpha, max_steps=30, free=True)
    assert flow.result == "max_steps_reached" and "max_steps = 30" in str(flow.message)
    assert np.all(np.isfinite(flow.W[0])) and np.all(np.isinf(flow.W[2])) and np.isnan(flow.loss[2])
    calls = []

    def stop():
        calls.append(1)
        return len(calls) > 3

    monkeypatch.setattr(_segments, "stop_requested", stop)
    solver = gradflow.DeepLinearSolver(newton="matrix_free")
    with pytest.raises(gradflow.Interrupted) as stopped:
        gradflow.simulate_flow(whitened(depth), u0=aligned(depth), ts=ts, alpha=alpha, solver=solver)
    flow = stopped.value.result
    assert flow.result == "interrupted" and "Ctrl-C" in str(flow.message)
    assert np.all(np.isfinite(flow.W[0])) and np.all(np.isinf(flow.W[2]))


def test_a_batch_across_the_three_ranges():
    """α = 1e-2 (direct), 1e-8 (split) and 1e-12 (the small-α path) in one batch at L = 3, aligned start: each run by its
    own path, in the batch's order, all learning the first mode by Saxe's ``T_1`` and not before."""
    depth = 3
    T1 = A0[0] ** (-(depth - 2)) / ((depth - 2) * S[0])
    ts = np.array([0.0, 0.5 * T1, 1.1 * T1])
    flow = gradflow.simulate_flow(whitened(depth), u0=aligned(depth), ts=ts, alpha=[1e-2, 1e-8, 1e-12])
    assert list(flow.result) == ["successful"] * 3
    assert flow.stats["num_frame_turns"][1] >= 1 and flow.stats["num_frame_turns"][0] == -1
    np.testing.assert_array_equal(flow.b[:, 1, 0] < 0.5, [False, False, False])
    np.testing.assert_array_equal(flow.b[:, 2, 0] < 0.5, [True, True, True])


def test_max_steps_keeps_what_it_reached():
    """A step budget that runs out in the first plateau: ``max_steps_reached``, the outputs before it kept, those
    after +inf."""
    depth, alpha = 3, 1e-8
    ts = np.array([0.0, 0.5, 1.0])
    flow = split_flow(whitened(depth), aligned(depth), ts, alpha, max_steps=5)
    assert flow.result == "max_steps_reached" and "max_steps = 5" in str(flow.message)
    assert np.all(np.isfinite(flow.W[0])) and np.all(np.isinf(flow.W[2])) and np.isnan(flow.loss[2])


def test_interrupted_split_keeps_what_it_finished(monkeypatch):
    """Ctrl-C after the first escape: ``"interrupted"``, the outputs of the chunks before it kept, those after +inf."""
    calls = []

    def interrupt():
        calls.append(1)
        if len(calls) > 400:
            raise KeyboardInterrupt

    monkeypatch.setattr(_split, "check_interrupt", interrupt)
    depth = 3
    T1 = A0[0] ** (-(depth - 2)) / ((depth - 2) * S[0])
    ts = np.array([0.0, 0.5 * T1, 2.0])
    with pytest.raises(gradflow.Interrupted) as stop:
        gradflow.simulate_flow(whitened(depth), u0=aligned(depth), ts=ts, alpha=1e-8)
    flow = stop.value.result
    assert flow.result == "interrupted" and "Ctrl-C" in str(flow.message)
    assert np.all(np.isfinite(flow.W[:2])) and np.all(np.isinf(flow.W[2])) and np.isnan(flow.loss[2])


@pytest.mark.slow
def test_rectangular_layers_and_a_wider_hidden_width():
    """``deep_matrix_factorization(m=4, n=6, width=5)`` from a Gaussian start, L = 3, α = 1e-8: the split's frames
    on spaces of three sizes; the small-α path's ``log σ`` within 1e-3 and its ``W`` within 1e-12."""
    task = gradflow.models.deep_matrix_factorization(m=4, n=6, depth=3, aligned=False, width=5)
    ts = np.linspace(0.0, 2.0, 11)
    flow = gradflow.simulate_flow(task.model, u0=task.u0, ts=ts, alpha=1e-8)
    with jax.enable_x64(True):
        limit = _small.flow(
            task.model,
            tuple(np.asarray(u) for u in task.u0),
            ts,
            math.log(1e-8),
            rtol=0.0,
            atol=1e-8,
            max_steps=None,
            progress=False,
        )
    assert flow.result == "successful" and flow.stats["num_frame_turns"] >= 1
    np.testing.assert_allclose(flow.log_singular_values, limit.log_singular_values, atol=1e-3)
    np.testing.assert_allclose(flow.W, limit.W, atol=1e-12)


@pytest.mark.slow
def test_the_small_alpha_paths_sleeping_modes_after_a_jump_at_depth_5():
    """L = 5, α = 1e-4, Gaussian start on the rotated task: the small-α path's ``log σ`` against the split's, within
    1e-4 after the first jump (τ ≤ 2) and 5e-4 after the second (τ ≥ 2.6): 1.6e-5 and 2.6e-4 measured with the rest of
    ``S`` followed beside the escaping chain (5.1e-5 and 3.4e-4 with it read where ``S`` had grown 1e7-fold, 1.5e-4 and
    1.6e-3 at the blow-up's cut, a growth of 1.6e5 at L = 5); at α = 1e-4 what is left is the flow's ``O(α)``."""
    ts = np.linspace(0.0, 3.0, 31)
    _, gap = gap_to_the_limit(5, 1e-4, ts)
    assert gap[ts <= 2.0].max() < 1e-4 and gap[ts >= 2.6].max() < 5e-4, gap


@pytest.mark.slow
def test_a_cross_entropy_split_is_the_direct_flow_where_both_run():
    """The cross-entropy of logits linear in ``W`` (L = 3, α = 1e-3, Gaussian start, through the first jump and its
    plateau): the split against the direct integration at atol = 1e-10, ``W`` to 1e-10 and ``log σ`` to 1e-5."""
    depth, alpha = 3, 1e-3
    model = labels_task(depth)
    W0 = gaussian(depth, seed=1)
    ts = np.linspace(0.0, 30.0, 16)
    split = split_flow(model, W0, ts, alpha)
    direct = gradflow.simulate_flow(model, u0=W0, ts=ts, alpha=alpha, atol=1e-10)
    assert split.result == "successful" and split.loss[-1] < 0.6 < 1.09 < split.loss[1]
    np.testing.assert_allclose(split.W, direct.W, atol=1e-10)
    np.testing.assert_allclose(split.log_singular_values, direct.log_singular_values, atol=1e-5)


@pytest.mark.slow
def test_a_cross_entropy_flow_between_the_ranges():
    """The cross-entropy at L = 3, α = 1e-8 (refused before the split took any loss): ``simulate_flow`` solves it through
    the first jump; two tolerances agree to 1e-7 in ``log σ``; the small-α path within 1e-6 in ``log σ`` (2.3e-3 on the
    sleeping modes after the jump while it projected the rest through the jump instead of carrying it), ``W`` within
    1e-7."""
    depth, alpha = 3, 1e-8
    model = labels_task(depth)
    W0 = gaussian(depth, seed=1)
    ts = np.linspace(0.0, 4.0, 16)
    coarse = gradflow.simulate_flow(model, u0=W0, ts=ts, alpha=alpha)
    fine = gradflow.simulate_flow(model, u0=W0, ts=ts, alpha=alpha, atol=1e-9)
    with jax.enable_x64(True):
        limit = _small.flow(model, W0, ts, math.log(alpha), rtol=0.0, atol=1e-8, max_steps=None, progress=False)
    assert coarse.result == "successful" and coarse.stats["num_frame_turns"] >= 1 and coarse.loss[-1] < 0.6
    np.testing.assert_allclose(coarse.log_singular_values, fine.log_singular_values, atol=1e-7)
    np.testing.assert_allclose(coarse.log_singular_values, limit.log_singular_values, atol=1e-6)
    np.testing.assert_allclose(coarse.W, limit.W, atol=1e-7)


def test_an_escape_and_a_turn_keep_A_zero_off_its_learned_blocks():
    """The sleeping chain moves into ``A`` exactly: ``A`` zero off its ``(k+1)×(k+1)`` block after the escape and after
    the turn of the frames, the layers in the original coordinates kept (an ``eps`` of ``A`` cut off there is
    ``eps/α`` of ``S``: docs/deep-linear.md, *Held plateaus*)."""
    rng = np.random.default_rng(4)
    depth, width, k, alpha = 4, 4, 1, 1e-12
    A, S = learned_chain(rng, k, width, depth), [rng.standard_normal((width, width)) for _ in range(depth)]
    for s in S:
        s[k:, k:] += 1e8 * np.outer(rng.standard_normal(width - k), rng.standard_normal(width - k)) / width
    frames = [np.linalg.qr(rng.standard_normal((width, width)))[0] for _ in range(depth + 1)]
    before = [f @ (a + alpha * s) @ g.T for f, g, a, s in zip(frames[1:], frames[:-1], A, S)]
    frames = _split._escape_into_A(A, S, frames, k, alpha)
    A, S, frames = _split._turn(A, S, frames, k + 1)
    for a in A:
        assert not np.any(a[k + 1 :]) and not np.any(a[:, k + 1 :])
    after = [f @ (a + alpha * s) @ g.T for f, g, a, s in zip(frames[1:], frames[:-1], A, S)]
    for b, a in zip(before, after):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-14 * np.abs(b).max())


def test_log_sigma_is_read_in_the_frames():
    """At α = 1e-12 the sleeping modes' ``log σ`` of an output is that of ``Π (A_l + α S_l)`` in the frames (to 1e-12,
    against 60 digits); read from the layers turned back to the original coordinates it was off by ``eps/α``."""
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 60
    rng = np.random.default_rng(5)
    depth, width, k, alpha = 4, 3, 1, 1e-12
    A, S = learned_chain(rng, k, width, depth), [rng.standard_normal((width, width)) for _ in range(depth)]
    frames = [np.linalg.qr(rng.standard_normal((width, width)))[0] for _ in range(depth + 1)]
    run = _split._Run(rotated(depth), math.log(alpha), 0.0, 1e-8)
    *_, log_sv = run._output(A, S, frames, k)
    product = mp.eye(width)
    for a, s in zip(A, S):
        product = (mp.matrix(a.tolist()) + mp.mpf(alpha) * mp.matrix(s.tolist())) * product
    exact = sorted((float(mp.log(x)) for x in mp.svd_r(product, compute_uv=False)), reverse=True)
    np.testing.assert_allclose(log_sv, exact, rtol=0, atol=1e-12)
    turned_back = _split.log_singular_values(*run._output(A, S, frames, k)[:2], k, math.log(alpha), width)
    assert np.abs(turned_back - exact).max() > 1e-8

"""The deep linear split's held plateaus (gradflow/_deep_linear/_held.py; docs/deep-linear.md, *Held plateaus*): the
turn of the hidden frames that removes the rotations from ``S``, the reduced coordinates, and the flow held where
``α^{L−2}`` is below ``HELD``: against the split in ``t`` where both run, and inside the range the split did not reach
before (L = 4, α = 1e-10) against the small-α path."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from deep_linear_common import S, aligned, gap_to_the_limit, gaussian, learned_chain, rotated, split_flow, whitened

import gradflow
from gradflow._deep_linear import _held, _split, _split_fields
from gradflow._deep_linear._split_fields import SleepingPart
from gradflow._solver import _segments


def _product(layers):
    out = layers[0]
    for w in layers[1:]:
        out = w @ out
    return out


def test_ungauge_removes_the_rotations_and_keeps_the_layers():
    """Mixed blocks made of a hidden rotation (``S_j ∋ X A_j``, ``S_{j+1} ∋ A_{j+1} Xᵀ``, entries of 1e3) fall to
    what the turn itself moves there, the sleeping blocks (0.3) turned by the angle ``α‖X‖ ≈ 1e-5``; the layers ``A +
    αS`` in the original coordinates are kept to 1e-15, ``A`` unchanged, the frames orthonormal."""
    rng = np.random.default_rng(0)
    depth, width, k, alpha = 4, 3, 1, 1e-8
    A = learned_chain(rng, k, width, depth)
    S = [0.3 * rng.standard_normal((width, width)) for _ in range(depth)]
    for s in S:
        s[k:, :k] = 0.0
        s[:k, k:] = 0.0
    for j in range(1, depth):  # a rotation of hidden space j (between layers j and j + 1)
        X = 1e3 * rng.standard_normal((width - k, k))
        S[j - 1][k:, :k] += X @ A[j - 1][:k, :k]
        S[j][:k, k:] += A[j][:k, :k] @ X.T
    frames = [np.linalg.qr(rng.standard_normal((width, width)))[0] for _ in range(depth + 1)]
    turned, new_frames = _held.ungauge(A, S, frames, k, alpha)
    for f in new_frames:
        np.testing.assert_allclose(f.T @ f, np.eye(width), atol=1e-14)
    before = [frames[l + 1] @ (a + alpha * s) @ frames[l].T for l, (a, s) in enumerate(zip(A, S))]
    after = [new_frames[l + 1] @ (a + alpha * s) @ new_frames[l].T for l, (a, s) in enumerate(zip(A, turned))]
    for b, a in zip(before, after):
        np.testing.assert_allclose(a, b, atol=1e-15)
    for l in range(depth - 1):  # the hidden spaces' mixed blocks
        assert np.abs(turned[l][k:, :k]).max() < 1e-5 and np.abs(turned[l + 1][:k, k:]).max() < 1e-5


@pytest.mark.parametrize("depth, alpha", [(3, 1e-13), (4, 1e-10), (6, 1e-10)])
def test_reduced_layers_solve_for_their_blocks_in_the_sweeps_of_the_scale(depth, alpha):
    """The bottom layer's learned rows and the top layer's learned columns, solved for from ``D`` by the fixed point
    of :meth:`Reduced.layers` from a start where they are zero, with the sleeping blocks' top mode at the escape scale:
    :func:`product_sweeps` sweeps (4, 5, 8) recover them to 1e-15, while one sweep leaves them 1e-14 to 1e-10 off
    (3e-14, 1.6e-11, 4e-11 measured)."""
    rng = np.random.default_rng(2)
    width, k, log_alpha = 4, 1, math.log(alpha)
    A = learned_chain(rng, k, width, depth)
    S = [rng.standard_normal((width, width)) for _ in range(depth)]
    for s in S:
        s[k:, k:] *= _held.escape_scale(log_alpha, depth) / alpha / np.linalg.norm(s[k:, k:], 2)
    start = [s.copy() for s in S]
    start[0][:k, k:], start[-1][:, :k] = 0.0, 0.0

    def solved(sweeps):
        with jax.enable_x64(True):
            z = jnp.asarray(_held.coordinates(A, S, k, log_alpha))
            reduced = _held.Reduced(
                tuple(map(jnp.asarray, start)), tuple(map(jnp.asarray, A)), jnp.asarray(log_alpha), k, sweeps
            )
            got = [np.asarray(w) for w in reduced.layers(z)]
        return max(np.abs(got[0][:k, k:] - S[0][:k, k:]).max(), np.abs(got[-1][:, :k] - S[-1][:, :k]).max())

    assert _held.product_sweeps(log_alpha, depth) == {3: 4, 4: 5, 6: 8}[depth]
    assert solved(_held.product_sweeps(log_alpha, depth)) < 1e-15
    assert solved(1) > 1e-14


def test_reduced_coordinates_carry_the_products_change_exactly():
    """``layers(coordinates(S)) = S``; the first coordinates are the blocks of ``D = (W − W_A)/α`` that meet a learned
    subspace, to every order in α: setting them gives layers with that ``D`` (at α = 1e-3, where ``W − W_A`` in
    float64 still holds ``D`` to 1e-12), the carried entries and the frozen learned blocks unchanged; ``velocity`` is
    ``D``'s derivative along the layers' velocities, and the carried entries of those velocities."""
    rng = np.random.default_rng(1)
    depth, m, n, hidden, k, alpha = 4, 4, 3, 5, 2, 1e-3
    shapes = [(hidden, n)] + [(hidden, hidden)] * (depth - 2) + [(m, hidden)]
    A = []
    for shape in shapes:
        a = np.zeros(shape)
        a[:k, :k] = np.diag(1.0 + rng.random(k))
        A.append(a)
    S = [rng.standard_normal(shape) for shape in shapes]

    def D(layers):
        return (_product([a + alpha * s for a, s in zip(A, layers)]) - _product(A)) / alpha

    with jax.enable_x64(True):
        log_alpha = math.log(alpha)
        reduced = _held.Reduced(tuple(map(jnp.asarray, S)), tuple(map(jnp.asarray, A)), jnp.asarray(log_alpha), k)
        z = _held.coordinates(A, S, k, log_alpha)
        for s, back in zip(S, reduced.layers(jnp.asarray(z))):
            np.testing.assert_allclose(np.asarray(back), s, rtol=0, atol=1e-13)
        blocks = (k * k, k * (n - k), (m - k) * k)
        target = D(S) + rng.standard_normal((m, n))
        wanted = np.concatenate([target[:k, :k].ravel(), target[:k, k:].ravel(), target[k:, :k].ravel()])
        moved = [np.asarray(x) for x in reduced.layers(jnp.asarray(z).at[: sum(blocks)].set(wanted))]
        got = D(moved)
        for rows, cols in [(slice(0, k), slice(0, k)), (slice(0, k), slice(k, n)), (slice(k, m), slice(0, k))]:
            np.testing.assert_allclose(got[rows, cols], target[rows, cols], atol=1e-10)
        np.testing.assert_array_equal(_held.coordinates(A, moved, k, log_alpha)[sum(blocks) :], z[sum(blocks) :])
        for l in range(depth - 1):
            np.testing.assert_array_equal(moved[l][:k, :k], S[l][:k, :k])
        dS = [rng.standard_normal(shape) for shape in shapes]
        dz = np.asarray(reduced.velocity(tuple(map(jnp.asarray, S)), [jnp.asarray(d) for d in dS]))
        dD = sum(
            _product([a + alpha * s for a, s in zip(A[l + 1 :], S[l + 1 :])] or [np.eye(m)])
            @ dS[l]
            @ _product([a + alpha * s for a, s in zip(A[:l], S[:l])] or [np.eye(n)])
            for l in range(depth)
        )
        np.testing.assert_allclose(
            dz[: sum(blocks)], np.concatenate([dD[:k, :k].ravel(), dD[:k, k:].ravel(), dD[k:, :k].ravel()]), atol=1e-12
        )
        np.testing.assert_array_equal(dz[sum(blocks) :], _held.coordinates(A, dS, k, log_alpha)[sum(blocks) :])


def test_align_turns_the_sleeping_chain_onto_the_first_sleeping_axis():
    """The sleeping blocks' top chain (a rank-one chain of size 1e8, as near an escape at L = 6, α = 1e-10, beside a
    rest of order one) becomes entry ``k, k`` of every layer, its neighbours off the chain; the learned blocks and
    the layers in the original coordinates are kept, the frames orthonormal; a sleeping space of one dimension is
    turned by its sign alone."""
    rng = np.random.default_rng(2)
    depth, width, k = 5, 4, 1
    b = [np.linalg.qr(rng.standard_normal((width - k, 1)))[0][:, 0] for _ in range(depth + 1)]
    S = [rng.standard_normal((width, width)) for _ in range(depth)]
    for l, s in enumerate(S):
        s[k:, k:] += 1e8 * np.outer(b[l + 1], b[l])
    frames = [np.linalg.qr(rng.standard_normal((width, width)))[0] for _ in range(depth + 1)]
    turned, new_frames = _held.align(S, frames, k)
    for f in new_frames:
        np.testing.assert_allclose(f.T @ f, np.eye(width), atol=1e-14)
    for l, (s, t) in enumerate(zip(S, turned)):
        np.testing.assert_allclose(
            new_frames[l + 1] @ t @ new_frames[l].T, frames[l + 1] @ s @ frames[l].T, rtol=1e-14, atol=1e-6
        )
        np.testing.assert_array_equal(t[:k, :k], s[:k, :k])
        assert t[k, k] > 0.99e8 and np.abs(t[k + 1 :, k]).max() < 10 and np.abs(t[k, k + 1 :]).max() < 10
    one = [np.diag([2.0, -3.0]) for _ in range(3)]
    turned, _ = _held.align(one, [np.eye(2)] * 4, 1)
    assert all(t[1, 1] > 0 for t in turned[1:]) and turned[0][1, 1] == 3.0
    frames = [np.eye(2)] * 4
    assert _held.align(one, frames, 2) == (one, frames)  # every mode learned: nothing to turn


def test_slaved_stops_the_fast_blocks_and_keeps_the_rest():
    """From a held plateau's start with ``D`` off where its velocity vanishes (L = 4, α = 1e-9, the rotated task with
    one learned mode), :func:`slaved` moves only ``D`` (the first coordinates), to where its velocity is below 1e-15
    of what it was (5e19 to 5e-6 measured), and the rest of the velocity falls from the fast blocks' pull (1.5e10) to
    order one (2.3)."""
    depth, alpha, k = 4, 1e-9, 1
    model = rotated(depth)
    rng = np.random.default_rng(3)
    A = learned_chain(rng, k, 3, depth)
    S = [0.5 * rng.standard_normal((3, 3)) for _ in range(depth)]
    with jax.enable_x64(True):
        gradient = jax.tree_util.tree_map(np.asarray, _split_fields.split_gradient(model)).in_frames(
            [np.eye(3)] * (depth + 1)
        )
        log_alpha = math.log(alpha)
        reduced = _held.Reduced(tuple(map(jnp.asarray, S)), tuple(map(jnp.asarray, A)), jnp.asarray(log_alpha), k)
        args = _held.HeldArgs(reduced, SleepingPart(gradient, k), jnp.asarray(1.0), jnp.asarray(1.0))
        z = _held.coordinates(A, S, k, log_alpha)
        n = reduced.fast_size
        before = np.asarray(_held.held_velocity(0.0, jnp.asarray(z), args))
        relaxed = _held.slaved(args, z, rtol=0.0, atol=1e-8)
        after = np.asarray(_held.held_velocity(0.0, jnp.asarray(relaxed), args))
    np.testing.assert_array_equal(relaxed[n:], z[n:])
    assert np.abs(after[:n]).max() < 1e-15 * np.abs(before[:n]).max(), (
        np.abs(before[:n]).max(),
        np.abs(after[:n]).max(),
    )
    assert np.abs(before[n:]).max() > 1e6 and np.abs(after[n:]).max() < 10, (before[n:], after[n:])


def test_escape_scale_and_chunk_unit():
    assert _held.escape_scale(math.log(1e-4), 4) == pytest.approx(1e-2)  # √α
    assert _held.escape_scale(math.log(1e-10), 4) == pytest.approx(1e-4)  # JUMP_SPAN^{-1/2}
    assert _held.escape_scale(math.log(1e-10), 6) == pytest.approx(1e-2)
    assert _held.chunk_unit(0.5, None) == 0.5 and _held.chunk_unit(3.0, None) == 1.0
    assert _held.chunk_unit(3.0, 2.0) == pytest.approx(2.0 / _held.SHRINK)
    assert _held.growth(4) == pytest.approx(1e3) and _held.growth(6) == pytest.approx(10**1.5)


def test_a_held_plateau_is_the_split_in_t_where_both_run(monkeypatch):
    """The first plateau of the flow below (to ``τ = 0.2``; the first jump comes between 0.4 and 0.5), held, within
    1e-5 of the split in ``t`` (3e-8 measured, while ``log σ`` grows by 0.5): the fast twin of the next test."""
    _held_against_in_t(monkeypatch, np.array([0.0, 0.1, 0.2]))


@pytest.mark.slow
def test_held_plateaus_are_the_split_in_t_where_both_run(monkeypatch):
    """Gaussian start on the rotated task, L = 4, α = 1e-8 (``α^{L−2} = 1e-16``: held), through the first jump and the
    plateau after it: the held flow's ``log σ`` within 1e-5 of the split in ``t`` (``HELD = 0``), whose own two
    tolerances differ by 4e-6 there (docs/deep-linear.md, *Between the two ranges*); 3e-7 measured."""
    _held_against_in_t(monkeypatch, np.linspace(0.0, 1.0, 11))


def _held_against_in_t(monkeypatch, ts):
    depth, alpha = 4, 1e-8
    model, W0 = rotated(depth), gaussian(depth)
    held = split_flow(model, W0, ts, alpha)
    monkeypatch.setattr(_split, "HELD", 0.0)
    in_t = split_flow(model, W0, ts, alpha)
    assert held.result == in_t.result == "successful"
    gap = np.abs(held.log_singular_values - in_t.log_singular_values).max()
    assert gap < 1e-5, gap


@pytest.mark.slow
def test_a_held_plateau_after_every_mode_is_learned():
    """Saxe's whitened task from the aligned start, L = 4, α = 1e-8 (held): every mode is learned by ``τ = 0.75`` and
    the plateau after the last jump, with no sleeping block left, is held too (it raised an IndexError in
    :func:`gradflow._deep_linear._held.align`); the learned ``log σ`` end within 1e-9 of ``log s``."""
    depth = 4
    flow = split_flow(whitened(depth), aligned(depth), np.linspace(0.0, 0.75, 7), 1e-8)
    assert flow.result == "successful", flow.message
    np.testing.assert_allclose(flow.log_singular_values[-1], np.log(S), atol=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize(
    "depth, alpha, ts, atol, largest, median",
    [
        (4, 1e-10, np.linspace(0.0, 6.0, 31), 1e-8, 2e-6, 5e-8),  # inside the former gap
        (6, 1e-10, np.linspace(0.0, 12.0, 31), 1e-8, 4e-6, 3e-8),  # where the split met its floor until 2026-12-01
        (3, 1e-13, np.linspace(0.0, 3.0, 61), 1e-11, 3e-6, 3e-8),  # its floor now (_checks.SPLIT_LOWEST)
    ],
)
def test_the_split_against_the_small_alpha_path_at_its_smallest_scales(depth, alpha, ts, atol, largest, median):
    """The split's ``log σ`` against the small-α path's through every jump, at every output and in the median
    (docs/deep-linear.md, *Held plateaus*). Measured: L = 4, α = 1e-10 (refused before the plateaus were held): 5.5e-7
    and 1.2e-8; L = 6, α = 1e-10 (refused until 2026-12-01: its held plateau after the first jump had not finished in
    15 minutes): 8.1e-7 (at a dip of the third mode's ``σ``) and 5.9e-9; L = 3, α = 1e-13 at ``atol = 1e-11``, where
    the small-α path's range begins: 2e-7 and 1.3e-9. While the small-α path read the rest of ``S`` from the
    blow-up's bounded variables they were 1.6e-4 and 5.9e-6 (L = 4), 9.3e-5 and 4.9e-7 (L = 6)."""
    split, gap = gap_to_the_limit(depth, alpha, ts, atol=atol)
    assert split.result == "successful"
    assert gap.max() < largest, gap
    assert np.median(gap) < median, gap


def test_a_held_plateau_stops_at_max_steps_and_at_ctrl_c_keeping_what_it_reached(monkeypatch):
    """L = 4, α = 1e-9 (held from the start): a step budget spent in the first held stretch gives
    ``max_steps_reached``, and Ctrl-C there ``"interrupted"`` (``gradflow.Interrupted``); either way the outputs
    reached are kept and those after are +inf."""
    depth = 4
    model, W0 = rotated(depth), gaussian(depth)
    ts = np.array([0.0, 0.2, 1.0])
    flow = split_flow(model, W0, ts, 1e-9, max_steps=30)
    assert flow.result == "max_steps_reached" and "max_steps = 30" in str(flow.message)
    assert np.all(np.isfinite(flow.W[0])) and np.all(np.isinf(flow.W[2]))
    calls = []

    def stop():
        calls.append(1)
        return len(calls) > 3

    monkeypatch.setattr(_segments, "stop_requested", stop)
    with pytest.raises(gradflow.Interrupted) as stopped:
        gradflow.simulate_flow(model, u0=W0, ts=ts, alpha=1e-9)
    flow = stopped.value.result
    assert flow.result == "interrupted" and "Ctrl-C" in str(flow.message)
    assert np.all(np.isfinite(flow.W[0])) and np.all(np.isinf(flow.W[2]))

"""The deep linear split's held plateaus (gradflow/_deep_linear/_held.py; docs/deep-linear.md, *Held plateaus*): the
turn of the hidden frames that removes the rotations from ``S``, the reduced coordinates, and the flow held where
``α^{L−2}`` is below ``HELD``: against the split in ``t`` where both run, and inside the range the split did not reach
before (L = 4, α = 1e-10) against the small-α path."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from deep_linear_common import gap_to_the_limit, gaussian, rotated, split_flow

import gradflow
from gradflow._deep_linear import _held, _split
from gradflow._solver import _segments


def _product(layers):
    out = layers[0]
    for w in layers[1:]:
        out = w @ out
    return out


def _balanced_learned(rng, k, width, depth):
    """Layers whose learned ``k×k`` blocks are a balanced rank-``k`` chain and whose other entries are zero."""
    A = []
    for _ in range(depth):
        a = np.zeros((width, width))
        a[:k, :k] = np.diag(1.0 + rng.random(k))
        A.append(a)
    return A


def test_ungauge_removes_the_rotations_and_keeps_the_layers():
    """Mixed blocks made of a hidden rotation (``S_j ∋ X A_j``, ``S_{j+1} ∋ A_{j+1} Xᵀ``, entries of 1e3) fall to
    what the turn itself moves there, the sleeping blocks (0.3) turned by the angle ``α‖X‖ ≈ 1e-5``; the layers ``A +
    αS`` in the original coordinates are kept to 1e-15, ``A`` unchanged, the frames orthonormal."""
    rng = np.random.default_rng(0)
    depth, width, k, alpha = 4, 3, 1, 1e-8
    A = _balanced_learned(rng, k, width, depth)
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


def test_reduced_coordinates_carry_the_products_first_order_change():
    """``layers(coordinates(S)) = S``; moving ``c`` changes ``Σ_l A_{>l} S_l^{kk} A_{<l}`` by ``c`` (in the top layer);
    ``velocity`` maps layer velocities to that change and to the entries off the learned blocks."""
    rng = np.random.default_rng(1)
    depth, width, k = 4, 3, 2
    A = _balanced_learned(rng, k, width, depth)
    S = [rng.standard_normal((width, width)) for _ in range(depth)]
    with jax.enable_x64(True):
        reduced = _held.Reduced(tuple(jnp.asarray(s) for s in S), tuple(jnp.asarray(a) for a in A), k)
        z = jnp.asarray(_held.coordinates(S, k))
        for s, back in zip(S, reduced.layers(z)):
            np.testing.assert_array_equal(np.asarray(back), s)

        def first_order(layers):
            return sum(
                _product(A[l + 1 :] + [np.eye(width)])[:k, :k]
                @ np.asarray(layers[l])[:k, :k]
                @ _product([np.eye(width)] + A[:l])[:k, :k]
                for l in range(depth)
            )

        c = rng.standard_normal((k, k))
        moved = reduced.layers(z.at[: k * k].set(c.ravel()))
        np.testing.assert_allclose(first_order(moved) - first_order(S), c, atol=1e-12)
        dS = [rng.standard_normal((width, width)) for _ in range(depth)]
        dz = np.asarray(reduced.velocity([jnp.asarray(d) for d in dS]))
        np.testing.assert_allclose(dz[: k * k], first_order(dS).ravel(), atol=1e-12)
        np.testing.assert_array_equal(dz[k * k :], _held.coordinates(dS, k)[k * k :])


def test_escape_scale_and_chunk_unit():
    assert _held.escape_scale(math.log(1e-4), 4) == pytest.approx(1e-2)  # √α
    assert _held.escape_scale(math.log(1e-10), 4) == pytest.approx(1e-4)  # JUMP_SPAN^{-1/2}
    assert _held.escape_scale(math.log(1e-10), 6) == pytest.approx(1e-2)
    assert _held.chunk_unit(0.5, None) == 0.5 and _held.chunk_unit(3.0, None) == 1.0
    assert _held.chunk_unit(3.0, 2.0) == pytest.approx(2.0 / _held.SHRINK)
    assert _held.growth(4) == pytest.approx(1e3) and _held.growth(6) == pytest.approx(10**1.5)


def test_held_plateaus_are_the_split_in_t_where_both_run(monkeypatch):
    """Gaussian start on the rotated task, L = 4, α = 1e-8 (``α^{L−2} = 1e-16``: held), through the first jump and the
    plateau after it: the held flow's ``log σ`` within 1e-5 of the split in ``t`` (``HELD = 0``), whose own two
    tolerances differ by 4e-6 there (docs/deep-linear.md, *Between the two ranges*)."""
    depth, alpha = 4, 1e-8
    model, W0 = rotated(depth), gaussian(depth)
    ts = np.linspace(0.0, 1.0, 11)
    held = split_flow(model, W0, ts, alpha)
    monkeypatch.setattr(_split, "HELD", 0.0)
    in_t = split_flow(model, W0, ts, alpha)
    assert held.result == in_t.result == "successful"
    gap = np.abs(held.log_singular_values - in_t.log_singular_values).max()
    assert gap < 1e-5, gap


@pytest.mark.slow
def test_the_split_inside_the_former_gap_at_depth_4():
    """L = 4, α = 1e-10 (refused before the plateaus were held): the split's ``log σ`` within 2e-3 of the small-α path
    through the jumps (5.6e-4 measured, at the third) and 3e-5 in the median over the outputs (9e-6 measured;
    docs/deep-linear.md, *Held plateaus*)."""
    split, gap = gap_to_the_limit(4, 1e-10, np.linspace(0.0, 6.0, 31))
    assert split.result == "successful"
    assert gap.max() < 2e-3, gap
    assert np.median(gap) < 3e-5, gap


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

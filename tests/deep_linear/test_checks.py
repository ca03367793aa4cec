"""The scales float64 resolves in a deep linear flow (docs/deep-linear.md, *Supported range*): the refused range is the
stated one."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from deep_linear_common import aligned, whitened
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import gradflow
from gradflow._deep_linear import _split_fields
from gradflow._deep_linear._checks import (
    JUMP_STEP,
    SPLIT_LOWEST,
    STIFFNESS,
    check_resolved,
    check_size,
    lowest_log_alpha,
    small_log_alpha,
)
from gradflow._kit._checks import EPS


@given(hnp.arrays(np.float64, 2, elements=st.floats(1e-9, 1e-2)))
def test_refused_range_is_the_stated_one(tols):
    """Just below the split's range (or the direct integration's, where that is lower), and above the small-α path's, a
    scale is refused with the ranges in the message (where they meet, nothing is refused)."""
    atol, rtol = float(tols[0]), float(tols[1])
    for depth in (3, 4, 6):
        lowest, small = lowest_log_alpha(depth, 1.0, rtol, atol), small_log_alpha(rtol, atol)
        floor = min(lowest, np.log(SPLIT_LOWEST))
        if floor - 1e-3 <= small:
            continue
        model = whitened(depth)
        with pytest.raises(ValueError, match=f"takes log α ≥ {floor:.4g} .* or log α ≤ {small:.4g}"):
            gradflow.simulate_flow(
                model, u0=aligned(depth), ts=[0.0, 1.0], log_alpha=floor - 1e-3, atol=atol, rtol=rtol
            )


def test_refused_range_at_the_default_tolerances():
    """At ``atol = 1e-8`` the stated range takes α = 1e-4 at L = 3, 4 (the stiffness bound, 8.9e-10 in α^{L−2}, was
    8.9e-7 while Newton stopped on the stages' velocity), α = 1e-3 at L = 5, not α = 1e-4 at L = 5."""
    assert lowest_log_alpha(4, 1.0, 0.0, 1e-8) < np.log(1e-4) < lowest_log_alpha(5, 1.0, 0.0, 1e-8)
    assert lowest_log_alpha(3, 1.0, 0.0, 1e-8) < np.log(1e-6)
    assert lowest_log_alpha(5, 1.0, 0.0, 1e-8) < np.log(1e-3)
    assert lowest_log_alpha(4, 1.0, 0.0, 1e-8) == pytest.approx(0.5 * np.log(STIFFNESS * EPS / 1e-8))


def test_the_split_meets_the_small_alpha_path_down_to_atol_1e_11():
    """The split of the layers (its plateaus held below ``α^{L−2} = 1e-12``) takes every scale down to the small-α
    path's at L = 3 to 6, at ``atol = 1e-8`` (1e-10), ``1e-10`` (1e-12) and ``1e-11`` (1e-13; until 2026-12-01 α ≥
    1e-9 at L = 6 and 1e-11 at L = 4, 5, and 1e-12 at every depth); at ``atol = 1e-12`` (the small-α path from 1e-14)
    5e-14 is refused with the ranges."""
    for depth in (3, 4, 5, 6):
        for atol in (1e-8, 1e-10, 1e-11):
            assert np.log(SPLIT_LOWEST) <= small_log_alpha(0.0, atol) + 1e-12
            small = math.exp(small_log_alpha(0.0, atol))
            check_resolved(depth, np.log([1e3 * small, 5 * small, 1.01 * small]), [0.0, 12.0], rtol=0.0, atol=atol)
    with pytest.raises(ValueError, match=r"α ≥ 1e-13; by the direct integration .* not covered yet"):
        check_resolved(6, np.log(5e-14), [0.0, 12.0], rtol=0.0, atol=1e-12)
    with pytest.raises(ValueError, match=r"log α ≥ .* split of the layers.* not covered yet"):
        gradflow.simulate_flow(whitened(5), u0=aligned(5), ts=[0.0, 1.0], alpha=5e-14, atol=1e-12)


def test_outputs_not_linear_in_W_are_refused_between_the_ranges():
    """The split takes outputs ``h(x, W)`` linear in ``W``, with any loss: with an ``h`` that is not, the scales between
    the direct integration's range and the small-α path's are refused, saying why; the cross-entropy of linear outputs
    is taken."""
    X = np.eye(3)
    model = gradflow.DeepLinearModel(lambda x, W: jnp.tanh(W @ x), X, np.eye(3), shape=(3, 3), depth=3)
    with pytest.raises(ValueError, match=r"takes outputs h\(x, W\) linear in W"):
        gradflow.simulate_flow(model, u0=aligned(3), ts=[0.0, 1.0], alpha=1e-8)
    assert not _split_fields.outputs_are_linear(model)
    assert _split_fields.outputs_are_linear(whitened(3))
    labels = gradflow.DeepLinearModel(lambda x, W: W @ x, X, np.arange(3), shape=(3, 3), depth=3, loss="cross_entropy")
    assert _split_fields.outputs_are_linear(labels)


def test_jumps_bound_at_loose_tolerances():
    """At a loose ``atol`` the jumps' bound is the one left: ``τ_end α^{−(L−2)} ≤ JUMP_STEP / (100 eps)``."""
    for depth, tau_end in ((4, 1.0), (5, 10.0)):
        lowest = lowest_log_alpha(depth, tau_end, 0.0, 1e-3)
        assert tau_end * np.exp(-(depth - 2) * lowest) == pytest.approx(JUMP_STEP / (100 * EPS))


def test_layers_too_large_for_a_dense_split_are_refused():
    """100 × 100 layers (L = 4: 40,000 entries, a 48 GiB Jacobian for the split's 80,000 unknowns) at α = 1e-6, on the
    split, with ``newton="dense"``, are refused before anything runs, naming the matrix-free Newton that takes them;
    so is a cross-entropy model whose coefficients (``M``: 3.3 GiB for 200 samples of 130 logits ``Wᵀ x`` at
    130 × 130) do not fit, naming the scales that take it at any size; matrix-free with ``G = G0 − W C``, off the
    split, small, or with the logits ``W x`` (the 200 inputs and ``Q``: 340 kB), nothing is refused."""
    model = gradflow.models.deep_matrix_factorization_model(np.eye(100), depth=4)
    W0 = tuple(np.eye(100) for _ in range(4))
    dense = gradflow.DeepLinearSolver(newton="dense")
    with pytest.raises(ValueError, match=r"dense Jacobian of 80,000 unknowns \(47\.7 GiB.*newton=\"matrix_free\"\)"):
        gradflow.simulate_flow(model, u0=W0, ts=[0.0, 1.0], alpha=1e-6, solver=dense)
    options = dict(rtol=0.0, atol=1e-8)
    check_size(model, np.array([-14.0]), np.array([True]), free=True, coefficients=8 * 100 * 200, **options)
    check_size(model, np.array([-10.0, -30.0]), np.array([False, False]), free=False, coefficients=0, **options)
    small = gradflow.models.deep_matrix_factorization_model(np.eye(10), depth=4)
    check_size(small, np.array([-14.0]), np.array([True]), free=False, coefficients=8 * 100**2, **options)
    n, samples = 130, 200
    rng = np.random.default_rng(0)
    data = (rng.standard_normal((samples, n)), rng.integers(0, n, samples))
    transposed = gradflow.DeepLinearModel(lambda x, W: W.T @ x, *data, shape=(n, n), depth=4, loss="cross_entropy")
    with pytest.raises(ValueError, match=r"3\.3 GiB of coefficients.*α ≥ 2\.98e-05.*α ≤ 1e-10.*simulate_gd"):
        gradflow.simulate_flow(transposed, u0=tuple(np.eye(n) for _ in range(4)), ts=[0.0, 1.0], alpha=1e-6)
    logits = gradflow.DeepLinearModel(lambda x, W: W @ x, *data, shape=(n, n), depth=4, loss="cross_entropy")
    with jax.enable_x64(True):  # as simulate_flow runs it
        assert _split_fields.split_form(logits, free=True).bytes == 8 * (samples * n + n * n)

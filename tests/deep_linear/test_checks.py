"""The scales float64 resolves in a deep linear flow (docs/deep-linear.md, *Supported range*): the refused range is the
stated one."""

import numpy as np
import pytest
from deep_linear_common import aligned, whitened
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import gradflow
from gradflow._deep_linear._checks import JUMP_STEP, STIFFNESS, lowest_log_alpha, small_log_alpha
from gradflow._kit._checks import EPS


@given(hnp.arrays(np.float64, 2, elements=st.floats(1e-9, 1e-2)))
def test_refused_range_is_the_stated_one(tols):
    """Just below the direct integration's range, and above the small-α path's, a scale is refused with both ranges
    in the message (where the two ranges meet, nothing is refused)."""
    atol, rtol = float(tols[0]), float(tols[1])
    for depth in (3, 4, 6):
        lowest, small = lowest_log_alpha(depth, 1.0, rtol, atol), small_log_alpha(rtol, atol)
        if lowest - 1e-3 <= small:
            continue
        model = whitened(depth)
        with pytest.raises(ValueError, match=f"takes log α ≥ {lowest:.4g} .* or log α ≤ {small:.4g}"):
            gradflow.simulate_flow(
                model, u0=aligned(depth), ts=[0.0, 1.0], log_alpha=lowest - 1e-3, atol=atol, rtol=rtol
            )


def test_refused_range_at_the_default_tolerances():
    """At ``atol = 1e-8`` the stated range takes α = 1e-4 at L = 3, 4 (the stiffness bound, 8.9e-10 in α^{L−2}, was
    8.9e-7 while Newton stopped on the stages' velocity), α = 1e-3 at L = 5, not α = 1e-4 at L = 5."""
    assert lowest_log_alpha(4, 1.0, 0.0, 1e-8) < np.log(1e-4) < lowest_log_alpha(5, 1.0, 0.0, 1e-8)
    assert lowest_log_alpha(3, 1.0, 0.0, 1e-8) < np.log(1e-6)
    assert lowest_log_alpha(5, 1.0, 0.0, 1e-8) < np.log(1e-3)
    assert lowest_log_alpha(4, 1.0, 0.0, 1e-8) == pytest.approx(0.5 * np.log(STIFFNESS * EPS / 1e-8))
    with pytest.raises(ValueError, match=r"log α ≥ .* not covered yet"):
        gradflow.simulate_flow(whitened(5), u0=aligned(5), ts=[0.0, 1.0], alpha=1e-4)


def test_jumps_bound_at_loose_tolerances():
    """At a loose ``atol`` the jumps' bound is the one left: ``τ_end α^{−(L−2)} ≤ JUMP_STEP / (100 eps)``."""
    for depth, tau_end in ((4, 1.0), (5, 10.0)):
        lowest = lowest_log_alpha(depth, tau_end, 0.0, 1e-3)
        assert tau_end * np.exp(-(depth - 2) * lowest) == pytest.approx(JUMP_STEP / (100 * EPS))

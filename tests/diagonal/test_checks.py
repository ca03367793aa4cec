"""A diagonal model's checks (gradflow/_diagonal/_checks.py): the initialisation against Assumption 4.2 (degenerate:
an error; near-degenerate: a warning at the caller's line, once per checked call) and the scales float64 resolves."""

import math
import warnings

import numpy as np
import pytest

from gradflow import AssumptionWarning
from gradflow._diagonal._checks import check_init, check_resolved
from gradflow._kit._checks import NEAR_DEGENERATE, init_checked


def test_exact_degeneracy_is_an_error_naming_coordinates_and_fix():
    u0, v0 = np.array([1.0, 0.5, 0.0, 2.0]), np.array([0.2, -0.5, 0.0, 1.0])
    with pytest.raises(ValueError, match=r"at coordinates \[1, 2\] \(a, b\).*Assumption 4.2.*u0\[i\] \*= 1.1"):
        check_init(u0, v0, 4, names=("x", "a", "b", "y"))


def test_near_degeneracy_warns_with_the_log_alpha_it_needs():
    """Below the threshold the warning fires and names log(1/gap) of the smallest gap; above it, nothing."""
    v0 = np.array([1.0, 2.0, -1.0])
    u0 = np.array([0.3, 2.0 * (1 - 0.5 * NEAR_DEGENERATE), 1.0 + 1e-9])
    with pytest.warns(AssumptionWarning, match=r"coordinates \[1, 2\].*log\(1/gap\) = 20\.7") as record:
        check_init(u0, v0, 3)
    assert len(record) == 1 and record[0].filename == __file__  # at the first line outside gradflow
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_init(np.array([0.3, 2.0 * (1 - 2 * NEAR_DEGENERATE), 2.0]), v0, 3)
        with init_checked():  # a caller that checked once silences the repeats
            check_init(u0, v0, 3)
    assert math.log(1 / NEAR_DEGENERATE) == pytest.approx(13.8, abs=0.05)


def test_the_flow_resolves_log_alpha_down_to_half_the_states_range():
    """The state ``log w`` reaches ``2 |log α|``: at atol = 1e-8, log α ≥ −2.25e6 (docs/floating-point.md)."""
    check_resolved(-2.2e6, None, rtol=0.0, atol=1e-8)
    with pytest.raises(ValueError, match=r"^alpha_log = -2\.3e\+06 is below .* log w reaches 2·\|log α\| = 4\.6e\+06"):
        check_resolved(-2.3e6, None, rtol=0.0, atol=1e-8, names=("a", "alpha_log"))
    check_resolved(-2.3e6, None, rtol=0.0, atol=1e-7)  # the range grows with the tolerance

"""The depth family's shared fixtures: the greedy limit of the whitened L = 3 task from the balanced start and a comparison
of flows built exactly on it (computed once for the tests of the comparison, the greedy limit, the report, the
figures and the results)."""

import numpy as np
import pytest
from depth_common import MODEL3, W_BALANCED, on_the_limit

import gradflow


@pytest.fixture(scope="session")
def balanced_path():
    """The greedy limit of ``MODEL3`` from the balanced start (stages at 1/3, 1/2, 1)."""
    return gradflow.greedy_limit(MODEL3, u0=W_BALANCED)


@pytest.fixture(scope="session")
def on_limit_comparison(balanced_path):
    """The comparison of two flows built on the limit (log α = −4, −6) with it."""
    flow = on_the_limit(balanced_path, [-4.0, -6.0], np.linspace(0.0, 1.5, 31))
    with pytest.warns(UserWarning, match="are the grid's"):  # the jumps are steps between recorded times
        return gradflow.compare_limits(MODEL3, u0=W_BALANCED, v0=None, path=balanced_path, flows=flow)

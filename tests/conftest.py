"""Shared test configuration.

Hypothesis runs derandomised under CI (``CI=true``) so that a CI result is reproducible, and with
no per-example deadline everywhere (the first example of a test pays JAX's compilation).
"""

import os

import pytest
from hypothesis import settings

settings.register_profile("default", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")


@pytest.fixture(scope="module")
def unoptimised_xla():
    """XLA compiles with its optimisations off (``jax_disable_most_optimizations``) while the module runs. For the
    networks' tests, which compile far more than they compute: the InRank resume test's first run takes 23 s
    instead of 73 s on two busy cores. What they check (resume bit for bit, refusals, shapes, dtypes, losses that
    fall) does not depend on XLA's optimisations."""
    import jax

    before = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", True)
    yield
    jax.config.update("jax_disable_most_optimizations", before)

"""Shared test configuration.

Hypothesis runs derandomised under CI (``CI=true``) so that a CI result is reproducible, and with
no per-example deadline everywhere (the first example of a test pays JAX's compilation).
"""

import os

from hypothesis import settings

settings.register_profile("default", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")

"""Shared test configuration.

Hypothesis runs derandomised under CI (``CI=true``) so that a CI result is reproducible, and with
no per-example deadline everywhere (the first example of a test pays JAX's compilation).

JAX keeps compiled programs in a persistent cache, ``.jax_cache/`` at the repository root (``make clean`` removes
it): a program compiled once — by another test, by the other ``pytest-xdist`` worker, or by an earlier run — is
read back instead of compiled again. That is the tests' own setting, so gradflow leaves it alone (it keeps programs
in a user cache directory only where none is configured: docs' *Floating point and JAX settings* page); the Python
processes that tests start get ``GRADFLOW_NO_CACHE=1``, so that they do not write into the user's cache directory
(``tests/test_config.py`` gives its own a temporary one).

Equinox's runtime checks (``eqx.error_if``, which diffrax, optimistix and lineax put into every flow's solve) raise
through a host callback by default, and XLA programs with host callbacks are never written to the persistent cache:
every flow was compiled again by each file and worker. The tests set ``EQX_ON_ERROR=nan`` (before equinox is
imported), which keeps those checks as a NaN instead, with no callback: the flows are cached like the rest. No test
expects such a check to fire (gradflow never catches equinox's error), and one that fired would give NaNs, which the
tests' comparisons fail on. Users' programs keep equinox's default.

XLA compiles for the CPU without its fusion emitters (``--xla_cpu_use_fusion_emitters=false``) and with LLVM's
optimisations off (``--xla_backend_optimization_level=0``), both set before JAX starts its backend and passed on to
the processes that tests start: the tests compile far more than they compute. The first flag cut three of the heaviest
files' XLA compilation from 79 s to 45 s; the second the whole suite, from a cold cache on 2 cores, from 483 s to
362 s (the tests' summed time 893 s → 658 s), every test passing with the same tolerances either way. Users keep XLA's defaults, which run the flows' steps up to 1.7×
faster (the diagonal attention head at log α = −1e4: 0.25 s against 0.42 s once compiled).

A test run started in the background by a non-interactive shell (``make test &``) inherits SIGINT ignored, and so
do the processes it starts: the Ctrl-C tests need Python's own handler, which this restores (the processes the tests
start then get the default disposition, and Python's handler with it).
"""

import os
import signal
from pathlib import Path

import jax
import pytest
from hypothesis import settings

settings.register_profile("default", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

FAST_COMPILE = {"xla_cpu_use_fusion_emitters": "false", "xla_backend_optimization_level": "0"}
for flag, value in FAST_COMPILE.items():  # a flag the environment sets already is kept as it is
    if flag not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --{flag}={value}".strip()
os.environ.setdefault("GRADFLOW_NO_CACHE", "1")
os.environ.setdefault("EQX_ON_ERROR", "nan")  # read when equinox is imported: after this file
jax.config.update("jax_compilation_cache_dir", str(Path(__file__).resolve().parents[1] / ".jax_cache"))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)


@pytest.fixture(scope="module")
def unoptimised_xla():
    """XLA compiles with its optimisations off (``jax_disable_most_optimizations``) while the module runs. For the
    networks' tests, which compile far more than they compute: the InRank resume test's first run takes 23 s
    instead of 73 s on two busy cores. What they check (resume bit for bit, refusals, shapes, dtypes, losses that
    fall) does not depend on XLA's optimisations."""
    before = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", True)
    yield
    jax.config.update("jax_disable_most_optimizations", before)


@pytest.fixture
def ctrl_c_at_call():
    """``wrap(fn, n)``: ``fn`` that raises ``KeyboardInterrupt`` at its ``n``-th call, as Ctrl-C would there."""

    def wrap(fn, n: int):
        calls = []

        def wrapped(*args, **kwargs):
            calls.append(1)
            if len(calls) == n:
                raise KeyboardInterrupt
            return fn(*args, **kwargs)

        return wrapped

    return wrap

"""Scoped float64 for the theory engine.

gradflow never changes the user's global JAX settings. Every public entry point of the
theory engine runs inside ``jax.enable_x64(True)`` (a context manager, restored on exit),
so the flow, the greedy limit and their comparisons are float64 whether or not the user
enabled ``jax_enable_x64``. Results come back as NumPy float64 arrays, so they stay float64
after the context has closed. The GPU networks (``gradflow.nets``) do not use this scope:
they run in float32 with bf16 compute, with explicit dtypes.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import jax

F = TypeVar("F", bound=Callable)


def float64(fn: F) -> F:
    """Decorate ``fn`` so that it runs with 64-bit JAX types enabled, then restores the user's setting."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with jax.enable_x64(True):
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


BATCHING = ("auto", "vmap", "separate")  # how a batch of flows is solved (``simulate_flow``'s ``batching``)


def cores_for(tasks: int) -> int:
    """Threads for ``tasks`` independent solves: one per core, at most one per task (a solve is a serial chain of
    small XLA calls that keeps about one core busy)."""
    return max(1, min(os.cpu_count() or 1, tasks))


def map_per_core(fn: Callable, items: Iterable) -> list:
    """``[fn(x) for x in items]`` on :func:`cores_for` threads, each call in gradflow's float64 scope (the scope is
    per thread, so a thread does not inherit it from its caller)."""
    items = list(items)
    with ThreadPoolExecutor(max_workers=cores_for(len(items))) as pool:
        return list(pool.map(float64(fn), items))

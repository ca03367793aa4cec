"""Scoped float64 for the theory engine.

gradflow never changes the user's global JAX settings. Every public entry point of the
theory engine runs inside ``jax.enable_x64(True)`` (a context manager, restored on exit),
so the flow, the greedy limit and their comparisons are float64 whether or not the user
enabled ``jax_enable_x64``. Results come back as NumPy float64 arrays, so they stay float64
after the context has closed. The GPU networks (``gradflow.nets``) do not use this scope:
they run in float32 with bf16 compute, with explicit dtypes.

Independent solves run on threads, one per core (:class:`PerCore`). Ctrl-C reaches only the main thread: there it
sets a stop flag that the workers' solves check between their segments (:func:`stop_requested`), so that every
worker ends within a segment, keeping what it reached, instead of running to its end.
"""

from __future__ import annotations

import contextvars
import functools
import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
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


_STOPS: contextvars.ContextVar[tuple[threading.Event, ...]] = contextvars.ContextVar("gradflow_stops", default=())


def stop_requested() -> bool:
    """Whether the thread runs for a :class:`PerCore` pool (or one inside it) that was told to stop."""
    return any(stop.is_set() for stop in _STOPS.get())


class PerCore:
    """Threads for ``tasks`` independent solves (:func:`cores_for`), as a context manager: ``submit(fn, *args)`` runs
    ``fn(*args)`` in gradflow's float64 scope (the scope is per thread, so a thread does not inherit it from its
    caller) and under this pool's stop flag.

    :meth:`stop` sets the flag, which the workers' solves check between segments (:func:`stop_requested`); leaving
    the block by a ``KeyboardInterrupt`` (Ctrl-C in the main thread, the only one that receives it) sets it too,
    cancels the calls not started and waits for the running ones, each of which ends within a segment.
    """

    def __init__(self, tasks: int):
        self._stop = threading.Event()
        self._stops = _STOPS.get() + (self._stop,)
        self._pool = ThreadPoolExecutor(max_workers=cores_for(tasks))

    def __enter__(self) -> PerCore:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        interrupted = kind is not None and not issubclass(kind, Exception)
        if interrupted:
            self.stop()
        self._pool.shutdown(wait=True, cancel_futures=interrupted)

    def submit(self, fn: Callable, *args, **kwargs) -> Future:
        def run():
            _STOPS.set(self._stops)
            return fn(*args, **kwargs)

        return self._pool.submit(float64(run))

    def stop(self) -> None:
        self._stop.set()


def map_per_core(fn: Callable, items: Iterable) -> list:
    """``[fn(x) for x in items]`` on a :class:`PerCore` pool: one thread per core, each call in gradflow's float64
    scope; Ctrl-C stops every call within a segment and is raised."""
    items = list(items)
    with PerCore(len(items)) as pool:
        return [future.result() for future in [pool.submit(fn, x) for x in items]]

"""Scoped float64 for the theory engine.

gradflow never changes the user's global JAX settings. Every public entry point of the
theory engine runs inside ``jax.enable_x64(True)`` (a context manager, restored on exit),
so the flow, the greedy limit and their comparisons are float64 whether or not the user
enabled ``jax_enable_x64``. Results come back as NumPy float64 arrays, so they stay float64
after the context has closed. The GPU networks (``gradflow.nets``) do not use this scope:
they run in float32 with bf16 compute, with explicit dtypes.

XLA's compiled CPU programs take thousands of the process's memory mappings each; at the kernel's limit
(``vm.max_map_count``, 65,530 by default on Linux) the next compilation aborts the whole process. Each entry point
therefore first checks the count (:func:`release_compiled_if_crowded`) and, past three quarters of the limit, clears
JAX's caches of compiled programs, with a warning.

Compiled programs are kept across processes in JAX's persistent compilation cache, in a user cache directory
(:func:`use_compilation_cache`, called by the first entry point of a process), unless the user configured JAX's
cache or switched gradflow's off (``GRADFLOW_NO_CACHE=1``).

Ctrl-C never interrupts JAX itself (:func:`deferred_interrupts`): inside an entry point it only sets a flag, which the
long loops check between their compiled calls (:func:`stop_requested`: between a solve's segments, the greedy path's
stages, a demo's steps), ending there, keeping what they finished, and raising ``KeyboardInterrupt``. Python's own
``KeyboardInterrupt`` lands wherever the main thread is, which may be inside JAX: during a compilation the compiler
goes on in XLA's threads, and at exit the interpreter frees the client it runs on (a segmentation fault); in JAX's
garbage-collection callback it is printed and dropped.

Independent solves run on threads, one per core (:class:`PerCore`). They see the same flag: every worker ends within
a segment, keeping what it reached, instead of running to its end. While such threads run, OpenBLAS (NumPy's and
SciPy's linear algebra, and JAX's CPU decompositions, which call SciPy's LAPACK) takes the cores over the workers
each, by threadpoolctl, and its own setting is restored when the last pool ends: its threads would contend with the
workers (two d = 50 flows on 2 cores: 7.5 s with OpenBLAS's default, 2.7 s so; docs/benchmarks.md).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib.util
import os
import pathlib
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

import jax
from threadpoolctl import threadpool_limits

F = TypeVar("F", bound=Callable)


MAPS = pathlib.Path("/proc/self/maps")  # one line per memory mapping of this process (Linux)
MAP_LIMIT = pathlib.Path("/proc/sys/vm/max_map_count")
MAP_SHARE = 0.75  # the share of the limit beyond which JAX's compiled programs are released
MAP_CHECK_EVERY = 1.0  # seconds between two counts (a count reads up to 65,530 lines; a compilation takes longer)
_last_count = [-float("inf")]


def release_compiled_if_crowded() -> bool:
    """``jax.clear_caches()``, with a warning, where this process uses more than ``MAP_SHARE`` of the kernel's limit
    on memory mappings: each compiled CPU program takes thousands (a factorised flow 2,000–5,000), and at the limit
    the next compilation fails inside LLVM ("Cannot allocate memory") and aborts the process, results and all.
    Counts at most every ``MAP_CHECK_EVERY`` seconds. Returns whether it cleared them; nothing where the counts
    cannot be read (not Linux)."""
    now = time.monotonic()
    if now - _last_count[0] < MAP_CHECK_EVERY:
        return False
    _last_count[0] = now
    try:
        limit = int(MAP_LIMIT.read_text())
        with MAPS.open("rb") as maps:
            used = sum(1 for _ in maps)
    except (OSError, ValueError):
        return False
    if used < MAP_SHARE * limit:
        return False
    jax.clear_caches()
    warnings.warn(
        f"gradflow cleared JAX's caches of compiled programs: this process had {used:,} memory mappings of the "
        f"{limit:,} the kernel allows (vm.max_map_count), and every compiled CPU program takes thousands; at the "
        "limit the next compilation would abort the process. Programs compile again when next used; to keep them, "
        "raise the limit (sysctl -w vm.max_map_count=262144).",
        RuntimeWarning,
        stacklevel=3,
    )
    return True


CACHE_DIR_ENV = "GRADFLOW_CACHE_DIR"  # where gradflow keeps compiled programs (default: the user cache directory)
NO_CACHE_ENV = "GRADFLOW_NO_CACHE"  # 1: gradflow leaves JAX's persistent compilation cache off
CACHE_MAX_BYTES = 2 * 2**30  # beyond this, the least recently used programs are evicted
CACHE_MIN_COMPILE_SECONDS = 0.2  # programs that compile faster are not stored (JAX's default: 1 s)
_cache_lock = threading.Lock()
_cache_done = [False]


def compilation_cache_dir(environ=os.environ) -> pathlib.Path | None:
    """Where gradflow keeps JAX's compiled programs: ``$GRADFLOW_CACHE_DIR``, else ``$XDG_CACHE_HOME/gradflow/jax``,
    else ``~/.cache/gradflow/jax``; None where ``GRADFLOW_NO_CACHE`` is set (to anything but ``""`` or ``0``)."""
    if environ.get(NO_CACHE_ENV, "") not in ("", "0"):
        return None
    if environ.get(CACHE_DIR_ENV):
        return pathlib.Path(environ[CACHE_DIR_ENV]).expanduser()
    base = environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
    return pathlib.Path(base) / "gradflow" / "jax"


def _cache_warning(path: pathlib.Path, problem: str) -> None:
    warnings.warn(
        f"gradflow runs without its compilation cache: {path} {problem}. Programs compile in every new process "
        f"(seconds to a minute each). Point {CACHE_DIR_ENV} to a writable directory, or set {NO_CACHE_ENV}=1 to "
        "silence this.",
        RuntimeWarning,
        stacklevel=5,  # the user's call of the entry point (float64's wrapper → use_compilation_cache → here)
    )


def writable_directory(path: pathlib.Path) -> bool:
    """Whether ``path`` is (or could be made) a directory this process can write; a warning where not."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        _cache_warning(path, f"cannot be made a directory ({error.strerror or error})")
        return False
    if not os.access(path, os.W_OK | os.X_OK):
        _cache_warning(path, "is not writable")
        return False
    return True


def use_compilation_cache(environ=os.environ) -> pathlib.Path | None:
    """Keep compiled programs across processes: point JAX's persistent compilation cache at
    :func:`compilation_cache_dir`, storing the programs that take over ``CACHE_MIN_COMPILE_SECONDS`` to compile,
    bounded to ``CACHE_MAX_BYTES`` (the least recently used evicted; reads and writes under a file lock, so that
    processes can share it; without the ``filelock`` package, unbounded and unlocked, as JAX's default, where an
    entry two processes write at once may be read back damaged: a warning, and a compilation).

    These are global JAX settings: set once per process, only where the user has configured no cache of their own
    (``jax_compilation_cache_dir`` unset, ``jax_enable_compilation_cache`` on) and has not switched gradflow's off. A
    directory that cannot be written is a warning, and no cache; a damaged entry is JAX's warning, and the program
    is compiled again. Returns the directory in use, or None."""
    with _cache_lock:
        if _cache_done[0]:
            return None
        _cache_done[0] = True
        if jax.config.jax_compilation_cache_dir is not None or not jax.config.jax_enable_compilation_cache:
            return None
        path = compilation_cache_dir(environ)
        if path is None or not writable_directory(path):
            return None
        if importlib.util.find_spec("filelock") is not None:  # a dependency; JAX refuses a size bound without it
            jax.config.update("jax_compilation_cache_max_size", CACHE_MAX_BYTES)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", CACHE_MIN_COMPILE_SECONDS)
        jax.config.update("jax_compilation_cache_dir", str(path))
        return path


_ENTERED: contextvars.ContextVar[bool] = contextvars.ContextVar("gradflow_entered", default=False)


def float64(fn: F) -> F:
    """Decorate ``fn`` so that it runs with 64-bit JAX types enabled, then restores the user's setting. The
    outermost such call of the main thread (the user's, not gradflow's own inside it) first releases compiled
    programs if memory mappings run short (:func:`release_compiled_if_crowded`), so its warning names the user's
    line; the first call of the process also sets up the compilation cache (:func:`use_compilation_cache`)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not _ENTERED.get():
            _refuse_tracers(fn.__name__, args, kwargs)
            if not _cache_done[0]:
                use_compilation_cache()
            if threading.current_thread() is threading.main_thread():
                release_compiled_if_crowded()
        token = _ENTERED.set(True)
        try:
            with deferred_interrupts(), jax.enable_x64(True):
                return fn(*args, **kwargs)
        finally:
            _ENTERED.reset(token)

    return wrapper  # type: ignore[return-value]


def _refuse_tracers(name: str, args, kwargs) -> None:
    """A ``TypeError`` if ``name`` is called inside ``jax.jit``, ``vmap`` or ``grad`` (an argument is a tracer): the
    entry points run their own compiled solvers on concrete arrays, and a tracer fails deep inside them."""
    if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves((args, kwargs))):
        raise TypeError(
            f"gradflow.{name} takes concrete arrays and runs its own compiled solver: it cannot be called inside "
            "jax.jit, jax.vmap or jax.grad. Call it outside them (a batch of scales or states is one call); to "
            "differentiate or compile the loss itself, use model.loss_of_beta and model.g (diagonal) or "
            "model.loss_of_weights and model.G (full weights)."
        )


_INTERRUPTED = threading.Event()  # Ctrl-C came during a deferred_interrupts scope


def _on_sigint(signum, frame) -> None:
    if _INTERRUPTED.is_set():  # a second Ctrl-C: at once, as Python's default does (wherever the main thread is)
        raise KeyboardInterrupt
    _INTERRUPTED.set()


@contextlib.contextmanager
def deferred_interrupts():
    """In the main thread, with Python's default SIGINT handler: Ctrl-C only sets the flag that
    :func:`stop_requested` reads, and ``KeyboardInterrupt`` is raised at the end of the block if nothing raised it
    before. The loops that check the flag stop at their next check and raise it themselves (``Interrupted``), with
    what they finished; a second Ctrl-C raises at once. Elsewhere (another thread, a handler of the user's, or
    inside such a block already) the block runs as it is."""
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    _INTERRUPTED.clear()
    signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        interrupted = _INTERRUPTED.is_set()
        _INTERRUPTED.clear()
    if interrupted:
        raise KeyboardInterrupt


def check_interrupt() -> None:
    """Raise ``KeyboardInterrupt`` if Ctrl-C or a pool's stop asked this thread to stop (:func:`stop_requested`): a
    loop's check between two steps."""
    if stop_requested():
        raise KeyboardInterrupt


BATCHING = ("auto", "vmap", "separate")  # how a batch of flows is solved (``simulate_flow``'s ``batching``)


_CORES: contextvars.ContextVar[int | None] = contextvars.ContextVar("gradflow_cores", default=None)
"""The cores a thread may fill: all of them in a thread of the user's, a worker's share inside a :class:`PerCore`
pool (so that a pool started by one of its calls, e.g. a greedy path's phase-(B) runs inside a sweep's point, does
not put a thread per core on every core again)."""


def cores_for(tasks: int) -> int:
    """Threads for ``tasks`` independent solves: one per core this thread may fill, at most one per task (a solve is a
    serial chain of small XLA calls that keeps about one core busy)."""
    cores = _CORES.get()
    return max(1, min((os.cpu_count() or 1) if cores is None else cores, tasks))


_STOPS: contextvars.ContextVar[tuple[threading.Event, ...]] = contextvars.ContextVar("gradflow_stops", default=())


def stop_requested() -> bool:
    """Whether Ctrl-C came during a :func:`deferred_interrupts` block, or the thread runs for a :class:`PerCore` pool
    (or one inside it) that was told to stop."""
    return _INTERRUPTED.is_set() or any(stop.is_set() for stop in _STOPS.get())


_blas_lock = threading.Lock()
_blas = {"pools": 0, "limit": None}  # pools of several workers running, and the OpenBLAS limit the first one set


@contextlib.contextmanager
def _blas_threads_per_worker(workers: int):
    """OpenBLAS limited to ``cores // workers`` threads while a pool of ``workers > 1`` runs (the limit is the
    process's: the first such pool sets it, and OpenBLAS's own setting comes back when the last ends)."""
    if workers < 2:
        yield
        return
    with _blas_lock:
        if _blas["pools"] == 0:
            _blas["limit"] = threadpool_limits(limits=max(1, (os.cpu_count() or 1) // workers), user_api="blas")
        _blas["pools"] += 1
    try:
        yield
    finally:
        with _blas_lock:
            _blas["pools"] -= 1
            if _blas["pools"] == 0:
                _blas["limit"].restore_original_limits()


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
        workers = cores_for(tasks)
        self._share = max(1, cores_for(os.cpu_count() or 1) // workers)  # the cores each worker's own pools may fill
        self._pool = ThreadPoolExecutor(max_workers=workers)
        self._blas = _blas_threads_per_worker(workers)

    def __enter__(self) -> PerCore:
        self._blas.__enter__()
        return self

    def __exit__(self, kind, error, traceback) -> None:
        interrupted = kind is not None and not issubclass(kind, Exception)
        if interrupted:
            self.stop()
        try:
            self._pool.shutdown(wait=True, cancel_futures=interrupted)
        finally:
            self._blas.__exit__(None, None, None)

    def submit(self, fn: Callable, *args, **kwargs) -> Future:
        def run():
            _STOPS.set(self._stops)
            _CORES.set(self._share)
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

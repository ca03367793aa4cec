"""Tests for gradflow/_config.py: compiled programs released before memory mappings run out."""

import threading
import warnings

import numpy as np
import pytest

import gradflow
from gradflow import _config


@pytest.fixture
def mappings(tmp_path, monkeypatch):
    """Fake ``/proc`` files: ``set(used, limit)`` makes the process appear to hold ``used`` of ``limit`` mappings;
    returns the calls to ``jax.clear_caches`` (recorded, not made)."""
    maps, limit, cleared = tmp_path / "maps", tmp_path / "max_map_count", []
    monkeypatch.setattr(_config, "MAPS", maps)
    monkeypatch.setattr(_config, "MAP_LIMIT", limit)
    monkeypatch.setattr(_config.jax, "clear_caches", lambda: cleared.append(True))
    monkeypatch.setattr(_config, "MAP_CHECK_EVERY", 0.0)

    def set_counts(used, most):
        maps.write_text("m\n" * used)
        limit.write_text(f"{most}\n")
        return cleared

    return set_counts


def test_entry_point_releases_compiled_programs_near_the_limit(mappings):
    cleared = mappings(800, 1000)
    task = gradflow.models.diagonal_linear(n=10, p=3, seed=0)
    with pytest.warns(RuntimeWarning, match="vm.max_map_count"):
        g = gradflow.evaluate_g(task.model, np.ones(3))
    assert cleared == [True] and np.all(np.isfinite(g))


def test_nested_float64_calls_count_once_and_warn_at_the_callers_line(mappings):
    """An entry point that calls gradflow's own float64 functions inside it counts only once, at the outermost call,
    so that the warning names the user's line (not a gradflow module, where the tests' filter makes it an error)."""
    cleared = mappings(800, 1000)
    inner = _config.float64(lambda: 1.0)
    outer = _config.float64(lambda: inner() + inner())
    with pytest.warns(RuntimeWarning, match="vm.max_map_count") as caught:
        outer()
    assert cleared == [True] and [w.filename for w in caught] == [__file__]


def test_nothing_released_below_the_limit_or_off_the_main_thread(mappings):
    cleared = mappings(700, 1000)
    task = gradflow.models.diagonal_linear(n=10, p=3, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gradflow.evaluate_g(task.model, np.ones(3))
    mappings(900, 1000)
    worker = threading.Thread(target=gradflow.evaluate_g, args=(task.model, np.ones(3)))
    worker.start()
    worker.join()
    assert cleared == []


def test_unreadable_counts_release_nothing(mappings, tmp_path, monkeypatch):
    cleared = mappings(900, 1000)
    monkeypatch.setattr(_config, "MAP_LIMIT", tmp_path / "missing")
    assert not _config.release_compiled_if_crowded() and cleared == []


def test_counts_at_most_once_a_second(mappings, monkeypatch):
    cleared = mappings(900, 1000)
    monkeypatch.setattr(_config, "MAP_CHECK_EVERY", 3600.0)
    monkeypatch.setattr(_config, "_last_count", [-float("inf")])
    with pytest.warns(RuntimeWarning):
        assert _config.release_compiled_if_crowded()
    assert not _config.release_compiled_if_crowded() and cleared == [True]


def test_cache_directory_from_the_environment(tmp_path):
    home = _config.pathlib.Path.home()
    assert _config.compilation_cache_dir({}) == home / ".cache" / "gradflow" / "jax"
    assert _config.compilation_cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "gradflow" / "jax"
    moved = {"GRADFLOW_CACHE_DIR": str(tmp_path / "here"), "XDG_CACHE_HOME": "/elsewhere"}
    assert _config.compilation_cache_dir(moved) == tmp_path / "here"
    assert _config.compilation_cache_dir(dict(moved, GRADFLOW_NO_CACHE="1")) is None
    assert _config.compilation_cache_dir(dict(moved, GRADFLOW_NO_CACHE="0")) == tmp_path / "here"


def test_unusable_cache_directory_is_a_warning(tmp_path):
    """A cache path through a file (a damaged cache directory) and a read-only directory: a warning naming the
    variables, and no cache."""
    (tmp_path / "file").write_text("")
    with pytest.warns(RuntimeWarning, match="cannot be made a directory.*GRADFLOW_CACHE_DIR.*GRADFLOW_NO_CACHE=1"):
        assert not _config.writable_directory(tmp_path / "file" / "jax")
    assert _config.writable_directory(tmp_path / "new" / "jax") and (tmp_path / "new" / "jax").is_dir()


@pytest.mark.skipif(not hasattr(_config.os, "geteuid") or _config.os.geteuid() == 0, reason="root writes anywhere")
def test_read_only_cache_directory_is_a_warning(tmp_path):
    tmp_path.chmod(0o500)
    try:
        with pytest.warns(RuntimeWarning, match="is not writable"):
            assert not _config.writable_directory(tmp_path)
    finally:
        tmp_path.chmod(0o700)


def test_users_cache_settings_are_left_alone(monkeypatch, tmp_path):
    """Where the user configured JAX's cache (here tests/conftest.py did), gradflow sets nothing."""
    monkeypatch.setattr(_config, "_cache_done", [False])
    before = _config.jax.config.jax_compilation_cache_dir
    assert before is not None
    assert _config.use_compilation_cache({"GRADFLOW_CACHE_DIR": str(tmp_path)}) is None
    assert _config.jax.config.jax_compilation_cache_dir == before and not any(tmp_path.iterdir())


CHILD = """
import json, pathlib, sys, warnings
import jax, numpy as np
from jax import monitoring
import gradflow
from gradflow import _config

_config.CACHE_MIN_COMPILE_SECONDS = 0.0  # store every program, however quickly it compiles
hits = []
monitoring.register_event_listener(lambda event, **kw: hits.append(1) if event.endswith("cache_hits") else None)
task = gradflow.models.diagonal_linear(n=10, p=3, seed=0)
loss = float(gradflow.evaluate_loss(task.model, np.ones(3)))
out = dict(loss=loss, hits=len(hits), dir=jax.config.jax_compilation_cache_dir)
if sys.argv[1] == "damage":  # every entry cut short, as by a process killed while writing it
    for entry in pathlib.Path(out["dir"]).glob("*-cache"):
        entry.write_bytes(entry.read_bytes()[:50])
    jax.clear_caches()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out["damaged_loss"] = float(gradflow.evaluate_loss(task.model, np.ones(3)))
    out["warned"] = any("persistent compilation cache" in str(w.message) for w in caught)
print("RESULT " + json.dumps(out))
"""


def test_second_process_reads_the_cache_and_survives_damaged_entries(tmp_path):
    """Two fresh processes with one GRADFLOW_CACHE_DIR: the first compiles and stores, the second reads its programs
    back (JAX's cache hits); then, its entries damaged, it warns, compiles again and gets the same loss."""
    import json
    import os
    import subprocess
    import sys

    root = _config.pathlib.Path(__file__).resolve().parents[1]
    env = dict(os.environ, GRADFLOW_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("GRADFLOW_NO_CACHE", None)
    env["PYTHONPATH"] = os.pathsep.join([str(root), *filter(None, [os.environ.get("PYTHONPATH")])])

    def child(mode):
        run = subprocess.run([sys.executable, "-c", CHILD, mode], env=env, capture_output=True, text=True, timeout=300)
        line = [x for x in run.stdout.splitlines() if x.startswith("RESULT ")]
        assert line, run.stderr[-2000:]
        return json.loads(line[0][len("RESULT ") :])

    first = child("plain")
    stored = sorted(p.name for p in (tmp_path / "cache").glob("*-cache"))
    assert first["dir"] == str(tmp_path / "cache") and first["hits"] == 0 and stored
    second = child("damage")
    assert second["hits"] >= len(stored) and second["loss"] == first["loss"]
    assert second["warned"] and second["damaged_loss"] == first["loss"]


def test_a_pool_inside_a_pools_worker_shares_that_workers_cores(monkeypatch):
    """On 8 cores a pool of 2 workers leaves each 4 cores for its own pools, a pool of 8 one; the threads a call
    gets follow (at most one per task), and a thread of the user's has every core."""
    monkeypatch.setattr(_config.os, "cpu_count", lambda: 8)
    assert _config.cores_for(3) == 3 and _config.cores_for(100) == 8

    def inner(tasks):
        with _config.PerCore(tasks) as pool:
            names = [pool.submit(lambda: threading.current_thread().name).result() for _ in range(tasks)]
        return _config.cores_for(100), len(pool._pool._threads), len(set(names))

    for outer, share in ((2, 4), (8, 1), (16, 1)):
        out = _config.map_per_core(lambda _: inner(6), range(outer))
        assert all(cores == share and threads <= share for cores, threads, _ in out), (outer, out)
    assert _config.cores_for(100) == 8


def _blas_threads():
    from threadpoolctl import threadpool_info

    return {info["filepath"]: info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"}


def test_openblas_takes_the_cores_over_the_workers_while_pools_run(monkeypatch):
    """While a pool of several workers runs, OpenBLAS takes ``cores // workers`` threads (its own threads would contend
    with the workers: docs/benchmarks.md, two d = 50 flows on 2 cores 2.6 times slower), a pool inside a worker
    leaves that limit, and OpenBLAS's own setting comes back when the last pool ends, whichever ends last; a pool of
    one worker changes nothing."""
    from threadpoolctl import threadpool_limits

    monkeypatch.setattr(_config.os, "cpu_count", lambda: 8)
    with threadpool_limits(limits=3, user_api="blas"):  # the user's own setting
        own = _blas_threads()
        assert own and set(own.values()) == {3}
        with _config.PerCore(1) as pool:
            assert pool.submit(_blas_threads).result() == own
        inner = lambda _: _config.map_per_core(lambda _: _blas_threads(), range(2))
        seen = _config.map_per_core(inner, range(4))
        assert {n for pools in seen for threads in pools for n in threads.values()} == {2}  # 8 cores, 4 workers
        assert _blas_threads() == own
        first, second = _config.PerCore(2), _config.PerCore(4)  # two pools of the user's threads, ending out of order
        first.__enter__(), second.__enter__()
        assert set(_blas_threads().values()) == {4}
        first.__exit__(None, None, None)
        assert set(_blas_threads().values()) == {4}
        second.__exit__(None, None, None)
        assert _blas_threads() == own

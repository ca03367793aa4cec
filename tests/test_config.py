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

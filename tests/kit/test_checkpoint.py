"""A greedy path's finished stages on disk (gradflow/_kit/_checkpoint.py): kept after every stage, resumed by a run
with the same key with its generator where it was, refused for another key; the model's fingerprint."""

from collections.abc import Callable

import equinox as eqx
import numpy as np
import pytest

from gradflow._kit._checkpoint import Checkpoint, fingerprint


def test_kept_stages_resume_with_the_generator_where_it_was(tmp_path, capsys):
    file = tmp_path / "greedy.stages.npz"
    first = Checkpoint(file, dict(model="m", tol=1e-9), np.random.default_rng(0))
    assert first.load() is None and first.start("θ⁰", None, progress=True) == (["θ⁰"], [])
    first.rng.standard_normal(3)  # the perturbations of the stages so far
    stages, transitions = [np.zeros(2), np.ones(2), 2 * np.ones(2)], [np.array([0.5]), np.array([1.5])]
    first.save(stages, transitions)
    expected_next = first.rng.standard_normal(2)

    again = Checkpoint(file, dict(model="m", tol=1e-9), np.random.default_rng(0))
    kept, moves = again.start(np.zeros(2), None, progress=True)
    assert "greedy stages 1–2 resumed from" in capsys.readouterr().out
    np.testing.assert_array_equal(kept[2], stages[2])
    np.testing.assert_array_equal(moves[1], transitions[1])
    np.testing.assert_array_equal(again.rng.standard_normal(2), expected_next)
    fewer = Checkpoint(file, dict(model="m", tol=1e-9), np.random.default_rng(0)).start(None, 1, progress=False)
    assert len(fewer[0]) == 2 and len(fewer[1]) == 1  # at most max_stages transitions
    with pytest.raises(ValueError, match="keeps the stages of another greedy path"):
        Checkpoint(file, dict(model="m", tol=1e-8), np.random.default_rng(0)).load()


class _Model(eqx.Module):
    X: np.ndarray
    h: Callable


def test_the_fingerprint_tells_data_and_functions_apart():
    def probe(model):
        return model.h(np.array([0.3, -0.7]))

    model = _Model(np.arange(4.0), np.sin)
    assert fingerprint(model, probe) == fingerprint(_Model(np.arange(4.0), np.sin), probe)
    assert fingerprint(model, probe) != fingerprint(_Model(np.arange(4.0) + 1e-12, np.sin), probe)
    assert fingerprint(model, probe) != fingerprint(_Model(np.arange(4.0), np.tanh), probe)

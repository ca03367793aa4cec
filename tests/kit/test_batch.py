"""Batched results sliced by α (gradflow/_kit/_batch.py): an index resolved into the runs, the leaves that hold the
runs taken, the others kept."""

import dataclasses

import numpy as np
import pytest

from gradflow._kit._batch import batch_index, batch_size, take_runs


def test_an_index_resolves_into_the_runs():
    assert batch_index(-1, 3, "flow") == 2 and type(batch_index(np.int64(1), 3, "flow")) is int
    np.testing.assert_array_equal(batch_index(slice(1, None), 3, "flow"), [1, 2])
    np.testing.assert_array_equal(batch_index([True, False, True], 3, "flow"), [0, 2])
    np.testing.assert_array_equal(batch_index(np.array([2, 0]), 3, "flow"), [2, 0])
    with pytest.raises(IndexError, match="^index 3 is out of range for the 3 runs of this flow"):
        batch_index(3, 3, "flow")
    for bad in (True, 1.0, "0", [[0]]):
        with pytest.raises(TypeError, match="a flow is indexed by its runs"):
            batch_index(bad, 3, "flow")


@dataclasses.dataclass(frozen=True)
class _Runs:
    ts: np.ndarray
    loss: np.ndarray
    parts: dict


def test_the_runs_leaves_are_indexed_and_the_shared_ones_kept():
    runs = _Runs(ts=np.arange(3.0), loss=np.arange(6.0).reshape(3, 2), parts={"w": np.arange(3), "n": 7})
    some = take_runs(runs, batch_index(slice(1, None), 3, "flow"), 3, lambda name, leaf: name != "ts")
    np.testing.assert_array_equal(some.ts, runs.ts)  # shared, though its leading axis has the runs' size
    np.testing.assert_array_equal(some.loss, [[2.0, 3.0], [4.0, 5.0]])
    np.testing.assert_array_equal(some.parts["w"], [1, 2])
    assert some.parts["n"] == 7
    one = take_runs(runs, batch_index(0, 3, "flow"), 3, lambda name, leaf: name != "ts")
    np.testing.assert_array_equal(one.loss, [0.0, 1.0])


def test_batch_size_is_the_number_of_scales():
    assert batch_size(np.array([-1.0, -2.0]), "flow") == 2
    with pytest.raises(TypeError, match="this flow holds a single run"):
        batch_size(np.float64(-1.0), "flow")

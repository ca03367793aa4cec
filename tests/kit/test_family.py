"""What every family shares (gradflow/_kit/_family.py): the check that a greedy path is the model's, and the
interface's defaults, the stage activated and the stage-time table."""

from types import SimpleNamespace

import numpy as np
import pytest

from gradflow._kit._family import ModelFamily, check_coordinate_path


class _Path:
    """A stand-in for a greedy path of a model of coordinates (``beta`` per stage)."""


FIELDS = ("times", "beta", "loss")


def _path(p: int):
    return SimpleNamespace(times=np.array([0.0, 1.0]), beta=np.zeros((2, p)), loss=np.array([1.0, 0.5]))


def test_a_coordinate_path_must_have_the_models_coordinates():
    model = SimpleNamespace(p=3)
    check_coordinate_path(model, _path(3), _Path, FIELDS)  # any object with the fields, of the model's p
    with pytest.raises(
        ValueError,
        match=r"^path is the greedy limit of a model with p = 2 coordinates, but this SimpleNamespace has p = 3 "
        r"coordinates: compute it with greedy_limit",
    ):
        check_coordinate_path(model, _path(2), _Path, FIELDS)
    with pytest.raises(TypeError, match=r"a _Path \(or an object with times, beta, loss\); got a dict without times"):
        check_coordinate_path(model, {}, _Path, FIELDS)


def test_the_defaults_name_the_activated_stage_and_table_the_stage_times():
    path = SimpleNamespace(activated=np.array([2, 0]))
    assert [ModelFamily.activated(None, path, ("a", "b", "c"), k) for k in (1, 2)] == ["c", "a"]
    comparison = SimpleNamespace(
        log_alpha=np.log([1e-2, 1e-8]),
        stage_times=np.array([0.0, 1.0, 2.0]),
        detected_times=np.array([[1.1, 2.2], [1.01, 2.02]]),
    )
    header, rows = ModelFamily.stage_rows(None, comparison)
    assert header == ["k", "greedy T_k", "α = 0.01", "α = 1e-8"]
    assert rows == [[1, 1.0, 1.1, 1.01], [2, 2.0, 2.2, 2.02]]

"""A sweep's grid and rows: points by task, shares by task, the α column as given, the worst weight matrix."""

from __future__ import annotations

import numpy as np
import pytest

import gradflow
from gradflow._sweep import SweepConfig, _grid
from gradflow._sweep._grid import flow_columns, grid, point_params, share


@pytest.mark.parametrize("alpha", [0.01, 1e-8, 0.3, 1.5e-30])
def test_the_alpha_column_holds_alpha_as_given(alpha):
    """``alphas = [0.01]`` gave the column alpha = 0.010000000000000004 (exp of the stored log α)."""
    config = SweepConfig.from_mapping(dict(alphas=[alpha], model=[dict(name="diagonal_linear", p=3)]))
    assert point_params(grid(config)[0])["alpha"] == alpha


def test_share_splits_by_task():
    config = SweepConfig.from_mapping(dict(seeds=5, alphas=[0.1, 0.01], model=[dict(name="diagonal_linear", p=3)]))
    points = grid(config)
    shares = [share(points, i, 3) for i in range(3)]
    assert sorted(p.hash for s in shares for p in s) == sorted(p.hash for p in points)
    assert [len({p.task for p in s}) for s in shares] == [2, 2, 1]
    tasks = [{p.task for p in s} for s in shares]
    assert not (tasks[0] & tasks[1]) and not (tasks[1] & tasks[2]) and not (tasks[0] & tasks[2])


def test_full_weight_rows_hold_the_worst_weight_matrix():
    """A full-weight comparison records its distances per weight matrix (``W_distance[W_KQ]``); the sweep's row
    holds the worst of them under the family's column name, never a NaN for a column it has."""
    family = gradflow._registry.family_named("factorized")
    assert flow_columns(family) == ("T_detected", "time_error", "W_distance", "b_distance", "loss_distance")
    assert flow_columns(gradflow._registry.family_named("diagonal"))[2] == "beta_distance"
    record = {"T_detected": 1.0, "W_distance[W_KQ]": 0.1, "W_distance[W_VO]": 0.3, "loss_distance": 0.2}
    assert [_grid._column(record, c) for c in ("T_detected", "W_distance", "loss_distance")] == [1.0, 0.3, 0.2]
    assert np.isnan(_grid._column(record, "b_distance"))

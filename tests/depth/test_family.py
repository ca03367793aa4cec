"""The depth family's hooks (gradflow/_depth/_family.py): its time unit, first stage speed and words for the model,
and its checks of a start and of a greedy path (nothing compiled but the model's gradient)."""

from types import SimpleNamespace

import numpy as np
import pytest
from depth_common import MODEL3, W_BALANCED, S, whitened

from gradflow._depth._family import DEPTH


def test_time_unit_speed_and_description():
    assert DEPTH.time_unit(MODEL3, np.log(1e-2)) == pytest.approx(1e-2)  # α^{L−2}
    assert DEPTH.time_unit(whitened(2), np.log(1e-2)) == pytest.approx(1 / np.log(1e2))  # 1/log(1/α)
    assert DEPTH.first_stage_speed(MODEL3) == pytest.approx(S.max())  # max |g(0)| = max s
    assert DEPTH.describe_model(MODEL3) == "p = 3, n = 3, depth L = 3"


def test_checks_the_start_and_the_path():
    u0, v0 = DEPTH.check_init(MODEL3, W_BALANCED.tolist(), None)
    assert v0 is None and u0.dtype == np.float64 and np.array_equal(u0, W_BALANCED)
    with pytest.raises(ValueError, match="v0 is not taken"):
        DEPTH.check_init(MODEL3, W_BALANCED, np.ones(3))
    with pytest.raises(ValueError, match="u0 contains NaN"):
        DEPTH.check_init(MODEL3, np.full((3, 3), np.nan), None)
    with pytest.raises(TypeError, match="a DepthGreedyPath .* without b_at, support"):
        DEPTH.check_path(MODEL3, SimpleNamespace(times=0, beta=0, b=0, loss=0))
    other = SimpleNamespace(times=0, beta=np.zeros((2, 4)), b=0, loss=0, b_at=0, support=0)
    with pytest.raises(ValueError, match="a model with p = 4 coordinates, but this DepthModel has p = 3"):
        DEPTH.check_path(MODEL3, other)

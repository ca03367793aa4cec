"""The deep linear family's hooks (gradflow/_deep_linear/_family.py): its time unit, first stage speed and words for
the model, and its checks of a start and of a greedy path (nothing compiled but the model's gradient)."""

from types import SimpleNamespace

import numpy as np
import pytest
from deep_linear_common import S, aligned, whitened

from gradflow._deep_linear._family import DEEP_LINEAR
from gradflow._deep_linear._greedy import DeepLinearGreedyPath


def test_time_unit_speed_and_description():
    model = whitened(3)
    assert DEEP_LINEAR.time_unit(model, np.log(1e-2)) == pytest.approx(1e-2)  # α^{L−2}
    assert DEEP_LINEAR.time_unit(whitened(2), np.log(1e-2)) == pytest.approx(1 / np.log(1e2))  # 1/log(1/α)
    assert DEEP_LINEAR.first_stage_speed(model) == pytest.approx(S.max())  # ‖G(0)‖₂ = ‖diag(s)‖₂
    assert DEEP_LINEAR.describe_model(model) == "W of shape 3×3, depth L = 3, hidden widths (3, 3), n = 3"
    assert DEEP_LINEAR.activated(None, model.names, 2) == "rank 2"


def test_checks_the_start_and_the_path():
    model = whitened(3)
    u0, v0 = DEEP_LINEAR.check_init(model, aligned(3), None)
    assert v0 is None and all(np.array_equal(a, b) for a, b in zip(u0, aligned(3)))
    with pytest.raises(ValueError, match="v0 is not taken"):
        DEEP_LINEAR.check_init(model, aligned(3), aligned(3))
    with pytest.raises(TypeError, match=f"a {DeepLinearGreedyPath.__name__} .* without b_at"):
        DEEP_LINEAR.check_path(model, SimpleNamespace(times=0, W=0, b=0, loss=0))
    other = SimpleNamespace(times=0, W=np.zeros((2, 2, 4)), b=0, loss=0, b_at=0)
    with pytest.raises(ValueError, match=r"a model with W of shape \(2, 4\), but this DeepLinearModel has W of shape"):
        DEEP_LINEAR.check_path(model, other)

"""FactorizedModel: its default widths and names, its words, and bad models, data and factors (the built-in tasks'
G = −∇_W L: test_tasks.py)."""

import re

import numpy as np
import pytest

from gradflow import AssumptionWarning, FactorizedModel, models
from gradflow._factorized._model import check_factors


def _h(x, Ws):
    return x @ Ws[0] @ Ws[1]


X, Y = np.ones((3, 2)), np.ones((3, 4))


def test_default_widths_and_names():
    m = FactorizedModel(_h, X, Y, shapes=[(2, 3), (3, 4)])
    assert m.widths == (2, 3) and m.names == ("W[0]", "W[1]") and m.n == 3


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(shapes=[(2, 3), (3,)]), "shapes must be a non-empty sequence of \\(m, n\\) pairs"),
        (dict(shapes=[]), "shapes must be a non-empty sequence"),
        (dict(shapes=[(2, 3), (3, 0)]), "positive integers"),
        (dict(shapes=[(2, 3.5), (3, 4)]), "positive integers"),
        (dict(shapes=[(2, 3), (3, 4)], widths=(2,)), "one width per weight matrix \\(2\\)"),
        (dict(shapes=[(2, 3), (3, 4)], widths=(2, 4)), "widths\\[1\\] = 4 exceeds min\\(m, n\\) = 3"),
        (dict(shapes=[(2, 3), (3, 4)], widths=(0, 1)), "widths\\[0\\] must be a positive integer"),
        (dict(shapes=[(2, 3), (4, 4)]), "h\\(x, Ws\\) failed on one sample"),
        (dict(shapes=[(2, 3), (3, 4)], loss="hinge"), "loss must be one of"),
        (dict(shapes=[(2, 3), (3, 4)], names=("a",)), "one label per weight matrix"),
    ],
)
def test_bad_model(kwargs, match):
    with pytest.raises(ValueError, match=match):
        FactorizedModel(_h, X, Y, **kwargs)


def test_bad_data():
    with pytest.raises(ValueError, match="X must be numeric and finite"):
        FactorizedModel(_h, np.full((3, 2), np.nan), Y, shapes=[(2, 3), (3, 4)])
    with pytest.raises(ValueError, match="returns shape \\(4,\\) but each target Y\\[j\\] has shape \\(5,\\)"):
        FactorizedModel(_h, X, np.ones((3, 5)), shapes=[(2, 3), (3, 4)])
    with pytest.raises(TypeError, match="h must be a function"):
        FactorizedModel(None, X, Y, shapes=[(2, 3), (3, 4)])


def test_bad_factors():
    m = FactorizedModel(_h, X, Y, shapes=[(2, 3), (3, 4)], widths=(2, 2))
    rng = np.random.default_rng(0)
    us = (rng.standard_normal((2, 2)), rng.standard_normal((3, 2)))
    vs = (rng.standard_normal((3, 2)), rng.standard_normal((4, 2)))
    check_factors(us, vs, m)
    with pytest.raises(ValueError, match="u0 must hold one factor per weight matrix \\(2\\); got 1"):
        check_factors(us[:1], vs, m)
    with pytest.raises(ValueError, match="v0\\[1\\] must have shape \\(4, 2\\)"):
        check_factors(us, (vs[0], vs[1].T), m)
    with pytest.raises(ValueError, match="u0\\[0\\] contains NaN or inf"):
        check_factors((np.full((2, 2), np.inf), us[1]), vs, m)
    dup = (us[0], np.stack([us[1][:, 0], us[1][:, 0]], axis=1))
    with pytest.raises(ValueError, match="\\[u0\\[1\\]; v0\\[1\\]\\] has rank 1 < width 2.*widths\\[1\\] = 1"):
        check_factors(dup, (vs[0], np.stack([vs[1][:, 0], vs[1][:, 0]], axis=1)), m)
    with pytest.raises(ValueError, match="\\[u0\\[0\\]; v0\\[0\\]\\] is zero.*Give nonzero factors"):
        check_factors((np.zeros((2, 2)), us[1]), (np.zeros((3, 2)), vs[1]), m)


def test_nearly_rank_deficient_factors_warn():
    """Columns of [U_j; V_j] that differ by 1e-9: the flow is exact, but the greedy limit needs log(1/α) ≫ 20.7."""
    m = FactorizedModel(_h, X, Y, shapes=[(2, 3), (3, 4)], widths=(2, 2))
    rng = np.random.default_rng(0)
    us = [rng.standard_normal((2, 2)), rng.standard_normal((3, 2))]
    vs = [rng.standard_normal((3, 2)), rng.standard_normal((4, 2))]
    us[1][:, 1] = us[1][:, 0] + 1e-9 * rng.standard_normal(3)
    vs[1][:, 1] = vs[1][:, 0] + 1e-9 * rng.standard_normal(4)
    with pytest.warns(
        AssumptionWarning, match=r"^near-degenerate .*\[u0\[1\]; v0\[1\]\] is nearly rank-deficient"
    ) as rec:
        check_factors(us, vs, m)
    assert len(rec) == 1 and re.search(r"log\(1/α\) ≫ log\(1/gap\) = 2\d\.\d", str(rec[0].message))


def test_describe_model_names_each_weight_and_the_samples():
    """The command line's one line on a model: ``weights W_W (3×2), n = 1 sample`` (was ``W_W 3×2, n = 1``)."""
    from gradflow._registry import family_of

    model = models.matrix_factorization(m=3, n=2, singular_values=(1.0,), seed=0).model
    assert family_of(model).describe_model(model) == "weights W_W (3×2), n = 1 sample"

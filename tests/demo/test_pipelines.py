"""The pipeline a family names for ``gradflow compare`` (gradflow/_demo/_pipelines.py): found from its
``"module:attribute"``, none where it names none, refused where the name is not a Pipeline."""

import math
from types import SimpleNamespace

import pytest

from gradflow._demo import Pipeline, pipeline_of
from gradflow._diagonal import DIAGONAL
from gradflow._factorized import FACTORIZED


def test_a_family_names_its_pipeline():
    assert pipeline_of(SimpleNamespace(name="none", pipeline=None)) is None
    with pytest.raises(TypeError, match=r"^odd family's pipeline gradflow._demo._steps:flow_name is not a Pipeline"):
        pipeline_of(SimpleNamespace(name="odd", pipeline="gradflow._demo._steps:flow_name"))
    settings = dict(model_options=(), log_alphas=(math.log(1e-3),), tau_max=None, num_times=50, max_stages=2)
    settings.update(rtol=0.0, atol=1e-8)
    diagonal, factorized = pipeline_of(DIAGONAL), pipeline_of(FACTORIZED)
    assert isinstance(diagonal, Pipeline) and isinstance(factorized, Pipeline)
    config = diagonal.configure(model="diagonal_linear", perturb=True, **settings)
    assert config.perturb and config.figure_log_alphas is None and config.max_stages == 2  # every flow drawn
    assert factorized.configure(model="matrix_factorization", perturb=False, **settings).gd_log_alphas == ()
    with pytest.raises(ValueError, match="--perturb applies to the models with diagonal weights"):
        factorized.configure(model="matrix_factorization", perturb=True, **settings)

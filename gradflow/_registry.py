"""The model families gradflow knows, found from the model's type (docs/extending.md: adding a family is a new
subpackage and one entry in ``FAMILIES``)."""

from __future__ import annotations

from ._diagonal import DIAGONAL
from ._factorized import FACTORIZED
from ._kit._family import ModelFamily

FAMILIES: tuple[ModelFamily, ...] = (DIAGONAL, FACTORIZED)


def family_of(model) -> ModelFamily:
    """The family whose model type ``model`` is, or a ``TypeError`` that names the model types gradflow takes."""
    for family in FAMILIES:
        if isinstance(model, family.model_type):
            return family
    kinds = " or ".join(f"a gradflow.{f.model_type.__name__}" for f in FAMILIES)
    raise TypeError(f"model must be {kinds}; got {type(model).__name__}.")


def family_of_result(result) -> ModelFamily:
    """The family whose results (flow, gradient descent, greedy path or comparison) ``result`` is one of, or a
    ``TypeError`` that says what gradflow draws and reports."""
    for family in FAMILIES:
        if isinstance(result, family.result_types):
            return family
    kinds = ", ".join(f"gradflow.{t.__name__}" for f in FAMILIES for t in f.result_types)
    raise TypeError(f"expected one of gradflow's results ({kinds}); got {type(result).__name__}.")

"""The model families gradflow knows, found from the model's type (docs/extending.md: adding a family is a new
subpackage and one entry in ``FAMILIES``)."""

from __future__ import annotations

from ._depth import DEPTH
from ._diagonal import DIAGONAL
from ._factorized import FACTORIZED
from ._family import ModelFamily

FAMILIES: tuple[ModelFamily, ...] = (DIAGONAL, FACTORIZED, DEPTH)


def family_of(model) -> ModelFamily:
    """The family whose model type ``model`` is, or a ``TypeError`` that names the model types gradflow takes."""
    for family in FAMILIES:
        if isinstance(model, family.model_type):
            return family
    kinds = " or ".join(f"a gradflow.{f.model_type.__name__}" for f in FAMILIES)
    raise TypeError(f"model must be {kinds}; got {type(model).__name__}.")

"""gradflow: incremental learning in networks with diagonal weights.

The theory engine runs in float64 inside a scoped ``jax.enable_x64(True)``; gradflow does not
change your global JAX settings (see ``gradflow._config``).
"""

from . import models as models
from ._model import DiagonalModel as DiagonalModel
from ._model import evaluate_g as evaluate_g
from ._model import evaluate_loss as evaluate_loss

__all__ = [
    "DiagonalModel",
    "evaluate_g",
    "evaluate_loss",
    "models",
]

"""The family of models with diagonal weights, ``f(x; θ) = h(x; u ⊙ v)``: the model, its exact flow in log
coordinates, gradient descent, Algorithm 1 (the greedy limit), their comparison, reports and figures."""

from ._compare import Comparison as Comparison
from ._family import DIAGONAL as DIAGONAL
from ._model import DiagonalModel as DiagonalModel
from ._model import evaluate_g as evaluate_g
from ._model import evaluate_loss as evaluate_loss
from ._path import GreedyPath as GreedyPath
from ._results import FlowResult as FlowResult
from ._results import FlowState as FlowState
from ._results import GDResult as GDResult

"""The family of models with diagonal weights, ``f(x; θ) = h(x; u ⊙ v)``: the model, its exact flow in log
coordinates and its options, gradient descent, Algorithm 1 (the greedy limit), their comparison, reports and
figures, and its built-in tasks."""

from ._attention import attention_head as attention_head
from ._attention import diagonal_attention as diagonal_attention
from ._attention import diagonal_attention_model as diagonal_attention_model
from ._compare import Comparison as Comparison
from ._family import DIAGONAL as DIAGONAL
from ._linear import diagonal_linear as diagonal_linear
from ._linear import diagonal_linear_model as diagonal_linear_model
from ._model import DiagonalModel as DiagonalModel
from ._model import evaluate_g as evaluate_g
from ._model import evaluate_loss as evaluate_loss
from ._options import DiagonalSolver as DiagonalSolver
from ._path import GreedyPath as GreedyPath
from ._results import FlowResult as FlowResult
from ._results import FlowState as FlowState
from ._results import GDResult as GDResult
from ._transformer import diagonal_transformer as diagonal_transformer
from ._transformer import diagonal_transformer_model as diagonal_transformer_model

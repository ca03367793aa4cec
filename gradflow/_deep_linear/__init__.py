"""The family of deep linear networks, ``f(x; θ) = h(x; W_L ⋯ W_1)``: the model and its exact flow, the layers in
units of α in rescaled time, its greedy low-rank limit and their comparison (docs/deep-linear.md)."""

from ._compare import DeepLinearComparison as DeepLinearComparison
from ._family import DEEP_LINEAR as DEEP_LINEAR
from ._greedy import DeepLinearGreedyPath as DeepLinearGreedyPath
from ._model import DeepLinearModel as DeepLinearModel
from ._options import DeepLinearSolver as DeepLinearSolver
from ._results import DeepLinearFlowResult as DeepLinearFlowResult
from ._results import DeepLinearFlowState as DeepLinearFlowState
from ._results import DeepLinearGDResult as DeepLinearGDResult
from ._tasks import deep_linear_regression as deep_linear_regression
from ._tasks import deep_linear_regression_model as deep_linear_regression_model
from ._tasks import deep_matrix_factorization as deep_matrix_factorization
from ._tasks import deep_matrix_factorization_model as deep_matrix_factorization_model

"""The family of models with full, factorised weights ``W_j = U_j V_jᵀ``: the model, its exact flow (continuous QR
in log scale) and its options, gradient descent, the greedy low-rank limit, their comparison, reports and figures,
and its built-in tasks."""

from ._compare import RankComparison as RankComparison
from ._family import FACTORIZED as FACTORIZED
from ._family import figure2_order as figure2_order
from ._model import FactorizedModel as FactorizedModel
from ._options import FactorizedSolver as FactorizedSolver
from ._path import FactorizedGreedyPath as FactorizedGreedyPath
from ._results import FactorizedFlowResult as FactorizedFlowResult
from ._results import FactorizedFlowState as FactorizedFlowState
from ._results import FactorizedGDResult as FactorizedGDResult
from ._tasks import attention_full as attention_full
from ._tasks import attention_full_model as attention_full_model
from ._tasks import full_attention_head as full_attention_head
from ._tasks import matrix_factorization as matrix_factorization
from ._tasks import matrix_factorization_model as matrix_factorization_model
from ._tasks import matrix_sensing as matrix_sensing
from ._tasks import matrix_sensing_model as matrix_sensing_model

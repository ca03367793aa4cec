"""The family of models with full, factorised weights ``W_j = U_j V_jᵀ``: the model, its exact flow (continuous QR
in log scale), gradient descent, the greedy low-rank limit, their comparison, reports and figures."""

from ._compare import RankComparison as RankComparison
from ._family import FACTORIZED as FACTORIZED
from ._family import figure2_order as figure2_order
from ._model import FactorizedModel as FactorizedModel
from ._path import FactorizedGreedyPath as FactorizedGreedyPath
from ._results import FactorizedFlowResult as FactorizedFlowResult
from ._results import FactorizedFlowState as FactorizedFlowState
from ._results import FactorizedGDResult as FactorizedGDResult

"""The family of depth-L diagonal networks, ``f(x; θ) = h(x; w_1 ⊙ ⋯ ⊙ w_L)``: the model, its exact flow at any α
(clocks ``c = (α/a)^{L−2}`` on plateaus, ``log a`` in jumps), the depth-L Algorithm 1 and their comparison."""

from ._compare import DepthComparison as DepthComparison
from ._family import DEPTH as DEPTH
from ._greedy import DepthGreedyPath as DepthGreedyPath
from ._model import DepthModel as DepthModel
from ._options import DepthSolver as DepthSolver
from ._results import DepthFlowResult as DepthFlowResult

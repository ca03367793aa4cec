"""The family of depth-L diagonal networks, ``f(x; θ) = h(x; w_1 ⊙ ⋯ ⊙ w_L)``: the model, its exact flow at any α
(clocks ``c = (α/a)^{L−2}`` on plateaus, ``log a`` in jumps), the depth-L Algorithm 1 and their comparison."""

from ._compare import DepthComparison as DepthComparison
from ._family import DEPTH as DEPTH
from ._greedy import DepthGreedyPath as DepthGreedyPath
from ._model import DepthModel as DepthModel
from ._options import DepthSolver as DepthSolver
from ._results import DepthFlowResult as DepthFlowResult
from ._results import DepthGDResult as DepthGDResult
from ._tasks import depth_linear as depth_linear
from ._tasks import depth_linear_model as depth_linear_model
from ._tasks import saxe_modes as saxe_modes

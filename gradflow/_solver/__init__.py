"""The solver kit under every engine: wrapped diffrax solvers, step-size controllers, solving onto output times,
batches of runs and how a solve ended. It imports no engine."""

from ._controllers import PredictiveController as PredictiveController
from ._controllers import UnderflowGuard as UnderflowGuard
from ._controllers import WrappedController as WrappedController
from ._solve import solve_onto as solve_onto
from ._solve import solve_separately as solve_separately
from ._solve import solve_status as solve_status
from ._solve import vmap_batches as vmap_batches
from ._wrapped import WrappedSolver as WrappedSolver

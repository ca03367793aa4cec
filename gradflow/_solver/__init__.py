"""The solver kit under every engine: wrapped diffrax solvers, step-size controllers, Newton's method for implicit
stages, solving onto output times in segments (interruptible, with progress), batches of runs and how a solve ended.
It imports no engine."""

from ._controllers import PredictiveController as PredictiveController
from ._controllers import UnderflowGuard as UnderflowGuard
from ._controllers import WrappedController as WrappedController
from ._newton import StageNewton as StageNewton
from ._newton import stiff_solve as stiff_solve
from ._radau import RadauNewtonFloor as RadauNewtonFloor
from ._segments import Solve as Solve
from ._segments import run_segments as run_segments
from ._segments import segment_status as segment_status
from ._solve import solve_in_segments as solve_in_segments
from ._solve import solve_runs as solve_runs
from ._solve import solve_status as solve_status
from ._solve import vmap_batches as vmap_batches
from ._wrapped import WrappedSolver as WrappedSolver

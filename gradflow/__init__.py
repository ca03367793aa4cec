"""gradflow: incremental learning from small initialisation, with diagonal weights and with full factorised weights W = U Vᵀ.

The theory engine runs in float64 inside a scoped ``jax.enable_x64(True)``; gradflow does not
change your global JAX settings (see ``gradflow._config``).
"""

from . import models as models
from ._assumptions import AssumptionWarning as AssumptionWarning
from ._compare import Comparison as Comparison
from ._compare import compare_limits as compare_limits
from ._demo import DemoConfig as DemoConfig
from ._demo import run_demo as run_demo
from ._experiments import Perturbation as Perturbation
from ._experiments import perturb_and_continue as perturb_and_continue
from ._factorized import FactorizedModel as FactorizedModel
from ._flow import FlowResult as FlowResult
from ._flow import FlowState as FlowState
from ._flow import simulate_flow as simulate_flow
from ._gd import GDResult as GDResult
from ._gd import simulate_gd as simulate_gd
from ._glrl import FactorizedGreedyPath as FactorizedGreedyPath
from ._greedy import GreedyPath as GreedyPath
from ._greedy import GreedyTolerances as GreedyTolerances
from ._greedy import greedy_limit as greedy_limit
from ._model import DiagonalModel as DiagonalModel
from ._model import evaluate_g as evaluate_g
from ._model import evaluate_loss as evaluate_loss
from ._rank_compare import RankComparison as RankComparison
from ._rank_demo import RankDemoConfig as RankDemoConfig
from ._rank_demo import run_rank_demo as run_rank_demo
from ._rank_flow import FactorizedFlowResult as FactorizedFlowResult
from ._rank_flow import FactorizedGDResult as FactorizedGDResult
from ._sweep import SweepResult as SweepResult
from ._sweep import sweep as sweep
from ._sweep_config import ModelGrid as ModelGrid
from ._sweep_config import SweepConfig as SweepConfig
from ._trajectory import Trajectory as Trajectory

__all__ = [
    "AssumptionWarning",
    "Comparison",
    "DemoConfig",
    "DiagonalModel",
    "FactorizedFlowResult",
    "FactorizedGDResult",
    "FactorizedGreedyPath",
    "FactorizedModel",
    "FlowResult",
    "FlowState",
    "GDResult",
    "GreedyPath",
    "GreedyTolerances",
    "ModelGrid",
    "Perturbation",
    "RankComparison",
    "RankDemoConfig",
    "SweepConfig",
    "SweepResult",
    "Trajectory",
    "compare_limits",
    "evaluate_g",
    "evaluate_loss",
    "greedy_limit",
    "models",
    "perturb_and_continue",
    "run_demo",
    "run_rank_demo",
    "simulate_flow",
    "simulate_gd",
    "sweep",
]

"""gradflow: incremental learning from small initialisation, with diagonal weights and with full factorised weights W = U Vᵀ.

The theory engine runs in float64 inside a scoped ``jax.enable_x64(True)``; gradflow does not
change your global JAX settings (see ``gradflow._config``).
"""

from . import _startup  # noqa: F401  (first: Ctrl-C while the command imports JAX is one line, gradflow._startup)
from . import models as models
from . import plot as plot
from ._api import compare_limits as compare_limits
from ._api import greedy_limit as greedy_limit
from ._api import simulate_flow as simulate_flow
from ._api import simulate_gd as simulate_gd
from ._deep_linear import DeepLinearComparison as DeepLinearComparison
from ._deep_linear import DeepLinearFlowResult as DeepLinearFlowResult
from ._deep_linear import DeepLinearFlowState as DeepLinearFlowState
from ._deep_linear import DeepLinearGDResult as DeepLinearGDResult
from ._deep_linear import DeepLinearGreedyPath as DeepLinearGreedyPath
from ._deep_linear import DeepLinearModel as DeepLinearModel
from ._deep_linear import DeepLinearSolver as DeepLinearSolver
from ._depth import DepthComparison as DepthComparison
from ._depth import DepthFlowResult as DepthFlowResult
from ._depth import DepthGDResult as DepthGDResult
from ._depth import DepthGreedyPath as DepthGreedyPath
from ._depth import DepthModel as DepthModel
from ._depth import DepthSolver as DepthSolver
from ._diagonal import Comparison as Comparison
from ._diagonal import DiagonalModel as DiagonalModel
from ._diagonal import DiagonalSolver as DiagonalSolver
from ._diagonal import FlowResult as FlowResult
from ._diagonal import FlowState as FlowState
from ._diagonal import GDResult as GDResult
from ._diagonal import GreedyPath as GreedyPath
from ._diagonal import evaluate_g as evaluate_g
from ._diagonal import evaluate_loss as evaluate_loss
from ._diagonal._experiments import Perturbation as Perturbation
from ._diagonal._experiments import perturb_and_continue as perturb_and_continue
from ._diagonal._pipeline import DemoConfig as DemoConfig
from ._diagonal._pipeline import run_demo as run_demo
from ._factorized import FactorizedFlowResult as FactorizedFlowResult
from ._factorized import FactorizedFlowState as FactorizedFlowState
from ._factorized import FactorizedGDResult as FactorizedGDResult
from ._factorized import FactorizedGreedyPath as FactorizedGreedyPath
from ._factorized import FactorizedModel as FactorizedModel
from ._factorized import FactorizedSolver as FactorizedSolver
from ._factorized import RankComparison as RankComparison
from ._factorized._pipeline import RankDemoConfig as RankDemoConfig
from ._factorized._pipeline import run_rank_demo as run_rank_demo
from ._kit._assumptions import AssumptionWarning as AssumptionWarning
from ._kit._greedy import GreedyTolerances as GreedyTolerances
from ._kit._trajectory import Trajectory as Trajectory
from ._outputs import load as load
from ._outputs import report as report
from ._outputs import save as save
from ._results import RESULTS as RESULTS
from ._results import Interrupted as Interrupted
from ._sweep import ModelGrid as ModelGrid
from ._sweep import SweepConfig as SweepConfig
from ._sweep import SweepResult as SweepResult
from ._sweep import sweep as sweep

__all__ = [
    "AssumptionWarning",
    "Comparison",
    "DeepLinearComparison",
    "DeepLinearFlowResult",
    "DeepLinearFlowState",
    "DeepLinearGDResult",
    "DeepLinearGreedyPath",
    "DeepLinearModel",
    "DeepLinearSolver",
    "DemoConfig",
    "DepthComparison",
    "DepthFlowResult",
    "DepthGDResult",
    "DepthGreedyPath",
    "DepthModel",
    "DepthSolver",
    "DiagonalModel",
    "DiagonalSolver",
    "FactorizedFlowResult",
    "FactorizedFlowState",
    "FactorizedGDResult",
    "FactorizedGreedyPath",
    "FactorizedModel",
    "FactorizedSolver",
    "FlowResult",
    "FlowState",
    "GDResult",
    "GreedyPath",
    "GreedyTolerances",
    "Interrupted",
    "ModelGrid",
    "Perturbation",
    "RESULTS",
    "RankComparison",
    "RankDemoConfig",
    "SweepConfig",
    "SweepResult",
    "Trajectory",
    "compare_limits",
    "evaluate_g",
    "evaluate_loss",
    "greedy_limit",
    "load",
    "models",
    "perturb_and_continue",
    "plot",
    "report",
    "run_demo",
    "run_rank_demo",
    "save",
    "simulate_flow",
    "simulate_gd",
    "sweep",
]

"""theory: symbolic derivations behind gradflow, checked with SymPy, and their closed forms as fast
numerical oracles.

``python -c "import theory; print(theory.verify_all())"`` re-derives everything (one ✓/✗ line each).
Sign convention as in docs/math.md (*The loss and the sign convention*): g = −∇_β L, du/dt = v ⊙ g,
dv/dt = u ⊙ g, τ = t / log(1/α)
(depth L ≥ 3: τ = t α^{L−2}, docs/depth.md; deep linear networks W = W_L ⋯ W_1, docs/deep-linear.md).
"""

from ._conservation import derive_conservation_law as derive_conservation_law
from ._conservation import derive_sum_difference_dynamics as derive_sum_difference_dynamics
from ._deep_linear import derive_aligned_modes as derive_aligned_modes
from ._deep_linear import derive_blow_up_variables as derive_blow_up_variables
from ._deep_linear import derive_deep_linear_conservation as derive_deep_linear_conservation
from ._deep_linear import derive_sleeping_layers as derive_sleeping_layers
from ._depth import derive_balanced_law as derive_balanced_law
from ._depth import derive_depth_clock as derive_depth_clock
from ._depth import derive_depth_conservation as derive_depth_conservation
from ._depth import derive_saxe_depth as derive_saxe_depth
from ._depth import derive_woodworth_tied as derive_woodworth_tied
from ._depth import saxe_time as saxe_time
from ._depth import woodworth_h as woodworth_h
from ._depth import woodworth_tied_beta as woodworth_tied_beta
from ._diagonal_linear import derive_diagonal_linear_closed_form as derive_diagonal_linear_closed_form
from ._diagonal_linear import derive_diagonal_linear_staircase as derive_diagonal_linear_staircase
from ._diagonal_linear import diagonal_linear_beta as diagonal_linear_beta
from ._diagonal_linear import diagonal_linear_beta_expression as diagonal_linear_beta_expression
from ._diagonal_linear import diagonal_linear_beta_rescaled as diagonal_linear_beta_rescaled
from ._diagonal_linear import diagonal_linear_staircase as diagonal_linear_staircase
from ._glrl import FactorizationStages as FactorizationStages
from ._glrl import derive_factorized_conservation as derive_factorized_conservation
from ._glrl import derive_matrix_factorization_stages as derive_matrix_factorization_stages
from ._glrl import derive_saddle_escape as derive_saddle_escape
from ._glrl import derive_sleeping_bookkeeping as derive_sleeping_bookkeeping
from ._glrl import derive_sleeping_orientation as derive_sleeping_orientation
from ._glrl import linear_sleeping_log_scales as linear_sleeping_log_scales
from ._glrl import matrix_factorization_stages as matrix_factorization_stages
from ._greedy import GreedyStages as GreedyStages
from ._greedy import derive_plateau_dynamics as derive_plateau_dynamics
from ._greedy import derive_time_until_active as derive_time_until_active
from ._greedy import greedy_orthonormal_stages as greedy_orthonormal_stages
from ._greedy import time_until_active as time_until_active
from ._record import Derivation as Derivation
from ._record import VerificationReport as VerificationReport
from ._record import check_claims as check_claims
from ._two_layer import derive_saxe_mode as derive_saxe_mode
from ._two_layer import saxe_mode as saxe_mode
from ._two_layer import saxe_mode_expression as saxe_mode_expression
from ._unbalanced import crossing_clock as crossing_clock
from ._unbalanced import derive_unbalanced_clock as derive_unbalanced_clock
from ._unbalanced import unbalanced_clock as unbalanced_clock
from ._verify import DERIVATIONS as DERIVATIONS
from ._verify import verify_all as verify_all

__all__ = [
    "DERIVATIONS",
    "Derivation",
    "FactorizationStages",
    "GreedyStages",
    "VerificationReport",
    "check_claims",
    "crossing_clock",
    "derive_aligned_modes",
    "derive_balanced_law",
    "derive_blow_up_variables",
    "derive_conservation_law",
    "derive_depth_clock",
    "derive_deep_linear_conservation",
    "derive_depth_conservation",
    "derive_diagonal_linear_closed_form",
    "derive_diagonal_linear_staircase",
    "derive_factorized_conservation",
    "derive_matrix_factorization_stages",
    "derive_plateau_dynamics",
    "derive_saddle_escape",
    "derive_saxe_depth",
    "derive_saxe_mode",
    "derive_sleeping_bookkeeping",
    "derive_sleeping_layers",
    "derive_sleeping_orientation",
    "derive_sum_difference_dynamics",
    "derive_time_until_active",
    "derive_unbalanced_clock",
    "derive_woodworth_tied",
    "diagonal_linear_beta",
    "diagonal_linear_beta_expression",
    "diagonal_linear_beta_rescaled",
    "diagonal_linear_staircase",
    "greedy_orthonormal_stages",
    "linear_sleeping_log_scales",
    "matrix_factorization_stages",
    "saxe_mode",
    "saxe_mode_expression",
    "saxe_time",
    "time_until_active",
    "unbalanced_clock",
    "verify_all",
    "woodworth_h",
    "woodworth_tied_beta",
]

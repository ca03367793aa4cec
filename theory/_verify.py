"""Run every derivation of the package."""

from __future__ import annotations

from ._conservation import derive_conservation_law, derive_sum_difference_dynamics
from ._deep_linear import (
    derive_aligned_modes,
    derive_blow_up_variables,
    derive_deep_linear_conservation,
    derive_sleeping_layers,
)
from ._depth import (
    derive_balanced_law,
    derive_depth_clock,
    derive_depth_conservation,
    derive_saxe_depth,
    derive_woodworth_tied,
)
from ._diagonal_linear import derive_diagonal_linear_closed_form, derive_diagonal_linear_staircase
from ._glrl import (
    derive_factorized_conservation,
    derive_matrix_factorization_stages,
    derive_saddle_escape,
    derive_sleeping_bookkeeping,
    derive_sleeping_orientation,
)
from ._greedy import derive_plateau_dynamics, derive_time_until_active
from ._record import VerificationReport
from ._two_layer import derive_saxe_mode
from ._unbalanced import derive_unbalanced_clock

DERIVATIONS = (
    derive_conservation_law,
    derive_sum_difference_dynamics,
    derive_plateau_dynamics,
    derive_time_until_active,
    derive_diagonal_linear_closed_form,
    derive_diagonal_linear_staircase,
    derive_saxe_mode,
    derive_factorized_conservation,
    derive_saddle_escape,
    derive_sleeping_bookkeeping,
    derive_sleeping_orientation,
    derive_matrix_factorization_stages,
    derive_depth_conservation,
    derive_balanced_law,
    derive_depth_clock,
    derive_saxe_depth,
    derive_woodworth_tied,
    derive_unbalanced_clock,
    derive_deep_linear_conservation,
    derive_aligned_modes,
    derive_blow_up_variables,
    derive_sleeping_layers,
)


def verify_all() -> VerificationReport:
    """Check every derivation with SymPy (a few seconds); ``print`` the result for a ✓/✗ line each."""
    return VerificationReport(tuple(derive() for derive in DERIVATIONS))

"""Built-in models with diagonal weights (docs/math.md, *Models with diagonal weights*), with full, factorised
weights (*Full weights: the exact flow*), depth-L diagonal networks (docs/depth.md) and deep linear networks
(docs/deep-linear.md), each with a seeded data generator; every family's built-in tasks by name (``TASKS``)."""

from .._deep_linear import deep_linear_regression as deep_linear_regression
from .._deep_linear import deep_linear_regression_model as deep_linear_regression_model
from .._deep_linear import deep_matrix_factorization as deep_matrix_factorization
from .._deep_linear import deep_matrix_factorization_model as deep_matrix_factorization_model
from .._depth import depth_linear as depth_linear
from .._depth import depth_linear_model as depth_linear_model
from .._depth import saxe_modes as saxe_modes
from .._diagonal import attention_head as attention_head
from .._diagonal import diagonal_attention as diagonal_attention
from .._diagonal import diagonal_attention_model as diagonal_attention_model
from .._diagonal import diagonal_linear as diagonal_linear
from .._diagonal import diagonal_linear_model as diagonal_linear_model
from .._diagonal import diagonal_transformer as diagonal_transformer
from .._diagonal import diagonal_transformer_model as diagonal_transformer_model
from .._factorized import attention_full as attention_full
from .._factorized import attention_full_model as attention_full_model
from .._factorized import full_attention_head as full_attention_head
from .._factorized import matrix_factorization as matrix_factorization
from .._factorized import matrix_factorization_model as matrix_factorization_model
from .._factorized import matrix_sensing as matrix_sensing
from .._factorized import matrix_sensing_model as matrix_sensing_model
from .._kit._task import Builtin as Builtin
from .._kit._task import Task as Task
from ._registry import TASKS as TASKS
from ._registry import builtin as builtin

__all__ = [
    "Builtin",
    "TASKS",
    "Task",
    "attention_full",
    "attention_full_model",
    "attention_head",
    "builtin",
    "deep_linear_regression",
    "deep_linear_regression_model",
    "deep_matrix_factorization",
    "deep_matrix_factorization_model",
    "depth_linear",
    "depth_linear_model",
    "diagonal_attention",
    "diagonal_attention_model",
    "diagonal_linear",
    "diagonal_linear_model",
    "diagonal_transformer",
    "diagonal_transformer_model",
    "full_attention_head",
    "matrix_factorization",
    "matrix_factorization_model",
    "matrix_sensing",
    "matrix_sensing_model",
    "saxe_modes",
]


def __getattr__(name: str):
    """The deprecated ``BUILTIN`` and ``FACTORIZED`` (one release; see CHANGELOG.md)."""
    from ._registry import DEPRECATED, deprecated

    if name in DEPRECATED:
        return deprecated(name)
    raise AttributeError(f"module 'gradflow.models' has no attribute {name!r}")

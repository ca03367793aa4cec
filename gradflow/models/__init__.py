"""Built-in models with diagonal weights, each with a seeded data generator (docs/math.md, *Models with diagonal
weights*)."""

from ._attention import attention_head as attention_head
from ._attention import diagonal_attention as diagonal_attention
from ._attention import diagonal_attention_model as diagonal_attention_model
from ._linear import diagonal_linear as diagonal_linear
from ._linear import diagonal_linear_model as diagonal_linear_model
from ._registry import BUILTIN as BUILTIN
from ._registry import Builtin as Builtin
from ._registry import builtin as builtin
from ._task import Task as Task
from ._transformer import diagonal_transformer as diagonal_transformer
from ._transformer import diagonal_transformer_model as diagonal_transformer_model

__all__ = [
    "BUILTIN",
    "Builtin",
    "Task",
    "attention_head",
    "builtin",
    "diagonal_attention",
    "diagonal_attention_model",
    "diagonal_linear",
    "diagonal_linear_model",
    "diagonal_transformer",
    "diagonal_transformer_model",
]

"""Sweeps: many independent theory runs over a grid of built-in tasks × seeds × α, batched, sharded over devices
and split over processes (docs' Scaling out page)."""

from ._config import ModelGrid as ModelGrid
from ._config import SweepConfig as SweepConfig
from ._run import SweepResult as SweepResult
from ._run import sweep as sweep
from ._summary import summarise as summarise

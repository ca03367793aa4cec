"""Batched results sliced by α: ``flow[0]``, ``flow[1:3]``, ``comparison[[0, 2]]``.

A batched result holds ``B`` runs, one per α; every leaf whose leading axis is the batch (those its class does not
name as shared, e.g. the common output times ``ts``) is indexed, the others are kept as they are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import numpy as np


def batch_index(index, size: int, what: str) -> np.ndarray | int:
    """``index`` (an int, a slice, or an array of ints or bools) resolved into ``range(size)``: an int, or a 1-D
    array of positions; an ``IndexError`` for one out of range, a ``TypeError`` for another kind of index."""
    positions = np.arange(size)
    if isinstance(index, (int, np.integer)) and not isinstance(index, bool):
        if not -size <= index < size:
            raise IndexError(f"index {index} is out of range for the {size} runs of this {what}.")
        return int(positions[index])
    if isinstance(index, slice) or (np.ndim(index) == 1 and np.asarray(index).dtype.kind in "biu"):
        return positions[index]
    raise TypeError(f"a {what} is indexed by its runs (one per α): an int, a slice or a 1-D array; got {index!r}.")


def take_runs(result, index, size: int, batched: Callable[[str, np.ndarray], bool]):
    """``result`` (a dataclass such as an ``eqx.Module``) with the leaves ``batched(field, leaf)`` says hold the
    ``size`` runs indexed by ``index`` (from :func:`batch_index`) along their leading axis."""

    def take(name):
        def leaf(x):
            if isinstance(x, np.ndarray) and x.ndim >= 1 and x.shape[0] == size and batched(name, x):
                return x[index]
            return x

        return leaf

    changes = {
        f.name: jax.tree_util.tree_map(take(f.name), getattr(result, f.name)) for f in dataclasses.fields(result)
    }
    return dataclasses.replace(result, **changes)


def batch_size(log_alpha, what: str) -> int:
    """The number of runs of a result whose scales are ``log_alpha``; a ``TypeError`` for a single run."""
    log_alpha = np.asarray(log_alpha)
    if log_alpha.ndim != 1:
        raise TypeError(f"this {what} holds a single run (one α): there is nothing to index.")
    return log_alpha.shape[0]

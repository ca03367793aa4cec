"""What ``gradflow compare`` runs for a model family: the pipeline the family names (``ModelFamily.pipeline``, a
demo configured from the command line's options)."""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """A family's pipeline: ``configure(model, model_options, log_alphas, tau_max, num_times, max_stages, perturb,
    rtol, atol)`` makes its configuration, ``run(config, out=, force=, progress=)`` runs it into a folder (a result
    with ``comparison``, ``log`` and ``seconds``)."""

    configure: Callable
    run: Callable


def pipeline_of(family) -> Pipeline | None:
    """The pipeline ``family.pipeline`` names (``"module:attribute"``), or None if it names none."""
    if family.pipeline is None:
        return None
    module, _, name = family.pipeline.partition(":")
    pipeline = getattr(importlib.import_module(module), name)
    if not isinstance(pipeline, Pipeline):
        raise TypeError(f"{family.name} family's pipeline {family.pipeline} is not a Pipeline.")
    return pipeline

"""What ``gradflow compare`` runs for a model family: the pipeline the family names (``ModelFamily.pipeline``, a
demo configured from the command line's options)."""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Demo:
    """A family's ``gradflow demo``: ``flag`` selects it (None: the demo run without a flag, one family's), ``help``
    says what it computes, ``configs`` its configurations by size (``"default"``, ``"quick"``, and optionally
    ``"paper_size"``), run by ``run(config, out=, force=, progress=)`` into ``OUT/folder`` (``OUT/paper_folder`` at
    the paper's size)."""

    flag: str | None
    help: str
    folder: str
    configs: Mapping[str, Any]
    run: Callable
    paper_folder: str = ""


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """A family's pipeline: ``configure(model, model_options, log_alphas, tau_max, num_times, max_stages, perturb,
    rtol, atol)`` makes its configuration, ``run(config, out=, force=, progress=)`` runs it into a folder (a result
    with ``comparison``, ``log`` and ``seconds``), for ``gradflow compare``; ``demo`` is its ``gradflow demo``, if
    it has one."""

    configure: Callable
    run: Callable
    demo: Demo | None = None


def pipeline_of(family) -> Pipeline | None:
    """The pipeline ``family.pipeline`` names (``"module:attribute"``), or None if it names none."""
    if family.pipeline is None:
        return None
    module, _, name = family.pipeline.partition(":")
    pipeline = getattr(importlib.import_module(module), name)
    if not isinstance(pipeline, Pipeline):
        raise TypeError(f"{family.name} family's pipeline {family.pipeline} is not a Pipeline.")
    return pipeline

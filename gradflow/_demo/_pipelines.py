"""What ``gradflow compare`` runs for each model family: its demo pipeline configured from the command line's options,
and the table of the stage times it prints (docs/extending.md: a family that wants a pipeline adds it here)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from .._diagonal._report import stage_time_rows
from .._factorized._report import rank_jump_rows
from ._diagonal import DemoConfig, run_demo
from ._full_weights import RankDemoConfig, run_rank_demo


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """A family's pipeline: ``configure(model, model_options, log_alphas, tau_max, num_times, max_stages, perturb,
    rtol, atol)`` makes its configuration, ``run(config, out=, force=, progress=)`` runs it into a folder,
    ``stage_rows(comparison)`` tables the stage times, ``columns`` names the quantities of the worst-distance
    table."""

    configure: Callable
    run: Callable
    stage_rows: Callable
    columns: tuple[tuple[str, str], ...]


def _diagonal(model, model_options, log_alphas, tau_max, num_times, max_stages, perturb, rtol, atol) -> DemoConfig:
    return DemoConfig(
        model=model,
        model_options=model_options,
        log_alphas=log_alphas,
        figure_log_alphas=None,
        tau_max=tau_max,
        num_times=num_times,
        max_stages=max_stages,
        perturb=perturb,
        rtol=rtol,
        atol=atol,
    )


def _factorized(model, model_options, log_alphas, tau_max, num_times, max_stages, perturb, rtol, atol):
    if perturb:
        raise ValueError("--perturb applies to the models with diagonal weights")
    return RankDemoConfig(
        model=model,
        model_options=model_options,
        log_alphas=log_alphas,
        tau_max=tau_max,
        num_times=num_times,
        max_stages=max_stages,
        gd_log_alphas=(),
        rtol=rtol,
        atol=atol,
    )


PIPELINES: dict[str, Pipeline] = {
    "diagonal": Pipeline(
        _diagonal, run_demo, stage_time_rows, (("weights", "β"), ("b", "b"), ("loss", "loss"), ("time", "stage time"))
    ),
    "factorized": Pipeline(
        _factorized,
        run_rank_demo,
        rank_jump_rows,
        (("weights", "W"), ("b", "log scales b"), ("loss", "loss"), ("time", "rank jump")),
    ),
}
"""The pipeline of each family, by the family's name."""

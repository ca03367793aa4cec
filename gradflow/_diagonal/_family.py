"""The family of models with diagonal weights, ``h(x; u ⊙ v)`` (paper Definition 3.1)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import ClassVar

import numpy as np

from .._kit._checks import check_losses
from .._kit._family import ModelFamily, check_coordinate_path
from .._kit._plots import plot_loss, save_figure
from .._kit._task import BOOLEAN, NON_NEGATIVE, POSITIVE, SPARSITY, SPARSITY_PAIR, Builtin
from ._attention import diagonal_attention
from ._checks import check_init, check_resolved
from ._compare import Comparison, compare
from ._flow import flow, solve_sharded
from ._gd import gd
from ._greedy import greedy
from ._linear import diagonal_linear
from ._model import DiagonalModel, evaluate_g, evaluate_loss
from ._options import DiagonalSolver
from ._path import GreedyPath
from ._plots import LABELS, coordinate_groups, plot_coordinates, significant
from ._report import comparison_json, comparison_summary, greedy_summary
from ._results import FlowResult, GDResult
from ._transformer import diagonal_transformer

TASKS: Mapping[str, Builtin] = MappingProxyType(
    {
        "diagonal_linear": Builtin(
            diagonal_linear,
            ("n", "p"),
            sweep=dict(n=POSITIVE, p=POSITIVE, nonzero=SPARSITY, orthonormal=BOOLEAN, noise=NON_NEGATIVE),
        ),
        "diagonal_attention": Builtin(
            diagonal_attention,
            ("n", "tokens", "dim"),
            sweep=dict(n=POSITIVE, tokens=POSITIVE, dim=POSITIVE, teacher_nonzero=SPARSITY_PAIR),
        ),
        "diagonal_transformer": Builtin(
            diagonal_transformer,
            ("n", "tokens", "dim", "layers", "heads"),
            sweep=dict(
                n=POSITIVE,
                tokens=POSITIVE,
                dim=POSITIVE,
                layers=POSITIVE,
                heads=POSITIVE,
                mlp=POSITIVE,
                ffn_scale=NON_NEGATIVE,
                teacher_nonzero=SPARSITY,
            ),
        ),
    }
)
"""The built-in tasks with diagonal weights by name."""


class DiagonalFamily(ModelFamily):
    """Models with diagonal weights: a [`DiagonalModel`][gradflow.DiagonalModel], its exact flow in log
    coordinates, Algorithm 1 and their comparison."""

    name: ClassVar[str] = "diagonal"
    model_type: ClassVar[type] = DiagonalModel
    solver_type: ClassVar[type] = DiagonalSolver
    tasks: ClassVar[Mapping[str, Builtin]] = TASKS
    size_options: ClassVar[Mapping[str, str]] = MappingProxyType(
        {
            "n": "samples",
            "p": "coordinates (diagonal_linear)",
            "tokens": "tokens per sample (attention, transformer)",
            "dim": "token dimension (attention, transformer)",
            "layers": "layers (diagonal_transformer)",
            "heads": "heads per layer (diagonal_transformer)",
        }
    )
    pipeline: ClassVar[str | None] = "gradflow._diagonal._pipeline:PIPELINE"
    weights_column: ClassVar[str] = "beta"
    worst_columns: ClassVar[tuple[tuple[str, str], ...]] = (
        ("weights", "β"),
        ("b", "b"),
        ("loss", "loss"),
        ("time", "stage time"),
    )

    def check_init(self, model, u0, v0):
        return check_init(u0, v0, model.p, model.names)

    def check_resolved(self, log_a, ts, *, rtol: float, atol: float, names=("alpha", "log_alpha")) -> None:
        check_resolved(log_a, ts, rtol=rtol, atol=atol, names=names)

    def check_path(self, model, path):
        check_coordinate_path(model, path, GreedyPath, ("times", "beta", "b", "loss", "b_at"))
        check_losses(path.loss, evaluate_loss(model, np.asarray(path.beta)), "path (at its stages)")

    flow = staticmethod(flow)
    gd = staticmethod(gd)
    greedy = staticmethod(greedy)
    compare = staticmethod(compare)

    def describe_model(self, model) -> str:
        return f"p = {model.p} coordinates, n = {model.n} sample{'s' if model.n != 1 else ''}"

    def first_stage_speed(self, model) -> float:
        return float(np.max(np.abs(evaluate_g(model, np.zeros(model.p)))))

    def describe_flow(self, flow, names) -> str:
        return f"final loss {float(flow.loss[-1]):.6g}"

    def flow_figures(self, flows, model, *, title: str, folder: Path) -> list[Path]:
        files = [save_figure(plot_loss(flows, title=f"Loss of {title}"), folder / "loss.png")]
        for part, idx in coordinate_groups(model.names).items():
            figure = plot_coordinates(flows, model.names, idx, title=f"β ({part})")
            files.append(save_figure(figure, folder / f"beta_{part}.png"))
        return files

    def greedy_summary(self, path, names) -> str:
        return greedy_summary(path, names)

    shards_models: ClassVar[bool] = True

    def solve_sharded(self, tasks, log_alphas, tss, **options):
        return solve_sharded(tasks, log_alphas, tss, **options)

    result_types: ClassVar[tuple[type, ...]] = (FlowResult, GDResult, GreedyPath, Comparison)
    convergence_labels: ClassVar[dict[str, str]] = LABELS

    def plot(self, quantity, runs, path, *, names, title):
        names = list(names) if names is not None else [str(i) for i in range(np.shape(runs[0].beta)[-1])]
        mask = significant(path, [run.beta for run in runs])
        quantity = {"weights": "beta"}.get(quantity, quantity)
        return plot_coordinates(
            runs, names, np.arange(len(names)), path=path, title=title, label_mask=mask, quantity=quantity
        )

    def comparison_report(self, comparison):
        names = comparison.names or [str(i) for i in range(np.shape(comparison.path.beta)[-1])]
        text = "## Greedy limit (Algorithm 1) and the assumption checks\n\n" + greedy_summary(comparison.path, names)
        text += "\n## Comparison with the flows\n\n" + comparison_summary(comparison)
        return text, comparison_json(comparison, comparison.path, names)


DIAGONAL = DiagonalFamily()

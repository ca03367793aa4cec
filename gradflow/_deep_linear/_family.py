"""The family of deep linear networks, ``h(x; W_L ⋯ W_1)`` (docs/deep-linear.md)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import ClassVar

import numpy as np

from .._kit._family import ModelFamily, check_path_of
from .._kit._plots import plot_loss, save_figure
from .._kit._task import BOOLEAN, NON_NEGATIVE, POSITIVE, SINGULAR_VALUES, Builtin
from .._kit._trajectory import time_unit
from ._checks import check_resolved
from ._compare import DeepLinearComparison, compare
from ._flow import flow
from ._gd import gd
from ._greedy import DeepLinearGreedyPath, greedy
from ._model import DeepLinearModel, check_layers
from ._options import DeepLinearSolver
from ._plots import LABELS, plot_singular_values
from ._report import comparison_report, greedy_summary
from ._results import DeepLinearFlowResult, DeepLinearGDResult
from ._tasks import SINGULAR_VALUES as TEACHER_SINGULAR_VALUES
from ._tasks import deep_linear_regression, deep_matrix_factorization

TASKS: Mapping[str, Builtin] = MappingProxyType(
    {
        "deep_matrix_factorization": Builtin(
            deep_matrix_factorization,
            ("m", "n", "depth"),
            "deep_linear",
            ("singular_values",),
            sweep=dict(
                m=POSITIVE, n=POSITIVE, depth=POSITIVE, singular_values=SINGULAR_VALUES, aligned=BOOLEAN, width=POSITIVE
            ),
        ),
        "deep_linear_regression": Builtin(
            deep_linear_regression,
            ("m", "n", "samples", "depth"),
            "deep_linear",
            ("singular_values",),
            sweep=dict(
                m=POSITIVE,
                n=POSITIVE,
                samples=POSITIVE,
                depth=POSITIVE,
                singular_values=SINGULAR_VALUES,
                noise=NON_NEGATIVE,
                width=POSITIVE,
            ),
        ),
    }
)
"""The built-in tasks of deep linear networks (a [`DeepLinearModel`][gradflow.DeepLinearModel]) by name."""


class DeepLinearFamily(ModelFamily):
    """Deep linear networks: a [`DeepLinearModel`][gradflow.DeepLinearModel], its exact flow (the layers in units of
    α, in rescaled time, by an L-stable method), its greedy low-rank limit and their comparison."""

    name: ClassVar[str] = "deep_linear"
    model_type: ClassVar[type] = DeepLinearModel
    solver_type: ClassVar[type] = DeepLinearSolver
    tasks: ClassVar[Mapping[str, Builtin]] = TASKS
    size_options: ClassVar[Mapping[str, str]] = MappingProxyType(
        {
            "m": "rows of W (deep_matrix_factorization, deep_linear_regression: outputs)",
            "n": "columns of W (deep_matrix_factorization, deep_linear_regression: inputs)",
            "samples": "samples of the whitened design, >= n (deep_linear_regression; default 2n)",
            "depth": "layers L = 2 … 6 of a deep linear network (deep_matrix_factorization, deep_linear_regression; "
            "default 3)",
        }
    )
    teacher_options: ClassVar[Mapping[str, str]] = MappingProxyType(
        {
            "singular_values": "of the teacher W* (deep_matrix_factorization, deep_linear_regression), at most "
            "min(m, n) of them (default " + " ".join(f"{v:g}" for v in TEACHER_SINGULAR_VALUES) + ", or its first "
            "min(m, n))",
        }
    )
    pipeline: ClassVar[str | None] = "gradflow._deep_linear._pipeline:PIPELINE"
    weights_column: ClassVar[str] = "W"
    worst_columns: ClassVar[tuple[tuple[str, str], ...]] = (
        ("weights", "W"),
        ("b", "log scales b"),
        ("loss", "loss"),
        ("time", "stage time"),
    )

    def check_init(self, model, u0, v0):
        if v0 is not None:
            raise ValueError(
                "a DeepLinearModel takes its layers' directions as u0, a tuple of L matrices; v0 is not taken."
            )
        return check_layers(model, u0), None

    def flow(self, model, request, solver):
        return flow(model, request, solver)

    def check_resolved(self, log_a, ts, *, rtol: float, atol: float, names=("alpha", "log_alpha")) -> None:
        check_resolved(None, log_a, ts, rtol=rtol, atol=atol, names=names)  # the flow checks its depth's range

    gd = staticmethod(gd)

    def time_unit(self, model, log_alpha) -> float:
        """``dτ/dt = α^{L−2}`` (``L ≥ 3``), ``1/log(1/α)`` (``L = 2``)."""
        return float(time_unit(model.depth, log_alpha))

    def describe_model(self, model) -> str:
        m, n = model.shape
        return f"W of shape {m}×{n}, depth L = {model.depth}, hidden widths {model.widths}, n = {model.n}"

    def first_stage_speed(self, model) -> float:
        return float(np.linalg.norm(np.asarray(model.G(np.zeros(model.shape))), 2))

    def describe_flow(self, flow, names) -> str:
        return f"final loss {float(np.asarray(flow.loss)[..., -1].max()):.6g}"

    def flow_figures(self, flows, model, *, title: str, folder: Path) -> list[Path]:
        files = [save_figure(plot_loss(flows, title=f"Loss of {title}"), folder / "loss.png")]
        figure = plot_singular_values(flows, title=f"Singular values of W, {title}")
        return files + [save_figure(figure, folder / "singular_values.png")]

    result_types: ClassVar[tuple[type, ...]] = (
        DeepLinearFlowResult,
        DeepLinearGDResult,
        DeepLinearGreedyPath,
        DeepLinearComparison,
    )
    convergence_labels: ClassVar[dict[str, str]] = LABELS

    greedy = staticmethod(greedy)

    def check_path(self, model, path):
        def shapes(path):
            return f"W of shape {tuple(np.shape(path.W)[-2:])}"

        fields = ("times", "W", "b", "loss", "b_at")
        check_path_of(model, path, DeepLinearGreedyPath, fields, shapes, f"W of shape {tuple(model.shape)}")

    compare = staticmethod(compare)

    def greedy_summary(self, path, names) -> str:
        return greedy_summary(path, names)

    def activated(self, path, names, k: int) -> str:
        return f"rank {k}"

    def comparison_report(self, comparison):
        return comparison_report(comparison)

    def plot(self, quantity, runs, path, *, names, title):
        return plot_singular_values(runs, path=path, title=title, quantity=quantity)


DEEP_LINEAR = DeepLinearFamily()

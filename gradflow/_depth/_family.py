"""The family of depth-L diagonal networks, ``h(x; w_1 ⊙ ⋯ ⊙ w_L)`` (docs/depth.md)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import ClassVar

import jax.numpy as jnp
import numpy as np

from .._kit._family import ModelFamily, check_coordinate_path
from .._kit._plots import plot_loss, save_figure
from .._kit._task import BOOLEAN, NON_NEGATIVE, POSITIVE, SINGULAR_VALUES, SPARSITY, Builtin
from .._kit._trajectory import time_unit
from ._checks import check_resolved
from ._compare import DepthComparison, compare
from ._flow import flow
from ._gd import gd
from ._greedy import DepthGreedyPath, _g, greedy
from ._model import DepthModel, check_init
from ._options import DepthSolver
from ._plots import LABELS, plot_coordinates
from ._report import comparison_report, greedy_summary
from ._results import DepthFlowResult, DepthGDResult
from ._tasks import SAXE_STRENGTHS, depth_linear, saxe_modes

TASKS: Mapping[str, Builtin] = MappingProxyType(
    {
        "depth_linear": Builtin(
            depth_linear,
            ("n", "p", "depth"),
            "depth",
            sweep=dict(
                n=POSITIVE, p=POSITIVE, depth=POSITIVE, nonzero=SPARSITY, orthonormal=BOOLEAN, noise=NON_NEGATIVE
            ),
        ),
        "saxe_modes": Builtin(
            saxe_modes,
            ("n", "depth"),
            "depth",
            ("singular_values",),
            sweep=dict(n=POSITIVE, depth=POSITIVE, singular_values=SINGULAR_VALUES),
        ),
    }
)
"""The built-in tasks of depth-L diagonal networks (a [`DepthModel`][gradflow.DepthModel]) by name."""


class DepthFamily(ModelFamily):
    """Depth-L diagonal networks: a [`DepthModel`][gradflow.DepthModel], its exact flow (clocks on plateaus,
    ``log a`` in jumps), the depth-L Algorithm 1 and their comparison."""

    name: ClassVar[str] = "depth"
    model_type: ClassVar[type] = DepthModel
    solver_type: ClassVar[type] = DepthSolver
    tasks: ClassVar[Mapping[str, Builtin]] = TASKS
    size_options: ClassVar[Mapping[str, str]] = MappingProxyType(
        {
            "n": "samples",
            "p": "coordinates (depth_linear)",
            "depth": "layers L = 2 … 6 of a depth-L diagonal network (depth_linear, saxe_modes; default 3)",
        }
    )
    teacher_options: ClassVar[Mapping[str, str]] = MappingProxyType(
        {
            "singular_values": "the modes' strengths s (saxe_modes; default "
            + " ".join(f"{v:g}" for v in SAXE_STRENGTHS)
            + ")",
        }
    )
    pipeline: ClassVar[str | None] = "gradflow._depth._pipeline:PIPELINE"
    weights_column: ClassVar[str] = "beta"
    worst_columns: ClassVar[tuple[tuple[str, str], ...]] = (
        ("weights", "β"),
        ("b", "clocks c"),
        ("loss", "loss"),
        ("time", "stage time"),
    )

    def check_init(self, model, u0, v0):
        if v0 is not None:
            raise ValueError("a DepthModel takes its layers' directions as u0, shape (L, p); v0 is not taken.")
        return check_init(model, u0), None

    def flow(self, model, request, solver):
        return flow(model, request)

    def check_resolved(self, log_a, ts, *, rtol: float, atol: float, names=("alpha", "log_alpha")) -> None:
        check_resolved(log_a, ts, rtol=rtol, atol=atol, names=names)

    def check_path(self, model, path):
        check_coordinate_path(model, path, DepthGreedyPath, ("times", "beta", "b", "loss", "b_at", "support"))

    greedy = staticmethod(greedy)
    compare = staticmethod(compare)

    gd = staticmethod(gd)

    def time_unit(self, model, log_alpha) -> float:
        """``dτ/dt = α^{L−2}`` (``L ≥ 3``), ``1/log(1/α)`` (``L = 2``)."""
        return float(time_unit(model.depth, log_alpha))

    def describe_model(self, model) -> str:
        return f"p = {model.p}, n = {model.n}, depth L = {model.depth}"

    def first_stage_speed(self, model) -> float:
        return float(np.max(np.abs(np.asarray(_g(model, jnp.zeros(model.p))))))

    def describe_flow(self, flow, names) -> str:
        return f"final loss {float(np.asarray(flow.loss)[..., -1].max()):.6g}"

    def flow_figures(self, flows, model, *, title: str, folder: Path) -> list[Path]:
        files = [save_figure(plot_loss(flows, title=f"Loss of {title}"), folder / "loss.png")]
        figure = plot_coordinates(flows, model.names, title=f"β of {title}")
        return files + [save_figure(figure, folder / "beta.png")]

    def greedy_summary(self, path, names) -> str:
        return greedy_summary(path, names)

    result_types: ClassVar[tuple[type, ...]] = (DepthFlowResult, DepthGDResult, DepthGreedyPath, DepthComparison)
    convergence_labels: ClassVar[dict[str, str]] = LABELS

    def plot(self, quantity, runs, path, *, names, title):
        names = list(names) if names is not None else [str(i) for i in range(np.shape(runs[0].beta)[-1])]
        return plot_coordinates(runs, names, path=path, title=title, quantity=quantity)

    def comparison_report(self, comparison):
        return comparison_report(comparison)


DEPTH = DepthFamily()

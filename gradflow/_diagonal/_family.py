"""The family of models with diagonal weights, ``h(x; u ⊙ v)`` (paper Definition 3.1)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import numpy as np

from .._kit._checks import check_losses
from .._kit._family import ModelFamily, check_path_of
from .._kit._plots import save_figure
from ._checks import check_init
from ._compare import compare
from ._flow import flow, solve_sharded
from ._gd import gd
from ._greedy import greedy
from ._model import DiagonalModel, evaluate_g, evaluate_loss
from ._path import GreedyPath
from ._plots import coordinate_groups, plot_coordinates, plot_loss
from ._report import greedy_summary


class DiagonalFamily(ModelFamily):
    """Models with diagonal weights: a [`DiagonalModel`][gradflow.DiagonalModel], its exact flow in log
    coordinates, Algorithm 1 and their comparison."""

    name: ClassVar[str] = "diagonal"
    model_type: ClassVar[type] = DiagonalModel
    flow_options: ClassVar[tuple[str, ...]] = ("jacobian_rank",)

    def check_init(self, model, u0, v0):
        return check_init(u0, v0, model.p, model.names)

    def check_path(self, model, path):
        def shapes(path):
            return f"p = {np.shape(path.beta)[-1]} coordinates"

        fields = ("times", "beta", "b", "loss", "b_at")
        check_path_of(model, path, GreedyPath, fields, shapes, f"p = {model.p} coordinates")
        check_losses(path.loss, evaluate_loss(model, np.asarray(path.beta)), "path (at its stages)")

    flow = staticmethod(flow)
    gd = staticmethod(gd)
    greedy = staticmethod(greedy)
    compare = staticmethod(compare)

    def describe_model(self, model) -> str:
        return f"p = {model.p}, n = {model.n}"

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

    def solve_sharded(self, tasks, log_alphas, tss, **options):
        return solve_sharded(tasks, log_alphas, tss, **options)


DIAGONAL = DiagonalFamily()

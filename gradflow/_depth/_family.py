"""The family of depth-L diagonal networks, ``h(x; w_1 ⊙ ⋯ ⊙ w_L)`` (docs/depth.md)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import jax.numpy as jnp
import numpy as np

from .._family import ModelFamily
from .._greedy import check_path_of
from ._compare import compare
from ._flow import flow
from ._greedy import DepthGreedyPath, _g, greedy
from ._model import DepthModel, check_init


class DepthFamily(ModelFamily):
    """Depth-L diagonal networks: a [`DepthModel`][gradflow.DepthModel], its exact flow (clocks on plateaus,
    ``log a`` in jumps), the depth-L Algorithm 1 and their comparison."""

    name: ClassVar[str] = "depth"
    model_type: ClassVar[type] = DepthModel
    flow_options: ClassVar[tuple[str, ...]] = ()
    single_init: ClassVar[bool] = True  # the start is u0 alone: the layers' directions, shape (L, p)

    def check_init(self, model, u0, v0):
        if v0 is not None:
            raise ValueError("a DepthModel takes its layers' directions as u0, shape (L, p); v0 is not taken.")
        return check_init(model, u0), None

    def check_path(self, model, path):
        def shapes(path):
            return f"p = {np.shape(path.beta)[-1]} coordinates"

        check_path_of(
            model, path, DepthGreedyPath, ("times", "beta", "b", "loss"), shapes, f"p = {model.p} coordinates"
        )

    flow = staticmethod(flow)
    greedy = staticmethod(greedy)
    compare = staticmethod(compare)

    def gd(self, model, **options):
        raise NotImplementedError(
            "simulate_gd does not train DepthModels yet (docs/depth.md, *What is left*); simulate_flow is exact."
        )

    def describe_model(self, model) -> str:
        return f"p = {model.p}, n = {model.n}, depth L = {model.depth}"

    def first_stage_speed(self, model) -> float:
        return float(np.max(np.abs(np.asarray(_g(model, jnp.zeros(model.p))))))

    def describe_flow(self, flow, names) -> str:
        return f"final loss {float(np.asarray(flow.loss)[..., -1].max()):.6g}"

    def flow_figures(self, flows, model, *, title: str, folder: Path) -> list[Path]:
        raise NotImplementedError("the depth family has no figures yet (docs/depth.md, *What is left*).")

    def greedy_summary(self, path, names) -> str:
        lines = ["| k | T_k | activated | sign | loss |", "|---|---|---|---|---|"]
        for k in range(path.num_stages + 1):
            act = f"{names[path.coordinate[k - 1]]}" if k else "—"
            sign = f"{path.sign[k - 1]:+.0f}" if k else "—"
            lines.append(f"| {k} | {path.times[k]:.6g} | {act} | {sign} | {path.loss[k]:.6g} |")
        return "\n".join(lines)


DEPTH = DepthFamily()

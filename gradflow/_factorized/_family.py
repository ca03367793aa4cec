"""The family of models with full, factorised weights, ``h(x; (U_1 V_1ᵀ, …, U_K V_Kᵀ))``."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import jax
import numpy as np

from .._kit._checks import EPS, check_long_times, check_losses, check_tolerances
from .._kit._family import ModelFamily, check_path_of
from .._kit._plots import save_figure
from ._compare import compare, loss_of_weights
from ._flow import flow
from ._gd import gd
from ._greedy import greedy
from ._model import FactorizedModel, check_factors
from ._path import FactorizedGreedyPath
from ._plots import plot_log_scales, plot_spectra
from ._report import rank_greedy_summary


class FactorizedFamily(ModelFamily):
    """Models with factorised weights: a [`FactorizedModel`][gradflow.FactorizedModel], its exact flow (continuous
    QR), the greedy low-rank limit and their comparison."""

    name: ClassVar[str] = "factorized"
    model_type: ClassVar[type] = FactorizedModel
    flow_options: ClassVar[tuple[str, ...]] = ("solver",)

    def check_resolved(self, log_a, ts, *, rtol: float, atol: float, names=("alpha", "log_alpha")) -> None:
        """The leaps' range (docs/math.md, *Plateau leaps*: the range of α): the log scales reach ``ρ = 2 log α`` (a
        column shrunk to ``α²``), whose rounding ``2 |log α| 2⁻⁵²`` must stay within ``atol + 2 rtol |log α|``
        (``|log α| ≤ 2.25e7`` at ``atol = 1e-8``); and the output times of ``gradflow._checks.check_long_times``."""
        check_tolerances(rtol, atol)
        worst = 2.0 * float(np.max(-np.asarray(log_a, dtype=np.float64)))
        if worst * EPS > atol + rtol * worst:
            limit = "any" if rtol >= EPS else f"|log α| ≤ {atol / (2.0 * (EPS - rtol)):.4g}"
            raise ValueError(
                f"{names[1]} = {-worst / 2:.6g} is beyond what float64 resolves at atol = {atol:g}, rtol = {rtol:g}: "
                f"the log scales of the factors reach 2 log α, where float64's rounding ({worst * EPS:.3g}) exceeds "
                f"the tolerance ({atol + rtol * worst:.3g}). Supported at these tolerances: {limit}. Loosen atol or "
                "set rtol to go further."
            )
        check_long_times(log_a, ts)

    def check_init(self, model, u0, v0):
        return check_factors(u0, v0, model)

    def check_path(self, model, path):
        def shapes(path):
            return f"weight matrices {tuple(tuple(np.shape(w)[1:]) for w in path.W)}"

        fields = ("times", "W", "ranks", "factor", "loss", "stage_at", "b_at")
        check_path_of(model, path, FactorizedGreedyPath, fields, shapes, f"weight matrices {model.shapes}")
        at_stages = [loss_of_weights(model, tuple(w[k] for w in path.W)) for k in range(len(path.loss))]
        check_losses(path.loss, at_stages, "path (at its stages)")

    flow = staticmethod(flow)
    gd = staticmethod(gd)
    greedy = staticmethod(greedy)
    compare = staticmethod(compare)

    def describe_model(self, model) -> str:
        shapes = ", ".join(f"W_{n} {m}×{c}" for n, (m, c) in zip(model.names, model.shapes))
        return f"{shapes}, n = {model.n}"

    def first_stage_speed(self, model) -> float:
        with jax.enable_x64(True):
            G = model.G(tuple(np.zeros(s) for s in model.shapes))
            return max(float(np.linalg.norm(np.asarray(g), 2)) for g in G)

    def describe_flow(self, flow, names) -> str:
        top = "; ".join(
            f"{n} {np.round(np.exp(s[-1, :4]), 4).tolist()}" for n, s in zip(names, flow.log_singular_values)
        )
        return f"final loss {float(flow.loss[-1]):.6g}, singular values {top}"

    def flow_figures(self, flows, model, *, title: str, folder: Path) -> list[Path]:
        names = model.names
        order = figure2_order(names)
        return [
            save_figure(plot_spectra(flows, names=names, factors=order, title=title), folder / "spectra.png"),
            save_figure(plot_log_scales(flows, names=names, factors=order), folder / "log_scales.png"),
        ]

    def greedy_summary(self, path, names) -> str:
        return rank_greedy_summary(path, names)


def figure2_order(names) -> list[int]:
    """The weight matrices in the order of the paper's Figure 2 d–f (``VO`` then ``KQ``), else the model's."""
    names = list(names)
    return [names.index("VO"), names.index("KQ")] if set(names) == {"KQ", "VO"} else list(range(len(names)))


FACTORIZED = FactorizedFamily()

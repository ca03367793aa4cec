"""The family of models with full, factorised weights, ``h(x; (U_1 V_1ᵀ, …, U_K V_Kᵀ))``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import ClassVar

import jax
import numpy as np

from .._kit._checks import EPS, check_long_times, check_losses, check_tolerances
from .._kit._family import ModelFamily, check_path_of
from .._kit._plots import save_figure
from .._kit._task import NON_NEGATIVE, POSITIVE, SINGULAR_VALUES, Builtin
from ._compare import RankComparison, compare, loss_of_weights
from ._flow import flow
from ._gd import gd
from ._greedy import greedy
from ._model import FactorizedModel, check_factors
from ._options import FactorizedSolver
from ._path import FactorizedGreedyPath
from ._plots import LABELS, plot_log_scales, plot_spectra
from ._report import rank_comparison_json, rank_comparison_summary, rank_greedy_summary, rank_jump_rows
from ._results import FactorizedFlowResult, FactorizedGDResult
from ._tasks import ATTENTION_SINGULAR_VALUES, attention_full, matrix_factorization, matrix_sensing
from ._tasks import SINGULAR_VALUES as TEACHER_SINGULAR_VALUES

TASKS: Mapping[str, Builtin] = MappingProxyType(
    {
        "matrix_factorization": Builtin(
            matrix_factorization,
            ("m", "n"),
            "factorized",
            ("singular_values",),
            sweep=dict(m=POSITIVE, n=POSITIVE, singular_values=SINGULAR_VALUES),
        ),
        "matrix_sensing": Builtin(
            matrix_sensing,
            ("m", "n", "measurements"),
            "factorized",
            ("singular_values",),
            sweep=dict(
                m=POSITIVE, n=POSITIVE, measurements=POSITIVE, singular_values=SINGULAR_VALUES, noise=NON_NEGATIVE
            ),
        ),
        "attention_full": Builtin(
            attention_full,
            ("n", "tokens", "dim"),
            "factorized",
            ("teacher_kq", "teacher_vo"),
            sweep=dict(
                n=POSITIVE, tokens=POSITIVE, dim=POSITIVE, teacher_kq=SINGULAR_VALUES, teacher_vo=SINGULAR_VALUES
            ),
        ),
    }
)
"""The built-in tasks with full, factorised weights (a [`FactorizedModel`][gradflow.FactorizedModel]) by name."""


def _spaced(values) -> str:
    return " ".join(f"{v:g}" for v in values)


class FactorizedFamily(ModelFamily):
    """Models with factorised weights: a [`FactorizedModel`][gradflow.FactorizedModel], its exact flow (continuous
    QR), the greedy low-rank limit and their comparison."""

    name: ClassVar[str] = "factorized"
    model_type: ClassVar[type] = FactorizedModel
    solver_type: ClassVar[type] = FactorizedSolver
    tasks: ClassVar[Mapping[str, Builtin]] = TASKS
    size_options: ClassVar[Mapping[str, str]] = MappingProxyType(
        {
            "n": "columns of W (matrix_factorization, matrix_sensing)",
            "m": "rows of W (matrix_factorization, matrix_sensing)",
            "measurements": "measurements (matrix_sensing)",
            "tokens": "tokens per sample (attention, transformer)",
            "dim": "token dimension (attention, transformer)",
        }
    )
    teacher_options: ClassVar[Mapping[str, str]] = MappingProxyType(
        {
            "singular_values": "of the teacher matrix (matrix_factorization, matrix_sensing), at most min(m, n) of "
            f"them (default {_spaced(TEACHER_SINGULAR_VALUES)}, or its first min(m, n))",
            "teacher_kq": "of the teacher's W_KQ (attention_full), at most dim of them "
            f"(default {_spaced(ATTENTION_SINGULAR_VALUES)}, or its first dim)",
            "teacher_vo": "of the teacher's W_VO (attention_full), as --teacher-kq",
        }
    )
    pipeline: ClassVar[str | None] = "gradflow._factorized._pipeline:PIPELINE"
    weights_column: ClassVar[str] = "W"
    worst_columns: ClassVar[tuple[tuple[str, str], ...]] = (
        ("weights", "W"),
        ("b", "log scales b"),
        ("loss", "loss"),
        ("time", "rank jump"),
    )

    def check_resolved(self, log_a, ts, *, rtol: float, atol: float, names=("alpha", "log_alpha")) -> None:
        """The leaps' range (docs/math.md, *Plateau leaps*: the range of α): the log scales reach ``ρ = 2 log α`` (a
        column shrunk to ``α²``), whose rounding ``2 |log α| 2⁻⁵²`` must stay within ``atol + 2 rtol |log α|``
        (``|log α| ≤ 2.25e7`` at ``atol = 1e-8``); and the output times of ``gradflow._kit._checks.check_long_times``."""
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

        fields = ("times", "W", "ranks", "activated", "loss", "stage_at", "sleeping_at")
        check_path_of(model, path, FactorizedGreedyPath, fields, shapes, f"weight matrices {model.shapes}")
        at_stages = [loss_of_weights(model, tuple(w[k] for w in path.W)) for k in range(len(path.loss))]
        check_losses(path.loss, at_stages, "path (at its stages)")

    flow = staticmethod(flow)
    gd = staticmethod(gd)
    greedy = staticmethod(greedy)
    compare = staticmethod(compare)

    def describe_model(self, model) -> str:
        shapes = ", ".join(f"W_{n} ({m}×{c})" for n, (m, c) in zip(model.names, model.shapes))
        return f"weights {shapes}, n = {model.n} sample{'s' if model.n != 1 else ''}"

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

    def stage_rows(self, comparison):
        return rank_jump_rows(comparison)

    result_types: ClassVar[tuple[type, ...]] = (
        FactorizedFlowResult,
        FactorizedGDResult,
        FactorizedGreedyPath,
        RankComparison,
    )
    convergence_labels: ClassVar[dict[str, str]] = LABELS

    def plot(self, quantity, runs, path, *, names, title):
        names = list(names) if names is not None else [str(j) for j in range(len(runs[0].W))]
        order = figure2_order(names)
        if quantity == "weights":
            return plot_spectra(runs, path, names=names, factors=order, title=title, loss=False)
        figure = plot_log_scales(runs, path, names=names, factors=order)
        if title:
            figure.suptitle(title)
        return figure

    def comparison_report(self, comparison):
        path = comparison.path
        text = "## Greedy low-rank limit and its diagnostics\n\n" + rank_greedy_summary(path, comparison.names)
        text += "\n## Comparison with the flows\n\n" + rank_comparison_summary(comparison)
        return text, rank_comparison_json(comparison, path)


def figure2_order(names) -> list[int]:
    """The weight matrices in the order of the paper's Figure 2 d–f (``VO`` then ``KQ``), else the model's."""
    names = list(names)
    return [names.index("VO"), names.index("KQ")] if set(names) == {"KQ", "VO"} else list(range(len(names)))


FACTORIZED = FactorizedFamily()

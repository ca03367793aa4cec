"""Results on disk and reports, for any model family: ``gradflow.save``, ``gradflow.load`` and ``gradflow.report``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from . import plot
from ._io import FORMAT, FORMAT_VERSION, load_result, save_result, write_csv, write_json
from ._kit._comparison import AbstractComparison
from ._kit._report import format_alpha, worst_exponents
from ._registry import family_of_result


def save(result: Any, path: str | os.PathLike) -> Path:
    """Write a result (a flow, a gradient descent, a greedy path or a comparison with the runs it keeps; batched
    or not) to ``path``, a ``.npz`` file, atomically, with the file format's version. Returns the path."""
    return save_result(path, result)


def load(path: str | os.PathLike) -> Any:
    """Read a result written by :func:`save` (or by the command line), the same object as was saved.

    Raises:
        ValueError: the file was written by a newer gradflow (a later format version), or holds a class whose
            fields this version does not know.
    """
    with np.load(Path(path), allow_pickle=False) as data:
        version = int(data[FORMAT]) if FORMAT in data.files else 1
    if version > FORMAT_VERSION:
        raise ValueError(
            f"{path} is in gradflow's file format {version}, written by a newer gradflow; this one reads formats up "
            f"to {FORMAT_VERSION}: upgrade gradflow."
        )
    return load_result(path)


FIGURES = ("loss", "weights", "b", "convergence")
"""The figures :func:`report` draws, by file name (``figures/<name>.png``)."""


def report(comparison: AbstractComparison, folder: str | os.PathLike, *, title: str = "") -> Path:
    """Write what ``gradflow compare`` writes for a comparison of any model, from the comparison alone (the runs and
    the greedy limit it keeps; nothing is solved again) into ``folder``::

        comparison.csv, comparison.json   the distances per α and window, the rates, the greedy stages
        figures/{loss,weights,b,convergence}.png
        report.md                          the greedy limit and its checks, the stage times, the distance tables

    Returns the path of ``report.md``.
    """
    if not isinstance(comparison, AbstractComparison):
        raise TypeError(f"report takes a comparison from compare_limits; got {type(comparison).__name__}.")
    if comparison.path is None or comparison.runs is None:
        raise ValueError("this comparison holds no runs or greedy limit (made by gradflow before 0.2): recompute it.")
    family = family_of_result(comparison)
    folder = Path(folder)
    body, json = family.comparison_report(comparison)
    write_csv(folder / "comparison.csv", comparison.to_records())
    write_json(folder / "comparison.json", json)
    figures = {
        "loss": plot.loss(comparison, title=f"Loss{': ' + title if title else ''}"),
        "weights": plot.weights(comparison, title=title),
        "b": plot.b(comparison, title=title),
        "convergence": plot.convergence(comparison),
    }
    for name, figure in figures.items():
        plot.save(figure, folder / "figures" / f"{name}.png")
    text = f"# gradflow comparison{': ' + title if title else ''}\n\n" + _summary(comparison, json["detection"]) + body
    text += "\n## Figures\n\n" + "".join(f"![{name}](figures/{name}.png)\n\n" for name in figures)
    path = folder / "report.md"
    path.write_text(text)
    return path


def _summary(comparison: AbstractComparison, detection: str) -> str:
    """The runs, the windows, how the stage times were ``detection``-ed and the rates, in words."""
    alphas = ", ".join(format_alpha(la) for la in comparison.log_alpha)
    horizon = float(comparison.window_end[-1])
    text = (
        f"Runs ({comparison.method}) at α ∈ {{{alphas}}} up to rescaled time τ = {horizon:.4g}, against the greedy "
        f"limit with {comparison.stage_times.size - 1} stages. Windows are [T_k + δ, T_{{k+1}} − δ] with "
        f"δ = {comparison.delta:.4g}; a stage time is detected on a run at the {detection} (threshold = "
        f"{comparison.threshold:g}). Rates: least-squares fit of log d = c − r log log(1/α).\n\n"
    )
    if comparison.message:
        text += f"**{comparison.result}**: {comparison.message}.\n\n"
    return text + worst_exponents(comparison) + "\n\n"

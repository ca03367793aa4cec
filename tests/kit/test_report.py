"""Text reports that every family shares (gradflow/_kit/_report.py): scales and numbers as text, Markdown tables, a
greedy path's end, the stage-time table and the end of a pipeline's report."""

import dataclasses
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from gradflow._kit._report import (
    figures_and_runtime,
    flags,
    fmt,
    format_alpha,
    markdown_table,
    path_summary,
    stage_time_rows,
)


def test_format_alpha():
    assert format_alpha(math.log(0.1)) == "0.1"
    assert format_alpha(math.log(1e-32)) == "1e-32"
    assert format_alpha(math.log(2.5e-300)) == "2.5e-300"
    assert format_alpha(-1.0) == "0.368"
    assert format_alpha(-700.0) == "9.86e-305"  # a normal float64 number: written as one
    # below float64's normal range (≈ e^-708.4) no float64 number is α: log α itself, never "5.08e-435"
    assert format_alpha(-745.0) == "e^-745"
    assert format_alpha(-1000.0) == "e^-1000"
    assert format_alpha(-10000.0) == "e^-10000"
    assert format_alpha(-1000.5) == "e^-1000.5"


def test_numbers_and_tables():
    assert [fmt(x) for x in (None, True, np.False_, np.int64(3), math.nan, 1 / 3)] == [
        "–",
        "yes",
        "**no**",
        "3",
        "–",
        "0.3333",
    ]
    assert markdown_table(["a", "b|c"], [[1.23456, None], ["x|y", 2]]) == (
        "| a | b\\|c |\n|---|---|\n| 1.235 | – |\n| x\\|y | 2 |\n"
    )
    assert flags(("4.2", "4.3"), [True, False], ran=(True, False)) == "4.2 ✓, 4.3 not run"
    path = SimpleNamespace(message="the gradient vanishes", warnings=("a tie",))
    text = path_summary(path, ["k"], [[0]])
    assert text.endswith("\nThe path ends with: the gradient vanishes.\n\nWarnings:\n\n- a tie\n")
    quiet = SimpleNamespace(message="", result="successful", warnings=())  # no message: the result's name
    assert path_summary(quiet, ["k"], [[0]]).endswith("\nThe path ends with: successful.\n")


def test_stage_time_rows():
    comparison = SimpleNamespace(
        log_alpha=np.array([math.log(1e-16)]), stage_times=np.array([0.0, 1.5]), detected_times=np.array([[1.49]])
    )
    assert stage_time_rows(comparison) == (["k", "greedy T_k", "α = 1e-16"], [[1, 1.5, 1.49]])


@dataclasses.dataclass(frozen=True)
class _Config:
    n: int = 3


def test_figures_and_runtime():
    text = figures_and_runtime([Path("figures/loss.png")], {"greedy": (1.5, "computed")}, _Config())
    assert text.startswith("![loss](figures/loss.png)\n\n## Runtime\n\n| step | seconds |  |\n")
    assert "| greedy | 1.5 | computed |" in text and text.endswith("\nConfiguration: `{'n': 3}`\n")

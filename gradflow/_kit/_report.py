"""Text reports that every family shares: numbers and scales as text, Markdown tables, a greedy path's table with
its end, the distance tables of a comparison, the JSON summary and the end of a demo's report.

Everything printed is computed from the results passed in; nothing is hard-coded.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from ._comparison import AbstractComparison, fit_rates

_LOG_TINY = math.log(float(np.finfo(np.float64).tiny))  # log of float64's smallest normal number, ≈ −708.4


def format_alpha(log_alpha: float) -> str:
    """``α`` from ``log α`` as short text: ``0.01``, ``1e-32``, ``2.5e-300``; below float64's normal range, where no
    float64 number is ``α``, as ``e^-1000`` (``log α`` itself)."""
    if log_alpha < _LOG_TINY:
        return f"e^{log_alpha:.6g}"
    e10 = log_alpha / math.log(10.0)
    if e10 >= -3:
        return f"{math.exp(log_alpha):.3g}"
    exponent = math.floor(e10 + 1e-9)
    mantissa = 10 ** (e10 - exponent)
    return f"1e{exponent}" if abs(mantissa - 1) < 1e-6 else f"{mantissa:.3g}e{exponent}"


def fmt(x: Any, spec: str = ".4g") -> str:
    if x is None:
        return "–"
    if isinstance(x, (bool, np.bool_)):
        return "yes" if x else "**no**"
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    x = float(x)
    if math.isnan(x):
        return "–"
    return format(x, spec)


def markdown_table(header: list[str], rows: list[list[Any]]) -> str:
    """A Markdown table; numbers to 4 significant digits, NaN and None as ``–``."""
    cell = lambda c: (c if isinstance(c, str) else fmt(c)).replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def flags(names, ok, ran) -> str:
    """✓/✗ per check (``names``, the columns of a path's ``assumptions_ok``); "not run" where the path holds no number
    for that check (``check_assumptions=False``)."""
    return ", ".join(
        f"{name} {('✓' if flag else '✗') if done else 'not run'}"
        for name, flag, done in zip(names, np.atleast_1d(ok), ran)
    )


def path_summary(path, header: list[str], rows: list[list[Any]]) -> str:
    """A greedy path's table (``header``, ``rows``) as Markdown, with the path's end reason and warnings."""
    text = markdown_table(header, rows)
    text += f"\nThe path ends with: {str(path.message) or str(path.result)}.\n"  # a message, or the result's name
    warnings = list(path.warnings)
    if warnings:
        text += "\nWarnings:\n\n" + "".join(f"- {w}\n" for w in warnings)
    return text


def stage_time_rows(comparison: AbstractComparison) -> tuple[list[str], list[list[Any]]]:
    """Greedy ``T_k`` against the stage times detected on every run."""
    header = ["k", "greedy T_k"] + [f"α = {format_alpha(la)}" for la in comparison.log_alpha]
    rows = [
        [k, float(comparison.stage_times[k])] + list(comparison.detected_times[:, k - 1])
        for k in range(1, comparison.stage_times.size)
    ]
    return header, rows


def distance_rows(comparison: AbstractComparison, quantity: str) -> tuple[list[str], list[list[Any]]]:
    """Sup distance per window (columns; the largest over the weight matrices, if any) and α (rows), with the fitted
    exponent per window."""
    d = comparison.per_window(quantity)
    first = 1 if quantity == "time" else 0
    header = ["α"] + [f"k = {k + first}" for k in range(d.shape[1])] + ["worst"]
    rows = [
        [format_alpha(la)] + list(d[a]) + [comparison.worst(quantity)[a]] for a, la in enumerate(comparison.log_alpha)
    ]
    used = comparison.fitted()
    rows.append(["fitted r"] + list(fit_rates(comparison.log_alpha[used], d[used])) + [comparison.summary()[quantity]])
    return header, rows


def distance_tables(comparison: AbstractComparison, labels: dict[str, str]) -> str:
    """:func:`distance_rows` of every quantity as Markdown, each under the heading ``method: label``."""
    return "".join(
        f"\n### {comparison.method}: {label}\n\n" + markdown_table(*distance_rows(comparison, q))
        for q, label in labels.items()
    )


def json_summary(comparison: AbstractComparison, path, greedy: tuple, *, detection: str) -> dict[str, Any]:
    """Everything in a comparison, as JSON-ready data: records, rates, the greedy stages (``greedy``: the header
    and rows of the path's table) and how the stage times were detected (``detection``)."""
    header, rows = greedy
    return dict(
        threshold=comparison.threshold,
        delta=comparison.delta,
        detection=detection,
        rate_model="d ≈ C · log(1/α)^(−r), least squares of log d on log log(1/α)",
        fit_range=dict(log_alpha=[float(x) for x in comparison.fit_range], scales=comparison.fit_description()),
        records=comparison.to_records(),
        rates=comparison.rate_records(),
        greedy=[dict(zip(header, row)) for row in rows],
        result=comparison.result,  # as the API's comparison says (e.g. "single_scale" for one α)
        message=comparison.message,
        greedy_result=path.result,
        greedy_message=path.message,
    )


def worst_exponents(comparison: AbstractComparison) -> str:
    """The fitted exponents of the worst-window distances, as a sentence."""
    summary = comparison.summary()
    rates = ", ".join(f"{comparison.table_name(q)}: {fmt(r, '.3g')}" for q, r in summary.items())
    return f"Worst-window fitted exponents r: {rates} (fitted over {comparison.fit_description()})."


def figures_and_runtime(figures, timings: dict[str, tuple[float, str]], config) -> str:
    """The report's end: the figures, the runtime of each step and the configuration."""
    text = "".join(f"![{f.stem}]({f.as_posix()})\n\n" for f in figures)
    text += "## Runtime\n\n" + markdown_table(
        ["step", "seconds", ""], [[k, t, what] for k, (t, what) in timings.items()]
    )
    return text + f"\nConfiguration: `{dataclasses.asdict(config)}`\n"

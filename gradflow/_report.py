"""Text reports: the greedy stage table, the comparison tables, the demo's Markdown report.

Everything printed is computed from the results passed in; nothing is hard-coded.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from ._compare import Comparison
from ._comparison import AbstractComparison, fit_rates
from ._experiments import Perturbation


def format_alpha(log_alpha: float) -> str:
    """``α`` from ``log α`` as short text: ``0.01``, ``1e-32``, ``2.5e-300``, ``1e-4343`` (beyond float64)."""
    e10 = log_alpha / math.log(10.0)
    if e10 >= -3:
        return f"{math.exp(log_alpha):.3g}"
    exponent = math.floor(e10 + 1e-9)
    mantissa = 10 ** (e10 - exponent)
    return f"1e{exponent}" if abs(mantissa - 1) < 1e-6 else f"{mantissa:.3g}e{exponent}"


def _fmt(x: Any, spec: str = ".4g") -> str:
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
    cell = lambda c: (c if isinstance(c, str) else _fmt(c)).replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _flags(ok, ran=(True, True, True)) -> str:
    """✓/✗ per assumption; "not run" where the path holds no number for that check (``check_assumptions=False``)."""
    return ", ".join(
        f"{name} {('✓' if flag else '✗') if done else 'not run'}"
        for name, flag, done in zip(("4.2", "4.3", "4.4"), np.atleast_1d(ok), ran)
    )


def greedy_rows(path, names) -> tuple[list[str], list[list[Any]]]:
    """One row per plateau ``k``: ``T_k``, the coordinate activated at ``T_k``, ``L(θ^k)``, and the checks.

    The Δ gap, runner-up, perturbation spread and ε discrepancy are those of the transition into
    stage ``k``; the Hessian is at ``θ^k``; the flags are those the path records for row ``k``.
    """
    K = np.asarray(path.times).size - 1
    header = [
        "k",
        "T_k",
        "coordinate i_k",
        "v sign",
        "L(θ^k)",
        "|S_k|",
        "Δ gap to runner-up",
        "runner-up",
        "Hessian min eig",
        "perturbation spread",
        "ε discrepancy",
        "assumptions",
    ]
    support = np.asarray(path.support)
    rows: list[list[Any]] = []
    for k in range(K + 1):
        row: list[Any] = [k, float(path.times[k])]
        if k == 0:
            row += ["–", "–", float(path.loss[0]), int(support[0].sum()), None, "–"]
        else:
            runner = int(path.runner_up[k - 1])
            row += [
                names[int(path.coordinate[k - 1])],
                "= sign u" if path.sign[k - 1] else "= −sign u",
                float(path.loss[k]),
                int(support[k].sum()),
                float(path.delta_gap[k - 1]),
                names[runner] if runner >= 0 else "–",
            ]
        row += [
            float(path.hessian_min_eig[k]),
            float(path.perturbation_spread[k - 1]) if k else None,
            float(path.epsilon_discrepancy[k - 1]) if k else None,
            _flags(
                path.assumptions_ok[k],
                ran=(
                    True,
                    not np.isnan(path.hessian_min_eig[k]),
                    k == 0 or not np.isnan(path.perturbation_spread[k - 1]),
                ),
            ),
        ]
        rows.append(row)
    return header, rows


def greedy_summary(path, names) -> str:
    """The greedy path as a Markdown table, with its end reason and warnings."""
    return path_summary(path, *greedy_rows(path, names))


def path_summary(path, header: list[str], rows: list[list[Any]]) -> str:
    """A greedy path's table (``header``, ``rows``) as Markdown, with the path's end reason and warnings."""
    text = markdown_table(header, rows)
    text += f"\nThe path ends with: {path.message}.\n"
    warnings = list(path.warnings)
    if warnings:
        text += "\nWarnings:\n\n" + "".join(f"- {w}\n" for w in warnings)
    return text


def stage_time_rows(comparison: Comparison) -> tuple[list[str], list[list[Any]]]:
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
    rows.append(["fitted r"] + list(fit_rates(comparison.log_alpha, d)) + [comparison.summary()[quantity]])
    return header, rows


def distance_tables(comparison: AbstractComparison, labels: dict[str, str]) -> str:
    """:func:`distance_rows` of every quantity as Markdown, each under the heading ``method: label``."""
    return "".join(
        f"\n### {comparison.method}: {label}\n\n" + markdown_table(*distance_rows(comparison, q))
        for q, label in labels.items()
    )


def comparison_json(comparison: Comparison, path, names) -> dict[str, Any]:
    """Everything in the comparison, as JSON-ready data: records, rates, greedy stages."""
    detection = "first τ where the loss has covered `threshold` of the drop L(θ^{k-1}) → L(θ^k)"
    return json_summary(comparison, path, greedy_rows(path, names), detection=detection)


def json_summary(comparison: AbstractComparison, path, greedy: tuple, *, detection: str) -> dict[str, Any]:
    """Everything in a comparison, as JSON-ready data: records, rates, the greedy stages (``greedy``: the header
    and rows of the path's table) and how the stage times were detected (``detection``)."""
    header, rows = greedy
    return dict(
        threshold=comparison.threshold,
        delta=comparison.delta,
        detection=detection,
        rate_model="d ≈ C · log(1/α)^(−r), least squares of log d on log log(1/α)",
        records=comparison.to_records(),
        rates=comparison.rate_records(),
        greedy=[dict(zip(header, row)) for row in rows],
        result=path.result,
        message=path.message,
    )


_LABELS = {
    "beta": "sup over the window of max_i |β_i(τ) − β^k_i|",
    "b": "sup over the window of max_i |b_i(τ) − (b^k_i − (τ − T_k) g_i(θ^k))|",
    "loss": "sup over the window of |L(τ) − L(θ^k)|",
    "time": "|detected stage time − T_k|",
}


def comparison_summary(comparison: Comparison) -> str:
    """Stage times and the distance tables as Markdown (used by the CLI and the report)."""
    text = "### Stage times: greedy T_k and detected on each flow\n\n" + markdown_table(*stage_time_rows(comparison))
    for comp in (comparison, comparison.gd):
        if comp is not None:
            text += distance_tables(comp, _LABELS)
    return text


def worst_exponents(comparison: AbstractComparison) -> str:
    """The fitted exponents of the worst-window distances, as a sentence."""
    summary = comparison.summary()
    return "Worst-window fitted exponents r: " + ", ".join(f"{q}: {_fmt(r, '.3g')}" for q, r in summary.items()) + "."


def figures_and_runtime(figures, timings: dict[str, tuple[float, str]], config) -> str:
    """The report's end: the figures, the runtime of each step and the configuration."""
    text = "".join(f"![{f.stem}]({f.as_posix()})\n\n" for f in figures)
    text += "## Runtime\n\n" + markdown_table(
        ["step", "seconds", ""], [[k, t, what] for k, (t, what) in timings.items()]
    )
    return text + f"\nConfiguration: `{dataclasses.asdict(config)}`\n"


def perturbation_rows(perturbations: dict[str, Perturbation], names) -> tuple[list[str], list[list[Any]]]:
    header = ["experiment", "τ_s", "noise std", "perturbed coordinates", "max |Δβ| at τ_s", "max |Δβ| at the end"]
    rows = []
    for kind, pert in perturbations.items():
        for j, t in enumerate(pert.start_times):
            coords = [names[i] for i in np.flatnonzero(pert.perturbed[j])]
            shown = ", ".join(coords[:6]) + (f" (+{len(coords) - 6})" if len(coords) > 6 else "")
            rows.append([kind, float(t), pert.std, shown or "none", pert.initial_deviation[j], pert.final_deviation[j]])
    return header, rows


def demo_report(
    *, config, task, path, comparison: Comparison, perturbations, drawn, perturbed, timings, figures, key: str
) -> str:
    """The demo's Markdown report."""
    names = task.model.names
    K = np.asarray(path.times).size - 1
    alphas = ", ".join(format_alpha(la) for la in comparison.log_alpha)
    horizon = float(comparison.window_end[-1])
    options = ", ".join(f"{k}={v}" for k, v in dict(task.config).items())
    text = f"# gradflow demo: {task.name}\n\n"
    text += (
        f"Model `{task.name}` ({options}); p = {task.model.p} coordinates, n = {task.model.n} samples. "
        f"Flows at α ∈ {{{alphas}}} up to rescaled time τ = {horizon:.4g}, tolerances rtol = {config.rtol:g}, "
        f"atol = {config.atol:g}; greedy limit with {K} stages. Configuration hash `{key}`.\n\n"
    )
    text += "## Greedy limit (Algorithm 1) and the assumption checks\n\n" + greedy_summary(path, names)
    if not config.check_assumptions:
        text += (
            "\nThe Hessian (4.3) and perturbed phase-(B) (4.4) checks were not run (`check_assumptions=False`); "
            "their flags read ✓ by convention.\n"
        )
    text += (
        f"\n## Comparison with the flows\n\nWindows are [T_k + δ, T_{{k+1}} − δ] with δ = {comparison.delta:.4g} "
        f"(the last window ends at τ = {horizon:.4g}). A stage time is detected on a flow at the first τ where "
        f"its loss has covered {comparison.threshold:g} of the drop between consecutive greedy plateaus "
        "L(θ^{k−1}) → L(θ^k). Rates: least-squares fit of log d = c − r log log(1/α), i.e. "
        "d ≈ C·log(1/α)^(−r); the theory suggests r ≈ 1 for b and the stage times.\n\n"
    )
    span = -np.asarray(comparison.log_alpha, dtype=np.float64)
    text += (
        f"The fits span log(1/α) from {span.min():.4g} to {span.max():.4g} "
        f"({math.log10(span.max() / span.min()):.2g} decades). " + worst_exponents(comparison) + "\n\n"
    )
    text += comparison_summary(comparison)
    if perturbations:
        a = format_alpha(perturbed)
        text += (
            f"\n## Perturb-and-continue checks (paper appendix A) at α = {a}\n\nAt each start time τ_s every "
            f"weight u_i, v_i of magnitude above {config.negligible:g} gets N(0, std²) noise and the flow "
            "continues; the table gives the largest deviation max_i |β_i − β_i(unperturbed)| right after the "
            "perturbation and at the end of the continued run. Random times (Figure 9, Assumption 4.3) and "
            "stage starts, where some weight first exceeds the threshold (Figure 10, Assumption 4.4).\n\n"
        )
        text += markdown_table(*perturbation_rows(perturbations, names))
    text += (
        "\n## Figures\n\nThe per-α figures draw the flows at α ∈ {"
        + ", ".join(format_alpha(la) for la in drawn)
        + "}; the convergence figure and the tables above use every α.\n\n"
    )
    return text + figures_and_runtime(figures, timings, config)

"""The perturb-and-continue checks around a diagonal flow: the paper's appendix A check of Assumptions 4.3 and 4.4
on trajectories (Figures 9 and 10), their table and their figure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import equinox as eqx
import numpy as np

from .._api import simulate_flow
from .._kit._plots import colour_map, new_figure
from .._kit._report import format_alpha

if TYPE_CHECKING:
    from matplotlib.figure import Figure


class Perturbation(eqx.Module):
    """Perturb-and-continue runs from states of one flow (paper appendix A, Figures 9 and 10).

    At each start time the weights ``u_i, v_i`` of magnitude above ``threshold`` get independent
    N(0, std²) noise and the flow continues from there at the same α; ``beta`` is the perturbed
    run and ``reference_beta`` the unperturbed flow at the same times.

    Attributes:
        kind: ``"plateau"`` (random times, Assumption 4.3) or ``"stage"`` (stage starts, 4.4).
        std, threshold, log_alpha: the noise, the negligibility threshold, the flow's ``log α``.
        start_times: ``(P,)``.
        ts: ``(P, m)`` continuation times (NaN-padded).
        beta, reference_beta: ``(P, m, p)``.
        perturbed: ``(P, p)`` the coordinates with a perturbed weight.
        initial_deviation, final_deviation: ``(P,)`` ``max_i |β_i − β_i^ref|`` at the start and at the last
            recorded time of the window ``[τ, τ + span]``.
    """

    kind: str = eqx.field(static=True)
    std: float
    threshold: float
    log_alpha: float
    start_times: np.ndarray
    ts: np.ndarray
    beta: np.ndarray
    reference_beta: np.ndarray
    perturbed: np.ndarray
    initial_deviation: np.ndarray
    final_deviation: np.ndarray


def _single(flow) -> tuple[float, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(log α, ts, u, v, β)`` of a flow result holding a single α."""
    u, v, beta = np.asarray(flow.u), np.asarray(flow.v), np.asarray(flow.beta)
    log_alpha = np.atleast_1d(np.asarray(flow.log_alpha, dtype=np.float64))
    if u.ndim != 2 or log_alpha.size != 1:
        raise ValueError("perturbation experiments need the flow of a single alpha.")
    return float(log_alpha[0]), np.asarray(flow.ts, dtype=np.float64), u, v, beta


def plateau_starts(flow, *, num: int, span: float, seed: int = 0) -> np.ndarray:
    """``num`` distinct random recorded-time indices (sorted), each leaving ``span`` of recorded time after it.

    Each index is drawn with probability proportional to the stretch of time it stands for (half the gaps to
    its neighbours), so the times are uniform in τ even where the recorded times cluster (around stage times).
    """
    ts = np.asarray(flow.ts, dtype=np.float64)
    last = int(np.searchsorted(ts, ts[-1] - span, side="right"))
    if last < num:
        raise ValueError(f"the flow records {last} times before its last {span:g} of rescaled time; need {num}.")
    if last == num:
        return np.arange(num)
    rng = np.random.default_rng(seed)
    idx = np.arange(1, last)
    weight = 0.5 * (ts[np.minimum(idx + 1, ts.size - 1)] - ts[idx - 1])
    return np.sort(rng.choice(idx, size=num, replace=False, p=weight / weight.sum()))


def stage_starts(flow, *, threshold: float) -> np.ndarray:
    """Recorded-time indices where some coordinate's weight first exceeds ``threshold`` in magnitude."""
    _, _, u, v, _ = _single(flow)
    big = np.maximum(np.abs(u), np.abs(v)) > threshold
    new = big[1:] & ~big[:-1]
    return np.flatnonzero(np.any(new, axis=1)) + 1


def perturb_and_continue(
    model,
    flow,
    *,
    starts,
    std: float,
    span: float,
    kind: str,
    threshold: float = 1e-5,
    seed: int = 0,
    flow_options: Mapping[str, Any] | None = None,
) -> Perturbation:
    """Perturb the non-negligible weights of ``flow`` at the recorded-time indices ``starts`` and continue.

    At start ``s`` every ``u_i`` (and ``v_i``) with ``|u_i| > threshold`` gets N(0, std²) noise; the run
    continues from the exact state ``flow.state_at(s).perturbed(du, dv)`` (see
    [`FlowState.perturbed`][gradflow.FlowState.perturbed]), so unperturbed coordinates keep their exact
    ``log w, log w̄`` at every α, including α below the float64 range. Each run continues over the
    flow's recorded times in ``[τ, τ + span]``, so the unperturbed reference is the flow itself, and
    ``final_deviation`` is the deviation at the window's last recorded time. Every run is padded with later
    times (solved, then dropped: NaN in the result) to as many times as the flow's longest such window holds,
    so that all runs, of this call and of later calls on the same flow and span, have one shape and the solver
    compiles once. ``flow_options`` go to ``simulate_flow``.
    """
    log_alpha, ts, u, v, beta = _single(flow)
    starts = np.asarray(starts)
    if (
        starts.ndim != 1
        or starts.size == 0
        or starts.dtype.kind not in "iu"
        or np.any((starts < 0) | (starts >= ts.size))
    ):
        raise ValueError(
            f"starts must be a non-empty 1-D array of recorded-time indices in [0, {ts.size}); got {starts!r}."
        )
    rng = np.random.default_rng(seed)
    # every run gets as many times as the flow's longest window of length span holds: the same shapes
    # for every start and every call on this flow (one compilation of the solver)
    m = int(np.max(np.searchsorted(ts, ts + span, side="right") - np.arange(ts.size)))
    step = np.ptp(ts) / max(ts.size - 1, 1)  # the padding's spacing
    P, p = starts.size, u.shape[1]
    out_ts = np.full((P, m), np.nan)
    out_beta = np.full((P, m, p), np.nan)
    ref_beta = np.full((P, m, p), np.nan)
    perturbed = np.zeros((P, p), dtype=bool)
    n_last = np.zeros(P, dtype=int)
    for j, s in enumerate(starts):
        idx = np.arange(s, np.searchsorted(ts, ts[s] + span, side="right"))  # the window [τ, τ + span]
        rel = ts[idx] - ts[s]
        rel = np.append(rel, rel[-1] + step * np.arange(1, m - idx.size + 1))
        mask_u, mask_v = np.abs(u[s]) > threshold, np.abs(v[s]) > threshold
        du = std * rng.standard_normal(p) * mask_u
        dv = std * rng.standard_normal(p) * mask_v
        start = flow.state_at(int(s)).perturbed(du, dv)
        res = simulate_flow(model, start=start, log_alpha=log_alpha, ts=rel, **dict(flow_options or {}))
        out_ts[j, : idx.size] = ts[idx]
        out_beta[j, : idx.size] = np.asarray(res.beta)[: idx.size]
        ref_beta[j, : idx.size] = beta[idx]
        perturbed[j] = mask_u | mask_v
        n_last[j] = idx.size - 1
    dev = np.max(np.abs(out_beta - ref_beta), axis=-1)
    return Perturbation(
        kind=kind,
        std=float(std),
        threshold=float(threshold),
        log_alpha=log_alpha,
        start_times=ts[starts],
        ts=out_ts,
        beta=out_beta,
        reference_beta=ref_beta,
        perturbed=perturbed,
        initial_deviation=dev[:, 0],
        final_deviation=dev[np.arange(P), n_last],
    )


def perturbation_rows(perturbations: dict[str, Perturbation], names) -> tuple[list[str], list[list[Any]]]:
    """One row per perturbed run: its experiment, start time, noise, perturbed coordinates and deviations."""
    header = ["experiment", "τ_s", "noise std", "perturbed coordinates", "max |Δβ| at τ_s", "max |Δβ| at the end"]
    rows = []
    for kind, pert in perturbations.items():
        for j, t in enumerate(pert.start_times):
            coords = [names[i] for i in np.flatnonzero(pert.perturbed[j])]
            shown = ", ".join(coords[:6]) + (f" (+{len(coords) - 6})" if len(coords) > 6 else "")
            rows.append([kind, float(t), pert.std, shown or "none", pert.initial_deviation[j], pert.final_deviation[j]])
    return header, rows


def plot_perturbation(pert: Perturbation, flow, names, groups: dict[str, np.ndarray], *, title: str) -> Figure:
    """Perturbed (solid) against unperturbed (dashed) trajectories, one colour per coordinate (Figures 9–10)."""
    fig = new_figure(figsize=(7, 3.6 * len(groups)))
    shown = np.any(pert.perturbed, axis=0)
    cmap = colour_map("tab10")
    for g, (part, idx) in enumerate(groups.items()):
        ax = fig.add_subplot(len(groups), 1, g + 1)
        idx = np.asarray(idx)[shown[np.asarray(idx)]]
        for c, i in enumerate(idx):
            colour = cmap(c % 10)
            ax.plot(flow.ts, np.asarray(flow.beta)[:, i], color=colour, ls="--", lw=1.0)
            for j in range(pert.ts.shape[0]):
                ax.plot(pert.ts[j], pert.beta[j, :, i], color=colour, lw=1.4, label=names[i] if j == 0 else None)
        for t in pert.start_times:
            ax.axvline(t, color="grey", lw=0.5, alpha=0.6)
        ax.set_ylabel(f"β ({part})" if part != "all" else "β")
        ax.set_title(title if g == 0 else None)
        if idx.size:
            ax.legend(fontsize=7, ncol=min(4, idx.size), loc="best")
    ax.set_xlabel(f"rescaled time τ (α = {format_alpha(pert.log_alpha)}; perturbed: solid, unperturbed: dashed)")
    return fig

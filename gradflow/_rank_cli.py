"""The command line for the built-in tasks with full weights (``gradflow flow/greedy/compare --model attention_full``,
``gradflow demo --full-weights``); ``gradflow._cli`` parses the arguments and calls these."""

from __future__ import annotations

import time
from pathlib import Path

import jax
import numpy as np

from ._flow import simulate_flow
from ._greedy import greedy_limit
from ._io import save_result
from ._plots import save_figure
from ._rank_demo import QUICK_FULL, RankDemoConfig, figure2_order, run_rank_demo
from ._rank_plots import plot_log_scales, plot_spectra
from ._rank_report import rank_greedy_summary, rank_jump_rows
from ._report import format_alpha, markdown_table


def first_stage_speed(model) -> float:
    """``max_j σ_1(G_j(0))``: ``1 / T_1``, the speed of the first rank jump."""
    with jax.enable_x64(True):
        G = model.G(tuple(np.zeros(s) for s in model.shapes))
        return max(float(np.linalg.norm(np.asarray(g), 2)) for g in G)


def flow(config: RankDemoConfig, *, tau_max, num_times: int, out: str) -> int:
    """``gradflow flow`` for a factorised task: the exact flow at every α, saved, with the spectra and log scales."""
    task = config.task()
    speed = first_stage_speed(task.model)
    if tau_max is None and speed == 0:
        raise ValueError("G(0) = 0: the flow from small initialisation does not move; give --tau-max")
    tau_max = tau_max if tau_max is not None else 5.0 / speed
    ts = np.linspace(0.0, tau_max, num_times)
    out_dir = Path(out)
    names = task.model.names
    shapes = ", ".join(f"W_{n} {m}×{c}" for n, (m, c) in zip(names, task.model.shapes))
    print(f"{task.name}: {shapes}, n = {task.model.n}, τ ∈ [0, {tau_max:.4g}]")
    flows = []
    for la in config.log_alphas:
        t0 = time.perf_counter()
        res = simulate_flow(task.model, u0=task.u0, v0=task.v0, ts=ts, log_alpha=la, rtol=config.rtol, atol=config.atol)
        name = f"flow_alpha={format_alpha(la)}"
        save_result(out_dir / "results" / f"{name}.npz", res)
        flows.append(res)
        top = "; ".join(
            f"{n} {np.round(np.exp(s[-1, :4]), 4).tolist()}" for n, s in zip(names, res.log_singular_values)
        )
        print(
            f"α = {format_alpha(la):>10}: final loss {float(res.loss[-1]):.6g}, singular values {top}, "
            f"{int(res.stats['num_steps'])} solver steps, {time.perf_counter() - t0:.1f} s → {out_dir / 'results' / name}.npz"
        )
    order = figure2_order(names)
    save_figure(plot_spectra(flows, names=names, factors=order, title=task.name), out_dir / "figures" / "spectra.png")
    save_figure(plot_log_scales(flows, names=names, factors=order), out_dir / "figures" / "log_scales.png")
    print(f"figures: {out_dir / 'figures'}")
    return 0


def greedy(config: RankDemoConfig, *, max_stages, out: str) -> int:
    """``gradflow greedy`` for a factorised task: the greedy low-rank limit and its diagnostics."""
    task = config.task()
    t0 = time.perf_counter()
    path = greedy_limit(task.model, u0=task.u0, v0=task.v0, max_stages=max_stages, progress=True, throw=False)
    seconds = time.perf_counter() - t0
    text = rank_greedy_summary(path, task.model.names)
    out_dir = Path(out)
    save_result(out_dir / "greedy.npz", path)
    (out_dir / "greedy.md").write_text(f"# Greedy low-rank limit of {task.name} ({seconds:.1f} s)\n\n{text}")
    print(f"{task.name}: n = {task.model.n}; greedy low-rank limit in {seconds:.1f} s\n")
    print(text)
    print(f"results: {out_dir / 'greedy.npz'}, {out_dir / 'greedy.md'}")
    return 0


def pipeline(config: RankDemoConfig, *, out: str, force: bool, progress: bool) -> int:
    """``gradflow compare`` for a factorised task and ``gradflow demo --full-weights``: run, print the summary."""
    result = run_rank_demo(config, out=out, force=force, progress=progress)
    comp = result.comparison
    print(markdown_table(*rank_jump_rows(comp)))
    print("worst distance over the stage windows, per α:")
    quantities = ("W", "b", "loss", "time")
    rows = [[format_alpha(la)] + [comp.worst(q)[a] for q in quantities] for a, la in enumerate(comp.log_alpha)]
    rows.append(["fitted r"] + [comp.summary()[q] for q in quantities])
    print(markdown_table(["α", "W", "log scales b", "loss", "rank jump"], rows))
    reused = sum(what == "reused" for _, what, _ in result.log)
    print(f"\n{len(result.log) - reused} steps computed, {reused} reused, {result.seconds:.1f} s")
    print(f"report: {Path(out) / 'report.md'}")
    return 0


def demo(*, out: str, quick: bool, force: bool, progress: bool) -> int:
    """``gradflow demo --full-weights``: Figure 2 d–f into ``out/full_weights``."""
    return pipeline(
        QUICK_FULL if quick else RankDemoConfig(), out=str(Path(out) / "full_weights"), force=force, progress=progress
    )

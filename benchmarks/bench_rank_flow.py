"""The exact flow of the full-weight attention head: float64 gradient descent against it, and its solvers.

    python benchmarks/bench_rank_flow.py            # GD against the flow, α = 1e-4 … 1e-32
    python benchmarks/bench_rank_flow.py --record   # also write the "Full weights" section of docs/benchmarks.md
    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_rank_flow.py --solvers [--dims 6 20 50] [--paper] [--leap-cap N]

``--solvers`` (section "Full weights: solvers"): on `models.attention_full(n=50, tokens=4, dim=d,
teacher_kq=(1, 0.5), teacher_vo=(1, 0.5))`, τ ∈ [0, 2.5] at 31 times, at α = 1e-32 and log α = −1e4, the leaps
(`method="leap"`, what `"auto"` takes below m + n = 64) side by side with the solver `"auto"` took before them (Tsit5 up to
log(1/α) = 2000, Kvaerno5 beyond, whose dense Jacobian of the state took 97 s on the d = 6 head at −1e4 and rules
out the wider ones: Tsit5 stands in for it there, capped at `CAP` steps); `--paper` adds the paper's size,
`attention_full(n=1000, tokens=10, dim=50)` with its default rank-3 teacher, at 1e-32 (the leaps only unless
`--paper-tsit5`; `--leap-cap N` stops the leaps' runs after N steps; `--split` puts `solver="split"`, capped alike,
in the second column instead of the solver "auto" took before). Per run: steps (explicit steps and leaps,
accepted and rejected), the leaps and their pieces, evaluations of G, seconds after compilation (a first call on the
same shapes over τ ∈ [0, 1e-6] compiles) and the process's peak memory after it. The largest |Δ log σ| between two
runs that both finished is their disagreement (|log σ| reaches 2 |log α|). Then the accuracy checks of tests/factorized/test_leap.py: matrix factorisation against
its closed form at log α = −1e4, and against DOP853 at α = 1e-2 and 1e-6. OpenBLAS's threads (which JAX's SVDs and
QRs use on the CPU) wait for each other on a loaded machine: set `OPENBLAS_NUM_THREADS=1` before Python starts.

Task: `models.attention_full()` (n = 200 samples, 5 tokens, dim 6, teacher singular values (1, 0.6, 0.3) in
both `W_K W_Qᵀ` and `W_V W_Oᵀ`), from `U(0) = α Ū`, `V(0) = α V̄` Gaussian, over rescaled times τ ∈ [0, τ_max]
on a grid of step `DT`. For each α: the exact flow (`simulate_flow`) and full-batch GD in float64
(`simulate_gd`) with the largest learning rate ≤ `LR_MAX` that puts its records on the same grid. A *jump*
of a singular value is the first τ at which it exceeds `THRESHOLD` (interpolated in log σ); the table gives,
per α, the largest |GD − flow| jump-time difference over the learned modes, and the smallest singular value
of each product relative to its largest at the end (GD's cannot go below float64's rounding of the large
ones, ~1e-16; the flow's is exact).
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
import resource
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing gradflow
    sys.path.insert(0, str(ROOT))

from benchmarks import _common  # noqa: E402
from gradflow import FactorizedSolver, models, simulate_flow, simulate_gd  # noqa: E402

ALPHAS = (1e-4, 1e-8, 1e-16, 1e-24, 1e-32)
TAU_MAX = 4.0
DT = 0.01
LR_MAX = 0.01
THRESHOLD = 1e-2
SECTION = "Full weights: float64 GD against the exact flow"
SOLVERS_SECTION = "Full weights: solvers"
SOLVER_TS = np.linspace(0.0, 2.5, 31)
SCALES = (("1e-32", math.log(1e-32)), ("−1e4", -1e4))
CAP = 2000  # steps for the solver "auto" took before, where it cannot finish


def jump_times(ts, log_sv, threshold=THRESHOLD) -> np.ndarray:
    """Per singular value (last axis), the first τ with ``σ > threshold`` (linear in log σ); NaN if never."""
    out = np.full(log_sv.shape[-1], np.nan)
    level = math.log(threshold)
    for r in range(log_sv.shape[-1]):
        above = np.flatnonzero(log_sv[:, r] > level)
        if above.size and above[0] > 0:
            k = above[0]
            a, b = log_sv[k - 1, r], log_sv[k, r]
            out[r] = ts[k - 1] + (level - a) / (b - a) * (ts[k] - ts[k - 1])
    return out


def run(alpha: float, task, ts) -> dict:
    t = time.perf_counter()
    flow = simulate_flow(task.model, u0=task.u0, v0=task.v0, ts=ts, alpha=alpha)
    flow_s = time.perf_counter() - t
    L = -math.log(alpha)
    every = math.ceil(DT * L / LR_MAX)  # records on the flow's grid: τ step DT = every · lr / L
    lr = DT * L / every
    t = time.perf_counter()
    gd = simulate_gd(
        task.model, u0=task.u0, v0=task.v0, alpha=alpha, lr=lr, steps=every * (len(ts) - 1), record_every=every
    )
    gd_s = time.perf_counter() - t
    assert np.allclose(gd.ts, ts, atol=1e-9)
    names = task.model.names
    rows = []
    for j, name in enumerate(names):
        f_jump, g_jump = jump_times(ts, flow.log_singular_values[j]), jump_times(ts, gd.log_singular_values[j])
        f_low = flow.log_singular_values[j][-1, -1] - flow.log_singular_values[j][-1, 0]
        g_low = gd.log_singular_values[j][-1, -1] - gd.log_singular_values[j][-1, 0]
        rows.append(dict(name=name, flow=f_jump, gd=g_jump, flow_low=f_low / math.log(10), gd_low=g_low / math.log(10)))
    learned = [(r["flow"][i], r["gd"][i]) for r in rows for i in range(len(r["flow"])) if np.isfinite(r["flow"][i])]
    dev = max(abs(g - f) if np.isfinite(g) else math.inf for f, g in learned)
    return dict(
        alpha=alpha,
        lr=lr,
        steps=every * (len(ts) - 1),
        flow_s=flow_s,
        gd_s=gd_s,
        rows=rows,
        dev=dev,
        flow_steps=int(flow.stats["num_steps"]),
        solver=flow.stats["solver"],
    )


def render(results, argv) -> str:
    head = [
        "α",
        "GD lr (steps)",
        "flow (s, steps, solver)",
        "GD (s)",
        "jump τ of W_KQ: flow / GD",
        "jump τ of W_VO: flow / GD",
        "max abs Δτ",
        "log₁₀ σ_min/σ_max at τ_max: flow / GD",
    ]
    lines = _common.table_head(head)
    for r in results:
        kq, vo = r["rows"]

        def jumps(row):
            return ", ".join(f"{f:.3f}/{g:.3f}" for f, g in zip(row["flow"], row["gd"]) if np.isfinite(f))

        low = "; ".join(f"{row['flow_low']:.1f} / {row['gd_low']:.1f}" for row in r["rows"])
        lines.append(
            _common._cells(
                [
                    f"{r['alpha']:g}",
                    f"{r['lr']:.4g} ({r['steps']})",
                    f"{r['flow_s']:.1f}, {r['flow_steps']}, {r['solver']}",
                    f"{r['gd_s']:.1f}",
                    jumps(kq),
                    jumps(vo),
                    f"{r['dev']:.3f}",
                    low,
                ]
            )
        )
    intro = (
        f"`python benchmarks/bench_rank_flow.py{(' ' + ' '.join(argv)) if argv else ''}` (see its docstring): "
        f"`models.attention_full()`, τ ∈ [0, {TAU_MAX:g}] on a grid of {DT:g}, jump = first τ with σ > "
        f"{THRESHOLD:g}. Machine: {_common.cpu_name()}, 2 shared cores, no GPU; the times "
        "of the first row include the compilations (one for the flow per solver, one for GD)."
    )
    close = [r for r in results if r["alpha"] >= 1e-16]
    far = [r for r in results if r["alpha"] < 1e-16]
    reading = (
        f"Reading: down to α = {min(r['alpha'] for r in close):g}, GD's jump times agree with the exact flow to "
        f"{max(r['dev'] for r in close):.3f} in τ (its O(lr) discretisation). GD's sleeping singular values cannot go "
        "below float64's rounding of the awake ones (σ_min/σ_max ≈ 1e-17, last column; the flow's are exact), so for "
        "smaller α they wake from there, too early: "
        + ", ".join(f"Δτ = {r['dev']:.3f} at α = {r['alpha']:g}" for r in far)
        + "."
    )
    return "\n".join([_common.header(SECTION, argv), intro, "", *lines, "", reading, ""])


def load() -> str:
    """The load averages, as ``uptime`` gives them."""
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def solver_run(task, log_alpha: float, solver: str, cap: int | None) -> dict:
    """One flow after compiling it (a first call over τ ∈ [0, 1e-6] on the same shapes)."""
    solver_options = FactorizedSolver(method=solver)
    kw = dict(u0=task.u0, v0=task.v0, log_alpha=log_alpha, solver=solver_options, max_steps=cap, throw=False)
    simulate_flow(task.model, ts=SOLVER_TS * 1e-6 / SOLVER_TS[-1], **kw)
    t = time.perf_counter()
    res = simulate_flow(task.model, ts=SOLVER_TS, **kw)
    seconds = time.perf_counter() - t
    st = res.stats
    return dict(
        solver=solver,
        seconds=seconds,
        load=load(),
        rss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,  # GiB (Linux: KiB)
        steps=int(st["num_steps"]),
        rejected=int(st["num_rejected_steps"]),
        leaps=int(st.get("num_leaps", 0)),
        pieces=int(st.get("num_pieces", 0)),
        splits=int(st.get("num_split_steps", 0)),
        evaluations=int(st["num_evaluations"]) if "num_evaluations" in st else None,
        done=str(res.result) == "successful",
        reached=float(SOLVER_TS[np.flatnonzero(np.isfinite(res.loss))[-1]]),
        log_sv=np.concatenate(res.log_singular_values, axis=-1),
    )


def before(log_alpha: float) -> tuple[str, int | None]:
    """The solver "auto" took before the leaps (Tsit5 standing in for Kvaerno5 beyond log(1/α) = 2000), its cap."""
    return ("tsit5", None) if -log_alpha <= 2000 else ("tsit5", CAP)


def solver_rows(dims, paper: bool, paper_tsit5: bool, leap_cap: int | None, split: bool = False):
    rows = []
    for d in dims:
        task = models.attention_full(n=50, tokens=4, dim=d, teacher_kq=(1, 0.5), teacher_vo=(1, 0.5))
        for scale, la in SCALES:
            other = ("split", leap_cap) if split else before(la)
            new, old = solver_run(task, la, "leap", leap_cap), solver_run(task, la, *other)
            rows.append(dict(case=f"d = {d}", scale=scale, old=old, new=new))
            print(f"d = {d}, {scale}: {describe(new)} | {describe(old)}", flush=True)
    if paper:
        task = models.attention_full(n=1000, tokens=10, dim=50)
        la = math.log(1e-32)
        new = solver_run(task, la, "leap", leap_cap)
        old = solver_run(task, la, "tsit5", None) if paper_tsit5 else None
        rows.append(dict(case="paper: n = 1000, 10 tokens, d = 50, rank-3 teacher", scale="1e-32", old=old, new=new))
        print(f"paper, 1e-32: {describe(new)} | {describe(old)}", flush=True)
    return rows


def describe(r: dict | None) -> str:
    if r is None:
        return "not run"
    counts = f"{r['steps']:,} steps ({r['rejected']:,} rejected"
    counts += f"; {r['leaps']} leaps, {r['pieces']} pieces" if r["solver"] in ("leap", "split") else ""
    counts += f", {r['splits']:,} split steps)" if r["solver"] == "split" else ")"
    evals = "" if r["evaluations"] is None else f", {r['evaluations']:,} G"
    stop = "" if r["done"] else f", stopped at τ = {r['reached']:.3g}"
    return f"{r['solver']}: {r['seconds']:.1f} s, {counts}{evals}{stop}, peak {r['rss']:.2f} GiB [load {r['load']}]"


def accuracy_checks(solvers=("leap",)) -> list[str]:
    """The errors on matrix factorisation of each solver: the closed form at log α = −1e4, DOP853 at α = 1e-2 and
    1e-6 (the tests' cases, tests/factorized/test_leap.py and test_split.py)."""
    return [line for solver in solvers for line in _accuracy_checks(solver)]


def _accuracy_checks(solver) -> list[str]:
    import scipy.integrate

    rng = np.random.default_rng(0)
    sig = np.array([3.0, 1.5, 0.0])
    ts = np.linspace(0.0, 1.0, 21)
    A, _ = np.linalg.qr(rng.standard_normal((4, 3)))
    B, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    sbar = np.array([0.5, 2.0, 1.0])
    M = (A * sig) @ B.T
    la = -1e4
    res = simulate_flow(
        models.matrix_factorization_model(M),
        u0=(A * np.sqrt(sbar),),
        v0=(B * np.sqrt(sbar),),
        ts=ts,
        log_alpha=la,
        solver=FactorizedSolver(method=solver),
    )
    t, ls0 = ts[:, None] * -la, 2.0 * la + np.log(sbar)
    s1 = np.where(sig > 0, sig, 1.0)
    grow = np.log(s1) + ls0 + 2 * sig * t - np.logaddexp(np.log(s1 - np.exp(ls0)), ls0 + 2 * sig * t)
    want = -np.sort(-np.where(sig > 0, grow, ls0 + 0 * t), axis=1)
    out = [
        f"{solver}: matrix factorisation (4×3, σ = 3, 1.5, 0), closed form at log α = −1e4: max |Δ log s| = "
        f"{np.max(np.abs(res.log_singular_values[0] - want)):.1e} (|log s| up to {np.max(np.abs(want)):.3g}), "
        f"{int(res.stats['num_steps'])} steps"
    ]
    task = models.matrix_factorization(m=4, n=3, singular_values=(3.0, 1.5), seed=1)
    Mt = task.teacher_beta[0]
    for alpha in (1e-2, 1e-6):
        res = simulate_flow(
            task.model, u0=task.u0, v0=task.v0, ts=ts, alpha=alpha, solver=FactorizedSolver(method=solver)
        )
        L = -math.log(alpha)

        def rhs(t, y, Mt=Mt):
            U, V = y[:12].reshape(4, 3), y[12:].reshape(3, 3)
            G = Mt - U @ V.T
            return np.concatenate([(G @ V).ravel(), (G.T @ U).ravel()])

        y0 = alpha * np.concatenate([task.u0[0].ravel(), task.v0[0].ravel()])
        sol = scipy.integrate.solve_ivp(
            rhs, (0, ts[-1] * L), y0, "DOP853", t_eval=ts * L, rtol=1e-12, atol=1e-14 * alpha
        )
        W = np.array([y[:12].reshape(4, 3) @ y[12:].reshape(3, 3).T for y in sol.y.T])
        sv = np.linalg.svd(W, compute_uv=False)
        big = sv > 1e-6 * sv.max(axis=1, keepdims=True)
        out.append(
            f"{solver}: matrix factorisation (seed 1) against DOP853 (rtol 1e-12) at α = {alpha:g}: max |ΔW| = "
            f"{np.max(np.abs(res.W[0] - W)):.1e}, max |Δ log σ| = "
            f"{np.max(np.abs(res.log_singular_values[0][big] - np.log(sv[big]))):.1e}"
        )
    return out


def render_solvers(rows, checks, argv, split: bool = False) -> str:
    other = '`"split"`' if split else 'before (`"auto"` until now)'
    head = ["case", "α", 'leaps (`"leap"`)', other, "max \\|Δ log σ\\|"]
    lines = _common.table_head(head)
    for r in rows:
        old, new = r["old"], r["new"]
        both = old is not None and old["done"] and new["done"]
        diff = f"{np.max(np.abs(old['log_sv'] - new['log_sv'])):.1e}" if both else "n/a"
        lines.append(_common._cells([r["case"], r["scale"], describe(new), describe(old), diff]))
    by = {(r["case"], r["scale"]): r["new"] for r in rows}
    ratios = [
        f"{c}: {'' if far['done'] else '≥ '}{far['steps'] / by[(c, '1e-32')]['steps']:.2f}"
        + ("" if far["done"] else f" (stopped at τ = {far['reached']:.3g} by `--leap-cap`)")
        for c in dict.fromkeys(r["case"] for r in rows)
        if (c, "−1e4") in by and (c, "1e-32") in by
        for far in [by[(c, "−1e4")]]
    ]
    if split:
        olds = {(r["case"], r["scale"]): r["old"] for r in rows}
        ratios.append(
            '`"split"`: '
            + ", ".join(
                f"{c}: {'' if far['done'] else '≥ '}{far['steps'] / olds[(c, '1e-32')]['steps']:.2f}"
                for c in dict.fromkeys(r["case"] for r in rows)
                if (c, "−1e4") in olds and (c, "1e-32") in olds
                for far in [olds[(c, "−1e4")]]
            )
        )
    threads = f"; OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}"
    intro = (
        f"`python benchmarks/bench_rank_flow.py{(' ' + ' '.join(argv)) if argv else ''}` (see its docstring). "
        f"Machine: {_common.cpu_name()}, 2 cores shared with other jobs (load averages per run in brackets), no "
        f"GPU{threads}. Seconds after compilation; peak: the process's peak resident memory so far. Steps of the "
        "leaps at log α = −1e4 over those at 1e-32: " + ", ".join(ratios) + "."
    )
    return "\n".join(
        [_common.header(SOLVERS_SECTION, argv), intro, "", *lines, "", "Accuracy:", "", *[f"- {c}" for c in checks], ""]
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", action="store_true", help="write the section into docs/benchmarks.md")
    parser.add_argument("--solvers", action="store_true", help="the solvers' table instead of GD against the flow")
    parser.add_argument("--dims", type=int, nargs="*", default=[6, 20, 50], help="head dimensions for --solvers")
    parser.add_argument("--paper", action="store_true", help="add the paper's size at 1e-32 to --solvers")
    parser.add_argument("--paper-tsit5", action="store_true", help="run Tsit5 on the paper's size too")
    parser.add_argument("--leap-cap", type=int, default=None, help="max_steps of the leaps' runs (default: none)")
    parser.add_argument("--split", action="store_true", help='--solvers: the leaps beside `"split"` (capped alike)')
    args = parser.parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv
    if args.solvers:
        rows = solver_rows(args.dims, args.paper, args.paper_tsit5, args.leap_cap, args.split)
        checks = accuracy_checks(("leap", "split") if args.split else ("leap",))
        print("\n".join(checks), flush=True)
        _common.show(render_solvers(rows, checks, argv, args.split), SOLVERS_SECTION, args.record)
        return
    task = models.attention_full()
    ts = np.round(np.arange(0.0, TAU_MAX + DT / 2, DT), 10)
    results = []
    for alpha in ALPHAS:
        r = run(alpha, task, ts)
        print(f"α={alpha:g}: max |Δτ| {r['dev']:.3f}; flow {r['flow_s']:.1f} s, GD {r['gd_s']:.1f} s", flush=True)
        results.append(r)
    _common.show(render(results, argv), SECTION, args.record)


if __name__ == "__main__":
    main()

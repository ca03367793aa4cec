"""How the cost of the full-weight attention head grows with its dimension d: flows, greedy limit, float64 GD.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_rank_scale.py --dims 3 6 10 20 50 --json scale.json
    python benchmarks/bench_rank_scale.py --methods leap auto --no-greedy   # the flows of two solvers side by side
    python benchmarks/bench_rank_scale.py --from-json a.json b.json --record   # merge runs, write the section

Model (issue 19's measurements): ``models.attention_full(n=50, tokens=4, dim=d, teacher_kq=(1, 0.5),
teacher_vo=(1, 0.5))``, τ ∈ [0, 2.5] at 31 times (``SOLVER_TS`` of bench_rank_flow.py). Per d, in one process:

- **flows** at α = 1e-8, 1e-32 and log α = −1e4 with each of ``--methods`` (``FactorizedSolver(method=...)``; by
  default the leaps, ``"leap"``, what ``"auto"`` took at every d until 2026-11-30; ``"auto"`` now takes the split
  integrator at d ≥ 32), each first called over τ ∈ [0, 1e-6] on the same shapes (its "cold" seconds: compilation, unless an earlier cell
  compiled the same program), then timed ("warm"); capped at ``--flow-cap`` steps (a capped cell gives the τ it
  reached);
- **GD at α = 1e-8** (float64, full batch, ``simulate_gd``), at the learning rate that matches the flow to 1e-3:
  GD records on a grid of step ``DT`` = 0.01 in τ (lr = DT · log(1/α) / k for an integer k), and a jump is the
  first τ at which a singular value of a product exceeds ``THRESHOLD`` = 1e-2 (linear in log σ between records),
  compared with a reference flow on the same grid (not timed). Δτ, the largest |GD − flow| over the flow's jumps
  in [0, 2.5] (∞ if GD misses one), is O(lr): GD first runs at lr₀ = 0.01 (the stability-limited value of
  bench_rank_flow.py), then at lr₁ = 0.8 · 1e-3 / Δτ(lr₀) · lr₀ (rounded down to the grid), halving lr until
  Δτ ≤ 1e-3; the cell gives the last lr, its steps, Δτ and seconds (warm: the records' count, the only static
  shape, is the same in every call, and a first call of 250 steps compiles). Not run where the steps would exceed
  ``GD_MAX_STEPS``. GD at 1e-32 and −1e4 is not run: at 1e-32 float64's rounding of the awake columns puts a
  floor under the sleeping ones, so GD's jumps come early by ≈ 0.29 in τ whatever lr (section "Full weights:
  float64 GD against the exact flow"), and at log α = −1e4 α underflows float64 (GD trains the weights themselves);
- **greedy** (``greedy_limit``, checks on), cold (compilation included), then warm (a second call) where the cold
  one took under ``GREEDY_WARM_BELOW`` seconds; stopped after ``--greedy-cap`` seconds (SIGALRM raising a
  KeyboardInterrupt, which ``greedy_limit`` takes as Ctrl-C: the stages finished are kept).

Wall and CPU seconds (``time.process_time``, all threads) and the load averages at the end of each cell. Then a
fit ``seconds ∝ d^k`` (least squares in log–log over the d that finished) per column.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy and JAX load OpenBLAS (bench_rank_flow.py)

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import pathlib  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing gradflow
    sys.path.insert(0, str(ROOT))

import gradflow  # noqa: E402
from benchmarks import _common  # noqa: E402
from benchmarks.bench_rank_flow import SOLVER_TS, jump_times  # noqa: E402
from gradflow import models  # noqa: E402

SECTION = "Full weights: how the cost grows with d"
FLOWS = (("1e-8", math.log(1e-8)), ("1e-32", math.log(1e-32)), ("−1e4", -1e4))
GD_ALPHA = 1e-8
DT = 0.01
TAU_MAX = float(SOLVER_TS[-1])
THRESHOLD = 1e-2
LR0 = 0.01
TARGET = 1e-3
GD_MAX_STEPS = 200_000
GREEDY_WARM_BELOW = 120.0


def task_of(d: int):
    return models.attention_full(n=50, tokens=4, dim=d, teacher_kq=(1.0, 0.5), teacher_vo=(1.0, 0.5))


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def timed(fn):
    """``fn()``, its wall and CPU seconds, the load averages after it."""
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t, time.process_time() - c, load()


def flow_cell(task, log_alpha: float, cap: int, method: str) -> dict:
    solver = gradflow.FactorizedSolver(method=method)
    kw = dict(u0=task.u0, v0=task.v0, log_alpha=log_alpha, solver=solver, max_steps=cap, throw=False)
    _, cold, cold_cpu, _ = timed(lambda: gradflow.simulate_flow(task.model, ts=SOLVER_TS * 1e-6 / TAU_MAX, **kw))
    res, wall, cpu, ld = timed(lambda: gradflow.simulate_flow(task.model, ts=SOLVER_TS, **kw))
    st = res.stats
    return dict(
        cold=cold,
        cold_cpu=cold_cpu,
        wall=wall,
        cpu=cpu,
        load=ld,
        steps=int(st["num_steps"]),
        rejected=int(st["num_rejected_steps"]),
        leaps=int(st.get("num_leaps", 0)),
        splits=int(st.get("num_split_steps", 0)),
        solver=str(st["solver"]),
        done=str(res.result) == "successful",
        reached=float(SOLVER_TS[np.flatnonzero(np.isfinite(res.loss))[-1]]),
        cap=cap,
    )


def gd_cell(task) -> dict:
    """GD at α = GD_ALPHA at the lr that matches the flow's jump times to TARGET (the module's docstring)."""
    L = -math.log(GD_ALPHA)
    ts = np.round(np.arange(0.0, TAU_MAX + DT / 2, DT), 10)
    records = len(ts) - 1
    ref = gradflow.simulate_flow(
        task.model, u0=task.u0, v0=task.v0, ts=ts, alpha=GD_ALPHA, solver=gradflow.FactorizedSolver(method="leap")
    )
    ref_jumps = [jump_times(ts, s) for s in ref.log_singular_values]

    def run(every: int):
        lr = DT * L / every
        res, wall, cpu, ld = timed(
            lambda: gradflow.simulate_gd(
                task.model, u0=task.u0, v0=task.v0, alpha=GD_ALPHA, lr=lr, steps=every * records, record_every=every
            )
        )
        assert np.allclose(res.ts, ts, atol=1e-9)
        dev = 0.0
        for f, s in zip(ref_jumps, res.log_singular_values):
            g = jump_times(ts, s)
            for a, b in zip(f, g):
                if np.isfinite(a):
                    dev = max(dev, abs(a - b) if np.isfinite(b) else math.inf)
        return dict(lr=lr, steps=every * records, wall=wall, cpu=cpu, load=ld, dev=dev)

    compile_ = run(1)  # 250 steps: compiles (lr and the records' spacing are traced, their count is static)
    tries = [run(math.ceil(DT * L / LR0))]
    lr = tries[0]["lr"] * 0.8 * TARGET / max(tries[0]["dev"], 1e-12)
    while tries[-1]["dev"] > TARGET:
        every = math.ceil(DT * L / lr)
        if every * records > GD_MAX_STEPS:
            return dict(
                done=False,
                why=f"lr = {lr:.3g} needs {every * records:,} steps > {GD_MAX_STEPS:,}",
                tries=tries,
                compile=compile_["wall"],
            )
        tries.append(run(every))
        lr = tries[-1]["lr"] / 2
    return dict(
        done=True,
        **tries[-1],
        tries=tries,
        compile=compile_["wall"],
        jumps=int(sum(np.isfinite(j).sum() for j in ref_jumps)),
    )


def greedy_cell(task, cap: float | None, warm: bool) -> dict:
    def ring(signum, frame):
        raise KeyboardInterrupt("greedy cap")

    def one():
        old = signal.signal(signal.SIGALRM, ring)
        if cap:
            signal.alarm(int(cap))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", gradflow.AssumptionWarning)
                return gradflow.greedy_limit(task.model, u0=task.u0, v0=task.v0, throw=False)
        except gradflow.Interrupted as stop:
            return stop.result
        except KeyboardInterrupt:
            return None
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)

    path, wall, cpu, ld = timed(one)
    out = dict(
        wall=wall,
        cpu=cpu,
        load=ld,
        result=None if path is None else str(path.result),
        stages=None if path is None else int(path.num_stages),
        last_T=None if path is None else float(np.asarray(path.times)[-1]),
        cap=cap,
    )
    out["done"] = out["result"] == "successful"
    if warm and out["done"] and wall < GREEDY_WARM_BELOW:
        _, out["warm"], out["warm_cpu"], out["warm_load"] = timed(one)
    return out


def run_dim(d: int, args) -> dict:
    task = task_of(d)
    row = dict(d=d, flows={})
    for method in args.methods:
        row["flows"][method] = flows = {}
        for name, la in FLOWS:
            flows[name] = r = flow_cell(task, la, args.flow_cap, method)
            print(f"d = {d}, {method} {name}: {fmt_flow(r)} [cold {r['cold']:.1f} s; load {r['load']}]", flush=True)
    if not args.no_gd:
        row["gd"] = g = gd_cell(task)
        print(f"d = {d}, GD 1e-8: {fmt_gd(g)}; tries {[(t['lr'], t['dev']) for t in g['tries']]}", flush=True)
    if not args.no_greedy:
        row["greedy"] = g = greedy_cell(task, args.greedy_cap, warm=True)
        print(f"d = {d}, greedy: {fmt_greedy(g)} [load {g['load']}]", flush=True)
    return row


def fmt_flow(r: dict) -> str:
    s = f"{r['wall']:.2f} s ({r['cpu']:.1f}), {r['steps']:,} steps, {r['leaps']} leaps"
    if r.get("splits"):
        s += f", {r['splits']:,} split steps"
    if not r["done"]:
        s += f"; capped at {r['cap']:,} steps, reached τ = {r['reached']:.3g}"
    return s


def fmt_gd(g: dict) -> str:
    if not g["done"]:
        return f"not run: {g['why']}"
    return f"lr {g['lr']:.3g}, {g['steps']:,} steps, {g['wall']:.2f} s ({g['cpu']:.1f} CPU), Δτ = {g['dev']:.1e}"


def fmt_greedy(g: dict) -> str:
    if g["result"] is None:
        return f"capped at {g['cap']:.0f} s before its first stage ended"
    s = f"{g['wall']:.1f} s ({g['cpu']:.1f} CPU)"
    if "warm" in g:
        s += f" (warm {g['warm']:.1f} s, {g['warm_cpu']:.1f} CPU)"
    s += f", {g['stages']} stages"
    if g["result"] == "interrupted":
        s = f"capped at {g['cap']:.0f} s: {g['stages']} stages kept, the last at τ = {g['last_T']:.3g}"
    elif not g["done"]:
        s += f" ({g['result']}, last at τ = {g['last_T']:.3g})"
    return s


def fit(ds, secs) -> str:
    ok = [(d, s) for d, s in zip(ds, secs) if s is not None and s > 0]
    if len(ok) < 2:
        return "n/a"
    x, y = np.log([d for d, _ in ok]), np.log([s for _, s in ok])
    k, _ = np.polyfit(x, y, 1)
    return f"{k:.2f} (d = {', '.join(str(d) for d, _ in ok)})"


def by_method(row: dict) -> dict:
    """The row's flows by solver (rows written before ``--methods`` hold the leaps' flows by scale alone)."""
    flows = row["flows"]
    return {"leap": flows} if set(flows) <= {n for n, _ in FLOWS} else flows


def render(rows: list[dict], argv, when: str) -> str:
    rows = sorted(rows, key=lambda r: r["d"])
    methods = list(by_method(rows[0]))
    head = [
        "d",
        *(h for m in methods for h in (f"{m}: compile", *(f"{m} {n}" for n, _ in FLOWS))),
        "greedy: cold (warm)",
        "GD at 1e-8: lr, steps",
        "GD: s (CPU s), Δτ",
        "load",
    ]
    lines = _common.table_head(head)
    for r in rows:
        cells, loads = [str(r["d"])], []
        for m in methods:
            flows = [by_method(r)[m][n] for n, _ in FLOWS]
            loads += [f["load"][0] for f in flows]
            cells += [f"{flows[0]['cold']:.1f} s", *(fmt_flow(f) for f in flows)]
        g = r.get("greedy")
        cells.append("not run" if g is None else fmt_greedy(g))
        loads += [] if g is None else [g["load"][0]]
        g = r.get("gd")
        if g is None or not g["done"]:
            cells += ["not run" if g is None else f"not run: {g['why']}", ""]
        else:
            cells += [
                f"{g['lr']:.3g}, {g['steps']:,}",
                f"{g['wall']:.1f} ({g['cpu']:.1f}), {g['dev']:.1e}; compile {g['compile']:.1f} s",
            ]
            loads.append(g["load"][0])
        cells.append(f"{min(loads):.1f}–{max(loads):.1f}")
        lines.append(_common._cells(cells))
    ds = [r["d"] for r in rows]

    def col(get):
        return [get(r) for r in rows]

    def flow(r, m, n):
        return by_method(r)[m][n]

    fits = [
        f"{m} {n}: seconds k = {fit(ds, col(lambda r: flow(r, m, n)['wall'] if flow(r, m, n)['done'] else None))}, "
        f"steps k = {fit(ds, col(lambda r: flow(r, m, n)['steps'] if flow(r, m, n)['done'] else None))}"
        for m in methods
        for n, _ in FLOWS
    ]
    fits += [f"{m} compilation: k = " + fit(ds, col(lambda r: flow(r, m, FLOWS[0][0])["cold"])) for m in methods]
    fits.append(
        "greedy, cold: k = " + fit(ds, col(lambda r: r["greedy"]["wall"] if r.get("greedy", {}).get("done") else None))
    )
    fits.append("greedy, warm: k = " + fit(ds, col(lambda r: r.get("greedy", {}).get("warm"))))
    fits.append("GD: k = " + fit(ds, col(lambda r: r["gd"]["wall"] if r.get("gd", {}).get("done") else None)))
    intro = (
        f"`python benchmarks/bench_rank_scale.py {' '.join(argv)}` (see its docstring), {when}: "
        "`models.attention_full(n=50, tokens=4, dim=d, teacher_kq=(1, 0.5), teacher_vo=(1, 0.5))`, τ ∈ [0, 2.5] at "
        f"31 times; jax {jax.__version__}. Machine: {_common.cpu_name()}, 2 cores shared with another job (last column: the 1-minute load "
        f"averages at the end of the cells of the row), no GPU, OPENBLAS_NUM_THREADS="
        f"{os.environ.get('OPENBLAS_NUM_THREADS')}. Flows (by `FactorizedSolver(method=...)`, named in the heads; "
        '`"auto"` takes the split integrator at d ≥ 32 and the leaps below): wall seconds after '
        "compilation (CPU seconds of this process in parentheses), steps (accepted and rejected), leaps, split steps; *compile*: "
        "the first call (τ ∈ [0, 1e-6]) of the 1e-8 flow, which compiles the program the other two reuse. Greedy: "
        "wall seconds cold (compilation included) and, in parentheses, warm (a second call); CPU seconds beside "
        "each. GD: the lr that matched, its steps, wall (CPU) seconds after compilation, its Δτ, and the compiling call's seconds (250 steps)."
    )
    return "\n".join(
        [
            f"## {SECTION}\n",
            intro,
            "",
            *lines,
            "",
            "Fitted growth, ∝ d^k (least squares in log–log over the d that finished):",
            "",
            *[f"- {f}" for f in fits],
            "",
        ]
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dims", type=int, nargs="*", default=[3, 6, 10, 20, 50])
    parser.add_argument("--flow-cap", type=int, default=10_000, help="max_steps of every flow")
    parser.add_argument(
        "--methods",
        nargs="*",
        default=["leap"],
        choices=["leap", "split", "auto"],
        help="the flows' solvers, side by side",
    )
    parser.add_argument("--greedy-cap", type=float, default=600.0, help="seconds before greedy_limit is stopped")
    parser.add_argument("--no-greedy", action="store_true")
    parser.add_argument("--no-gd", action="store_true")
    parser.add_argument("--json", default=None, help="write the rows to this file")
    parser.add_argument("--from-json", nargs="*", default=None, help="render these files' rows (no runs)")
    parser.add_argument("--record", action="store_true", help="write the section into docs/benchmarks.md")
    args = parser.parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv
    if args.from_json:
        rows = [row for p in args.from_json for row in json.loads(pathlib.Path(p).read_text())["rows"]]
        when = ", ".join(sorted({json.loads(pathlib.Path(p).read_text())["when"] for p in args.from_json}))
        argv = ["--dims", *[str(r["d"]) for r in sorted(rows, key=lambda r: r["d"])]]
    else:
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        print(f"# {_common.cpu_name()}; load {load()}", flush=True)
        rows = []
        for d in args.dims:
            rows.append(run_dim(d, args))
            if args.json:
                pathlib.Path(args.json).write_text(json.dumps(dict(when=when, argv=argv, rows=rows), indent=1))
    text = render(rows, argv, when)
    print(text)
    if args.record:
        _common.record_section(ROOT / "docs" / "benchmarks.md", SECTION, text)


if __name__ == "__main__":
    main()

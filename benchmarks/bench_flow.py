"""The theory engine on the paper's toy task: `simulate_flow` against the ways one could otherwise get the flow.

    python benchmarks/bench_flow.py            # α ∈ {1e-8, 1e-32, 1e-300}, 15 s cap per alternative (~10 min)
    python benchmarks/bench_flow.py --quick    # smaller task (n = 200), 10 s cap (~2 min)
    python benchmarks/bench_flow.py --record   # also write its two sections of docs/benchmarks.md
    python benchmarks/bench_flow.py --only cost --record   # only the "Solver cost" section (~30 min)

Task: `models.diagonal_attention()` (n = 1000 samples, 10 tokens, dim 50, p = 100), from θ(0) = α (u0, v0),
over rescaled times τ ∈ [0, 3] (31 output times), which cover the task's first stages. Methods, timed in
the same run on the same CPU:

- `simulate_flow` (default settings), after one compilation (timed separately);
- `simulate_gd` (full-batch GD, float64): the learning rate must be small enough that β agrees with the
  flow to 1e-3. lr is taken on a grid lr = 0.1 log(1/α) / k (so records land on the flow's τ grid); the
  largest k that fits the cap is run, and the lr needed for 1e-3 is extrapolated from the first-order
  error (error ∝ lr), with its time extrapolated from the measured time per step. The error at the lr
  that fits is O(1), where it saturates, so the extrapolated lr is too large and the time a lower bound;
- SciPy `solve_ivp` (Radau, LSODA) and Diffrax `Tsit5` + PID on the plain (u, v) equations
  du/dt = v g, dv/dt = u g, with rtol 1e-8 and atol 1e-8 α (the state is of size α at first).

Each alternative is stopped after the cap (wall clock) and reported as "cap" with the τ it reached; a NaN
or a solver failure is reported as such.

Then the solver's own cost ("Solver cost"), on the toy and on a dense head (n = 200, 10 tokens, dim 20,
every teacher coordinate nonzero: about 24 stages in τ ∈ [0, 1]), at log α = −690.78, −2000, −1e4: steps
(accepted + rejected), jumps resolved (coordinates with |β_i| > 1e-3 at some recorded time), accepted steps
per jump, the time of one g evaluation (the model's g and autodiff of the same loss, in a compiled loop)
and the flow's time in units of it; the timings of the issue's goals (the toy at 1e-32 with 400 times,
the dense head at 1e-300); and GD on the dense head at α = 1e-32 run, not extrapolated, at the largest lr
on a grid that agrees with the flow to 1e-3, with the measured time ratio.
"""

from __future__ import annotations

import argparse
import datetime
import pathlib
import sys
import time

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import scipy.integrate

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing gradflow
    sys.path.insert(0, str(ROOT))

import gradflow  # noqa: E402
from benchmarks import _common  # noqa: E402
from gradflow import models, simulate_flow, simulate_gd  # noqa: E402

DOCS = ROOT / "docs" / "benchmarks.md"
ALPHAS = (1e-8, 1e-32, 1e-300)
TS = np.linspace(0.0, 3.0, 31)
AGREE = 1e-3


class _Cap(Exception):
    pass


def plain_rhs(model):
    """``f(θ) = (v ⊙ g, u ⊙ g)`` on the plain weights, jitted, float64."""
    p = model.p

    @jax.jit
    def f(theta):
        u, v = theta[:p], theta[p:]
        g = model.g(u * v)
        return jnp.concatenate([v * g, u * g])

    return f


def run_flow(task, alpha):
    t = time.perf_counter()
    res = simulate_flow(task.model, u0=task.u0, v0=task.v0, ts=TS, alpha=alpha)
    return res, time.perf_counter() - t


def run_gd(task, alpha, flow, cap):
    """Largest-k GD that fits the cap, its β error against the flow, and the extrapolated cost at 1e-3."""
    L = np.log(1 / alpha)
    kw = dict(alpha=alpha, u0=task.u0, v0=task.v0)
    simulate_gd(task.model, lr=0.1 * L / 10, steps=20, record_every=10, **kw)  # compile the step
    t = time.perf_counter()
    simulate_gd(task.model, lr=0.1 * L / 10, steps=200, record_every=10, **kw)
    per_step = (time.perf_counter() - t) / 200
    k_fit = max(1, int(cap / (per_step * 30)))
    k = max(kk for kk in (1, 3, 10, 30, 100, 300, 1000, 3000, 10_000) if kk <= max(k_fit, 1))
    t = time.perf_counter()
    res = simulate_gd(task.model, lr=0.1 * L / k, steps=30 * k, record_every=k, **kw)
    elapsed = time.perf_counter() - t
    if not np.all(np.isfinite(res.beta)):
        return dict(status="NaN", time=elapsed, steps=30 * k, lr=0.1 * L / k)
    err = float(np.abs(res.beta - flow.beta).max())
    k_need = k * err / AGREE
    return dict(
        status="ok" if err <= AGREE else f"β error {err:.2g} at lr={0.1 * L / k:.3g}",
        time=elapsed,
        steps=30 * k,
        lr=0.1 * L / k,
        err=err,
        lr_needed=0.1 * L / k_need,
        time_needed=30 * k_need * per_step,
        loss=float(res.loss[-1]),
    )


def run_scipy(task, alpha, method, cap):
    f = plain_rhs(task.model)
    L = np.log(1 / alpha)
    calls = [0]
    t0 = time.perf_counter()

    def rhs(t, theta):
        calls[0] += 1
        if time.perf_counter() - t0 > cap:
            raise _Cap(t)
        return np.asarray(f(jnp.asarray(theta)))

    theta0 = alpha * np.concatenate([task.u0, task.v0])
    try:
        sol = scipy.integrate.solve_ivp(
            rhs, (0.0, TS[-1] * L), theta0, method=method, t_eval=TS * L, rtol=1e-8, atol=1e-8 * alpha
        )
    except _Cap as stop:
        return dict(status=f"cap (τ = {float(stop.args[0]) / L:.3g})", time=time.perf_counter() - t0, steps=calls[0])
    elapsed = time.perf_counter() - t0
    if not sol.success:
        return dict(status=f"failed: {sol.message}", time=elapsed, steps=calls[0])
    if not np.all(np.isfinite(sol.y)):
        return dict(status="NaN", time=elapsed, steps=calls[0])
    return dict(status="ok", time=elapsed, steps=calls[0], theta=sol.y.T)


def run_tsit5(task, alpha, cap, segment_steps=300):
    """Tsit5 + PID in segments of ``segment_steps`` steps, checking the wall clock between segments."""
    f = plain_rhs(task.model)
    L = np.log(1 / alpha)
    term = dfx.ODETerm(lambda t, y, args: f(y))

    @eqx.filter_jit
    def segment(y0, t0, t1, dt0):
        return dfx.diffeqsolve(
            term,
            dfx.Tsit5(),
            t0,
            t1,
            dt0,
            y0,
            saveat=dfx.SaveAt(t1=True),
            stepsize_controller=dfx.PIDController(rtol=1e-8, atol=1e-8 * alpha),
            max_steps=segment_steps,
            throw=False,
        )

    y = jnp.asarray(alpha * np.concatenate([task.u0, task.v0]))
    steps, t_start, dt0 = 0, time.perf_counter(), 1e-3
    out = [np.asarray(y)]
    for a, b in zip(TS[:-1] * L, TS[1:] * L):
        t = a
        while True:
            sol = segment(y, t, b, dt0)
            steps += int(sol.stats["num_steps"])
            y_end = sol.ys[-1]
            if sol.result == dfx.RESULTS.successful:
                y, dt0 = y_end, None
                break
            if not np.all(np.isfinite(np.asarray(y_end))):
                return dict(status=f"NaN (τ ≈ {t / L:.3g})", time=time.perf_counter() - t_start, steps=steps)
            if sol.result != dfx.RESULTS.max_steps_reached:
                return dict(status=f"failed: {sol.result}", time=time.perf_counter() - t_start, steps=steps)
            # max_steps inside the segment: diffrax stopped early; restart from where it got to.
            t_reached = float(sol.ts[-1])
            y, t, dt0 = y_end, sol.ts[-1], None  # an array: a Python float would recompile `segment`
            if time.perf_counter() - t_start > cap:
                return dict(status=f"cap (τ = {t_reached / L:.3g})", time=time.perf_counter() - t_start, steps=steps)
        out.append(np.asarray(y))
        if time.perf_counter() - t_start > cap and b < TS[-1] * L:
            return dict(status=f"cap (τ = {b / L:.3g})", time=time.perf_counter() - t_start, steps=steps)
    return dict(status="ok", time=time.perf_counter() - t_start, steps=steps, theta=np.array(out))


def beta_error(theta, flow, p):
    return float(np.abs(theta[:, :p] * theta[:, p:] - flow.beta).max())


def fmt_time(x):
    return f"{x:.3g}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="n = 200 samples and a 10 s cap")
    parser.add_argument("--cap", type=float, default=None, help="seconds per alternative and scale")
    parser.add_argument("--record", action="store_true", help="write the sections into docs/benchmarks.md")
    parser.add_argument(
        "--only", choices=("alternatives", "cost"), default=None, help="run (and record) one of the two sections"
    )
    args = parser.parse_args(argv)
    cap = args.cap if args.cap is not None else (10.0 if args.quick else 15.0)
    n = 200 if args.quick else 1000
    task = models.diagonal_attention(n=n)
    if args.only in (None, "alternatives"):
        table = alternatives(task, n, cap) + "\n" + scaling_table()
        print(table)
        if args.record:
            _common.record_section(DOCS, SECTION.removeprefix("## "), INTRO + table)
    if args.only in (None, "cost"):
        table = solver_cost(task, n, args.quick)
        print(table)
        if args.record:
            _common.record_section(DOCS, COST_SECTION.removeprefix("## "), COST_INTRO + table)


def alternatives(task, n, cap) -> str:
    """`simulate_flow` on the toy against GD, SciPy and Tsit5 on the plain weights, at each α of ``ALPHAS``."""
    p = task.model.p
    t = time.perf_counter()
    simulate_flow(task.model, u0=task.u0, v0=task.v0, ts=TS * 0.01, alpha=0.1)  # same shapes: compiles
    compile_s = time.perf_counter() - t
    rows = []
    for alpha in ALPHAS:
        flow, flow_s = run_flow(task, alpha)
        print(
            f"α={alpha:g}: simulate_flow {flow_s:.1f} s, {int(flow.stats['num_steps'])} steps, loss {flow.loss[-1]:.3g}",
            flush=True,
        )
        rows.append(
            (
                "simulate_flow",
                alpha,
                "ok",
                flow_s,
                f"{int(flow.stats['num_steps'])} steps",
                f"{flow.loss[-1]:.3g}",
                "0 (reference)",
                "",
            )
        )
        gd = run_gd(task, alpha, flow, cap)
        note = (
            f"lr={gd['lr']:.3g}; 1e-3 needs lr ≲ {gd['lr_needed']:.2g}: ≳ {gd['time_needed']:.3g} s "
            f"(≳ {gd['time_needed'] / flow_s:.3g}× flow, extrapolated)"
            if "err" in gd
            else f"lr={gd['lr']:.3g}"
        )
        rows.append(
            (
                "GD (largest lr in cap)",
                alpha,
                gd["status"],
                gd["time"],
                f"{gd['steps']} steps",
                f"{gd.get('loss', float('nan')):.3g}",
                f"{gd.get('err', float('nan')):.2g}",
                note,
            )
        )
        print(f"  GD: {gd['status']} {gd['time']:.1f} s; {note}", flush=True)
        for name, runner in (
            ("SciPy Radau (plain u, v)", lambda: run_scipy(task, alpha, "Radau", cap)),
            ("SciPy LSODA (plain u, v)", lambda: run_scipy(task, alpha, "LSODA", cap)),
            ("Diffrax Tsit5 + PID (plain u, v)", lambda: run_tsit5(task, alpha, cap)),
        ):
            r = runner()
            err = f"{beta_error(r['theta'], flow, p):.2g}" if "theta" in r else ""
            count = f"{r['steps']} {'f-evals' if 'SciPy' in name else 'steps'}"
            rows.append(
                (
                    name,
                    alpha,
                    r["status"],
                    r["time"],
                    count,
                    "",
                    err,
                    f"{r['time'] / flow_s:.3g}× flow" if r["status"] == "ok" else "",
                )
            )
            print(f"  {name}: {r['status']} {r['time']:.1f} s {count} {err}", flush=True)

    return render(rows, task, n, cap, compile_s)


# --------------------------------------------------------------------------------------------------
# The solver's cost (issue 10): steps against log α, cost per jump, g's cost, and GD at the lr that agrees.

DENSE = dict(n=200, tokens=10, dim=20, teacher_nonzero=(None, None))  # every teacher coordinate nonzero
COST_LOG_ALPHAS = (-690.78, -2000.0, -1e4)
GD_HEAD = dict(n=20, tokens=5, dim=10, teacher_nonzero=(None, None))  # small enough for GD at lr ~ 1e-5
GD_BUDGET = 600.0  # seconds of GD runs


def g_ms(model, reps=50) -> float:
    """Milliseconds per evaluation of ``model.g`` inside one compiled loop (no call overhead), best of 3."""
    beta0 = jnp.asarray(0.3 * np.random.default_rng(0).standard_normal(model.p))
    loop = eqx.filter_jit(lambda m, b: jax.lax.fori_loop(0, reps, lambda i, b: b + 1e-12 * m.g(b), b))
    loop(model, beta0).block_until_ready()
    best = np.inf
    for _ in range(3):
        t = time.perf_counter()
        loop(model, beta0).block_until_ready()
        best = min(best, (time.perf_counter() - t) / reps)
    return 1e3 * best


def woke(flow) -> int:
    """Jumps resolved: coordinates with ``|β_i| > 1e-3`` at some recorded time (each woke once)."""
    return int(np.sum(np.any(np.abs(flow.beta) > 1e-3, axis=-2)))


def cost_rows(label, task, ts, log_alphas):
    """``simulate_flow`` at each ``log α`` (compiled first): steps, rejections, jumps, time, g-equivalents."""
    m = task.model
    generic = gradflow.DiagonalModel(m.h, m.X, m.Y, p=m.p, loss=m.loss)
    g_fast, g_auto = g_ms(m), g_ms(generic)
    t = time.perf_counter()
    simulate_flow(m, u0=task.u0, v0=task.v0, ts=ts * 0.01, log_alpha=-5.0)  # same shapes: compiles
    compile_s = time.perf_counter() - t
    rows = []
    for la in log_alphas:
        t = time.perf_counter()
        res = simulate_flow(m, u0=task.u0, v0=task.v0, ts=ts, log_alpha=la)
        elapsed = time.perf_counter() - t
        s = {k: int(v) for k, v in res.stats.items() if k != "max_steps"}
        rows.append(dict(la=la, time=elapsed, jumps=woke(res), flow=res, **s))
        print(f"{label} log α={la:g}: {s} {elapsed:.1f} s, {woke(res)} jumps", flush=True)
    return dict(label=label, g_fast=g_fast, g_auto=g_auto, compile_s=compile_s, ts=ts, rows=rows)


def render_cost(block) -> str:
    lines = [
        f"**{block['label']}**, τ ∈ [0, {block['ts'][-1]:g}] at {len(block['ts'])} times. g: "
        f"{block['g_fast']:.3g} ms (the model's g) against {block['g_auto']:.3g} ms (autodiff of the same loss), "
        f"per evaluation in a compiled loop; `simulate_flow` compiles in {block['compile_s']:.1f} s.\n",
        "| log α | steps (accepted + rejected) | rejected | jumps | accepted per jump | time (s) | cost in g evaluations |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in block["rows"]:
        lines.append(
            f"| {r['la']:g} | {r['num_steps']} ({r['num_accepted_steps']} + {r['num_rejected_steps']}) | "
            f"{100 * r['num_rejected_steps'] / r['num_steps']:.0f} % | {r['jumps']} | "
            f"{r['num_accepted_steps'] / max(r['jumps'], 1):.0f} | {r['time']:.3g} | "
            f"{r['time'] / block['g_fast']:.3g}k |"
        )
    first, last = block["rows"][0], block["rows"][-1]
    lines.append(
        f"\nSteps at log α = {last['la']:g} / steps at {first['la']:g}: {last['num_steps'] / first['num_steps']:.2f}.\n"
    )
    return "\n".join(lines)


def gd_agreement(task, alpha, ts, flow, budget, agree=AGREE, k0=32):
    """Full-batch GD at the largest lr on the grid ``lr = Δτ log(1/α) / k`` found to agree with the flow to ``agree``.

    k starts at ``k0`` and grows by the first-order estimate ``err / agree`` (error ∝ lr; at most ×1000 per
    run, as the error saturates at O(1) for large lr) until β agrees; a run whose projected time would exceed
    what is left of ``budget`` seconds is not started, and the lr and time that 1e-3 needs are then
    extrapolated from the last run (error ∝ lr, time ∝ 1/lr), labelled as such.
    """
    L = np.log(1 / alpha)
    kw = dict(alpha=alpha, u0=task.u0, v0=task.v0)
    m = len(ts) - 1
    lr_of = lambda k: (ts[1] - ts[0]) * L / k  # noqa: E731
    simulate_gd(task.model, lr=lr_of(k0), steps=m * k0, record_every=k0, **kw)  # compiles
    k, tried, spent = k0, [], 0.0
    while True:
        t = time.perf_counter()
        res = simulate_gd(task.model, lr=lr_of(k), steps=m * k, record_every=k, **kw)
        elapsed = time.perf_counter() - t
        spent += elapsed
        err = float(np.abs(res.beta - flow.beta).max())
        tried.append((lr_of(k), err, elapsed))
        print(f"  GD lr={lr_of(k):.3g} ({m * k} steps): β error {err:.2g}, {elapsed:.1f} s", flush=True)
        out = dict(lr=lr_of(k), err=err, time=elapsed, steps=m * k, tried=tried)
        if err <= agree:
            return out
        k_next = int(np.ceil(k * min(1000.0, max(2.0, 1.3 * err / agree))))
        if spent + elapsed * k_next / k > budget:
            need = k * err / agree
            return dict(out, lr_needed=lr_of(need), time_needed=elapsed * need / k)
        k = k_next


def speed_table(quick: bool) -> str:
    """The goals' timings and GD on the dense head at the lr that agrees to 1e-3, measured."""
    dense = models.diagonal_attention(**(dict(DENSE, n=50) if quick else DENSE))
    toy = models.diagonal_attention(n=200 if quick else 1000)
    lines = []
    # The paper toy at 1e-32 with the demo's 400 times (τ ≤ 1.25 T_5 ≈ 3.75), and the dense head at 1e-300.
    for label, task, ts, alpha in (
        ("paper toy", toy, np.linspace(0.0, 3.75, 400), 1e-32),
        ("dense head", dense, TS, 1e-300),
    ):
        simulate_flow(task.model, u0=task.u0, v0=task.v0, ts=ts * 0.01, alpha=0.1)  # compiles
        t = time.perf_counter()
        res = simulate_flow(task.model, u0=task.u0, v0=task.v0, ts=ts, alpha=alpha)
        elapsed = time.perf_counter() - t
        lines.append(
            f"| {label}, α = {alpha:g}, τ ∈ [0, {ts[-1]:g}] at {len(ts)} times | {elapsed:.3g} | "
            f"{int(res.stats['num_steps'])} ({int(res.stats['num_rejected_steps'])} rejected) |"
        )
        print(lines[-1], flush=True)
    head = "| run (after compilation) | time (s) | steps |\n| --- | --- | --- |\n"
    out = head + "\n".join(lines) + "\n\n"
    # GD against the flow on a head small enough for GD at the lr that agrees to finish.
    small = models.diagonal_attention(**GD_HEAD)
    ts = np.linspace(0.0, 1.0, 31)
    alpha = 1e-32
    simulate_flow(small.model, u0=small.u0, v0=small.v0, ts=ts * 0.01, alpha=0.1)  # compiles
    t = time.perf_counter()
    flow = simulate_flow(small.model, u0=small.u0, v0=small.v0, ts=ts, alpha=alpha)
    flow_s = time.perf_counter() - t
    gd = gd_agreement(small, alpha, ts, flow, budget=60.0 if quick else GD_BUDGET)
    tried = "; ".join(f"lr {lr:.3g}: {e:.2g} ({s:.3g} s)" for lr, e, s in gd["tried"])
    head = (
        f"GD against the flow: `models.diagonal_attention({', '.join(f'{k}={v!r}' for k, v in GD_HEAD.items())})`, "
        f"α = 1e-32, τ ∈ [0, 1] at 31 times, {woke(flow)} jumps. `simulate_flow`: {flow_s:.3g} s "
        f"({int(flow.stats['num_steps'])} steps). Full-batch GD (float64, the model's g), lr tried (max β error, "
        f"time): {tried}.\n\n"
    )
    if "lr_needed" in gd:
        verdict = (
            f"Not reached within the {GD_BUDGET:g} s budget: 1e-3 needs lr ≲ {gd['lr_needed']:.2g}, "
            f"≳ {gd['time_needed']:.3g} s: **≳ {gd['time_needed'] / flow_s:.3g}× the flow's time (extrapolated "
            "from the last run)**.\n"
        )
    else:
        verdict = (
            f"At lr = {gd['lr']:.3g} ({gd['steps']} steps) β agrees to {gd['err']:.2g} in {gd['time']:.3g} s: "
            f"**{gd['time'] / flow_s:.3g}× the flow's time, measured**.\n"
        )
    return out + head + verdict


def solver_cost(task, n, quick) -> str:
    """The "Solver cost" section: both models at each log α of ``COST_LOG_ALPHAS``, the goals' timings, GD."""
    dense = models.diagonal_attention(**(dict(DENSE, n=50) if quick else DENSE))
    costs = [
        cost_rows(f"`models.diagonal_attention(n={n})` (the paper toy, p = 100)", task, TS, COST_LOG_ALPHAS),
        cost_rows(
            f"`models.diagonal_attention(n={dense.config['n']}, dim=20, teacher_nonzero=(None, None))` "
            "(the dense head, p = 40)",
            dense,
            np.linspace(0.0, 1.0, 31),
            COST_LOG_ALPHAS,
        ),
    ]
    return (
        f"Machine: {_common.cpu_name()}, 2 cores shared with other jobs (timings are noisy; steps and g counts are not); "
        f"jax {jax.__version__}, diffrax {dfx.__version__}; {datetime.date.today().isoformat()}.\n\n"
        + "\n".join(render_cost(b) for b in costs)
        + "\n"
        + speed_table(quick)
    )


def scaling_table() -> str:
    """Steps and time of `simulate_flow` against log α on an orthonormal diagonal linear task (p = 8),
    with the max abs β error against the closed form of `theory`."""
    import theory

    lin = models.diagonal_linear(n=50, p=8, orthonormal=True, seed=0)
    ts = np.linspace(0.0, 4.0, 41)
    lines = [
        "Cost against log α: `simulate_flow` on `models.diagonal_linear(n=50, p=8, orthonormal=True)`, "
        "τ ∈ [0, 4] at 41 times (six stages), default settings; error against "
        "`theory.diagonal_linear_beta_rescaled`.\n",
        "| log α | steps (accepted + rejected) | time (s) | max abs β error |",
        "| --- | --- | --- | --- |",
    ]
    simulate_flow(lin.model, u0=lin.u0, v0=lin.v0, ts=ts, log_alpha=-1.0)  # compile
    for la in (-18.42, -73.68, -230.26, -690.78, -2000.0, -1e4):
        t = time.perf_counter()
        res = simulate_flow(lin.model, u0=lin.u0, v0=lin.v0, ts=ts, log_alpha=la)
        elapsed = time.perf_counter() - t
        ref = theory.diagonal_linear_beta_rescaled(ts[:, None], lin.teacher_beta, lin.u0, lin.v0, log_alpha=la)
        s = res.stats
        steps = f"{int(s['num_steps'])} ({int(s['num_accepted_steps'])} + {int(s['num_rejected_steps'])})"
        lines.append(f"| {la:g} | {steps} | {elapsed:.3g} | {np.abs(res.beta - ref).max():.1e} |")
    return "\n".join(lines) + "\n"


def render(rows, task, n, cap, compile_s) -> str:
    head = (
        "| method | α | status | time (s) | work | loss at τ = 3 | max abs β error vs flow | note |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- |\n"
    )
    body = "".join(
        f"| {m} | {a:g} | {s} | {fmt_time(t)} | {w} | {l} | {e} | {note} |\n" for m, a, s, t, w, l, e, note in rows
    )
    return (
        f"Task: `models.diagonal_attention(n={n})` (10 tokens, dim 50, p = 100), τ ∈ [0, 3] at 31 times. "
        f"Cap per alternative and scale: {cap:g} s. `simulate_flow` compiles once in {compile_s:.1f} s "
        "(not included below). Machine: "
        f"{_common.cpu_name()}, 2 cores, no GPU; jax {jax.__version__}, diffrax {dfx.__version__}, "
        f"gradflow {gradflow.__version__ if hasattr(gradflow, '__version__') else '0.1.0'}; "
        f"{datetime.date.today().isoformat()}.\n\n" + head + body
    )


SECTION = "## Theory engine"

# How the default solver was chosen (measured once, 2026-11-21, on the machine of the tables; not rerun).
SOLVER_CHOICE = """\
**Solver choice** (measured while choosing the default; toy task with n = 200, τ ∈ [0, 3] at 31 times,
log α = −18.4 / −73.7 / −690 / −10⁴; "f-evals" counts evaluations of g):

| configuration | steps | f-evals | note |
| --- | --- | --- | --- |
| Kvaerno5, diffrax's default root finder (VeryChord), τ-time (8-coordinate linear task) | 2001 at −18.4 (1104 rejected); none accepted at −73.7 and −2000 | | its tolerance on dy/dτ = log(1/α) g is below the rounding of g |
| Kvaerno5 + `optimistix.Newton(1e-10)`, τ-time (linear task) | 165 at −18.4, 230 at −73.7, 79,120 at −2000 | | same cause, once log(1/α)² eps exceeds the tolerance |
| Kvaerno5 + Newton, unscaled time t (linear task) | 259 / 382 / 495 / 594 at −18.4 / −73.7 / −690 / −10⁴ | | a dense p×p Jacobian per Newton iteration: 8 s for p = 100 |
| Kvaerno3 + cached low-rank chord (t-time) | 2142 / 2800 / 3016 / 3081 | 13.0k / 17.0k / 18.5k / 18.8k | low order: many steps at atol 1e-8 |
| Kvaerno4 + cached low-rank chord | 812 / 1115 / 1277 / 1367 | 8.3k / 11.2k / 12.7k / 13.3k | |
| **Kvaerno5 + cached low-rank chord** (the default until 2026-11-23; still the solver of batched runs) | 257 / 372 / 488 / 556 | 4.1k / 5.9k / 7.2k / 7.6k | 5–59 Jacobians of rank 16 |

Since 2026-11-23 a single run takes Dopri8 steps inside the jumps and reads the output times off the dense
output; see *Solver cost against its goals*. The rest of this paragraph holds for both. The default integrates y = log w in unscaled time t = τ log(1/α) (so the stage equations are O(1) and
their rounding floor does not grow with log(1/α)), controls the local error of log w absolutely
(atol 1e-8; a relative tolerance on log w ≈ b log α would loosen the wake-up times of sleeping
coordinates: with rtol = atol = 1e-8 the β error at log α = −2000 was 2.5e-4 against 4.7e-9). Batched runs
step exactly onto the output times (Kvaerno5's cubic dense output alone gave 1.5e-6 β error at α = 1e-8 against
6.8e-8). The default limits step growth to 3× per step (fewer big steps overshooting into a jump: 54 instead of
90 Jacobians at log α = −10⁴). PI coefficients (pcoeff 0.3, icoeff 0.4) gave no gain.

"""


INTRO = (
    f"{SECTION}\n\n`python benchmarks/bench_flow.py --record` (see its docstring for the methods). "
    "`simulate_flow` is the exact flow; every alternative is measured against it.\n\n" + SOLVER_CHOICE
)

COST_SECTION = "## Solver cost"

COST_INTRO = f"""{COST_SECTION}

`python benchmarks/bench_flow.py --only cost --record`: what one `simulate_flow` costs, in steps, in
evaluations of g and in seconds, on the toy and on a dense head (24 stages in τ ∈ [0, 1]); see the
docstring. "Jumps" counts the coordinates that woke (|β_i| > 1e-3 at some recorded time); "cost in g
evaluations" is the flow's time over one g's time. An explicit step (Dopri8, inside the jumps) costs 13 g
evaluations; an implicit one (Kvaerno5, on the plateaus) about 17 (6 implicit stages of 2–3 chord
iterations, and the Jacobian refreshes), plus two Jacobian-vector products for its dense output when it
crosses a requested time.

"""


if __name__ == "__main__":
    with jax.enable_x64(True):  # the alternatives run in float64 too (gradflow's entry points scope it themselves)
        main()

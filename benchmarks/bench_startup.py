"""The first call of a fresh process, without and with gradflow's compilation cache (JAX's persistent cache in a
user cache directory; docs' *Floating point and JAX settings* page).

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_startup.py [--cases readme_full head_d6 ...] [--record]

Each case runs in new Python processes, one after the other: ``GRADFLOW_NO_CACHE=1`` (what every process paid
before: everything compiles), then two processes sharing a new, empty ``GRADFLOW_CACHE_DIR`` (the first compiles
and stores, the second reads back). Each process times ``import gradflow``, its first call of the case and a
second, identical call (compiled programs already in memory: the floor a cache can reach). The cases:

- ``readme_full``: the README's full-weight example (``matrix_factorization(m=4, n=3)``: ``greedy_limit``, then
  ``compare_limits`` at α = 1e-3 and 1e-6);
- ``readme_diagonal``: the README's API example without its comparison (``diagonal_attention(n=200, tokens=5,
  dim=8)``: ``greedy_limit``, then ``simulate_flow`` at three α);
- ``head_d6``: a first full-weight flow, ``attention_full(n=50, tokens=4, dim=6)`` at α = 1e-32, τ ∈ [0, 2.5] at
  31 times (the setting of bench_rank_growth.py);
- ``head_d50``: the same head at d = 50 over τ ∈ [0, 1e-6] (compilation and a few steps: the whole flow takes
  ~25 s after compiling, which no cache shortens).

``--record`` writes the section "Startup: the first call of a fresh process" of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing gradflow
    sys.path.insert(0, str(ROOT))

import jax  # noqa: E402

from benchmarks import _common  # noqa: E402

SECTION = "Startup: the first call of a fresh process"

CASES = {
    "readme_full": (
        "README, full weights: greedy + compare",
        "task = models.matrix_factorization(m=4, n=3, singular_values=(2.0, 1.0), seed=0)\n"
        "def call():\n"
        "    path = gradflow.greedy_limit(task.model, u0=task.u0, v0=task.v0)\n"
        "    gradflow.compare_limits(task.model, alphas=[1e-3, 1e-6], u0=task.u0, v0=task.v0, path=path)\n",
    ),
    "readme_diagonal": (
        "README, diagonal: greedy + 3 flows",
        "task = models.diagonal_attention(n=200, tokens=5, dim=8, seed=0)\n"
        "def call():\n"
        "    path = gradflow.greedy_limit(task.model, u0=task.u0, v0=task.v0)\n"
        "    ts = np.linspace(0.0, 1.2 * path.times[-1], 200)\n"
        "    gradflow.simulate_flow(task.model, u0=task.u0, v0=task.v0, ts=ts, alpha=np.array([1e-4, 1e-16, 1e-64]))\n",
    ),
    "head_d6": (
        "d = 6 head: one flow at 1e-32",
        "task = models.attention_full(n=50, tokens=4, dim=6, teacher_kq=(1, 0.5), teacher_vo=(1, 0.5))\n"
        "def call():\n"
        "    gradflow.simulate_flow(task.model, u0=task.u0, v0=task.v0, ts=np.linspace(0, 2.5, 31), alpha=1e-32)\n",
    ),
    "head_d50": (
        "d = 50 head: compile + τ ≤ 1e-6",
        "task = models.attention_full(n=50, tokens=4, dim=50, teacher_kq=(1, 0.5), teacher_vo=(1, 0.5))\n"
        "def call():\n"
        "    gradflow.simulate_flow(task.model, u0=task.u0, v0=task.v0, ts=np.linspace(0, 1e-6, 31), alpha=1e-32)\n",
    ),
}

CHILD = """
import json, os, time
t0 = time.perf_counter()
import numpy as np
import gradflow
from gradflow import models
t1 = time.perf_counter()
{setup}
t2 = time.perf_counter()
call()
t3 = time.perf_counter()
call()
t4 = time.perf_counter()
import jax
print("RESULT " + json.dumps(dict(imp=t1 - t0, first=t3 - t2, second=t4 - t3, load=os.getloadavg()[0],
                                  cache=jax.config.jax_compilation_cache_dir)))
"""


def child(case: str, env: dict) -> dict:
    """One fresh process running ``case``: its seconds to import, for the first and the second call."""
    code = CHILD.format(setup=CASES[case][1])
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    out = subprocess.run(
        [sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=path, **env), capture_output=True, text=True
    )
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"{case} failed:\n{out.stderr[-3000:]}")
    r = json.loads(line[len("RESULT ") :])
    print(f"measured: {case} {env} {json.dumps(r)}", flush=True)
    return r


def measure(case: str) -> dict:
    """The case without the cache, then twice with a new one."""
    env = {k: v for k, v in os.environ.items() if k in ("GRADFLOW_NO_CACHE", "GRADFLOW_CACHE_DIR")}
    if env:
        raise SystemExit(f"unset {', '.join(env)} first: this benchmark sets them per process.")
    off = child(case, dict(GRADFLOW_NO_CACHE="1"))
    with tempfile.TemporaryDirectory(prefix="gradflow-bench-cache-") as tmp:
        first = child(case, dict(GRADFLOW_CACHE_DIR=tmp))
        second = child(case, dict(GRADFLOW_CACHE_DIR=tmp))
        size = sum(f.stat().st_size for f in pathlib.Path(tmp).glob("*-cache"))
    return dict(case=case, off=off, first=first, second=second, mb=size / 2**20)


def table(rows: list[dict]) -> str:
    head = [
        "case",
        "no cache: first call (s)",
        "cache, 1st process (s)",
        "cache, 2nd process (s)",
        "2nd process / no cache",
        "second call, same process (s)",
        "import (s)",
        "cache (MB)",
        "load (1 min)",
    ]
    lines = _common.table_head(head)
    for r in rows:
        off, first, second = r["off"], r["first"], r["second"]
        lines.append(
            _common._cells(
                [
                    CASES[r["case"]][0],
                    f"{off['first']:.1f}",
                    f"{first['first']:.1f}",
                    f"**{second['first']:.1f}**",
                    f"{second['first'] / off['first']:.2f}",
                    f"{off['second']:.2f}",
                    f"{second['imp']:.1f}",
                    f"{r['mb']:.1f}",
                    " / ".join(f"{x['load']:.1f}" for x in (off, first, second)),
                ]
            )
        )
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    p.add_argument("--record", action="store_true", help=f'write the section "{SECTION}" of docs/benchmarks.md')
    args = p.parse_args(argv)
    rows = [measure(case) for case in args.cases]
    text = "\n".join(
        [
            f"## {SECTION}",
            "",
            f"`python benchmarks/bench_startup.py {' '.join(argv if argv is not None else sys.argv[1:])}`"
            " (see its docstring): each case in fresh processes, one after the other — without the cache"
            " (`GRADFLOW_NO_CACHE=1`: every program compiles, as before gradflow kept them), then twice with a new"
            " cache directory. Times are the first call's, `import gradflow` apart (a few seconds);"
            " the load is the 1-minute load average of each of the three processes."
            f" Machine: {_common.cpu_name()}, {os.cpu_count()} cores, no GPU; jax {jax.__version__}.",
            "",
            table(rows),
            "",
        ]
    )
    _common.show(text, SECTION, args.record)


if __name__ == "__main__":
    main()

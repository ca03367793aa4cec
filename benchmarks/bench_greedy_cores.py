"""The greedy low-rank limit with its phase-(B) runs one per core against one after the other, side by side.

    python benchmarks/bench_greedy_cores.py                       # both cases (about 10 minutes on 2 cores)
    python benchmarks/bench_greedy_cores.py --cases head20 --record

Each phase (B) of a factorised model's greedy path runs its flow from two ε and, with the assumption checks on, from
two perturbed starts (docs/math.md, *How (B) is computed*). The runs are independent: ``greedy_limit`` runs the ε
side by side, one per core, then the perturbed starts (``gradflow._config.map_per_core``). Here each case runs
``greedy_limit`` with one core (``gradflow._config._CORES`` set to 1: the runs one after the other, as before) and with
every core, in one process, after a path of one stage that compiles the programs both use. Cases:

- ``paper``: the paper's size (``PAPER_FULL`` of ``gradflow demo --full-weights --paper-size``: 1,000 samples of 10
  tokens, d = 50), without the assumption checks, as that demo runs it (two runs per phase (B));
- ``head20``: ``models.attention_full(n=50, tokens=4, dim=20, teacher_kq=(1, 0.5), teacher_vo=(1, 0.5))`` with the
  checks (four runs per phase (B)).

``--record`` replaces the section *Greedy low-rank limit: phase-(B) runs on all cores* of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing gradflow
    sys.path.insert(0, str(ROOT))

import gradflow  # noqa: E402
from benchmarks import _common  # noqa: E402
from gradflow import _config, models  # noqa: E402
from gradflow._factorized._pipeline import PAPER_FULL  # noqa: E402

CASES = {
    "paper": (lambda: PAPER_FULL.task(), False),
    "head20": (
        lambda: models.attention_full(n=50, tokens=4, dim=20, teacher_kq=(1.0, 0.5), teacher_vo=(1.0, 0.5)),
        True,
    ),
}
SECTION = "Greedy low-rank limit: phase-(B) runs on all cores"


def _greedy(task, check: bool, cores: int | None, **options):
    token = _config._CORES.set(cores)
    try:
        start, cpu = time.perf_counter(), time.process_time()
        path = gradflow.greedy_limit(
            task.model, u0=task.u0, v0=task.v0, check_assumptions=check, throw=False, progress=False, **options
        )
        return path, time.perf_counter() - start, time.process_time() - cpu
    finally:
        _config._CORES.reset(token)


def run(name: str) -> list[list]:
    build, check = CASES[name]
    task = build()
    _greedy(task, check, None, max_stages=1)  # compiles what both runs use
    rows, times, paths = [], {}, []
    for label, cores in (("one after the other", 1), ("one per core", None)):
        path, wall, cpu = _greedy(task, check, cores)
        times[label] = wall
        paths.append(path)
        stages = np.asarray(path.times)
        print(
            f"{name}: {label}: {wall:.1f} s wall, {cpu:.1f} s CPU, {stages.size - 1} stages, {path.result}", flush=True
        )
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        rows.append([name, label, f"{wall:.1f}", f"{cpu:.1f}", stages.size - 1, str(path.result), load])
    same = float(np.max(np.abs(np.asarray(paths[0].times) - np.asarray(paths[1].times))))
    rows[-1] += [f"{times['one after the other'] / times['one per core']:.2f}", f"{same:.1e}"]
    rows[0] += ["", ""]
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--record", action="store_true", help=f"replace the section '{SECTION}' of docs/benchmarks.md")
    args = parser.parse_args(argv)
    rows = [row for name in args.cases for row in run(name)]
    header = ["case", "phase-(B) runs", "wall s", "CPU s", "stages", "result", "load averages", "speed-up", "max ΔT_k"]
    details = (
        "Wall and CPU seconds of `greedy_limit` after a one-stage path compiled its programs; load averages (1, 5, "
        "15 min) at each run's end."
    )
    _common.cpu_table_section("bench_greedy_cores.py", SECTION, header, rows, details, args.record)


if __name__ == "__main__":
    main()

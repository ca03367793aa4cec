"""Sweeps: rows equal to the points run one by one, resume, outputs, 4 devices, two processes."""

from __future__ import annotations

import csv
import dataclasses
import math
import os
import pickle
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import gradflow
from gradflow._cli import main
from gradflow._io import config_hash
from gradflow._kit._comparison import default_times
from gradflow._sweep import SweepConfig, _run, _summary
from gradflow._sweep._grid import SweepTask, greedy_key, grid, point_rows
from gradflow._sweep._io import read_point, write_table

ROOT = Path(__file__).resolve().parents[2]

# Tiny tasks: diagonal linear regression (p = 3, two teachers) and a diagonal attention head (p = 4), one seed
# (seed 1, not the default 0), three scales: 9 points, 2 flow shapes (6 and 3 runs; 6 is padded to 8 on 4 devices).
# One seed: the flows of a task are compiled for its number of recorded times, which differs between seeds; two
# seeds compiled 4 flows instead of 2 (62 s instead of 37 s of CPU for this file's reference sweep).
TOML = (Path(__file__).parent / "sweep.toml").read_text()


def _config(tmp_path: Path, text: str = TOML) -> Path:
    path = tmp_path / "sweep.toml"
    path.write_text(text)
    return path


def _rows(out: Path, config: SweepConfig) -> list[dict]:
    rows = []
    for point in grid(config):
        found = read_point(out, point.hash)
        assert found is not None, f"point {point.hash} has no rows in {out}"
        rows += found
    return rows


def _one_flow(task, ts, log_alpha) -> gradflow.FlowResult:
    """``simulate_flow``'s single run: on the CPU the sweep solves each flow alone (``batching = "auto"``)."""
    return gradflow.simulate_flow(task.model, u0=task.u0, v0=task.v0, ts=ts, log_alpha=log_alpha)


def _assert_rows_equal(got: list[dict], want: list[dict], tol: float = 1e-10) -> dict[str, float]:
    """Same keys and values, floats to ``tol`` (absolute, plus relative); returns the largest difference per column."""
    assert len(got) == len(want)
    worst: dict[str, float] = {}
    for a, b in zip(got, want):
        assert list(a) == list(b)
        for key in a:
            x, y = a[key], b[key]
            if isinstance(y, float):
                x = float(x)
                same = x == y or (math.isnan(x) and math.isnan(y)) or abs(x - y) <= tol * (1 + abs(y))
                assert same, (key, x, y, a["point"])
                if math.isfinite(x) and math.isfinite(y):
                    worst[key] = max(worst.get(key, 0.0), abs(x - y))
            else:
                assert x == y, (key, x, y, a["point"])
    return worst


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The sweep of ``TOML`` in this process (one device), with its output folder."""
    out = tmp_path_factory.mktemp("sweep")
    result = gradflow.sweep(_config(out), out=out / "out", progress=False, table_format="csv")
    return result, out / "out"


# --------------------------------------------------------------------------------------------------
# The sweep against the points run one by one, resume, outputs.


def test_sweep_equals_points_run_one_by_one(reference):
    """Every point through the public API (greedy_limit, simulate_flow, compare_limits) gives the sweep's rows."""
    result, _ = reference
    config = result.config
    assert result.computed == 9 and result.missing == 0 and result.failed == 0
    want, paths = [], {}
    for point in grid(config):
        task = point.task.build()
        if point.task not in paths:
            paths[point.task] = gradflow.greedy_limit(
                task.model, u0=task.u0, v0=task.v0, max_stages=2, check_assumptions=False, seed=point.task.seed
            )
        path = paths[point.task]
        ts = default_times(path.times, num=config.num_times, log_alphas=config.log_alphas)  # as the sweep
        flow = _one_flow(task, ts, point.log_alpha)
        comparison = gradflow.compare_limits(
            task.model, log_alpha=[point.log_alpha], u0=task.u0, v0=task.v0, path=path, ts=ts, flows=flow
        )
        rows = point_rows(point, path=path, names=task.model.names, flow=flow, comparison=comparison)
        # the rows say what the path and the comparison say
        assert [r["T_greedy"] for r in rows] == path.times.tolist()
        assert [r["coordinate"] for r in rows[1:]] == [task.model.names[i] for i in path.activated]
        np.testing.assert_array_equal([r["T_detected"] for r in rows[1:]], comparison.detected_times[0])
        assert [[r["ok_4_2"], r["ok_4_3"], r["ok_4_4"]] for r in rows] == path.assumptions_ok.tolist()
        want += rows
    worst = _assert_rows_equal(list(result.rows), want)
    print("largest differences:", {k: f"{v:.1e}" for k, v in worst.items() if v})


_FACTORIZED = """\
run = "compare"
alphas = [1e-2, 1e-4]
max_stages = 2
check_assumptions = false
num_times = 30
batching = "vmap"

[[model]]
name = "matrix_factorization"
m = 2
n = 2
singular_values = [1.0, 0.4]
"""


def test_a_factorised_greedy_sweep(tmp_path):
    """The sweep takes every family's tasks: the rows of a full-weight task's greedy path, the rank jumps named by
    weight matrix (the flows: the slow test below)."""
    config = SweepConfig.from_toml(_config(tmp_path, _FACTORIZED.replace('run = "compare"', 'run = "greedy"')))
    assert dict(config.models[0].options)["singular_values"] == ((1.0, 0.4),)
    result = gradflow.sweep(config, out=tmp_path / "out", progress=False, figures=False)
    task = grid(config)[0].task.build()
    path = gradflow.greedy_limit(task.model, u0=task.u0, v0=task.v0, max_stages=2, check_assumptions=False)
    want = point_rows(grid(config)[0], path=path, names=task.model.names)
    assert [r["coordinate"] for r in want] == ["", "W", "W"] and [r["T_greedy"] for r in want] == path.times.tolist()
    _assert_rows_equal(list(result.rows), want)


@pytest.mark.slow
def test_a_factorised_sweep_equals_its_points_run_one_by_one(tmp_path):
    """The sweep runs every family: a full-weight task's rows are those of its points through the public API, the
    rank jumps named by weight matrix; with ``batching = "vmap"`` its flows, which its family cannot batch across
    models, are solved alone."""
    config = SweepConfig.from_toml(_config(tmp_path, _FACTORIZED))
    result = gradflow.sweep(config, out=tmp_path / "out", progress=False, figures=False)
    assert result.computed == 2 and result.failed == 0
    task = grid(config)[0].task.build()
    path = gradflow.greedy_limit(task.model, u0=task.u0, v0=task.v0, max_stages=2, check_assumptions=False)
    ts = _run._times(config, path, grid(config)[0].task)  # the sweep's grid, refined to the smallest α's jumps
    want = []
    for point in grid(config):
        flow = gradflow.simulate_flow(task.model, u0=task.u0, v0=task.v0, ts=ts, log_alpha=point.log_alpha)
        comparison = gradflow.compare_limits(
            task.model, log_alpha=[point.log_alpha], u0=task.u0, v0=task.v0, path=path, ts=ts, flows=flow
        )
        want += point_rows(point, path=path, names=task.model.names, flow=flow, comparison=comparison)
    assert [r["coordinate"] for r in want] == ["", "W", "W"] * 2 and "W_distance" in want[0]
    assert all(np.isfinite(r["W_distance"]) and np.isfinite(r["b_distance"]) for r in want)
    _assert_rows_equal(list(result.rows), want)


def test_resume_skips_finished_points(reference, tmp_path, monkeypatch):
    result, out = reference
    out = Path(shutil.copytree(out, tmp_path / "out"))
    calls = {"greedy": 0, "flows": 0, "runs": 0}
    greedy, solve = _run.greedy_limit, _run.solve_flow

    def counted_greedy(*args, **kwargs):
        calls["greedy"] += 1
        return greedy(*args, **kwargs)

    def counted_solve(task, *args, **kwargs):
        calls["flows"] += 1
        calls["runs"] += 1
        return solve(task, *args, **kwargs)

    monkeypatch.setattr(_run, "greedy_limit", counted_greedy)
    monkeypatch.setattr(_run, "solve_flow", counted_solve)
    again = gradflow.sweep(result.config, out=out, progress=False, table_format="csv", figures=False)
    assert (again.computed, again.reused) == (0, 9) and calls == {"greedy": 0, "flows": 0, "runs": 0}
    assert again.rows == result.rows
    # an interrupted sweep: the linear points' rows and one task's greedy path are lost
    lost = [p for p in grid(result.config) if p.task.model == "diagonal_linear"]
    for point in lost:
        (out / "points" / f"{point.hash}.json").unlink()
    (out / "greedy" / f"greedy-{config_hash(greedy_key(result.config, lost[0].task))}.npz").unlink()
    again = gradflow.sweep(result.config, out=out, progress=False, table_format="csv", figures=False)
    assert (again.computed, again.reused) == (6, 3) and calls == {"greedy": 1, "flows": 6, "runs": 6}
    _assert_rows_equal(list(again.rows), list(result.rows), tol=0.0)


def test_ctrl_c_writes_no_row_of_a_stopped_flow(reference, tmp_path, monkeypatch):
    """Ctrl-C as the flows run (the stop flag every solve checks between segments): the sweep raises
    ``KeyboardInterrupt`` without writing a row for a flow it stopped, and a rerun computes those points."""
    from gradflow._solver import _segments

    result, out = reference
    out = Path(shutil.copytree(out, tmp_path / "out"))
    lost = [p for p in grid(result.config) if p.task.model == "diagonal_linear"]
    for point in lost:
        (out / "points" / f"{point.hash}.json").unlink()
    with monkeypatch.context() as stop:
        stop.setattr(_segments, "stop_requested", lambda: True)
        with pytest.raises(KeyboardInterrupt):
            gradflow.sweep(result.config, out=out, progress=False, table_format="csv", figures=False)
    assert not any((out / "points" / f"{point.hash}.json").exists() for point in lost)
    again = gradflow.sweep(result.config, out=out, progress=False, table_format="csv", figures=False)
    assert (again.computed, again.reused) == (6, 3)
    _assert_rows_equal(list(again.rows), list(result.rows), tol=0.0)


_LINEAR = TOML.split('[[model]]\nname = "diagonal_attention"')[0]


def test_another_sweep_into_the_folder_is_refused_unless_overwrite(reference, tmp_path, capsys):
    """A different sweep into a sweep's folder is refused before it computes; with ``overwrite`` the earlier table
    and figures go, and the points the two sweeps share are reused."""
    result, out = reference
    out = Path(shutil.copytree(out, tmp_path / "out"))
    files = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    linear = SweepConfig.from_toml(_config(tmp_path, _LINEAR))  # the linear points of the reference sweep
    with pytest.raises(ValueError, match="holds the output of another run .gradflow sweep; .* pass --overwrite"):
        gradflow.sweep(linear, out=out, progress=False)
    assert main(["sweep", str(_config(tmp_path, _LINEAR)), "--out", str(out)]) == 2
    assert "pass --overwrite (overwrite=True) to replace it" in capsys.readouterr().err
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == files
    merged = gradflow.sweep(linear, out=out, merge_only=True, overwrite=True, table_format="csv", figures=False)
    assert merged.missing == 0 and len(merged.rows) == len(_rows(out, linear))
    assert not list((out / "figures").glob("*.png"))  # the other sweep's figures are gone
    with open(out / "sweep.csv") as fh:
        assert [r["point"] for r in csv.DictReader(fh)] == [r["point"] for r in merged.rows]


def test_merge_with_points_missing_writes_no_table(reference, tmp_path, capsys):
    """``--merge`` before every point is done: exit status 1, a message saying how many are missing, no table."""
    result, out = reference
    out = Path(shutil.copytree(out, tmp_path / "out"))
    (out / "sweep.csv").unlink()
    (out / "points" / f"{result.rows[0]['point']}.json").unlink()
    assert main(["sweep", str(_config(tmp_path)), "--out", str(out), "--merge", "--format", "csv"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gradflow: error: 1 point of the grid has no rows in ") and "no table is written" in err
    assert not (out / "sweep.csv").exists()


def test_greedy_only_sweep(reference, tmp_path):
    """``run = "greedy"``: one row per task and stage, the greedy columns of the compare sweep."""
    result, _ = reference
    text = _LINEAR.replace('run = "compare"', 'run = "greedy"')
    greedy = gradflow.sweep(_config(tmp_path, text), out=tmp_path / "out", progress=False, figures=False)
    compared = [
        r for r in result.rows if r["model"] == "diagonal_linear" and r["log_alpha"] == result.config.log_alphas[0]
    ]
    assert len(greedy.rows) == len(compared) and "T_detected" not in greedy.rows[0]
    for got, want in zip(greedy.rows, compared):
        assert got["log_alpha"] is None
        shared = [k for k in got if k in want and k not in ("point", "log_alpha", "alpha")]
        assert shared == [k for k in got if k not in ("point", "log_alpha", "alpha")]
        _assert_rows_equal([{k: got[k] for k in shared}], [{k: want[k] for k in shared}], tol=0.0)


@pytest.mark.slow  # fast twins: the reference sweep's flows (run = "compare"), test_greedy_only_sweep
def test_flow_only_sweep(reference, tmp_path):
    """``run = "flow"``: one row per point, the final loss of ``simulate_flow`` on an even grid up to ``tau_max``."""
    text = _LINEAR.replace('run = "compare"', 'run = "flow"\ntau_max = 3.0').replace("num_times = 60", "num_times = 67")
    config = SweepConfig.from_toml(_config(tmp_path, text))
    flows = gradflow.sweep(config, out=tmp_path / "out", progress=False, figures=False)
    assert len(flows.rows) == len(grid(config)) == 6 and "stage" not in flows.rows[0]
    for row, point in zip(flows.rows, grid(config)):
        task = point.task.build()
        ts = np.linspace(0.0, 3.0, 67)
        flow = _one_flow(task, ts, point.log_alpha)
        assert row["point"] == point.hash and row["flow_steps"] == int(flow.stats["num_steps"])
        assert abs(row["final_loss"] - float(flow.loss[-1])) <= 1e-10


def test_outputs_table_figures_and_summary(reference):
    result, out = reference
    assert result.table == out / "sweep.csv"
    with open(result.table) as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == len(result.rows) and list(table[0]) == list(dict.fromkeys(k for r in result.rows for k in r))
    assert {r["model"] for r in table} == {"diagonal_linear", "diagonal_attention"}
    assert table[-1]["teacher_nonzero"] == "[1, 1]" and table[0]["tokens"] == ""
    assert sorted(f.name for f in result.figures) == [
        "assumptions.png",
        "num_stages.png",
        "rates.png",
        "stage_times.png",
    ]
    groups = _summary.summarise(result.rows)
    assert [g.label for g in groups] == ["diagonal_linear nonzero=2", "diagonal_linear nonzero=3", "diagonal_attention"]
    assert all(g.tasks == 1 and g.rates["b"].size == 1 for g in groups)
    assert all(0 <= f <= 1 for g in groups for f in g.failures.values())


def test_parquet_table(reference, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    result, _ = reference
    path = write_table(tmp_path, list(result.rows), "parquet")
    table = pq.read_table(path).to_pylist()
    assert len(table) == len(result.rows) and table[0]["T_greedy"] == result.rows[0]["T_greedy"]
    assert table[-1]["teacher_nonzero"] == "[1, 1]" and table[0]["tokens"] is None


# --------------------------------------------------------------------------------------------------
# Several devices, several processes (subprocesses: the device count is fixed when JAX starts).


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "JAX_"))}
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT), **extra)
    return env


def _vmap_sweep(reference, tmp_path):
    """The linear tasks of the reference sweep with ``batching = "vmap"`` (the accelerators' default), 2 runs per
    device and call (``batch_size = 2``, which does not change the points: on 4 devices one call of 6 runs padded to
    8), the greedy paths reused."""
    result, out = reference
    for folder in ("one", "out"):
        shutil.copytree(out / "greedy", tmp_path / folder / "greedy")
    config = SweepConfig.from_toml(_config(tmp_path, _LINEAR))
    config = dataclasses.replace(config, batch_size=2, batching="vmap")
    return config, gradflow.sweep(config, out=tmp_path / "one", progress=False, figures=False)


def test_vmapped_batches_match_the_separate_solves(reference, tmp_path):
    """Batched flows (one device) give the rows of the CPU's default, each flow solved alone, to the solvers'
    accuracy."""
    _, one = _vmap_sweep(reference, tmp_path)
    separate = [r for r in reference[0].rows if r["model"] == "diagonal_linear"]
    assert [r["point"] for r in one.rows] == [r["point"] for r in separate]
    for a, b in zip(one.rows, separate):  # Kvaerno5 throughout against Dopri8 inside the jumps: 1e-8 per step
        x, y = a["beta_distance"], b["beta_distance"]
        assert (math.isnan(x) and math.isnan(y)) or abs(x - y) <= 1e-6, (a, b)


@pytest.mark.slow  # a second process compiles the batched flows again; the fast twin is the test above
def test_four_devices_match_one_device(reference, tmp_path):
    """The batched flows sharded over 4 CPU devices give the rows of the same sweep on 1 device."""
    config, one = _vmap_sweep(reference, tmp_path)
    code = (
        "import jax, gradflow, pickle, sys\n"
        "from gradflow._diagonal import _family\n"
        "assert len(jax.local_devices()) == 4, jax.local_devices()\n"
        "solve, calls = _family.solve_sharded, []\n"
        "_family.solve_sharded = lambda tasks, *a, **k: calls.append((len(tasks), k['width'])) or solve(tasks, *a, **k)\n"
        "config = pickle.loads(sys.stdin.buffer.read())\n"
        f"r = gradflow.sweep(config, out={str(tmp_path / 'out')!r}, progress=False, figures=False)\n"
        "print(r.computed, r.reused, r.missing, calls)\n"
    )
    env = _env(XLA_FLAGS="--xla_force_host_platform_device_count=4")
    proc = subprocess.run(
        [sys.executable, "-c", code], input=pickle.dumps(config), env=env, capture_output=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    assert proc.stdout.decode().strip() == "6 0 0 [(6, 8)]"
    worst = _assert_rows_equal(_rows(tmp_path / "out", config), list(one.rows))
    print("largest differences:", {k: f"{v:.1e}" for k, v in worst.items() if v})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_split_and_merge(reference, tmp_path):
    """``gradflow sweep --coordinator`` in two processes: each computes its share, process 0 merges one table."""
    result, _ = reference
    coordinator = f"127.0.0.1:{_free_port()}"
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "gradflow", "sweep", str(_config(tmp_path)), "--out", str(tmp_path / "out")]
            + ["--format", "csv", "--no-progress", "--coordinator", coordinator]
            + ["--num-processes", "2", "--process-id", str(i)],
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outputs = [p.communicate(timeout=600) for p in procs]
    for p, (_, stderr) in zip(procs, outputs):
        assert p.returncode == 0, stderr[-3000:]
    counts = [int(stdout.split(" points:")[0].split()[-1]) for stdout, _ in outputs]
    assert sum(counts) == 9 and min(counts) > 0  # the grid was split, by task
    assert "table: " in outputs[0][0] and "process 0 merges the table" in outputs[1][0]
    with open(tmp_path / "out" / "sweep.csv") as fh:
        table = list(csv.DictReader(fh))
    columns = list(table[0])
    _assert_rows_equal(table, [{k: _csv_cell(r.get(k)) for k in columns} for r in result.rows])


def _csv_cell(value):
    """A value as the CSV holds it (text), floats kept as floats for the tolerance."""
    if isinstance(value, float):
        return value
    if isinstance(value, list):
        return str(value)
    return "" if value is None else str(value)


def test_a_depth_tasks_grid_resolves_its_jumps():
    """The sweep refines a task's recorded times down to its family's jump width, ``0.01 α^{L−2}`` at depth L (as
    ``compare_limits`` does), not the ``0.01 / log(1/α)`` of depth 2, so that the detected stage times of depth tasks
    are not the grid's."""
    config = SweepConfig.from_mapping(dict(alphas=[1e-2, 1e-4], model=[dict(name="saxe_modes", depth=3)]))
    path = SimpleNamespace(times=np.array([0.0, 1 / 3, 1 / 2, 1.0]))
    ts = _run._times(config, path, SweepTask("saxe_modes", (("depth", 3),), 0))
    for stage_time in path.times[1:]:
        offsets = np.abs(ts - stage_time)
        assert np.min(offsets[offsets > 0]) == pytest.approx(0.01 * 1e-4, rel=1e-6)

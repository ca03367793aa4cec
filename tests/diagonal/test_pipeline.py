"""The demo on its reduced configuration: every file, and a re-run that recomputes nothing."""

import dataclasses
import json
import os
import stat

import numpy as np
import pytest

from gradflow._demo import PAPER_LOG_ALPHAS, QUICK, DemoConfig, run_demo
from gradflow._io import _HEADER, ResultStore, config_hash, load_result, save_result
from gradflow._kit._report import format_alpha


@dataclasses.dataclass(frozen=True)
class _Inner:
    a: np.ndarray
    name: str


@dataclasses.dataclass(frozen=True)
class _Outer:
    inner: _Inner
    values: tuple
    nothing: None
    x: float


def test_save_load_roundtrip(tmp_path):
    obj = _Outer(_Inner(np.arange(6.0).reshape(2, 3), "β[0]"), ("a", 1, np.array([True, False])), None, float("nan"))
    back = load_result(save_result(tmp_path / "r.npz", obj))
    assert type(back) is _Outer and back.inner.name == "β[0]" and np.isnan(back.x) and back.nothing is None
    np.testing.assert_array_equal(back.inner.a, obj.inner.a)
    assert back.values[:2] == ("a", 1) and back.values[2].tolist() == [True, False]


def test_store_reuses_by_config(tmp_path):
    calls = []
    store = ResultStore(tmp_path)
    make = lambda: calls.append(1) or _Inner(np.zeros(2), "x")  # noqa: E731
    store.get("r", {"a": 1.0}, make)
    store.get("r", {"a": 1.0}, make)
    store.get("r", {"a": 2.0}, make)
    assert len(calls) == 2 and [w for _, w, _ in store.log] == ["computed", "reused", "computed"]
    assert config_hash({"a": 1.0}) != config_hash({"a": 1.0 + 1e-15})
    ResultStore(tmp_path, force=True).get("r", {"a": 1.0}, make)
    assert len(calls) == 3


def test_result_from_another_version_is_recomputed(tmp_path):
    """A stored result whose fields differ from the class's (written by an older gradflow) is not half-loaded."""
    store = ResultStore(tmp_path)
    path = store.path("r", {"a": 1})
    save_result(path, _Inner(np.zeros(2), "x"))
    with np.load(path) as data:
        arrays = dict(data)
    header = json.loads(str(arrays[_HEADER]))
    del header["fields"]["name"]  # as if the class had gained the field `name` since
    arrays[_HEADER] = np.asarray(json.dumps(header))
    np.savez(path, **arrays)
    with pytest.raises(ValueError, match="another version"):
        load_result(path)
    with pytest.warns(UserWarning, match="another version.*computing it again"):
        store.get("r", {"a": 1}, lambda: _Inner(np.ones(2), "new"))
    assert [w.split(" ")[0] for _, w, _ in store.log] == ["unreadable", "computed"] and load_result(path).name == "new"


def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip_a_byte(path):  # inside the first array's data: the zip's CRC-32 no longer matches
    data = bytearray(path.read_bytes())
    data[200] ^= 0xFF
    path.write_bytes(bytes(data))


def _foreign(path):
    np.savez(path, x=np.zeros(3))


@pytest.mark.parametrize(
    "damage, reason",
    [
        (_truncate, "BadZipFile"),
        (_flip_a_byte, "BadZipFile: Bad CRC-32"),
        (_foreign, "KeyError"),
        (lambda path: path.write_text("not a zip"), "ValueError"),
        (lambda path: path.write_bytes(b""), "(EOFError|BadZipFile)"),
    ],
)
def test_a_damaged_result_file_is_refused_in_one_line_and_recomputed_by_the_store(tmp_path, damage, reason):
    """A truncated ``results/flow_*.npz`` gave ``zipfile.BadZipFile`` and a traceback (issue 26): every damaged or
    foreign file is now a ``DamagedFile`` (a ``ValueError``, one line, naming it), which a store recomputes."""
    from gradflow._io import DamagedFile

    store = ResultStore(tmp_path)
    path = store.path("flow", {"a": 1})
    save_result(path, _Inner(np.arange(100.0), "old"))
    damage(path)
    with pytest.raises(DamagedFile, match=f"{path}.*{reason}") as refused:
        load_result(path)
    assert "\n" not in str(refused.value)
    with pytest.warns(UserWarning, match=f"{path} is not a whole gradflow result.*computing it again"):
        again = store.get("flow", {"a": 1}, lambda: _Inner(np.ones(2), "new"))
    assert again.name == load_result(path).name == "new"


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_result_files_are_as_readable_as_the_umask_allows(tmp_path, umask, mode):
    """Results and records were written 0600 whatever the umask (a private temporary file renamed): now as ``open``
    would create them."""
    from gradflow._io import write_durably

    before = os.umask(umask)
    try:
        written = [save_result(tmp_path / "r.npz", _Inner(np.zeros(2), "x")), tmp_path / "gradflow.json"]
        write_durably(written[1], "{}")
    finally:
        os.umask(before)
    assert [stat.S_IMODE(p.stat().st_mode) for p in written] == [mode, mode]


def test_config_validation():
    with pytest.raises(ValueError, match="unknown model"):
        DemoConfig(model="mlp")
    with pytest.raises(ValueError, match="alpha"):
        DemoConfig(log_alphas=(1.0,))
    with pytest.raises(ValueError, match="figure_log_alphas shares no scale"):
        DemoConfig(log_alphas=(-3.0,))
    assert DemoConfig(log_alphas=(-3.0,), figure_log_alphas=None).drawn() == [0]
    default = DemoConfig()
    assert len(default.log_alphas) == 11 and min(default.log_alphas) == -1e4
    assert [default.log_alphas[a] for a in default.drawn()] == list(PAPER_LOG_ALPHAS)


def test_quick_demo_writes_everything_and_reuses_it(tmp_path):
    result = run_demo(QUICK, out=tmp_path, progress=False)
    expected = ["report.md", "comparison.csv", "comparison.json", "log.txt"] + [
        f"figures/{name}.png"
        for name in ("loss", "beta_KQ", "beta_VO", "log_weights", "convergence", "perturb_plateau", "perturb_stage")
    ]
    for name in expected:
        assert (tmp_path / name).stat().st_size > 0, name
    results = sorted((tmp_path / "results").glob("*.npz"))
    assert len(results) == 1 + len(QUICK.log_alphas) + 2
    assert {w for _, w, _ in result.log} == {"computed"}
    # Figure 9's check: perturbed at random plateau times, the flow returns to the unperturbed one
    plateau = result.perturbations["plateau"]
    assert np.all(plateau.final_deviation < plateau.initial_deviation)
    report = (tmp_path / "report.md").read_text()
    assert "Greedy limit" in report and "Hessian min eig" in report and "fitted r" in report
    # the report's numbers are the computed ones, and checks that QUICK skips are not claimed as passed
    for T in result.path.times[1:]:
        assert f"| {T:.4g} |" in report
    assert not QUICK.check_assumptions and "4.3 not run" in report and "4.3 ✓" not in report
    # log α = −1e4 is compared and fitted, not drawn per α; the grid resolves its stage times near T_k
    assert f"α = {format_alpha(-1e4)} |" in report and "α ∈ {0.01, 1e-8, 1e-16}" in report and "figures draw" in report
    T = result.path.times[1:]
    assert np.all(np.abs(result.comparison.detected_times[-1] - T) < 2e-3 * T)
    mtimes = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file() and p.name != "log.txt"}

    again = run_demo(QUICK, out=tmp_path, progress=False)
    assert {w for _, w, _ in again.log} == {"reused"}
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes
    np.testing.assert_array_equal(again.comparison.b_distance, result.comparison.b_distance)

"""Results on disk (gradflow/_io.py): saved and loaded with their classes, reused by configuration, refused in one
line when damaged or written by another version, and as readable as the user's umask allows."""

import dataclasses
import json
import os
import stat

import numpy as np
import pytest

from gradflow._io import _HEADER, DamagedFile, ResultStore, config_hash, load_result, save_result, write_durably


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
    before = os.umask(umask)
    try:
        written = [save_result(tmp_path / "r.npz", _Inner(np.zeros(2), "x")), tmp_path / "gradflow.json"]
        write_durably(written[1], "{}")
    finally:
        os.umask(before)
    assert [stat.S_IMODE(p.stat().st_mode) for p in written] == [mode, mode]

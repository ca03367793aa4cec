"""Results on disk: result objects as ``.npz``, written as they are produced and reused on re-runs.

A result object (an ``eqx.Module`` or dataclass whose fields are arrays, numbers, strings,
tuples of those, ``None`` or nested result objects) is written by :func:`save_result` as one
``.npz`` file: its arrays as NumPy arrays and everything else in a JSON header naming the class.
:func:`load_result` rebuilds the same object without calling its ``__init__``. Every member of the file carries the
zip format's CRC-32, checked as it is read: a truncated, damaged or foreign file is a :class:`DamagedFile` error
(one line, naming the file), never a half-read result.

Files are written atomically (a temporary file renamed over the target) with the permissions the user's umask gives
a new file, as ``open`` would (a temporary file alone would be private, 0600).

:class:`ResultStore` keys every file by a hash of the configuration that produced it, so a re-run
with the same configuration reuses it and a changed configuration recomputes it.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import importlib
import json
import os
import sys
import tempfile
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

_HEADER = "__gradflow_header__"
FORMAT = "__gradflow_format__"
FORMAT_VERSION = 2
"""The version of the file format, written into every file: 1 (no version in the file) before the names of
CHANGELOG.md's *Vocabulary*, 2 since."""


def config_hash(config: Any, *, length: int = 12) -> str:
    """A stable short hash of a JSON-serialisable configuration (floats by their ``repr``)."""
    text = json.dumps(_jsonable(config), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def _jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [_jsonable(v) for v in obj.tolist()]
    if isinstance(obj, (np.floating, float)):
        return repr(float(obj))
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def _encode(value: Any, key: str, arrays: dict[str, np.ndarray]) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            "__class__": _class_name(type(value)),
            "fields": {
                f.name: _encode(getattr(value, f.name), f"{key}.{f.name}", arrays) for f in dataclasses.fields(value)
            },
        }
    if isinstance(value, (np.ndarray, np.generic)) or hasattr(value, "__array__"):
        arr = np.asarray(value)
        if arr.dtype == object:
            raise TypeError(f"cannot save field {key!r}: object arrays are not supported.")
        arrays[key] = arr
        return {"__array__": key}
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v, f"{key}[{i}]", arrays) for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [_encode(v, f"{key}[{i}]", arrays) for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {"__dict__": {str(k): _encode(v, f"{key}[{k}]", arrays) for k, v in value.items()}}
    if value is None or isinstance(value, (bool, int, float, str)):
        if isinstance(value, float) and not np.isfinite(value):
            return {"__float__": repr(value)}
        return value
    raise TypeError(f"cannot save field {key!r} of type {type(value).__name__}.")


def _decode(spec: Any, arrays) -> Any:
    if isinstance(spec, list):
        return [_decode(v, arrays) for v in spec]
    if not isinstance(spec, dict):
        return spec
    if "__array__" in spec:
        return np.asarray(arrays[spec["__array__"]])
    if "__tuple__" in spec:
        return tuple(_decode(v, arrays) for v in spec["__tuple__"])
    if "__dict__" in spec:
        return {k: _decode(v, arrays) for k, v in spec["__dict__"].items()}
    if "__float__" in spec:
        return float(spec["__float__"])
    qualname = spec["__class__"].split(":")[1]
    cls = _class(spec["__class__"])
    expected = {f.name for f in dataclasses.fields(cls)}
    fields = upgraded_fields(cls, spec["fields"])
    if set(fields) != expected:
        raise ValueError(
            f"the stored {qualname} has fields {sorted(spec['fields'])} but this version of gradflow expects "
            f"{sorted(expected)}: it was written by another version; recompute it."
        )
    obj = object.__new__(cls)
    for name, field_spec in fields.items():
        object.__setattr__(obj, name, _decode(field_spec, arrays))
    return obj


RENAMED_FIELDS = {
    "Comparison": {"beta_distance": "weights_distance", "beta_rate": "weights_rate"},
    "RankComparison": {"W_distance": "weights_distance", "W_rate": "weights_rate", "factor": "activated"},
    "GreedyPath": {"coordinate": "activated"},
    "FactorizedGreedyPath": {"factor": "activated"},
}
"""The fields renamed in format version 2 (CHANGELOG.md, *Vocabulary*), by class: files of version 1 still load."""


def upgraded_fields(cls: type, fields: dict[str, Any]) -> dict[str, Any]:
    """A stored object's ``fields`` (name: spec) under the names of this version (``RENAMED_FIELDS``), with the
    fields added since that have a default (e.g. a comparison's ``runs``) set to it."""
    renames = RENAMED_FIELDS.get(cls.__name__, {})
    fields = {renames.get(name, name): spec for name, spec in fields.items()}
    for f in dataclasses.fields(cls):
        if f.name not in fields and f.default is not dataclasses.MISSING and f.default is None:
            fields[f.name] = None
    return fields


def _class_name(cls: type) -> str:
    """``module:qualname`` of a result's class: ``gradflow:Name`` for the classes gradflow exports (stable when the
    package's private modules move), else where it is defined."""
    public = sys.modules.get("gradflow")
    if getattr(public, cls.__name__, None) is cls:
        return f"gradflow:{cls.__name__}"
    return f"{cls.__module__}:{cls.__qualname__}"


def _class(name: str) -> Any:
    """The class ``module:qualname`` names, or gradflow's public class of that name where the module has moved (a
    file written by an earlier version)."""
    module, qualname = name.split(":")
    try:
        cls: Any = importlib.import_module(module)
        for part in qualname.split("."):
            cls = getattr(cls, part)
        return cls
    except (ImportError, AttributeError):
        public = importlib.import_module("gradflow")
        if module.startswith("gradflow.") and hasattr(public, qualname):
            return getattr(public, qualname)
        raise


class DamagedFile(ValueError):
    """A result file that cannot be read back: truncated, damaged (a CRC-32 that does not match), or not written by
    :func:`save_result`; ``reason`` says which."""

    def __init__(self, path: Path, reason: str):
        self.path, self.reason = path, reason
        super().__init__(f"{path} {reason}; delete it (a re-run computes it again).")


def save_result(path: str | os.PathLike, result: Any) -> Path:
    """Write ``result`` to ``path`` (``.npz``) atomically: a crash never leaves a half-written file."""
    path = Path(path)
    arrays: dict[str, np.ndarray] = {}
    header = _encode(result, "result", arrays)
    arrays[_HEADER] = np.asarray(json.dumps(header))
    arrays[FORMAT] = np.asarray(FORMAT_VERSION)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp.npz")
    os.close(fd)
    try:
        np.savez(tmp, **arrays)
        os.chmod(tmp, _new_file_mode())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def load_result(path: str | os.PathLike) -> Any:
    """Read a result written by :func:`save_result`; a file that is not one whole (truncated, damaged, another
    program's) is a :class:`DamagedFile` error naming it."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
        header = json.loads(str(arrays.pop(_HEADER)))
    except (zipfile.BadZipFile, EOFError, KeyError, ValueError, OSError) as err:
        if isinstance(err, FileNotFoundError):
            raise
        why = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        reason = f"is not a whole gradflow result file ({type(err).__name__}: {why}): truncated, damaged or another's"
        raise DamagedFile(path, reason) from None
    try:
        return _decode(header, arrays)
    except (KeyError, TypeError, AttributeError, ImportError) as err:
        raise DamagedFile(path, f"holds no gradflow result this version reads ({type(err).__name__}: {err})") from None


def _new_file_mode() -> int:
    """The permissions of a new file under the process's umask (``0o666 & ~umask``), read without changing it."""
    try:
        with open("/proc/self/status") as status:
            umask = next(int(line.split()[1], 8) for line in status if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        umask = _UMASK_AT_IMPORT
    return 0o666 & ~umask


def _umask_at_import() -> int:
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


_UMASK_AT_IMPORT = _umask_at_import()  # where /proc cannot tell (not Linux); set before any thread of gradflow's


class ResultStore:
    """Results under ``root``, one ``{name}-{hash}.npz`` per step, keyed by the step's configuration.

    ``get(name, config, compute)`` returns the stored result when a file for the same name and
    configuration exists (unless ``force``), else computes, writes and returns it. ``log`` lists
    ``(name, "computed" | "reused", path)`` for every step, in order.
    """

    def __init__(self, root: str | os.PathLike, *, force: bool = False):
        self.root = Path(root)
        self.force = force
        self.log: list[tuple[str, str, Path]] = []

    def path(self, name: str, config: Any, suffix: str = ".npz") -> Path:
        return self.root / f"{name}-{config_hash(config)}{suffix}"

    def get(self, name: str, config: Any, compute: Callable[[], Any]) -> Any:
        path = self.path(name, config)
        if path.exists() and not self.force:
            try:
                result = load_result(path)
            except (OSError, ValueError) as err:  # DamagedFile, or a file of another version
                why = f"{path} {err.reason}" if isinstance(err, DamagedFile) else str(err)
                warnings.warn(f"{why}; computing it again", UserWarning, stacklevel=2)
                self.log.append((name, f"unreadable ({type(err).__name__}), recomputed", path))
            else:
                self.log.append((name, "reused", path))
                return result
        result = compute()
        save_result(path, result)
        self.log.append((name, "computed", path))
        return result

    def fresh(self, name: str, config: Any, targets: list[Path]) -> bool:
        """Whether the files ``targets`` were made from ``config`` (a stamp file records it)."""
        stamp = self.path(name, config, suffix=".done")
        ok = not self.force and stamp.exists() and all(t.exists() for t in targets)
        if ok:
            self.log.append((name, "reused", stamp))
        return ok

    def mark(self, name: str, config: Any, targets: list[Path]) -> None:
        """Record that ``targets`` were made from ``config``."""
        stamp = self.path(name, config, suffix=".done")
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text("\n".join(str(t) for t in targets) + "\n")
        self.log.append((name, "computed", stamp))


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write JSON (NaN and inf as ``null``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_json_clean(obj), indent=2) + "\n")
    return path


def _json_clean(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _json_clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_clean(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _json_clean(obj.tolist())
    if isinstance(obj, (np.floating, float)):
        return float(obj) if np.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj


def write_csv(path: str | os.PathLike, records: list[dict[str, Any]]) -> Path:
    """Write records as CSV, floats in full precision; the columns are the union of their keys (empty if missing)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fields = list(dict.fromkeys(k for rec in records for k in rec))
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields, restval="")
        writer.writeheader()
        for rec in records:
            writer.writerow({k: (repr(float(v)) if isinstance(v, (float, np.floating)) else v) for k, v in rec.items()})
    return path


RECORD = "gradflow.json"


def claim_folder(out: Path, record: dict[str, Any], *, overwrite: bool, how: str) -> bool:
    """Write ``record`` (what a run computes, JSON) to ``out/gradflow.json``, unless the folder holds another run's.

    A folder with the same record is the same run's (a re-run resumes it); one with another record, or an
    unreadable one, raises ``ValueError`` saying ``how`` to overwrite it, unless ``overwrite``. Returns whether
    the folder held another run.
    """
    path = out / RECORD
    record = json.loads(json.dumps(record))  # as it reads back
    text = json.dumps(record, indent=1)
    try:
        earlier = json.loads(path.read_text())
    except FileNotFoundError:
        write_durably(path, text)
        return False
    except (OSError, ValueError):
        earlier = None
    if earlier == record:
        return False
    if not overwrite:
        command = (
            f"gradflow {earlier['command']}" if isinstance(earlier, dict) and "command" in earlier else "unreadable"
        )
        raise ValueError(
            f"{out} holds the output of another run ({command}; its settings are in {path}); {how} to replace it, "
            "or give another output folder."
        )
    write_durably(path, text)
    return True


def write_durably(path: Path, text: str) -> None:
    """Write ``text`` atomically and durably (``fsync``): a crash leaves the file whole or absent."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fchmod(fh.fileno(), _new_file_mode())
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)

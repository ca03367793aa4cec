"""A sweep's files: its TOML config, one rows file per finished point, and the merged table.

Layout of a sweep's output folder::

    gradflow.json          which sweep writes here (its grid), so that another one does not overwrite it
    points/<hash>.json     the rows of one finished point (written atomically and fsync'ed as it finishes)
    greedy/greedy-<hash>.npz  the greedy paths (``_io.ResultStore``), reused by re-runs
    sweep.parquet | .csv   the merged table (Parquet when pyarrow is installed, else CSV)

A point is finished when its rows file exists, so a re-run (or another process) skips it; the
files of all processes go to the same folder, and merging reads them in grid order.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from .._io import write_csv, write_durably

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

FORMATS = ("auto", "csv", "parquet")
TABLES = ("sweep.csv", "sweep.parquet")


def read_toml(path: str | os.PathLike) -> dict[str, Any]:
    """Parse a TOML file (a syntax error becomes a ``ValueError`` with TOML's line and column)."""
    with open(path, "rb") as fh:
        try:
            return tomllib.load(fh)
        except tomllib.TOMLDecodeError as err:
            raise ValueError(f"not valid TOML: {err}") from None


def example_config() -> Path:
    """The example sweep shipped with gradflow (``gradflow/data/sweep_example.toml``)."""
    return Path(__file__).parents[1] / "data" / "sweep_example.toml"


def point_file(out: Path, point: str) -> Path:
    return out / "points" / f"{point}.json"


def write_point(out: Path, point: str, rows: list[dict[str, Any]]) -> Path:
    """Write the rows of one point atomically and durably: a crash leaves the file whole or absent."""
    path = point_file(out, point)
    write_durably(path, json.dumps({"point": point, "rows": rows}))
    return path


def read_point(out: Path, point: str) -> list[dict[str, Any]] | None:
    """The rows of a finished point, or None if it has no (readable) rows file."""
    try:
        with open(point_file(out, point)) as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data["rows"] if isinstance(data, dict) and data.get("point") == point else None


def wait_for_points(out: Path, points, *, interval: float = 2.0) -> None:
    """Block until every point of ``points`` (hashes) has a rows file: the other processes' shares are done.

    Polls the (shared) output folder, not a collective: the shares may finish hours apart, longer than
    a collective's time-out, and JAX's distributed runtime ends a process that dies, so no process
    waits for a dead one for ever.
    """
    left = [p for p in points if not point_file(out, p).exists()]
    while left:
        time.sleep(interval)
        left = [p for p in left if not point_file(out, p).exists()]


def _cell(value: Any) -> Any:
    """A table cell: tuples and lists as JSON text, everything else as is."""
    return json.dumps(value) if isinstance(value, (list, tuple)) else value


def write_table(out: Path, rows: list[dict[str, Any]], fmt: str = "auto") -> Path:
    """Write the merged table as ``out/sweep.parquet`` (pyarrow) or ``out/sweep.csv``; returns its path.

    ``fmt="auto"`` picks Parquet when pyarrow is installed. Columns are the union of the rows' keys
    (empty where a row has none, e.g. the sizes of another model); a column mixing numbers and text is
    written as text.
    """
    if fmt not in FORMATS:
        raise ValueError(f"table format must be one of {FORMATS}; got {fmt!r}.")
    have_arrow = importlib.util.find_spec("pyarrow") is not None
    if fmt == "parquet" and not have_arrow:
        raise ValueError("Parquet needs pyarrow: pip install pyarrow (or pip install 'gradflow[parquet]'), or use csv.")
    rows = [{k: _cell(v) for k, v in row.items()} for row in rows]
    if fmt == "csv" or not have_arrow:
        return write_csv(out / TABLES[0], rows)
    return _write_parquet(out / TABLES[1], rows)


def _write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = list(dict.fromkeys(k for row in rows for k in row))
    columns = {}
    for name in names:
        values = [row.get(name) for row in rows]
        kinds = {type(v) for v in values if v is not None}
        if str in kinds and len(kinds) > 1:
            values = [None if v is None else str(v) for v in values]
        elif kinds == {int, float}:
            values = [None if v is None else float(v) for v in values]
        columns[name] = pa.array(values)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(pa.table(columns), tmp)
    os.replace(tmp, path)
    return path

"""A sweep's files: one rows file per finished point, written whole, and the merged table (CSV or Parquet)."""

from __future__ import annotations

import csv
import threading

import pytest

from gradflow._sweep._io import point_file, read_point, wait_for_points, write_point, write_table

ROWS = [dict(point="p1", n=3, teacher=[1, 2], loss=0.125), dict(point="p1", n=3, teacher=[1, 2], error="nan loss")]


def test_a_points_rows_read_back_only_from_its_own_whole_file(tmp_path):
    path = write_point(tmp_path, "p1", ROWS)
    assert path == point_file(tmp_path, "p1") == tmp_path / "points" / "p1.json"
    assert read_point(tmp_path, "p1") == ROWS
    assert read_point(tmp_path, "p2") is None  # not finished
    path.rename(point_file(tmp_path, "p2"))
    assert read_point(tmp_path, "p2") is None  # another point's rows
    point_file(tmp_path, "p3").write_text('{"point": "p3", "rows": [')
    assert read_point(tmp_path, "p3") is None  # cut short


def test_waiting_for_points_ends_when_the_last_rows_file_appears(tmp_path):
    write_point(tmp_path, "p1", ROWS)
    wait_for_points(tmp_path, ["p1"], interval=0.01)
    later = threading.Timer(0.05, write_point, (tmp_path, "p2", ROWS))
    later.start()
    wait_for_points(tmp_path, ["p1", "p2"], interval=0.01)
    later.join()
    assert read_point(tmp_path, "p2") == ROWS


def test_csv_table_has_every_column_and_lists_as_json(tmp_path):
    path = write_table(tmp_path, ROWS, "csv")
    with open(path) as fh:
        table = list(csv.DictReader(fh))
    assert path == tmp_path / "sweep.csv" and list(table[0]) == ["point", "n", "teacher", "loss", "error"]
    assert [r["teacher"] for r in table] == ["[1, 2]"] * 2 and [r["loss"] for r in table] == ["0.125", ""]
    assert table[1]["error"] == "nan loss" and table[0]["error"] == ""
    with pytest.raises(ValueError, match=r"table format must be one of \('auto', 'csv', 'parquet'\); got 'xlsx'"):
        write_table(tmp_path, ROWS, "xlsx")


def test_parquet_table_writes_a_column_of_mixed_kinds_as_text(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [dict(a=1, b=1, c=None), dict(a=2.5, b="x", c=None)]
    table = pq.read_table(write_table(tmp_path, rows, "parquet")).to_pylist()
    assert table == [dict(a=1.0, b="1", c=None), dict(a=2.5, b="x", c=None)]
    assert write_table(tmp_path, rows, "auto") == tmp_path / "sweep.parquet"

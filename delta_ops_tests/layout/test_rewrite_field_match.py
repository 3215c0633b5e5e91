"""The rewriters and the statistics writer refuse files whose columns, read by name, are not
what the spec's reader reads.

Spec "Column Mapping": in `id` mode "readers must resolve columns by using the `field_id`
in the parquet metadata for each file", nested fields included. Before the fix, a file
whose nested field had the right id under another name (written before a rename, or
converted from Iceberg) was rewritten by OPTIMIZE with nulls in place of its values, and
`stats` published "every row null" for it; a file whose column names differ from the
table's only in case (Spark reads them, deltalake does not) lost its values the same way.
Now the file is refused, naming the column, and nothing of it changes.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from delta_ops.errors import RewriteError, StatsReadError
from delta_ops.layout.field_match import file_mismatch
from delta_ops.layout.optimize import optimize
from delta_ops.layout.stats import compute_stats

OLD_MS = 1_700_000_000_000


def _field(name: str, kind, fid: int, physical: str) -> dict:
    return {"name": name, "type": kind, "nullable": True,
            "metadata": {"delta.columnMapping.id": fid,
                         "delta.columnMapping.physicalName": physical}}


def _ids(name: str, kind: pa.DataType, fid: int) -> pa.Field:
    return pa.field(name, kind, metadata={b"PARQUET:field_id": str(fid).encode()})


def _table(root: Path, schema: list[dict], config: dict, files: list[pa.Table],
           protocol: tuple[int, int]) -> None:
    log = root / "_delta_log"
    log.mkdir(parents=True)
    actions = [
        {"commitInfo": {"timestamp": OLD_MS, "operation": "WRITE"}},
        {"protocol": {"minReaderVersion": protocol[0], "minWriterVersion": protocol[1]}},
        {"metaData": {"id": "t", "format": {"provider": "parquet", "options": {}},
                      "schemaString": json.dumps({"type": "struct", "fields": schema}),
                      "partitionColumns": [], "configuration": config,
                      "createdTime": OLD_MS}},
    ]
    for data in files:
        name = f"part-{uuid.uuid4()}.parquet"
        pq.write_table(data, root / name)
        actions.append({"add": {"path": name, "partitionValues": {},
                                "size": (root / name).stat().st_size,
                                "modificationTime": OLD_MS, "dataChange": True}})
    (log / f"{0:020}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))


def _renamed_nested(root: Path) -> None:
    """`id` mode, `st: struct<x>`; one file holds `st.x` (id 3) under an old name."""
    schema = [_field("a", "long", 1, "col-a"),
              _field("st", {"type": "struct", "fields": [_field("x", "string", 3, "col-x")]},
                     2, "col-st")]
    old = pa.schema([_ids("col-a", pa.int64(), 1),
                     _ids("col-st", pa.struct([_ids("old_x", pa.string(), 3)]), 2)])
    new = pa.schema([_ids("col-a", pa.int64(), 1),
                     _ids("col-st", pa.struct([_ids("col-x", pa.string(), 3)]), 2)])
    _table(root, schema, {"delta.columnMapping.mode": "id", "delta.columnMapping.maxColumnId":
                          "3"},
           [pa.Table.from_pylist([{"col-a": 1, "col-st": {"old_x": "one"}}], old),
            pa.Table.from_pylist([{"col-a": 2, "col-st": {"col-x": "two"}}], new)], (2, 5))


def _case_only(root: Path) -> None:
    schema = [{"name": "FooBar", "type": "long", "nullable": True, "metadata": {}}]
    _table(root, schema, {}, [pa.table({"foobar": [1, 2]}), pa.table({"FooBar": [3]})], (1, 2))


@pytest.mark.parametrize(("build", "says"), [
    (_renamed_nested, "nested field col-st.col-x (id 3) is named 'old_x'"),
    (_case_only, "column FooBar is 'foobar' in the file"),
])
def test_optimize_and_stats_refuse_naming_the_column(tmp_path, build, says):
    root = tmp_path / "t"
    build(root)
    before = sorted((p.name, p.read_bytes()) for p in root.rglob("*") if p.is_file())
    with pytest.raises(RewriteError, match=re.escape(says)):
        optimize(str(root), min_files=2, dry_run=False)
    with pytest.raises(StatsReadError, match=re.escape(says)):
        compute_stats(str(root), recompute_all=True, dry_run=False)
    assert sorted((p.name, p.read_bytes()) for p in root.rglob("*") if p.is_file()) == before


def test_file_mismatch_cases():
    """The rules one by one: ids agree with names; an id found under another name; a file
    without ids in `id` mode; the id absent where the name holds other values; a list's
    and a map's children; names that differ only in case; `name` mode reads by name."""
    x = _ids("col-x", pa.string(), 3)
    target = pa.schema([_ids("col-st", pa.struct([x]), 2)])
    same = pa.schema([_ids("col-st", pa.struct([x]), 2)])
    assert file_mismatch(same, target, "id") is None
    renamed = pa.schema([_ids("other", pa.struct([_ids("old", pa.string(), 3)]), 2)])
    assert "(id 3) is named 'old'" in file_mismatch(renamed, target, "id")
    no_ids = pa.schema([pa.field("col-st", pa.struct([pa.field("col-x", pa.string())]))])
    assert "has no field ids" in file_mismatch(no_ids, target, "id")
    assert file_mismatch(no_ids, pa.schema([pa.field("col-st", pa.struct(
        [pa.field("col-x", pa.string())]))]), "name") is None
    wrong_id = pa.schema([_ids("col-st", pa.struct([_ids("col-x", pa.string(), 9)]), 2)])
    assert "no field id 3" in file_mismatch(wrong_id, target, "id")
    listed = pa.schema([_ids("l", pa.list_(pa.field("element", pa.struct(
        [_ids("old", pa.string(), 3)]))), 4)])
    want = pa.schema([_ids("l", pa.list_(pa.field("element", pa.struct([x]))), 4)])
    assert "is named 'old'" in file_mismatch(listed, want, "id")
    mapped = pa.schema([_ids("m", pa.map_(pa.string(), pa.struct(
        [_ids("old", pa.string(), 3)])), 5)])
    want_map = pa.schema([_ids("m", pa.map_(pa.string(), pa.struct([x])), 5)])
    assert "is named 'old'" in file_mismatch(mapped, want_map, "id")
    cased = pa.schema([pa.field("S", pa.struct([pa.field("X", pa.int64())]))])
    assert "differs only in case" in file_mismatch(
        cased, pa.schema([pa.field("S", pa.struct([pa.field("x", pa.int64())]))]), "none")


def test_a_partition_column_missing_from_the_schema_is_named_not_a_traceback(tmp_path):
    from delta_ops.errors import CorruptLogError

    root = tmp_path / "t"
    _table(root, [{"name": "a", "type": "long", "nullable": True, "metadata": {}}], {},
           [pa.table({"a": [1]}), pa.table({"a": [2]})], (1, 2))
    commit = root / "_delta_log" / f"{0:020}.json"
    lines = [json.loads(line) for line in commit.read_text().splitlines()]
    for action in lines:
        if "metaData" in action:
            action["metaData"]["partitionColumns"] = ["month"]
    commit.write_text("".join(json.dumps(a) + "\n" for a in lines))
    with pytest.raises(CorruptLogError, match="partition column 'month' is not in the"):
        optimize(str(root), min_files=2, dry_run=True)

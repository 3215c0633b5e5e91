"""Deletion vectors and the data (part 3 of `test_deletion_vectors.py`): live files of DV
tables are read with pyarrow, rows in the DV dropped, and the result compared with DAT's
expected rows or with the file statistics and Spark's recorded DELETE predicates."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from delta_ops.protocol.deletion_vectors import (
    DeletionVectorDescriptor,
    RoaringBitmap64,
    unique_id_of,
)
from delta_ops_tests.support.corpus import CORPUS, corpus_path
from delta_ops_tests.support.dv_cases import (
    SPECIAL_CHAR_TABLE,
    decode_dv,
)

# ---------------------------------------------------------------------------------------
# 3. Data correctness
# ---------------------------------------------------------------------------------------


def live_adds(table: str) -> list[dict[str, Any]]:
    """Tiny replay: latest add per (path, DV unique id), from the last classic checkpoint
    (per `_last_checkpoint`) and the commits after it."""
    log = corpus_path(table) / "_delta_log"
    state: dict[tuple[str, str | None], dict[str, Any]] = {}
    start = -1
    last = log / "_last_checkpoint"
    if last.exists():
        info = orjson.loads(last.read_bytes())
        assert "parts" not in info and "v2Checkpoint" not in info, "only classic here"
        start = info["version"]
        cp = pq.read_table(log / f"{start:020d}.checkpoint.parquet", columns=["add"])
        for add in cp.column("add").to_pylist():
            if add is not None:
                state[(add["path"], unique_id_of(add.get("deletionVector")))] = add
    for path in sorted(log.glob("[0-9]" * 20 + ".json")):
        if int(path.stem) <= start:
            continue
        for line in path.read_bytes().splitlines():
            action = orjson.loads(line)
            for kind in ("add", "remove"):
                if kind in action:
                    a = action[kind]
                    key = (a["path"], unique_id_of(a.get("deletionVector")))
                    if kind == "add":
                        state[key] = a
                    else:
                        state.pop(key, None)
    return list(state.values())


def read_live_rows(
    table: str, add: dict[str, Any]
) -> tuple[pa.Table, pa.Table, RoaringBitmap64]:
    """(all rows of the data file, rows left after the DV, the DV's bitmap)."""
    data = pq.read_table(corpus_path(table) / unquote(add["path"]))
    raw = add.get("deletionVector")
    if raw is None:
        return data, data, RoaringBitmap64()
    d = DeletionVectorDescriptor.from_dict(raw)
    bitmap = decode_dv(table, d)
    assert len(bitmap) == d.cardinality
    assert bitmap.max() < data.num_rows
    keep = pa.array([i not in bitmap for i in range(data.num_rows)], pa.bool_())
    return data, data.filter(keep), bitmap


# DELETE predicates as Spark records them in commitInfo, for one column:
# `(col1#10915 = 16)`, `(id#378L < 2)`, `(letter#39791 = a)` and
# `(spark_catalog.delta.`<path>`.value IN (0, 9))`.
_PREDICATE = re.compile(
    r"\((?:(\w+)#\d+L?|spark_catalog\.delta\.`[^`]*`\.(\w+)) (=|<|IN) (\(([^)]*)\)|[\w-]+)\)"
)


@dataclass(frozen=True)
class DeletePredicate:
    version: int
    column: str
    op: str
    values: tuple[Any, ...]

    def matches(self, value: Any) -> bool:
        if self.op == "<":
            return value is not None and value < self.values[0]
        return value in self.values


def _literal(token: str) -> Any:
    token = token.strip()
    return int(token) if re.fullmatch(r"-?\d+", token) else token


def log_history(table: str) -> tuple[list[DeletePredicate], dict[str, int], dict[str, str]]:
    """From every JSON commit: DELETE predicates, first version each path was added, and
    the logical -> physical column names of the latest schema (column mapping)."""
    log = corpus_path(table) / "_delta_log"
    commits = sorted(log.glob("[0-9]" * 20 + ".json"))
    assert [int(c.stem) for c in commits] == list(range(len(commits))), "need every commit"
    predicates: list[DeletePredicate] = []
    first_added: dict[str, int] = {}
    schema: dict[str, Any] = {}
    for commit in commits:
        version = int(commit.stem)
        for line in commit.read_bytes().splitlines():
            action = orjson.loads(line)
            info = action.get("commitInfo")
            if info and info.get("operation") == "DELETE":
                conjuncts = orjson.loads(info["operationParameters"]["predicate"])
                assert len(conjuncts) == 1, conjuncts
                m = _PREDICATE.fullmatch(conjuncts[0])
                assert m, f"unparsed DELETE predicate {conjuncts[0]!r} in {table}"
                values = m[5].split(",") if m[3] == "IN" else [m[4]]
                predicates.append(
                    DeletePredicate(version, m[1] or m[2], m[3], tuple(map(_literal, values)))
                )
            if "add" in action:
                first_added.setdefault(action["add"]["path"], version)
            if "metaData" in action:
                schema = orjson.loads(action["metaData"]["schemaString"])
    physical = {
        f["name"]: f.get("metadata", {}).get("delta.columnMapping.physicalName", f["name"])
        for f in schema["fields"]
    }
    return predicates, first_added, physical


GOLDEN_DV_DATA_TABLES = [
    "golden__dv-partitioned-with-checkpoint",
    "golden__dv-with-columnmapping",
    "golden__log-replay-dv-key-cases",
    "kernel-defaults__basic-dv-no-checkpoint",
    "kernel-defaults__basic-dv-with-checkpoint",
    "spark__table-with-dv-small",
    "spark__table-with-dv-large",
    "spark__partitioned-table-with-dv-large",
    SPECIAL_CHAR_TABLE,
]


@pytest.mark.parametrize("table", GOLDEN_DV_DATA_TABLES)
def test_live_rows_match_stats_and_delete_predicates(table: str) -> None:
    """Row counts agree with `numRecords - cardinality`, and the rows the DVs drop are
    the ones the table's DELETE commits targeted: every dropped row satisfies some DELETE
    predicate, and no kept row satisfies a DELETE issued after its file was added."""
    adds = live_adds(table)
    assert adds
    predicates, first_added, physical = log_history(table)
    with_dv = live = expected_live = dropped_checked = 0
    for add in adds:
        data, kept, bitmap = read_live_rows(table, add)
        num_records = orjson.loads(add["stats"])["numRecords"] if add.get("stats") else None
        if num_records is not None:
            assert data.num_rows == num_records, add["path"]
            expected_live += num_records - len(bitmap)
        else:
            expected_live += kept.num_rows
        assert kept.num_rows == data.num_rows - len(bitmap)
        live += kept.num_rows
        with_dv += add.get("deletionVector") is not None
        if not predicates:
            continue
        columns = {p.column: data.column(physical[p.column]).to_pylist() for p in predicates}
        later = [p for p in predicates if p.version > first_added[add["path"]]]
        for row in range(data.num_rows):
            if row in bitmap:
                assert any(p.matches(columns[p.column][row]) for p in predicates), (add, row)
                dropped_checked += 1
            else:
                assert not any(p.matches(columns[p.column][row]) for p in later), (add, row)
    assert with_dv > 0, "a DV table whose live files carry no DV proves nothing"
    assert live == expected_live
    if table == SPECIAL_CHAR_TABLE:
        assert not predicates  # its DV was not written by a DELETE
    else:
        assert predicates and dropped_checked > 0


def test_dat_deletion_vectors_exact_rows() -> None:
    table = "deletion_vectors"
    root = CORPUS / "dat" / table
    content = root / "expected" / "latest" / "table_content"
    expected = pa.concat_tables([pq.read_table(p) for p in sorted(content.glob("*.parquet"))])
    columns = expected.column_names
    adds = live_adds(table)
    assert len(adds) == 1 and adds[0].get("deletionVector") is not None
    actual_rows: list[tuple[Any, ...]] = []
    deleted_rows: list[tuple[Any, ...]] = []
    for add in adds:
        data, kept, bitmap = read_live_rows(table, add)
        assert len(bitmap) > 0
        actual_rows += list(zip(*(kept.column(c).to_pylist() for c in columns), strict=True))
        all_rows = list(zip(*(data.column(c).to_pylist() for c in columns), strict=True))
        deleted_rows += [r for r in all_rows if r not in actual_rows]
    expected_rows = list(zip(*(expected.column(c).to_pylist() for c in columns), strict=True))
    assert sorted(actual_rows, key=repr) == sorted(expected_rows, key=repr)
    # The commit that wrote the DV is `DELETE WHERE letter = 'a'`.
    assert deleted_rows and all(r[columns.index("letter")] == "a" for r in deleted_rows)

"""The plan read column by column (`plan_layout` on the snapshot's Arrow schema: a map of
partition values, a DV struct) against the plan the simple way, written out here: every row
to Python, grouped by its partition values. Random files over two partition columns with
nulls, deletion vectors, row tracking fields, percent-encoded paths, absolute paths inside
and outside the root; the two plans must be the same, bin for bin and file for file. A
commit refuses bins whose rows are not the planned snapshot's."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delta_ops.layout.commit import _planned_extras
from delta_ops.layout.plan import parse_where, plan_layout
from delta_ops.protocol.path_identity import relative_key
from delta_ops_tests.support.dv_writer import inline_descriptor

ROOT = "file:///t"
TARGET = 1000
PARTS = {"p1": "p1", "p2": "col-2"}  # logical -> physical (the second as column mapping has it)
STRING_MAP = pa.map_(pa.string(), pa.string())
#: The columns of `Snapshot.files` the plan and the commit read, with the snapshot's types.
SCHEMA = pa.schema([
    ("path", pa.string()), ("partitionValues", STRING_MAP), ("size", pa.int64()),
    ("stats", pa.string()), ("tags", STRING_MAP),
    ("deletionVector", pa.struct([
        ("storageType", pa.string()), ("pathOrInlineDv", pa.string()),
        ("offset", pa.int32()), ("sizeInBytes", pa.int32()), ("cardinality", pa.int64())])),
    ("baseRowId", pa.int64()), ("defaultRowCommitVersion", pa.int64()),
])

files_strategy = st.lists(st.tuples(
    st.sampled_from(["a", "b", None]), st.sampled_from(["x", "y z"]),
    st.integers(1, 30).map(lambda k: 100 * k),  # sizes tie often: then the path orders
    st.integers(0, 50), st.integers(0, 10),
    st.sampled_from(["relative", "absolute", "outside", "dotted", "climbs", "colon"]),
    st.booleans(),
), max_size=60)


def _path(i: int, p1: str | None, p2: str, where: str) -> str:
    relative = (f"p1={'__HIVE_DEFAULT_PARTITION__' if p1 is None else p1}/"
                f"col-2={p2.replace(' ', '%20')}/f{37 * i % 101}-{i}.parquet")
    return {"relative": relative, "absolute": f"{ROOT}/{relative}",
            "outside": f"file:///elsewhere/f{i}.parquet",
            # Empty and dot segments: inside, under another key than the path as written.
            "dotted": "./" + relative.replace("/col-2", "//col-2"),
            "climbs": f"../f{i}.parquet",  # above the root: outside
            "colon": relative.replace("/f", "/t=10:00/f")}[where]


def _table(files) -> pa.Table:
    rows = []
    for i, (p1, p2, size, n, deleted, where, tracked) in enumerate(files):
        deleted = min(deleted, n)
        rows.append({
            "path": _path(i, p1, p2, where),
            "partitionValues": [("p1", p1), ("col-2", p2)],
            "size": size,
            "stats": json.dumps({"numRecords": n}) if n else None,
            "tags": [("INSERTION_TIME", str(i))] if i % 3 == 0 else None,
            "deletionVector": inline_descriptor(range(deleted)).to_dict() if deleted else None,
            "baseRowId": 10 * i if tracked else None,
            "defaultRowCommitVersion": i % 4 if tracked else None,
        })
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def _simple_plan(table, operation, min_files, ratio, cap, where):
    """The plan the simple way: every row as a dict, the partition as its sorted items."""
    to_logical = {p: lg for lg, p in PARTS.items()}
    groups: dict[tuple, list[tuple]] = {}
    considered = considered_bytes = outside = 0
    for row_no, row in enumerate(table.to_pylist()):
        key = relative_key(row["path"], ROOT)
        if key is None:
            outside += 1
            continue
        values = dict(row["partitionValues"])
        if where is not None and not where.matches(
                {to_logical[k]: v for k, v in values.items()}):
            continue
        considered += 1
        considered_bytes += row["size"]
        dv = row["deletionVector"]
        dv = None if dv is None else {k: v for k, v in dv.items() if v is not None}
        deleted = int(dv.get("cardinality") or 0) if dv else 0
        records = json.loads(row["stats"])["numRecords"] if row["stats"] else None
        groups.setdefault(tuple(sorted(values.items())), []).append((
            row["path"], key, row["size"], records, deleted, dv,
            row["baseRowId"], row["defaultRowCommitVersion"], values, row_no))
    bins = []
    for part in sorted(groups, key=repr):
        group = groups[part]
        if operation == "purge":
            chosen = [f for f in group if f[5]]
        else:
            # A DV's share of the rows; all of them when the row count is unknown or 0.
            must = [f for f in group
                    if f[5] and f[4] and (f[4] / f[3] if f[3] else 1.0) > ratio]
            small = [f for f in group if f[2] < TARGET and f not in must]
            if not must and len(small) < max(min_files, 2):
                continue
            chosen = must + small
        chosen.sort(key=lambda f: (f[2], f[0]))
        current: list[tuple] = []
        for f in chosen:
            if current and sum(c[2] for c in current) + f[2] > cap:
                bins.append((dict(part), current))
                current = []
            current.append(f)
        if current:
            bins.append((dict(part), current))
    return bins, considered, considered_bytes, outside


@settings(max_examples=300, deadline=None)
@given(files=files_strategy, min_files=st.integers(1, 4),
       ratio=st.sampled_from([0.0, 0.05, 0.5]), cap=st.integers(TARGET, 4 * TARGET),
       where=st.sampled_from([None, "p1 = 'a'", "p1 IS NULL", "p2 IN ('y z')"]))
def test_the_columnar_plan_is_the_simple_plan(files, min_files, ratio, cap, where):
    table = _table(files)
    predicate = None if where is None else parse_where(where, list(PARTS))
    for operation in ("optimize", "purge"):
        plan = plan_layout(table, root=ROOT, version=1, operation=operation,
                           partition_columns=PARTS, target_size=TARGET, min_files=min_files,
                           max_deleted_rows_ratio=ratio, max_bin_bytes=cap, where=predicate)
        bins, considered, considered_bytes, outside = _simple_plan(
            table, operation, min_files, ratio, cap, predicate)
        assert (plan.files_considered, plan.bytes_considered, plan.skipped_outside_root) == (
            considered, considered_bytes, outside)
        assert [(b.partition_values, [tuple(f) for f in b.files]) for b in plan.bins] == bins
        assert [b.directory for b in plan.bins] == [
            files_[0][1].rpartition("/")[0] for _, files_ in bins]
        # What the remove carries from the add: its stats and tags, by row.
        removed = [f for b in plan.bins for f in b.files]
        expected = [(r["stats"], dict(r["tags"]) if r["tags"] else None)
                    for r in table.take(pa.array([f.row for f in removed], pa.int64())).to_pylist()]
        assert _planned_extras(_Planned(table), removed) == expected


class _Planned:
    """The parts of a `Snapshot` that `_planned_extras` reads."""

    version = 1

    def __init__(self, files: pa.Table):
        self.files = files
        self.storage = type("S", (), {"root": ROOT})()


def test_a_commit_refuses_bins_planned_on_another_snapshot():
    files = [("a", "x", 10, 5, 0, "relative", False)] * 3
    table = _table(files)
    plan = plan_layout(table, root=ROOT, version=1, operation="optimize",
                       partition_columns=PARTS, target_size=TARGET)
    (only,) = plan.bins
    shifted = pa.concat_tables([_table([("b", "x", 10, 5, 0, "relative", False)]), table])
    with pytest.raises(ValueError, match=r"input p1=a/col-2=x/f0-0\.parquet is not row 0 of the "
                                         r"planned snapshot \(version 1, table file:///t\)"):
        _planned_extras(_Planned(shifted), list(only.files))

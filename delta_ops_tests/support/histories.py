"""Real small Delta tables for tests, written through delta_ops' own commit API.

Every table has real Parquet data files (written with pyarrow, `numRecords` and min/max/null
stats in the add actions unless asked otherwise) and a log made of `create_table`,
`append_files` and `Transaction` commits. Use it when a test needs a table shape the corpus
lacks, or many random ones.

API (keep it small; other test modules reuse it):

- `StepClock(start_ms, step_ms)`: a deterministic `clock` (each call advances).
- `write_data_file(storage, rows=..., ...) -> dict`: one Parquet file, returns its add action.
- `new_table(storage, ...) -> CommitResult`: an empty table with chosen features.
- `HistorySpec` + `build_history(storage, spec) -> BuiltHistory`: a table with a history of
  appends, removes, deletion vectors, txns, domain metadata and (optionally) in-commit
  timestamps enabled midway.
- `histories(...)`: a hypothesis strategy of `HistorySpec`s.
- `table_rows(storage, version=None) -> list[tuple]`: the table's data rows (deletion vectors
  and partition values applied, logical column names), sorted; for "reads identically".
- `write_compaction(storage, start, end, form=...)`: a log compaction file of commits
  start..end in either form a reader meets: "spec" (reconciled, one line per key: delta_ops'
  writer) or "databricks" (every covered action but commitInfo, unreconciled, newest commit
  first: the first line for a key wins); `compaction_windows(n)` draws where to put them.

The table schema is `id long, value string` plus `part string` when partitioned; ids are
unique across the table, so rows identify themselves.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import strategies as st

from delta_ops.commit import CommitResult, Transaction, append_files, create_table
from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
from delta_ops.protocol.deletion_vectors import (
    DeletionVectorDescriptor,
    inline_dv_bitmap,
    read_dv_from_file_bytes,
)
from delta_ops.protocol.filenames import LOG_DIR, commit_name, compaction_name
from delta_ops.protocol.schema import PrimitiveType, StructField, StructType
from delta_ops.storage import Storage
from delta_ops_tests.support.dv_writer import inline_descriptor

__all__ = [
    "BuiltHistory",
    "HistorySpec",
    "StepClock",
    "COMPACTION_FORMS",
    "build_history",
    "compaction_windows",
    "databricks_compaction_bytes",
    "histories",
    "new_table",
    "table_rows",
    "write_compaction",
    "write_data_file",
]

START_MS = 1_700_000_000_000
PARTITIONS = ("a", "b", "c")


class StepClock:
    """A clock for `clock=` parameters: returns start_ms, then advances step_ms per call."""

    def __init__(self, start_ms: int = START_MS, step_ms: int = 1_000) -> None:
        self.now = start_ms
        self.step = step_ms

    def __call__(self) -> int:
        value = self.now
        self.now += self.step
        return value


def _schema(partitioned: bool, column_mapping: bool) -> StructType:
    names = ["id", "value"] + (["part"] if partitioned else [])
    types = {"id": "long", "value": "string", "part": "string"}
    fields = []
    for i, name in enumerate(names, start=1):
        meta: dict[str, Any] = {}
        if column_mapping:
            meta = {
                "delta.columnMapping.id": i,
                "delta.columnMapping.physicalName": f"col-{i}-{name}",
            }
        fields.append(StructField(name, PrimitiveType(types[name]), True, meta))
    return StructType(tuple(fields))


def _physical(storage: Storage) -> dict[str, str]:
    """Logical -> physical column names of the table (identity without column mapping)."""
    snap = load_snapshot(storage)
    mode = snap.metadata.configuration.get("delta.columnMapping.mode", "none")
    return {f.name: (f.physical_name if mode != "none" else f.name) for f in snap.schema.fields}


def write_data_file(
    storage: Storage,
    *,
    rows: int,
    start_id: int = 0,
    partition: str | None = None,
    stats: bool = True,
    physical_names: dict[str, str] | None = None,
    modification_time: int = START_MS,
) -> dict[str, Any]:
    """Write one small Parquet data file and return its `add` action body.

    Args:
        storage: The table's storage.
        rows: Number of rows (ids start_id .. start_id + rows - 1, value "v<id>").
        start_id: First id.
        partition: Value of partition column `part` (the file goes under `part=<value>/`).
        stats: Put `numRecords`/min/max/null counts into the add's stats (else no stats).
        physical_names: Logical -> physical column names (column mapping), identity if None.
        modification_time: The add's modificationTime.
    """
    names = physical_names or {}
    ids = list(range(start_id, start_id + rows))
    id_name, value_name = names.get("id", "id"), names.get("value", "value")
    table = pa.table(
        {id_name: pa.array(ids, pa.int64()), value_name: pa.array([f"v{i}" for i in ids])}
    )
    buf = io.BytesIO()
    pq.write_table(table, buf)
    data = buf.getvalue()
    part_name = names.get("part", "part")
    prefix = f"{part_name}={partition}/" if partition is not None else ""
    path = f"{prefix}part-{uuid.uuid4().hex}.parquet"
    storage.put_atomic(path, data)
    add: dict[str, Any] = {
        "path": path,
        "partitionValues": {part_name: partition} if partition is not None else {},
        "size": len(data),
        "modificationTime": modification_time,
        "dataChange": True,
    }
    if stats:
        st_obj: dict[str, Any] = {"numRecords": rows}
        if rows:
            st_obj["minValues"] = {id_name: ids[0], value_name: min(f"v{i}" for i in ids)}
            st_obj["maxValues"] = {id_name: ids[-1], value_name: max(f"v{i}" for i in ids)}
            st_obj["nullCount"] = {id_name: 0, value_name: 0}
        add["stats"] = orjson.dumps(st_obj).decode()
    return add


def new_table(
    storage: Storage,
    *,
    partitioned: bool = False,
    column_mapping: bool = False,
    in_commit_timestamps: bool = False,
    row_tracking: bool = False,
    deletion_vectors: bool = False,
    append_only: bool = False,
    configuration: dict[str, str] | None = None,
    clock: Any = None,
) -> CommitResult:
    """Create an empty table (version 0) with the chosen features enabled."""
    config = dict(configuration or {})
    if column_mapping:
        config["delta.columnMapping.mode"] = "name"
        config["delta.columnMapping.maxColumnId"] = "3"
    if in_commit_timestamps:
        config["delta.enableInCommitTimestamps"] = "true"
    if row_tracking:
        config["delta.enableRowTracking"] = "true"
    if deletion_vectors:
        config["delta.enableDeletionVectors"] = "true"
    if append_only:
        config["delta.appendOnly"] = "true"
    return create_table(
        storage,
        _schema(partitioned, column_mapping),
        ["part"] if partitioned else [],
        config,
        clock=clock or StepClock(),
    )


# ---- histories ------------------------------------------------------------------------------

# Steps of a history (plain tuples, so hypothesis shrinks and prints them well):
#   ("append", (rows, ...), stats: bool)   one commit adding one file per entry
#   ("remove", k)                          remove the k-th live file (modulo), dataChange=true
#   ("dv", k, (row, ...))                  delete rows of the k-th live file with an inline DV
#   ("txn", app_id, version)               a commit holding only a txn action
#   ("domain", name, removed)              a commit setting/removing a user domain
#   ("enable_ict",)                        enable in-commit timestamps from here on
Step = tuple


@dataclass(frozen=True)
class HistorySpec:
    """What `build_history` builds.

    Attributes:
        partitioned: Partition by `part`.
        column_mapping: Column mapping mode `name` (physical names differ from logical).
        in_commit_timestamps: Enable in-commit timestamps at creation.
        row_tracking: Enable row tracking at creation (files get row IDs as they come).
        deletion_vectors: Support deletion vectors (needed by "dv" steps; they are skipped
            otherwise).
        append_only: `delta.appendOnly=true` ("remove" and "dv" steps are skipped).
        steps: The history after creation.
    """

    partitioned: bool = False
    column_mapping: bool = False
    in_commit_timestamps: bool = False
    row_tracking: bool = False
    deletion_vectors: bool = False
    append_only: bool = False
    steps: tuple[Step, ...] = ()


@dataclass
class BuiltHistory:
    """A table built by `build_history`.

    Attributes:
        storage: The table's storage.
        spec: What was asked for.
        versions: Every committed version, in order.
        next_id: The next unused row id value (ids written so far: 0 .. next_id - 1).
    """

    storage: Storage
    spec: HistorySpec
    versions: list[int] = field(default_factory=list)
    next_id: int = 0


def _live_adds(storage: Storage, version: int | None = None) -> list[dict[str, Any]]:
    """Live add actions as log-style dicts (maps as dicts, nulls dropped), sorted by path."""
    rows = load_snapshot(storage, version).files.to_pylist()
    out = []
    for row in sorted(rows, key=lambda r: r["path"]):
        add = {k: v for k, v in row.items() if v is not None}
        add["partitionValues"] = dict(add.get("partitionValues") or [])
        if "tags" in add:
            add["tags"] = dict(add["tags"])
        if "deletionVector" in add:
            add["deletionVector"] = {
                k: v for k, v in add["deletionVector"].items() if v is not None
            }
        out.append(add)
    return out


def _remove_of(add: dict[str, Any], now: int) -> dict[str, Any]:
    rm = {
        "path": add["path"],
        "deletionTimestamp": now,
        "dataChange": True,
        "extendedFileMetadata": True,
        "partitionValues": add["partitionValues"],
        "size": add["size"],
    }
    for key in ("deletionVector", "baseRowId", "defaultRowCommitVersion", "stats", "tags"):
        if key in add:
            rm[key] = add[key]
    return rm


def build_history(storage: Storage, spec: HistorySpec, *, clock: Any = None) -> BuiltHistory:
    """Create a table and commit `spec.steps` through the commit API.

    Args:
        storage: An empty location.
        spec: The history.
        clock: Milliseconds (default a `StepClock`).
    """
    clock = clock or StepClock()
    built = BuiltHistory(storage, spec)
    created = new_table(
        storage,
        partitioned=spec.partitioned,
        column_mapping=spec.column_mapping,
        in_commit_timestamps=spec.in_commit_timestamps,
        row_tracking=spec.row_tracking,
        deletion_vectors=spec.deletion_vectors,
        append_only=spec.append_only,
        clock=clock,
    )
    built.versions.append(created.version)
    names = _physical(storage)
    for step in spec.steps:
        kind = step[0]
        result: CommitResult | None = None
        if kind == "append":
            adds = []
            for i, rows in enumerate(step[1]):
                part = (
                    PARTITIONS[(built.next_id + i) % len(PARTITIONS)] if spec.partitioned else None
                )
                adds.append(
                    write_data_file(
                        storage,
                        rows=rows,
                        start_id=built.next_id,
                        partition=part,
                        stats=step[2],
                        physical_names=names,
                        modification_time=clock(),
                    )
                )
                built.next_id += rows
            result = append_files(storage, adds, clock=clock)
        elif kind in ("remove", "dv"):
            if spec.append_only or (kind == "dv" and not spec.deletion_vectors):
                continue
            live = _live_adds(storage)
            if not live:
                continue
            target = live[step[1] % len(live)]
            txn = Transaction(storage, operation="DELETE", clock=clock)
            now = clock()
            txn.remove_files([_remove_of(target, now)])
            if kind == "dv":
                with storage.open_input(target["path"]) as fh:
                    n = pq.ParquetFile(fh).metadata.num_rows
                old = _deleted_rows(storage, target)
                rows = sorted(old | {r for r in step[2] if r < n})
                if not rows or rows == sorted(old):
                    continue
                new = {k: v for k, v in target.items()}
                new["deletionVector"] = inline_descriptor(rows).to_dict()
                new["dataChange"] = True
                txn.add_files([new])
            result = txn.commit()
        elif kind == "txn":
            result = (
                Transaction(storage, operation="STREAMING UPDATE", clock=clock)
                .set_txn(step[1], step[2], last_updated=clock())
                .commit()
            )
        elif kind == "domain":
            txn = Transaction(storage, operation="SET DOMAIN", clock=clock)
            txn.add_features(["domainMetadata"])
            txn.set_domain(
                step[1], orjson.dumps({"step": len(built.versions)}).decode(), removed=step[2]
            )
            result = txn.commit()
        elif kind == "enable_ict":
            txn = Transaction(storage, operation="SET TBLPROPERTIES", clock=clock)
            txn.add_features(["inCommitTimestamp"])
            txn.update_configuration({"delta.enableInCommitTimestamps": "true"})
            result = txn.commit()
        else:
            raise ValueError(f"unknown history step {step!r}")
        built.versions.append(result.version)
    return built


def _deleted_rows(storage: Storage, add: dict[str, Any]) -> set[int]:
    dv = add.get("deletionVector")
    if not dv:
        return set()
    descriptor = DeletionVectorDescriptor.from_dict(dv)
    if descriptor.is_inline:
        return set(inline_dv_bitmap(descriptor))
    path = descriptor.relative_path()
    if path is None:
        raise ValueError(f"absolute deletion vector paths are not supported here: {dv}")
    data = storage.read(path)
    return set(
        read_dv_from_file_bytes(data, descriptor.offset, descriptor.size_in_bytes, file=path)
    )


def table_rows(storage: Storage, version: int | None = None) -> list[tuple]:
    """Every data row of the table (DVs applied, partition values added), sorted.

    Rows are tuples in the schema's logical column order; values are strings or ints as
    Parquet holds them (partition values as the strings in the log).
    """
    snap = load_snapshot(storage, version)
    schema = snap.schema
    mode = snap.metadata.configuration.get("delta.columnMapping.mode", "none")
    logical = [f.name for f in schema.fields]
    physical = {f.name: (f.physical_name if mode != "none" else f.name) for f in schema.fields}
    parts = set(snap.partition_columns)
    out: list[tuple] = []
    for add in _live_adds(storage, snap.version):
        pv = add["partitionValues"]
        with storage.open_input(add["path"]) as fh:
            data = pq.read_table(fh)
        deleted = _deleted_rows(storage, add) if add.get("deletionVector") else set()
        columns = {
            name: (
                [pv.get(physical[name])] * data.num_rows
                if name in parts
                else (
                    data.column(physical[name]).to_pylist()
                    if physical[name] in data.column_names
                    else [None] * data.num_rows
                )
            )
            for name in logical
        }
        for i in range(data.num_rows):
            if i not in deleted:
                out.append(tuple(columns[name][i] for name in logical))
    return sorted(out, key=repr)


# ---- hypothesis -----------------------------------------------------------------------------


def _steps(allow_dv: bool) -> st.SearchStrategy[Step]:
    options = [
        st.tuples(
            st.just("append"),
            st.lists(st.integers(0, 6), min_size=1, max_size=3).map(tuple),
            st.booleans(),
        ),
        st.tuples(st.just("remove"), st.integers(0, 50)),
        st.tuples(st.just("txn"), st.sampled_from(["app-1", "app-2"]), st.integers(0, 9)),
        st.tuples(
            st.just("domain"), st.sampled_from(["com.example.a", "com.example.b"]), st.booleans()
        ),
        st.tuples(st.just("enable_ict")),
    ]
    if allow_dv:
        options.append(
            st.tuples(
                st.just("dv"),
                st.integers(0, 50),
                st.lists(st.integers(0, 5), min_size=1, max_size=3).map(tuple),
            )
        )
    return st.one_of(*options)


def histories(
    *,
    max_steps: int = 8,
    row_tracking: bool | None = False,
    features: Sequence[str] = (
        "partitioned",
        "column_mapping",
        "in_commit_timestamps",
        "deletion_vectors",
        "append_only",
    ),
) -> st.SearchStrategy[HistorySpec]:
    """A strategy of history specs.

    Args:
        max_steps: Most steps after creation.
        row_tracking: Enable row tracking at creation (True/False), or draw it (None).
        features: Which table options may be drawn (the rest stay off).
    """

    @st.composite
    def build(draw: Any) -> HistorySpec:
        flags = {
            name: draw(st.booleans()) if name in features else False
            for name in (
                "partitioned",
                "column_mapping",
                "in_commit_timestamps",
                "deletion_vectors",
                "append_only",
            )
        }
        rt = draw(st.booleans()) if row_tracking is None else row_tracking
        steps = draw(st.lists(_steps(flags["deletion_vectors"]), min_size=1, max_size=max_steps))
        return HistorySpec(row_tracking=rt, steps=tuple(steps), **flags)

    return build()


# ---- log compaction files in both forms -----------------------------------------------------

#: The forms of `x.y.compacted.json` a reader meets.
COMPACTION_FORMS = ("spec", "databricks")


def databricks_compaction_bytes(storage: Storage, start: int, end: int) -> bytes:
    """Databricks' form of the compaction of commits start..end: every line of the covered
    commits but `commitInfo`, newest commit first, each commit's lines as written (so keys
    repeat; inside the file the first line for a key wins). The commits must be valid: one
    action per file key, txn appId and domain each (else, inside one commit, no order
    decides)."""
    out: list[bytes] = []
    for v in range(end, start - 1, -1):
        data = storage.read(f"{LOG_DIR}/{commit_name(v)}")
        out += [
            line
            for line in data.splitlines()
            if line.strip() and "commitInfo" not in orjson.loads(line)
        ]
    return b"".join(line + b"\n" for line in out)


def write_compaction(storage: Storage, start: int, end: int, *, form: str) -> str:
    """Write `start.end.compacted.json` in `form` ("spec": delta_ops' reconciling writer;
    "databricks": `databricks_compaction_bytes`); returns its path.

    Raises:
        FileExistsError: the compaction file is already there.
    """
    if form == "spec":
        from delta_ops.maintenance.compaction import compact_log

        result = compact_log(storage, start=start, end=end)
        if result.already_existed:
            raise FileExistsError(result.file)
        return result.file
    if form != "databricks":
        raise ValueError(f"unknown compaction form {form!r}")
    path = f"{LOG_DIR}/{compaction_name(start, end)}"
    if not storage.put_if_absent(path, databricks_compaction_bytes(storage, start, end)):
        raise FileExistsError(path)
    return path


def compaction_windows(n: int) -> st.SearchStrategy[list[tuple[int, int, str]]]:
    """Non-overlapping `(start, end, form)` windows (start < end) over versions 0..n-1,
    each in a drawn form."""

    @st.composite
    def build(draw: Any) -> list[tuple[int, int, str]]:
        out, pos = [], 0
        while pos < n - 1:
            length = draw(st.integers(1, 4))
            if draw(st.booleans()) and pos + length < n:
                out.append((pos, pos + length, draw(st.sampled_from(COMPACTION_FORMS))))
            pos += length + 1
        return out

    return build()

"""Read a just-written checkpoint file back and check it against what the snapshot holds.

Spec section: "Checkpoints" (a checkpoint "contains the complete replay of all actions, up
to and including the checkpointed table version"). Each file of a new checkpoint is read
back independently of how it was written (Parquet through pyarrow with column projection,
JSON line by line) before the checkpoint is published: the live files (path, size,
deletion vector, in order, and whether each keeps statistics), the tombstones, and the
protocol, metadata, transaction identifiers, domain metadata, checkpoint metadata and
sidecar actions. A mismatch raises CheckpointVerificationError and nothing is published.

Statistics ("Checkpoint Schema", "Per-file Statistics"): a live file that has statistics
in the state must keep them in the checkpoint, as JSON `stats` or typed `stats_parsed`
(whichever the table's `delta.checkpoint.writeStatsAsJson`/`writeStatsAsStruct` ask for);
a checkpoint that drops them would silently take data skipping away from every reader.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from delta_ops.engine.threads import io_map
from delta_ops.errors import CheckpointVerificationError
from delta_ops.protocol.actions import DELETION_VECTOR_TYPE, conform
from delta_ops.protocol.arrays import from_numpy, int_values

NON_FILE_COLUMNS = (
    "protocol",
    "metaData",
    "txn",
    "domainMetadata",
    "checkpointMetadata",
    "sidecar",
)


def normalize(value: Any) -> Any:
    """JSON-like value with nulls dropped from objects and Arrow maps as dicts."""
    if isinstance(value, Mapping):
        return {str(k): normalize(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [normalize(v) for v in value]
    return value


def _key(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


def has_stats(stats: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Per add: whether it has statistics. A string column is JSON `stats` (an empty string
    holds none); a struct column is typed `stats_parsed` (present when not null)."""
    if isinstance(stats, pa.ChunkedArray):
        stats = stats.combine_chunks() if stats.num_chunks != 1 else stats.chunk(0)
    if pa.types.is_string(stats.type) or pa.types.is_large_string(stats.type):
        # Through buffers: a Python "" or False handed to a compute function would import
        # pandas (`protocol.arrays`), which the checkpoint path never pays for.
        lengths, valid = int_values(pc.binary_length(stats))
        return from_numpy(valid & (lengths > 0))
    return pc.is_valid(stats)


def stats_column(add: pa.StructType) -> str | None:
    """The column of a checkpoint's `add` that says which adds have statistics, and its
    leaf to read: `stats` when written, else `stats_parsed.numRecords` (a struct's
    validity comes with any of its leaves), else None."""
    if add.get_field_index("stats") >= 0:
        return "stats"
    idx = add.get_field_index("stats_parsed")
    if idx >= 0 and pa.types.is_struct(add.field(idx).type) and add.field(idx).type.num_fields:
        return f"stats_parsed.{add.field(idx).type.field(0).name}"
    return None

@dataclass
class Expected:
    """What one file of a checkpoint must hold.

    Attributes:
        adds: expected live files in file order (columns path, size, deletionVector, and
            `stats` when the check of statistics applies: each file with statistics there
            must keep them).
        removes: expected tombstones in file order (columns path, deletionVector).
        non_file: expected non-file actions per column, normalized; a column missing here
            must hold no action.
    """

    adds: pa.Table
    removes: pa.Table
    non_file: dict[str, list[Any]] = field(default_factory=dict)


@dataclass
class _ReadBack:
    add_path: pa.Array
    add_size: pa.Array
    add_dv: pa.Array
    add_stats: pa.Array
    remove_path: pa.Array
    remove_dv: pa.Array
    non_file: dict[str, list[Any]]
    num_rows: int


def _one(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return col


def _valid_chunks(col: pa.ChunkedArray) -> list[pa.Array]:
    """The valid rows of a (struct) column, chunk by chunk: all-null chunks (row groups of
    other actions) are skipped, all-valid ones kept without a copy."""
    out = []
    for chunk in col.chunks:
        if chunk.null_count == len(chunk):
            continue
        out.append(chunk.filter(pc.is_valid(chunk)) if chunk.null_count else chunk)
    return out


def _file_column(t: pa.Table, name: str, children: list[str]) -> dict[str, pa.Array]:
    if name in t.column_names:
        chunks = _valid_chunks(t.column(name))
        if not chunks:
            return {}
        present = [f.name for f in chunks[0].type]
        # Chunked as read (one chunk per row group): comparing needs no contiguous copy.
        return {
            c: pa.chunked_array([pc.struct_field(ch, c) for ch in chunks])
            for c in children
            if c in present
        }
    # Some pyarrow versions flatten a nested selection to "add.path" style columns.
    prefix = f"{name}."
    cols = {c[len(prefix) :]: _one(t.column(c)) for c in t.column_names if c.startswith(prefix)}
    if not cols:
        return {}
    mask = pc.is_valid(cols["path"])
    return {c: cols[c].filter(mask) for c in children if c in cols}


# One leaf per non-file action: reading it gives the action's validity row by row, cheaply.
_MARKERS = {
    "protocol": "minReaderVersion",
    "metaData": "id",
    "txn": "appId",
    "domainMetadata": "domain",
    "checkpointMetadata": "version",
    "sidecar": "path",
}


def _row_groups_with(pf: pq.ParquetFile, t: pa.Table, name: str) -> list[int]:
    """Row groups in which column `name` has a non-null value."""
    if name in t.column_names:
        valid = pc.is_valid(_one(t.column(name)))
    else:
        leaf = f"{name}.{_MARKERS[name]}"
        if leaf not in t.column_names:
            return []
        valid = pc.is_valid(_one(t.column(leaf)))
    groups = []
    start = 0
    for i in range(pf.metadata.num_row_groups):
        n = pf.metadata.row_group(i).num_rows
        if n and pc.any(valid.slice(start, n)).as_py():
            groups.append(i)
        start += n
    return groups


def _read_columns(source: Any, pf: pq.ParquetFile, columns: list[str]) -> pa.Table:
    """`columns` of every row group. A checkpoint held in memory is decoded one row group
    per thread (several times faster than one threaded read of nested columns)."""
    meta = pf.metadata
    n = meta.num_row_groups
    if not isinstance(source, pa.Buffer) or n < 2:
        return pf.read(columns=columns, use_threads=True)

    def group(i: int) -> pa.Table:
        reader = pq.ParquetFile(pa.BufferReader(source), metadata=meta)
        return reader.read_row_group(i, columns=columns, use_threads=False)

    return pa.concat_tables(io_map(group, range(n)))


def _read_parquet(source: Any) -> _ReadBack:
    pf = pq.ParquetFile(source, pre_buffer=False)
    top = pf.schema_arrow
    wanted: list[str] = []
    for name, children in (
        ("add", ("path", "size", "deletionVector")),
        ("remove", ("path", "deletionVector")),
    ):
        if name in top.names:
            sub = top.field(name).type
            wanted += [f"{name}.{c}" for c in children if sub.get_field_index(c) >= 0]
    stats_leaf = stats_column(top.field("add").type) if "add" in top.names else None
    if stats_leaf is not None:
        wanted.append(f"add.{stats_leaf}")
    stats_name = None if stats_leaf is None else stats_leaf.split(".", 1)[0]
    present = [c for c in NON_FILE_COLUMNS if c in top.names]
    for name in present:
        sub = top.field(name).type
        marker = _MARKERS[name]
        if pa.types.is_struct(sub) and sub.get_field_index(marker) >= 0:
            wanted.append(f"{name}.{marker}")
    t = _read_columns(source, pf, wanted)
    stats_names = [] if stats_leaf is None else [stats_name, stats_leaf]
    adds = _file_column(t, "add", ["path", "size", "deletionVector", *stats_names])
    # (A pyarrow that flattens nested selections names the leaf, not the struct.)
    stats_got = next((adds[n] for n in stats_names if n in adds), None)
    removes = _file_column(t, "remove", ["path", "deletionVector"])
    non_file: dict[str, list[Any]] = {}
    for name in present:
        groups = _row_groups_with(pf, t, name)
        if not groups:
            continue
        col = _one(pf.read_row_groups(groups, columns=[name], use_threads=True).column(name))
        values = col.filter(pc.is_valid(col)).to_pylist(maps_as_pydicts="strict")
        if values:
            non_file[name] = [normalize(v) for v in values]
    n_add = len(adds.get("path", []))
    n_rm = len(removes.get("path", []))
    return _ReadBack(
        add_path=adds.get("path", pa.nulls(0, pa.string())),
        add_size=adds.get("size", pa.nulls(n_add, pa.int64())),
        add_dv=adds.get("deletionVector", pa.nulls(n_add, DELETION_VECTOR_TYPE)),
        add_stats=(
            has_stats(stats_got) if stats_got is not None else from_numpy(np.zeros(n_add, bool))
        ),
        remove_path=removes.get("path", pa.nulls(0, pa.string())),
        remove_dv=removes.get("deletionVector", pa.nulls(n_rm, DELETION_VECTOR_TYPE)),
        non_file=non_file,
        num_rows=pf.metadata.num_rows,
    )


def _read_json(data: bytes) -> _ReadBack:
    adds: list[dict] = []
    removes: list[dict] = []
    non_file: dict[str, list[Any]] = {}
    rows = 0
    for line in data.splitlines():
        if not line.strip():
            continue
        obj = orjson.loads(line)
        rows += 1
        for name, value in obj.items():
            if value is None:
                continue
            if name == "add":
                adds.append(value)
            elif name == "remove":
                removes.append(value)
            elif name in NON_FILE_COLUMNS:
                non_file.setdefault(name, []).append(normalize(value))
    return _ReadBack(
        add_path=pa.array([a.get("path") for a in adds], pa.string()),
        add_size=pa.array([a.get("size") for a in adds], pa.int64()),
        add_dv=pa.array([a.get("deletionVector") for a in adds], DELETION_VECTOR_TYPE),
        add_stats=has_stats(pa.array([a.get("stats") for a in adds], pa.string())),
        remove_path=pa.array([r.get("path") for r in removes], pa.string()),
        remove_dv=pa.array([r.get("deletionVector") for r in removes], DELETION_VECTOR_TYPE),
        non_file=non_file,
        num_rows=rows,
    )


def _chunked(arr: pa.Array | pa.ChunkedArray) -> pa.ChunkedArray:
    return arr if isinstance(arr, pa.ChunkedArray) else pa.chunked_array([arr])


def _dv_children(arr: pa.Array | pa.ChunkedArray) -> list[pa.ChunkedArray]:
    chunks = [
        c if c.type == DELETION_VECTOR_TYPE else conform(c, DELETION_VECTOR_TYPE)
        for c in _chunked(arr).chunks
    ]
    flat = [c.flatten() for c in chunks]
    return [
        pa.chunked_array([f[i] for f in flat], type=field.type)
        for i, field in enumerate(DELETION_VECTOR_TYPE)
    ]


def _equal(a: pa.Array | pa.ChunkedArray, b: pa.Array | pa.ChunkedArray) -> bool:
    """Same values, whatever the chunking (ChunkedArray.equals compares values)."""
    a, b = _chunked(a), _chunked(b)
    if len(a) != len(b):
        return False
    if a.type != b.type:
        try:
            b = b.cast(a.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return False
    return a.equals(b)


def _compare(got: _ReadBack, expected: Expected) -> str | None:
    ea, er = expected.adds, expected.removes
    if len(got.add_path) != ea.num_rows:
        return f"holds {len(got.add_path)} add actions, expected {ea.num_rows}"
    if len(got.remove_path) != er.num_rows:
        return f"holds {len(got.remove_path)} remove actions, expected {er.num_rows}"
    if ea.num_rows:
        if not _equal(ea.column("path"), got.add_path):
            return "add paths differ from the snapshot's live files"
        if not _equal(ea.column("size"), got.add_size):
            return "add sizes differ from the snapshot's live files"
        exp_dv, got_dv = _dv_children(ea.column("deletionVector")), _dv_children(got.add_dv)
        if not all(_equal(x, y) for x, y in zip(exp_dv, got_dv, strict=True)):
            return "add deletion vectors differ from the snapshot's live files"
        if "stats" in ea.column_names:
            lost = pc.and_(has_stats(ea.column("stats")), pc.invert(got.add_stats))
            n_lost = pc.sum(lost).as_py() or 0
            if n_lost:
                first = _one(ea.column("path")).filter(lost)[0].as_py()
                return (
                    f"{n_lost} add actions lost the statistics the snapshot's live files have "
                    f"(first: {first})"
                )
    if er.num_rows:
        if not _equal(er.column("path"), got.remove_path):
            return "remove paths differ from the snapshot's tombstones"
        exp_dv, got_dv = _dv_children(er.column("deletionVector")), _dv_children(got.remove_dv)
        if not all(_equal(x, y) for x, y in zip(exp_dv, got_dv, strict=True)):
            return "remove deletion vectors differ from the snapshot's tombstones"
    want = {k: sorted(map(_key, v)) for k, v in expected.non_file.items() if v}
    have = {k: sorted(map(_key, v)) for k, v in got.non_file.items() if v}
    for name in sorted(set(want) | set(have)):
        if want.get(name) != have.get(name):
            return (
                f"{name} actions differ: expected {len(want.get(name, []))} "
                f"({b','.join(want.get(name, []))[:300]!r}), "
                f"read {len(have.get(name, []))} ({b','.join(have.get(name, []))[:300]!r})"
            )
    return None


def verify_file(
    source: Any,
    fmt: str,
    expected: Expected,
    *,
    table: str,
    version: int,
    file: str,
) -> int:
    """Read one checkpoint file (bytes, a buffer or an open file) and compare it.

    Returns:
        The number of actions (rows) it holds.

    Raises:
        CheckpointVerificationError: it cannot be read, or it differs from `expected`.
    """
    try:
        if fmt == "json":
            data = bytes(source) if not isinstance(source, bytes) else source
            got = _read_json(data)
        else:
            if isinstance(source, (bytes, bytearray, memoryview)):
                source = pa.BufferReader(source)
            got = _read_parquet(source)
    except (pa.ArrowException, orjson.JSONDecodeError, OSError, ValueError) as exc:
        raise CheckpointVerificationError(
            f"the checkpoint file written cannot be read back: {exc}",
            table=table,
            version=version,
            file=file,
        ) from exc
    problem = _compare(got, expected)
    if problem is not None:
        raise CheckpointVerificationError(
            f"the checkpoint read back does not reproduce the snapshot: {problem}; "
            "it was not published",
            table=table,
            version=version,
            file=file,
        )
    return got.num_rows

"""VACUUM: delete data files the table no longer references, once they are old enough.

Spec sections: "VACUUM Protocol Check" (check the reader and writer protocol before
anything is listed), "Add File and Remove File" (tombstones expire `deletedFileRetention`
after their `deletionTimestamp`), "Deletion Vectors" (a DV file lives as long as an add or
an unexpired remove references it; `u` descriptors resolve to
`<table>/<random prefix>/deletion_vector_<uuid>.bin`), "Change Data Files" (`_change_data`
files are not referenced by the state; they go purely by age), "Delta Table Specification"
(data lives in non-hidden directories), and the table properties
`delta.deletedFileRetentionDuration` (default 1 week) and `delta.logRetentionDuration`.

What is kept (everything else old enough below the table root is deleted):

* live `add` files and unexpired tombstones (`deletionTimestamp >= now - retention`): for
  each path, every file a reader may open for it (`reader_keys`: the spec's reading, a URI
  or absolute path inside the root made relative, and deltalake's and the literal ones);
* every DV file referenced by either (`u`: resolved against the root; `p`: as any path);
* files modified less than `retention` ago (in-flight writes), from the listing's mtimes;
* everything under `_delta_log`, and every hidden file or directory (name starting with
  `_` or `.`), except `_change_data` and partition directories (`<partition column>=...`),
  as Spark decides it. `metadata` (Iceberg UniForm) and `_delta_index` are hidden too.
  A Hadoop side checksum `.<name>.crc` goes with `<name>` when `<name>` goes.

Nothing outside the table root is ever touched: candidates come from listing the root
without following symbolic links (a linked directory is not entered, a linked file never
deleted: links are left in place), and paths in the log only ever protect files. Before
anything is deleted (dry run and real run share the plan) each candidate is proven: a
regular file whose real path is the root's real path joined with its own (no link on the
way), and unreferenced by a second, independent normalisation (paths decoded until they no
longer change, schemes dropped, slashes collapsed) of its path and of every referenced
path; any doubt refuses the whole run (`UnsafeDeletionError`, naming table and file). A
file whose name is not valid UTF-8 (no log can name it) is left and reported in the
messages. Retention is checked first: shorter than
`delta.deletedFileRetentionDuration` is refused unless forced, and so is a
`delta.logRetentionDuration` shorter than the retention.

No full snapshot is built: VACUUM only needs, per logical file, whether its newest action is
an add or a still-unexpired remove, and which DV file it names. The commits are parsed once,
columnar, by Arrow's JSON reader with a schema of just `path`, `deletionVector` and
`deletionTimestamp` (orjson takes over for logs it refuses); checkpoints are read for those
columns only; reconciliation (newest action per file key) is vectorized.

Lite mode does not list storage: it considers only the files named by expired tombstones
still in the log state (and their DV files), checking each one's existence and age.
"""

from __future__ import annotations

import math
import numbers
import posixpath
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import unquote

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
import pyarrow.parquet as pq

from delta_ops.engine.base import UNREADABLE_PREFIX, Engine
from delta_ops.errors import (
    CorruptLogError,
    DeletionVectorError,
    RetentionError,
    UnsafeDeletionError,
)
from delta_ops.log.protocol_metadata import read_protocol_metadata
from delta_ops.log.replay import (
    SidecarMissingError,
    delta_lines_oldest_first,
    parse_json_actions,
    read_file_action_column,
    read_log_files,
)
from delta_ops.log.segment import CheckpointFiles, LogSegment, build_log_segment
from delta_ops.protocol import features, filenames
from delta_ops.protocol.actions import (
    DELETION_VECTOR_TYPE,
    READER_PATTERN,
    Metadata,
    file_keys,
    reader_key_array,
    relative_key,
)
from delta_ops.protocol.arrays import from_numpy, string_array
from delta_ops.protocol.deletion_vectors import decode_uuid_path
from delta_ops.protocol.filenames import LOG_DIR
from delta_ops.protocol.properties import TableProperties
from delta_ops.storage import FileInfo, Storage

__all__ = [
    "FileReferences",
    "VacuumPlan",
    "VacuumResult",
    "file_references",
    "is_hidden",
    "plan_vacuum",
    "vacuum",
]

HOUR_MS = 3_600_000
# The longest retention accepted (100,000 years): beyond it, times in ms since the epoch
# and `timedelta` stop being exact or overflow.
_MAX_RETENTION_HOURS = 100_000 * 8766
_IO_THREADS = 16
# Up to this many directories, each is checked against the kept paths with one scan of
# them; beyond, the kept paths' parent directories are computed once instead.
_FEW_DIRS = 32
CHANGE_DATA_DIR = "_change_data"
# Names Spark treats as hidden although they would not be by their first character.
_HIDDEN_NAMES = frozenset({"metadata"})

_ADD_REF_TYPE = pa.struct(
    [pa.field("path", pa.string()), pa.field("deletionVector", DELETION_VECTOR_TYPE)]
)
_REMOVE_REF_TYPE = pa.struct(
    [
        pa.field("path", pa.string()),
        pa.field("deletionTimestamp", pa.int64()),
        pa.field("deletionVector", DELETION_VECTOR_TYPE),
    ]
)


# --------------------------------------------------------------------------------------
# Hidden names and paths
# --------------------------------------------------------------------------------------


def partition_prefixes(metadata: Metadata) -> tuple[str, ...]:
    """`<column>=` for each partition column, by logical and (column mapping) physical name."""
    names = list(metadata.partition_columns)
    schema_string = metadata.schema_string
    if schema_string and names:
        try:
            fields = orjson.loads(schema_string).get("fields") or []
        except (orjson.JSONDecodeError, AttributeError):
            fields = []
        for f in fields:
            if isinstance(f, dict) and f.get("name") in metadata.partition_columns:
                physical = (f.get("metadata") or {}).get("delta.columnMapping.physicalName")
                if isinstance(physical, str):
                    names.append(physical)
    return tuple(f"{n}=" for n in names)


def is_hidden(name: str, prefixes: tuple[str, ...] = ()) -> bool:
    """Spark's rule (`DeltaTableUtils.isHiddenDirectory`) for one file or directory name.

    Hidden: a name starting with `_` or `.`, unless it starts with `_change_data` or is a
    partition directory `<partition column>=<value>`; also `metadata` (Iceberg UniForm).
    Unlike Spark, `_delta_index` is hidden too: nothing in the log references its files, so
    treating it as data would delete them by age.
    """
    if name in _HIDDEN_NAMES:
        return True
    if not name.startswith(("_", ".")):
        return False
    if name.startswith(CHANGE_DATA_DIR):
        return False
    return not (prefixes and name.startswith(prefixes))


def _hidden_path(path: str, prefixes: tuple[str, ...]) -> bool:
    return any(is_hidden(part, prefixes) for part in path.split("/"))


def _side_file_of(path: str) -> str | None:
    """`dir/name` for a Hadoop side checksum `dir/.name.crc`, else None."""
    head, _, name = path.rpartition("/")
    if not (name.startswith(".") and name.endswith(".crc")) or len(name) <= 5:
        return None
    main = name[1:-4]
    return f"{head}/{main}" if head else main


def _side_file(path: str) -> str:
    head, _, name = path.rpartition("/")
    return f"{head}/.{name}.crc" if head else f".{name}.crc"


def _relative_key_array(paths: pa.Array, root: str) -> pa.Array:
    """`relative_key` of each path (the file the spec's reading names), those pointing
    outside the root left out; only paths matching `READER_PATTERN` go through Python."""
    paths = paths.cast(pa.string()).drop_null()
    if not len(paths):
        return paths
    odd = pc.match_substring_regex(paths, READER_PATTERN)
    if not pc.any(odd).as_py():
        return paths
    fixed = [k for p in paths.filter(odd).to_pylist() if (k := relative_key(p, root)) is not None]
    return pa.concat_arrays([paths.filter(pc.invert(odd)), string_array(fixed)])


# --------------------------------------------------------------------------------------
# What the log references
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileReferences:
    """What the latest state references, split by what VACUUM may do with it.

    Attributes:
        keep: listing keys (`reader_keys`) of every file any reader may open for a path
            (file or DV file) of a live add or an unexpired tombstone, unique.
        expired: listing keys of the files expired tombstones (and their DV files) name,
            by the spec's reading, that nothing in `keep` names (lite mode's candidates),
            unique, sorted.
        written: those paths of live adds and unexpired tombstones as written in the log
            (DV files of `u` descriptors as resolved), unique: what the independent check
            of the plan compares candidates with.
    """

    keep: pa.Array
    expired: pa.Array
    written: pa.Array = field(default_factory=lambda: string_array([]))


class _DvResolver:
    """Turns (storageType, pathOrInlineDv) pairs into DV file paths, cached: `u` ones
    resolved against the root (relative), `p` ones as written."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.cache: dict[tuple[str, str], str | None] = {}

    def __call__(self, storage_type: str | None, path: str | None) -> str | None:
        if storage_type not in ("u", "p") or not path:
            return None
        key = (storage_type, path)
        if key not in self.cache:
            if storage_type == "p":
                self.cache[key] = path  # as written: the caller maps it to listing keys
            else:
                try:
                    prefix, uid = decode_uuid_path(path)
                except DeletionVectorError as exc:
                    raise DeletionVectorError(
                        f"cannot resolve the deletion vector file of a 'u' descriptor "
                        f"{path!r}, so VACUUM cannot know which file to keep: {exc.reason}",
                        table=self.root,
                    ) from exc
                name = f"deletion_vector_{uid}.bin"
                self.cache[key] = f"{prefix}/{name}" if prefix else name
        return self.cache[key]


# One row per logical file (the newest action for its key): the shape both the commits and
# the checkpoint are brought to before deciding what to keep.
_ROW_NAMES = ("key", "path", "is_add", "ts", "st", "dvp")
_DV_REF_TYPE = pa.struct(
    [
        pa.field("storageType", pa.string()),
        pa.field("pathOrInlineDv", pa.string()),
        pa.field("offset", pa.int32()),
    ]
)
_COMMIT_REF_SCHEMA = pa.schema(
    [
        pa.field("add", pa.struct([pa.field("path", pa.string()),
                                   pa.field("deletionVector", _DV_REF_TYPE)])),
        pa.field("remove", pa.struct([pa.field("path", pa.string()),
                                      pa.field("deletionTimestamp", pa.int64()),
                                      pa.field("deletionVector", _DV_REF_TYPE)])),
    ]
)
_JSON_BLOCK = 4 << 20


def _int_range(start: int, stop: int, step: int = 1) -> pa.Array:
    return from_numpy(np.arange(start, stop, step, dtype=np.int64))


def _column(table: pa.Table, name: str) -> pa.Array:
    """A column as one array (`combine_chunks` of a column without chunks, as a filter that
    keeps no row leaves, imports pandas)."""
    col = table.column(name)
    if col.num_chunks == 0:
        return pa.nulls(0, col.type)
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def _int_scalar(value: int) -> pa.Scalar:
    """An int64 scalar taken from a buffer-built array: a Python value given to a compute
    function becomes a scalar through `pa.scalar`, which imports pandas."""
    return _int_range(value, value + 1)[0]


def _bool_scalar(value: bool) -> pa.Scalar:
    bits = pa.py_buffer(b"\x01" if value else b"\x00")
    return pa.Array.from_buffers(pa.bool_(), 1, [None, bits])[0]


def _constant_bool(value: bool, n: int) -> pa.Array:
    return pc.fill_null(pa.nulls(n, pa.bool_()), _bool_scalar(value))


def _rows(
    path: pa.Array, is_add: pa.Array, ts: pa.Array, st: pa.Array, dvp: pa.Array, offset: pa.Array,
    root: str,
) -> pa.Table:
    """File actions as rows keyed by (canonical path, DV unique id); `path` as written."""
    st = st.cast(pa.string())
    dv = pa.StructArray.from_arrays(
        [st, dvp.cast(pa.string()), offset.cast(pa.int32())],
        names=["storageType", "pathOrInlineDv", "offset"],
        mask=pc.is_null(st),
    )
    keys = file_keys(pa.StructArray.from_arrays([path, dv], names=["path", "deletionVector"]), root)
    return pa.Table.from_arrays(
        [keys, path.cast(pa.string()), is_add, ts.cast(pa.int64()), st, dv.field(1)],
        names=list(_ROW_NAMES),
    )


def _read_commit_json(buf: bytes) -> pa.Table:
    options = pj.ParseOptions(
        explicit_schema=_COMMIT_REF_SCHEMA, unexpected_field_behavior="ignore"
    )
    try:
        return pj.read_json(
            pa.BufferReader(buf), read_options=pj.ReadOptions(block_size=_JSON_BLOCK),
            parse_options=options,
        )
    except pa.ArrowInvalid:
        if len(buf) <= _JSON_BLOCK:
            raise
        # A line longer than a block: parse the whole buffer as one block.
        return pj.read_json(
            pa.BufferReader(buf), read_options=pj.ReadOptions(block_size=len(buf) + 1),
            parse_options=options,
        )


def _newest_per_key(rows: pa.Table) -> pa.Table:
    """Keep the first row of each key (rows are newest first)."""
    keys = _column(rows, "key")
    first = pc.index_in(pc.unique(keys), value_set=keys)
    return rows.take(first)


def _commit_rows_columnar(segment: LogSegment, blobs: Mapping[str, bytes], root: str) -> pa.Table:
    """Newest action per file key among the segment's commits, parsed by Arrow's JSON reader
    (only the path, DV and deletionTimestamp fields are materialized).

    Raises:
        pyarrow.ArrowInvalid: Some line does not fit (the caller falls back to orjson).
    """
    parts: list[bytes] = []
    for delta in segment.deltas:
        # A compaction's first line per key wins: reversed, like every delta reader does.
        blob = delta_lines_oldest_first(blobs[delta.file.path], is_compaction=delta.is_compaction)
        parts.append(blob)
        if blob and not blob.endswith(b"\n"):
            parts.append(b"\n")
    buf = b"".join(parts)
    if not buf or buf.isspace():
        return _empty_rows()
    table = _read_commit_json(buf)
    n = table.num_rows
    table = table.take(_int_range(n - 1, -1, -1))  # newest line first
    add = _column(table, "add")
    rm = _column(table, "remove")
    add_path, rm_path = pc.struct_field(add, "path"), pc.struct_field(rm, "path")
    is_add = pc.is_valid(add_path)
    path = pc.coalesce(add_path, rm_path)
    add_dv, rm_dv = pc.struct_field(add, "deletionVector"), pc.struct_field(rm, "deletionVector")

    def dv_field(name: str) -> pa.Array:
        return pc.if_else(is_add, pc.struct_field(add_dv, name), pc.struct_field(rm_dv, name))

    rows = _rows(
        path, is_add, pc.struct_field(rm, "deletionTimestamp"), dv_field("storageType"),
        dv_field("pathOrInlineDv"), dv_field("offset"), root,
    )
    rows = rows.filter(pc.is_valid(path))
    return _newest_per_key(rows)


def _parse_blob(data: bytes, *, table: str, version: int, file: str) -> list[dict]:
    """All actions of a commit in one orjson call (lines joined into a JSON array)."""
    lines = [line for line in data.split(b"\n") if line.strip()]
    try:
        actions = orjson.loads(b"[" + b",".join(lines) + b"]")
    except orjson.JSONDecodeError:
        return parse_json_actions(data, table=table, version=version, file=file)
    if not all(isinstance(a, dict) for a in actions):
        return parse_json_actions(data, table=table, version=version, file=file)
    return actions


def _commit_rows_python(segment: LogSegment, blobs: Mapping[str, bytes], root: str) -> pa.Table:
    """`_commit_rows_columnar` with orjson, for logs Arrow's JSON reader refuses (a field of
    another type than the spec's, say); raises CorruptLogError on invalid JSON."""
    cols: dict[str, list] = {k: [] for k in ("path", "is_add", "ts", "st", "dvp", "offset")}
    for delta in reversed(segment.deltas):
        data = delta_lines_oldest_first(blobs[delta.file.path], is_compaction=delta.is_compaction)
        actions = _parse_blob(data, table=root, version=delta.end, file=delta.file.path)
        for obj in reversed(actions):
            action = obj.get("add")
            is_add = isinstance(action, dict)
            if not is_add:
                action = obj.get("remove")
                if not isinstance(action, dict):
                    continue
            path = action.get("path")
            if not isinstance(path, str):
                raise CorruptLogError(
                    f"file action without a path: {action!r:.200}",
                    table=root, version=delta.end, file=delta.file.path,
                )
            dv = action.get("deletionVector")
            dv = dv if isinstance(dv, dict) else {}
            ts = action.get("deletionTimestamp")
            cols["path"].append(path)
            cols["is_add"].append(is_add)
            cols["ts"].append(None if is_add or ts is None else int(ts))
            cols["st"].append(dv.get("storageType"))
            cols["dvp"].append(dv.get("pathOrInlineDv"))
            offset = dv.get("offset")
            cols["offset"].append(None if offset is None else int(offset))
    if not cols["path"]:
        return _empty_rows()
    rows = _rows(
        pa.array(cols["path"], pa.string()), pa.array(cols["is_add"], pa.bool_()),
        pa.array(cols["ts"], pa.int64()), pa.array(cols["st"], pa.string()),
        pa.array(cols["dvp"], pa.string()), pa.array(cols["offset"], pa.int64()), root,
    )
    return _newest_per_key(rows)


def _empty_table(schema: pa.Schema) -> pa.Table:
    """A table without rows, one empty chunk per column, as `Schema.empty_table` makes
    (which imports pandas; so does `combine_chunks` of a column without chunks)."""
    return pa.Table.from_arrays([pa.nulls(0, f.type) for f in schema], schema=schema)


def _empty_rows() -> pa.Table:
    return _empty_table(pa.schema(
        [("key", pa.string()), ("path", pa.string()), ("is_add", pa.bool_()),
         ("ts", pa.int64()), ("st", pa.string()), ("dvp", pa.string())]
    ))


def _read_refs_parquet(
    storage: Storage, path: str, version: int
) -> tuple[pa.Table, pa.Table, list[str]]:
    """(adds, removes, sidecar names) of a Parquet checkpoint file or sidecar, reference
    columns only."""
    try:
        with storage.open_input(path) as fh:
            pf = pq.ParquetFile(fh)
            top = set(pf.schema_arrow.names)
            adds = read_file_action_column(pf, "add", _ADD_REF_TYPE, top)
            removes = read_file_action_column(pf, "remove", _REMOVE_REF_TYPE, top)
            sidecars: list[str] = []
            if "sidecar" in top:
                col = pf.read(columns=["sidecar"]).column("sidecar")
                valid = col.filter(pc.is_valid(col))
                sidecars = [p for p in pc.struct_field(valid, "path").to_pylist() if p]
    except (OSError, pa.ArrowInvalid) as exc:
        raise CorruptLogError(
            f"checkpoint file cannot be read as Parquet: {exc}",
            table=storage.root, version=version, file=path,
        ) from exc
    return adds, removes, sidecars


def _fields(actions: Iterable[dict], key: str, fields: Sequence[str]) -> list[dict]:
    out = []
    for a in actions:
        v = a.get(key)
        if isinstance(v, dict):
            out.append({f: v.get(f) for f in fields})
    return out


def _read_checkpoint_refs(
    storage: Storage, checkpoint: CheckpointFiles
) -> tuple[pa.Table, pa.Table]:
    root = storage.root
    adds: list[pa.Table] = []
    removes: list[pa.Table] = []
    sidecars: list[str] = []
    for lf, info in zip(checkpoint.log_files, checkpoint.files, strict=True):
        if lf.format == "json":
            actions = parse_json_actions(
                storage.read(info.path), table=root, version=lf.version, file=info.path
            )
            adds.append(pa.Table.from_pylist(
                _fields(actions, "add", _ADD_REF_TYPE.names),
                schema=pa.schema(list(_ADD_REF_TYPE)),
            ))
            removes.append(pa.Table.from_pylist(
                _fields(actions, "remove", _REMOVE_REF_TYPE.names),
                schema=pa.schema(list(_REMOVE_REF_TYPE)),
            ))
            sidecars += [
                a["sidecar"]["path"] for a in actions
                if isinstance(a.get("sidecar"), dict) and a["sidecar"].get("path")
            ]
        else:
            a, r, s = _read_refs_parquet(storage, info.path, lf.version)
            adds.append(a)
            removes.append(r)
            sidecars += s
    for name in sidecars:
        if "/" in name or ":" in name:
            rel = relative_key(name, root)
            path = rel if rel is not None else filenames.sidecar_path(name.rsplit("/", 1)[-1])
        else:
            path = filenames.sidecar_path(name)
        if not storage.exists(path):
            raise SidecarMissingError(
                "V2 checkpoint references a sidecar that does not exist",
                table=root, version=checkpoint.version, file=path,
            )
        a, r, _ = _read_refs_parquet(storage, path, checkpoint.version)
        adds.append(a)
        removes.append(r)
    add_t = pa.concat_tables(adds) if adds else _empty_table(pa.schema(list(_ADD_REF_TYPE)))
    rm_t = pa.concat_tables(removes) if removes else _empty_table(pa.schema(list(_REMOVE_REF_TYPE)))
    return add_t.combine_chunks(), rm_t.combine_chunks()


def _checkpoint_rows(storage: Storage, checkpoint: CheckpointFiles) -> pa.Table:
    adds, removes = _read_checkpoint_refs(storage, checkpoint)
    root = storage.root
    tables = []
    for t, is_add in ((adds, True), (removes, False)):
        if not t.num_rows:
            continue
        dv = _column(t, "deletionVector")
        ts = (pa.nulls(t.num_rows, pa.int64()) if is_add
              else _column(t, "deletionTimestamp"))
        tables.append(_rows(
            _column(t, "path"), _constant_bool(is_add, t.num_rows), ts,
            dv.field("storageType"), dv.field("pathOrInlineDv"), dv.field("offset"), root,
        ))
    return pa.concat_tables(tables) if tables else _empty_rows()


def _dv_paths(rows: pa.Table, resolve: _DvResolver) -> list[str]:
    """Paths of the DV files `rows` reference (each once; see `_DvResolver`)."""
    if not rows.num_rows:
        return []
    st = _column(rows, "st")
    has_file = pc.is_in(st, value_set=string_array(["u", "p"]))
    if not pc.any(has_file).as_py():
        return []
    dvp = _column(rows, "dvp").filter(has_file)
    pairs = pc.binary_join_element_wise(st.filter(has_file), dvp, string_array(["\x00"])[0])
    out = []
    for pair in pc.unique(pairs).to_pylist():
        if pair is None:
            continue
        storage_type, _, path = pair.partition("\x00")
        resolved = resolve(storage_type, path)
        if resolved is not None:
            out.append(resolved)
    return out


def file_references(
    storage: Storage,
    segment: LogSegment,
    blobs: Mapping[str, bytes],
    delete_before: int,
) -> FileReferences:
    """What the state at `segment.version` references, for VACUUM.

    Args:
        storage: The table's storage.
        segment: The log segment of the latest version.
        blobs: The bytes of every delta of the segment, by path.
        delete_before: Tombstones with `deletionTimestamp` before this (ms) are expired.

    Raises:
        CorruptLogError: Unreadable log files (SidecarMissingError for a V2 checkpoint
            whose sidecar is missing).
        DeletionVectorError: A `u` descriptor that does not decode.
    """
    root = storage.root
    try:
        rows = _commit_rows_columnar(segment, blobs, root)
    except pa.ArrowInvalid:
        rows = _commit_rows_python(segment, blobs, root)
    if segment.checkpoint is not None:
        cp = _checkpoint_rows(storage, segment.checkpoint)
        if rows.num_rows and cp.num_rows:
            cp = cp.filter(pc.invert(pc.is_in(cp.column("key"), value_set=rows.column("key"))))
        rows = pa.concat_tables([rows, cp])
    ts = pc.fill_null(rows.column("ts"), _int_scalar(0))
    live = pc.or_(rows.column("is_add"), pc.greater_equal(ts, _int_scalar(delete_before)))
    live = pc.fill_null(live, _bool_scalar(False))
    kept, gone = rows.filter(live), rows.filter(pc.invert(live))
    resolve = _DvResolver(root)
    written = pa.concat_arrays([
        _column(kept, "path").cast(pa.string()), string_array(_dv_paths(kept, resolve)),
    ])
    written = pc.unique(written.drop_null())
    keep = pc.unique(reader_key_array(written, root))
    expired = pa.concat_arrays([
        _column(gone, "path").cast(pa.string()), string_array(_dv_paths(gone, resolve)),
    ])
    expired = pc.unique(_relative_key_array(expired, root))
    if len(expired):
        expired = expired.filter(pc.invert(pc.is_in(expired, value_set=keep)))
        expired = expired.take(pc.array_sort_indices(expired))
    return FileReferences(keep=keep, expired=expired, written=written)


# --------------------------------------------------------------------------------------
# Plan and apply
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VacuumPlan:
    """What a VACUUM deletes.

    Attributes:
        table: Table root URI.
        version: The table version whose state decided what is kept.
        retention_ms: The retention used.
        delete_before: Files modified before this (ms) and tombstones deleted before it
            are old enough.
        files: Paths to delete, relative to the root, sorted.
        sizes: Their sizes in bytes (same order).
        side_files: The Hadoop side checksums among `files` (deleted before the others).
        directories: Directories this deletion empties (and that go with it), deepest first.
        top_dirs: Top-level directories whose empty subdirectories are swept after deleting.
        lite: Lite mode (no listing).
        messages: Notes (what lite mode cannot see).
    """

    table: str
    version: int
    retention_ms: int
    delete_before: int
    files: tuple[str, ...]
    sizes: tuple[int, ...]
    side_files: frozenset[str]
    directories: tuple[str, ...]
    top_dirs: tuple[str, ...]
    lite: bool
    messages: tuple[str, ...] = ()


@dataclass(frozen=True)
class VacuumResult:
    """Outcome of `vacuum` (the CLI's --json object).

    Attributes:
        table: Table root URI.
        version: The table version whose state decided what is kept.
        files: Files deleted (dry run: to delete), relative to the root, sorted.
        num_files: len(files).
        size_bytes: Their total size.
        directories: Directories removed because they were (or became) empty; in a dry
            run, those this deletion would empty.
        dry_run: Nothing was deleted.
        retention_hours: The retention used, in hours.
        lite: Lite mode (tombstones from the log instead of a listing).
        messages: Notes (e.g. what lite mode cannot see).
    """

    table: str
    version: int
    files: tuple[str, ...]
    num_files: int
    size_bytes: int
    directories: tuple[str, ...]
    dry_run: bool
    retention_hours: float
    lite: bool = False
    messages: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["files"] = list(self.files)
        out["directories"] = list(self.directories)
        out["messages"] = list(self.messages)
        return out


def _read_deltas(storage: Storage, segment: LogSegment) -> dict[str, bytes]:
    paths = [d.file.path for d in segment.deltas]
    return dict(zip(paths, read_log_files(storage, paths), strict=True))


def retention_for(
    props: TableProperties,
    *,
    retention_hours: float | None,
    force_retention: bool,
    table: str,
    version: int,
) -> timedelta:
    """The retention VACUUM uses, after the safety checks.

    Raises:
        RetentionError: Not a finite number of hours, negative or beyond 100,000 years;
            shorter than `delta.deletedFileRetentionDuration`; or
            `delta.logRetentionDuration` shorter than it (the last two unless forced).
    """
    configured = props.deleted_file_retention
    if retention_hours is None:
        retention = configured
    else:
        if isinstance(retention_hours, bool) or not isinstance(retention_hours, numbers.Real):
            raise RetentionError(
                f"VACUUM retention must be a number of hours, got "
                f"{type(retention_hours).__name__}",
                table=table, version=version,
            )
        if not math.isfinite(retention_hours):
            raise RetentionError(
                f"VACUUM retention must be a finite number of hours, got {retention_hours!r}",
                table=table, version=version,
            )
        if retention_hours < 0:
            raise RetentionError(
                f"VACUUM retention cannot be negative ({retention_hours} hours)",
                table=table, version=version,
            )
        if retention_hours > _MAX_RETENTION_HOURS:
            raise RetentionError(
                f"VACUUM retention of {retention_hours:g} hours is longer than "
                f"{_MAX_RETENTION_HOURS:g} hours (100,000 years), the most it can express",
                table=table, version=version,
            )
        retention = timedelta(hours=retention_hours)
    hours = retention.total_seconds() / 3600
    if retention < configured and not force_retention:
        raise RetentionError(
            f"refusing to VACUUM with a retention of {hours:g} hours, shorter than "
            f"delta.deletedFileRetentionDuration ({configured.total_seconds() / 3600:g} "
            "hours): files that concurrent readers or writers still use could be deleted. "
            "Use at least that retention, or force it (force_retention=True / "
            "--force-retention) if nothing else is using the table",
            table=table, version=version,
        )
    if props.log_retention < retention and not force_retention:
        raise RetentionError(
            f"refusing to VACUUM: delta.logRetentionDuration "
            f"({props.log_retention.total_seconds() / 3600:g} hours) is shorter than the file "
            f"retention ({hours:g} hours); raise the log retention (or force it with "
            "force_retention=True / --force-retention)",
            table=table, version=version,
        )
    return retention


def _ancestors(path: str) -> Iterable[str]:
    parts = path.split("/")[:-1]
    for i in range(len(parts), 0, -1):
        yield "/".join(parts[:i])


def _dirs_emptied(storage: Storage, deleted: Sequence[str], keep: pa.Array) -> list[str]:
    """Directories that hold no file once `deleted` are gone, deepest first (checked by
    listing only the few directories no kept path lies under)."""
    if not _has_directories(storage):
        return []
    heads = {p.rpartition("/")[0] for p in deleted}
    candidates = {d for head in heads if head for d in _ancestors(f"{head}/x")}
    if not candidates:
        return []
    if len(keep):
        # A directory holding a referenced file does not become empty.
        if len(candidates) <= _FEW_DIRS:
            candidates = {
                d for d in candidates if not pc.any(pc.starts_with(keep, f"{d}/")).as_py()
            }
        else:
            nested = keep.filter(pc.match_substring(keep, "/"))
            parents = pc.unique(pc.replace_substring_regex(nested, r"/[^/]*$", ""))
            for parent in parents.to_pylist():
                candidates.difference_update(_ancestors(f"{parent}/x"))
    gone = set(deleted)
    emptied: set[str] = set()
    for d in sorted(candidates, key=lambda c: (-c.count("/"), c)):
        files = storage.list_dir(d)
        if any(f.path not in gone for f in files):
            continue
        if all(sub in emptied for sub in storage.list_subdirs(d)):
            emptied.add(d)
    return sorted(emptied, key=lambda c: (-c.count("/"), c))


def _listing_dirs(storage: Storage, prefixes: tuple[str, ...]) -> list[str]:
    subdirs = [
        d for d in storage.list_subdirs("", follow_symlinks=False)
        if d != LOG_DIR and not is_hidden(d, prefixes)
    ]
    return ["", *subdirs]


def _select(
    paths: Sequence[str], prefixes: tuple[str, ...]
) -> tuple[list[int], list[int]]:
    """Indexes of deletable files among unreferenced old ones, and of their side files."""
    chosen: list[int] = []
    sides: dict[str, int] = {}
    hidden_dirs: dict[str, bool] = {}  # files share few directories: decide each once
    log_prefix = f"{LOG_DIR}/"
    for i, path in enumerate(paths):
        if path.startswith(log_prefix) or path == LOG_DIR:
            continue
        head, _, name = path.rpartition("/")
        if head:
            hidden = hidden_dirs.get(head)
            if hidden is None:
                hidden = hidden_dirs[head] = _hidden_path(head, prefixes)
            if hidden:
                continue
        if is_hidden(name, prefixes):
            main = _side_file_of(path)
            if main is not None:
                sides[main] = i
            continue
        chosen.append(i)
    side_idx = [sides[paths[i]] for i in chosen if paths[i] in sides]
    return chosen, side_idx


def plan_vacuum(
    storage: Storage,
    *,
    now_ms: int,
    retention_hours: float | None = None,
    force_retention: bool = False,
    lite: bool = False,
    engine: Engine | None = None,
    allow_catalog_managed: bool = False,
) -> VacuumPlan:
    """Decide what VACUUM deletes (reads the log and lists the table; deletes nothing).

    Every file of the plan is proven deletable before the plan is returned (see
    `_prove_deletable`): a dry run and a real run share it.

    Args:
        storage: The table's storage.
        now_ms: Current time in ms since the epoch.
        retention_hours: See `vacuum`.
        force_retention: See `vacuum`.
        lite: See `vacuum`.
        engine: See `vacuum`.
        allow_catalog_managed: See `vacuum`.

    Raises:
        UnsupportedFeatureError: Unknown or unsupported reader or writer features (checked
            before any data directory is listed).
        RetentionError: See `retention_for`.
        UnsafeDeletionError: A chosen file cannot be proven unreferenced and inside the
            root (nothing is deleted).
    """
    table = storage.root
    excluded: set[str] = set()
    missing: SidecarMissingError | None = None
    while True:
        try:
            segment = build_log_segment(storage, exclude_checkpoints=frozenset(excluded))
        except CorruptLogError as exc:
            if missing is None:
                raise
            # Without that checkpoint nothing reads the table: name what is missing.
            raise CorruptLogError(
                f"{missing.reason}, and no older checkpoint or complete run of commits "
                f"can stand in for it ({exc.reason})",
                table=table, version=missing.version, file=missing.file,
            ) from exc
        blobs = _read_deltas(storage, segment)
        # The protocol check comes before anything else is read or listed.
        found = read_protocol_metadata(storage, segment, blobs=blobs)
        protocol, metadata = found.protocol, found.metadata
        features.ensure_supported(
            protocol, "vacuum", table=table, version=segment.version,
            permitted=frozenset({"catalogManaged"}) if allow_catalog_managed else frozenset(),
        )
        props = TableProperties.from_configuration(
            metadata.configuration, table=table, version=segment.version
        )
        retention = retention_for(
            props, retention_hours=retention_hours, force_retention=force_retention,
            table=table, version=segment.version,
        )
        retention_ms = int(retention.total_seconds() * 1000)
        delete_before = now_ms - retention_ms
        try:
            refs = file_references(storage, segment, blobs, delete_before)
        except SidecarMissingError as exc:
            assert segment.checkpoint is not None
            excluded.add(segment.checkpoint.identity)
            missing = exc
            continue
        break
    prefixes = partition_prefixes(metadata)
    common = {
        "table": table, "version": segment.version, "retention_ms": retention_ms,
        "delete_before": delete_before, "lite": lite,
    }
    if lite:
        plan = _plan_lite(storage, refs, prefixes, common)
        _prove_deletable(storage, plan.files, refs, version=segment.version)
        return plan
    owned = engine is None
    eng = engine
    if eng is None:
        from delta_ops.engine.local import LocalEngine

        eng = LocalEngine()
    try:
        dirs = _listing_dirs(storage, prefixes)
        found = eng.find_unreferenced(storage, dirs, refs.keep, delete_before)
    finally:
        if owned:
            eng.close()
    paths = found.column("path").to_pylist()
    sizes = found.column("size").to_pylist()
    unreadable = [p[len(UNREADABLE_PREFIX):] for p in paths if p.startswith(UNREADABLE_PREFIX)]
    if unreadable:
        keep_rows = [i for i, p in enumerate(paths) if not p.startswith(UNREADABLE_PREFIX)]
        paths = [paths[i] for i in keep_rows]
        sizes = [sizes[i] for i in keep_rows]
    chosen, side_idx = _select(paths, prefixes)
    idx = sorted(set(chosen) | set(side_idx))
    files = [paths[i] for i in idx]
    _prove_deletable(storage, files, refs, version=segment.version)
    messages: list[str] = []
    if unreadable:
        shown = ", ".join(sorted(unreadable)[:20])
        more = f" and {len(unreadable) - 20} more" if len(unreadable) > 20 else ""
        messages.append(
            f"left {len(unreadable)} file(s) whose names are not valid UTF-8 (a Delta log "
            f"cannot name them; never deleted, delete by hand if unused): {shown}{more}"
        )
    if _has_directories(storage):
        linked = sorted(
            set(storage.list_subdirs("")) - set(storage.list_subdirs("", follow_symlinks=False))
        )
        if linked:
            messages.append(
                "symbolic links to directories were neither followed nor deleted: "
                + ", ".join(linked)
            )
    return VacuumPlan(
        **common,
        files=tuple(files),
        sizes=tuple(sizes[i] for i in idx),
        side_files=frozenset(paths[i] for i in side_idx),
        directories=tuple(_dirs_emptied(storage, files, refs.keep)),
        top_dirs=tuple(d for d in dirs if d),
        messages=tuple(messages),
    )


# The independent check of a plan. It shares nothing with `reader_keys`: paths are decoded
# until nothing changes, any scheme and `//localhost` dropped, slashes collapsed, dot
# segments resolved, and for references also taken relative to the root spelt the same way.
_ANY_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:(//localhost(?=/))?", re.IGNORECASE)
_PLAIN = r"%|:|^/|//|(^|/)\.|/$"


def _loose(text: str) -> str:
    for _ in range(16):
        decoded = unquote(text)
        if decoded == text:
            break
        text = decoded
    text = posixpath.normpath(re.sub(r"/+", "/", text)) if text else text
    return "" if text == "." else text.lstrip("/")


def _loose_references(written: pa.Array, root: str) -> pa.Array:
    """Loose spellings of the referenced paths: each path, without its scheme, and
    relative to the root when it starts with the root's loose spelling."""
    if not len(written):
        return written
    odd = pc.match_substring_regex(written, _PLAIN)
    if not pc.any(odd).as_py():
        return written
    root_loose = _loose(_ANY_SCHEME.sub("", root)) + "/"
    out: list[str] = []
    for p in written.filter(odd).to_pylist():
        whole = _loose(p)
        bare = _loose(_ANY_SCHEME.sub("", p))
        out += [whole, bare]
        for form in (whole, bare):
            if form.startswith(root_loose):
                out.append(form[len(root_loose) :])
    return pa.concat_arrays([written.filter(pc.invert(odd)), string_array(out)])


def _prove_deletable(
    storage: Storage, files: Sequence[str], refs: FileReferences, *, version: int
) -> None:
    """Refuse the whole run unless every file of the plan is proven deletable: no symbolic
    link on its way and inside the root (`Storage.deletion_hazards`), and unreferenced by
    a second, independent normalisation of its path and of every referenced path.

    Raises:
        UnsafeDeletionError: Naming the table, version and (first) file.
    """
    if not files:
        return
    table = storage.root
    candidates = string_array(list(files))
    named = pc.is_in(candidates, value_set=refs.keep)
    odd = pc.match_substring_regex(candidates, _PLAIN)
    if pc.any(odd).as_py():
        loose = string_array([
            _loose(f) if o else f for f, o in zip(files, odd.to_pylist(), strict=True)
        ])
    else:
        loose = candidates  # nothing to decode or collapse: each is its own loose form
    named = pc.or_(named, pc.is_in(loose, value_set=_loose_references(refs.written, table)))
    if pc.any(named).as_py():
        clash = candidates.filter(named).to_pylist()
        raise UnsafeDeletionError(
            f"refusing to VACUUM: {len(clash)} file(s) chosen for deletion match a path the "
            f"log references once both are decoded and normalized another way (first: "
            f"{clash[0]!r}); nothing was deleted",
            table=table, version=version, file=clash[0],
        )
    hazards = storage.deletion_hazards(files)
    if hazards:
        path, reason = hazards[0]
        raise UnsafeDeletionError(
            f"refusing to VACUUM: {len(hazards)} file(s) chosen for deletion cannot be "
            f"proven inside the table root (first: {path!r}: {reason}); nothing was deleted",
            table=table, version=version, file=path,
        )


def _has_directories(storage: Storage) -> bool:
    """Object stores (and fsspec's memory store) have no directories to remove."""
    return storage.scheme == "file"


def _plan_lite(
    storage: Storage, refs: FileReferences, prefixes: tuple[str, ...], common: dict[str, Any]
) -> VacuumPlan:
    candidates = [
        p for p in refs.expired.to_pylist()
        if not p.startswith(f"{LOG_DIR}/") and not _hidden_path(p, prefixes)
    ]
    probes = candidates + [_side_file(p) for p in candidates]
    infos: list[FileInfo | None] = []
    if probes:
        with ThreadPoolExecutor(min(_IO_THREADS, len(probes))) as pool:
            infos = list(pool.map(storage.info, probes))
    old = {
        p: info for p, info in zip(probes, infos, strict=True)
        if info is not None and info.modification_time < common["delete_before"]
    }
    chosen = [p for p in candidates if p in old]
    sides = [s for p in chosen if (s := _side_file(p)) in old]
    files = sorted(chosen + sides)
    messages = (
        "lite mode: only files named by expired tombstones still in the log state (and "
        "their deletion vector files) were considered; it cannot see files never committed "
        "(failed or aborted writes), files whose tombstones were already dropped from "
        "checkpoints, or change data files (_change_data); run a full VACUUM to remove those",
    )
    return VacuumPlan(
        **common,
        files=tuple(files),
        sizes=tuple(old[p].size for p in files),
        side_files=frozenset(sides),
        directories=tuple(_dirs_emptied(storage, files, refs.keep)),
        top_dirs=tuple(sorted({p.split("/", 1)[0] for p in files if "/" in p})),
        messages=messages,
    )


def _remove_empty_dirs(storage: Storage, plan: VacuumPlan) -> tuple[list[str], list[str]]:
    """Remove empty directories below the data directories; (removed, notes)."""
    removed: list[str] = []
    notes: list[str] = []
    for top in plan.top_dirs:
        removed += storage.remove_empty_dirs(top)
    emptied_tops = [
        t for t in plan.top_dirs if not storage.list_dir(t) and not storage.list_subdirs(t)
    ]
    if emptied_tops:
        removed += _remove_top_level(storage, emptied_tops, notes)
    return removed, notes


def _empty_dir_below(storage: Storage, directory: str) -> str | None:
    """An empty directory at any depth below `directory`, or None."""
    for sub in storage.list_subdirs(directory):
        inner = storage.list_subdirs(sub)
        if not inner and not storage.list_dir(sub):
            return sub
        found = _empty_dir_below(storage, sub)
        if found is not None:
            return found
    return None


def _remove_top_level(storage: Storage, tops: list[str], notes: list[str]) -> list[str]:
    """Remove empty top-level directories.

    `Storage` can only remove the empty directories *below* a directory, so for these the
    sweep has to start at the root. It runs only when the log directory holds no empty
    directory, so that nothing under `_delta_log` is ever touched.
    """
    blocker = _empty_dir_below(storage, LOG_DIR)
    if blocker is not None:
        notes.append(
            f"empty directories {tops} were left in place: removing them would also remove "
            f"the empty log directory {blocker}"
        )
        return []
    return storage.remove_empty_dirs("")


def vacuum(
    table_or_storage: Any,
    *,
    retention_hours: float | None = None,
    force_retention: bool = False,
    lite: bool = False,
    dry_run: bool = False,
    now_ms: int | None = None,
    engine: Engine | None = None,
    storage_options: Mapping[str, Any] | None = None,
    allow_catalog_managed: bool = False,
) -> VacuumResult:
    """Delete files the table no longer references once they are older than the retention.

    Args:
        table_or_storage: A `DeltaTable`, a `Storage`, or a table URI.
        retention_hours: Retention instead of `delta.deletedFileRetentionDuration`
            (default 1 week).
        force_retention: Allow a retention shorter than the table's (and a log retention
            shorter than the file retention).
        lite: Use expired tombstones from the log instead of listing the table.
        dry_run: Only report what would be deleted.
        now_ms: Current time in ms since the epoch (default: the system clock).
        engine: Where listing and deleting run (default: `LocalEngine`).
        storage_options: Used when `table_or_storage` is a URI.
        allow_catalog_managed: Accept a catalog-managed table (`catalogManaged` feature):
            only when the catalog that owns it is known not to need the files.

    Raises:
        UnsupportedFeatureError: The table has reader or writer features this tool does not
            know (nothing listed, nothing deleted); `features` names them.
        RetentionError: The retention is unsafe (see `retention_for`).
        UnsafeDeletionError: A file chosen for deletion could not be proven unreferenced
            and inside the root (nothing deleted).
        StorageError: Listing or deleting failed (a re-run finishes the job).
    """
    storage = Storage.of(table_or_storage, storage_options)
    now = int(time.time() * 1000) if now_ms is None else int(now_ms)
    plan = plan_vacuum(
        storage, now_ms=now, retention_hours=retention_hours, force_retention=force_retention,
        lite=lite, engine=engine, allow_catalog_managed=allow_catalog_managed,
    )
    directories: Sequence[str] = plan.directories
    messages = list(plan.messages)
    if not dry_run:
        owned = engine is None
        eng = engine
        if eng is None:
            from delta_ops.engine.local import LocalEngine

            eng = LocalEngine()
        try:
            # Side checksums first: a crash in between leaves their data files, which a
            # re-run finds again, never a side file whose data file is gone.
            sides = [p for p in plan.files if p in plan.side_files]
            mains = [p for p in plan.files if p not in plan.side_files]
            if sides:
                eng.delete_files(storage, sides)
            if mains:
                eng.delete_files(storage, mains)
        finally:
            if owned:
                eng.close()
        removed, notes = _remove_empty_dirs(storage, plan)
        directories = sorted(set(removed), key=lambda c: (-c.count("/"), c))
        messages += notes
    return VacuumResult(
        table=plan.table,
        version=plan.version,
        files=plan.files,
        num_files=len(plan.files),
        size_bytes=int(sum(plan.sizes)),
        directories=tuple(directories),
        dry_run=dry_run,
        retention_hours=plan.retention_ms / HOUR_MS,
        lite=plan.lite,
        messages=tuple(messages),
    )


def describe(result: VacuumResult) -> str:
    """Human-readable summary of a result (the CLI's text output)."""
    verb = "would delete" if result.dry_run else "deleted"
    lines = [
        f"table       {result.table} (version {result.version})",
        f"retention   {result.retention_hours:g} hours{' (lite)' if result.lite else ''}",
        f"{verb} {result.num_files} files ({result.size_bytes} bytes)",
    ]
    lines += [f"  {p}" for p in result.files]
    if result.directories:
        lines.append(f"{'would remove' if result.dry_run else 'removed'} "
                     f"{len(result.directories)} empty directories")
        lines += [f"  {d}/" for d in result.directories]
    lines += result.messages
    return "\n".join(lines)

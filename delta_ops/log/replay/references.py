"""The references-only replay: which files the state of one version protects.

Spec sections: "Action Reconciliation", "Checkpoints" (V1 and V2 with sidecars), "Log
Compaction Files", "Add File and Remove File" (a tombstone expires `deletedFileRetention`
after its `deletionTimestamp`) and "Deletion Vectors" (a DV file lives as long as an add or
an unexpired remove references it; `u` descriptors resolve to
`<table>/<random prefix>/deletion_vector_<uuid>.bin`).

The reconciliation is `log.replay.full_replay.replay`'s, through the same readers: the commits (and
compactions, first line wins inside one, `delta_lines_oldest_first`) by
`log.replay.columnar_commits.reconcile` in its references-only mode, action by action by
`log.replay.full_replay._Reconciler` when that steps aside; checkpoint files and sidecars by
`log.replay.full_replay._read_parquet_actions` (sidecars found by the same rule). The newest action
per file key `(canonical path, deletion vector unique id)` wins, and the checkpoint's only
for keys no commit touched. What differs is what is read: only `path`, `deletionVector` and
`deletionTimestamp` of adds and removes, nothing else, and no snapshot is built.

`file_references` turns that state into what VACUUM protects (`FileReferences`): the
paths of live adds and of tombstones still within the retention, and their DV files. A
checkpoint that cannot be read raises `UnusableCheckpointError`: read through
`log.replay.checkpoint_fallback.read_with_usable_checkpoint` to fall back to an older one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.engine.threads import io_map
from delta_ops.errors import CorruptLogError, DeletionVectorError, DeltaOpsError
from delta_ops.log.files.checkpoint_reader import read_json_part
from delta_ops.log.files.sidecars import require_sidecar, sidecar_files
from delta_ops.log.replay.columnar_commits import (
    REFERENCE_ADD_TYPE,
    REFERENCE_REMOVE_TYPE,
    CommitFile,
)
from delta_ops.log.replay.columnar_commits import reconcile as reconcile_commits
from delta_ops.log.replay.full_replay import (
    _read_parquet_actions,
    _Reconciler,
    delta_lines_oldest_first,
    parse_json_actions,
    read_log_files,
)
from delta_ops.log.segment.log_segment import CheckpointFiles, LogSegment, build_log_segment
from delta_ops.protocol.actions import (
    file_keys,
    read_otherwise,
    reader_key_array,
    relative_key,
)
from delta_ops.protocol.arrays import empty_table, from_numpy, not_in, sorted_unique, string_array
from delta_ops.protocol.deletion_vectors import decode_uuid_path
from delta_ops.storage import Storage

__all__ = [
    "COMMIT_BATCH_BYTES",
    "FileReferences",
    "commit_rows",
    "file_references",
    "read_checkpoint_references",
    "read_deltas",
    "reference_parts",
    "reference_rows",
]

# One row per logical file (the newest action for its key): the shape both the commits and
# the checkpoint are brought to. `path` as written; `ts` the deletionTimestamp (removes);
# `st` and `dvp` the DV descriptor's storageType and pathOrInlineDv.
ROW_SCHEMA = pa.schema(
    [("key", pa.string()), ("path", pa.string()), ("is_add", pa.bool_()),
     ("ts", pa.int64()), ("st", pa.string()), ("dvp", pa.string())]
)
#: Bytes of JSON deltas the references replay reconciles at once (`commit_rows`): the
#: columnar reader holds about three times what it reads, so a longer log since the
#: checkpoint is read in runs of this size.
COMMIT_BATCH_BYTES = 8 << 20
# Of the checkpoint's other actions only the sidecars (V2) are read.
_SIDECAR_ONLY = ("sidecar",)


# --------------------------------------------------------------------------------------
# Arrow helpers that never import pandas (a VACUUM dry run must not)
# --------------------------------------------------------------------------------------


def _int_range(start: int, stop: int, step: int = 1) -> pa.Array:
    return from_numpy(np.arange(start, stop, step, dtype=np.int64))


def _column(table: pa.Table, name: str) -> pa.Array:
    """A column as one array (`combine_chunks` of a column without chunks, as a filter that
    keeps no row leaves, imports pandas); its one non-empty chunk as it is, not a copy."""
    col = table.column(name)
    chunks = [c for c in col.chunks if len(c)]
    if len(chunks) <= 1:
        return chunks[0] if chunks else pa.nulls(0, col.type)
    return pa.concat_arrays(chunks)


def _int_scalar(value: int) -> pa.Scalar:
    """An int64 scalar taken from a buffer-built array: a Python value given to a compute
    function becomes a scalar through `pa.scalar`, which imports pandas."""
    return _int_range(value, value + 1)[0]


def _bool_scalar(value: bool) -> pa.Scalar:
    bits = pa.py_buffer(b"\x01" if value else b"\x00")
    return pa.Array.from_buffers(pa.bool_(), 1, [None, bits])[0]


def _constant_bool(value: bool, n: int) -> pa.Array:
    return pc.fill_null(pa.nulls(n, pa.bool_()), _bool_scalar(value))


def _empty_rows() -> pa.Table:
    return empty_table(ROW_SCHEMA)


# --------------------------------------------------------------------------------------
# The reconciled state, as rows
# --------------------------------------------------------------------------------------


def read_deltas(storage: Storage, segment: LogSegment) -> dict[str, bytes]:
    """The bytes of every delta (commit or compaction) of `segment`, by path."""
    paths = [d.file.path for d in segment.deltas]
    return dict(zip(paths, read_log_files(storage, paths), strict=True))


def _action_rows(actions: pa.Table, is_add: bool, keys: pa.Array | None, root: str) -> pa.Table:
    """Rows of reference-schema adds or removes; `keys` computed when not given."""
    n = actions.num_rows
    if not n:
        return _empty_rows()
    path = _column(actions, "path")
    dv = _column(actions, "deletionVector")
    st = dv.field("storageType").cast(pa.string())
    if keys is None:
        # Keys of the actions as read: the DV's null storageType is a missing DV.
        ref = pa.StructArray.from_arrays(
            [st, dv.field("pathOrInlineDv").cast(pa.string()), dv.field("offset")],
            names=["storageType", "pathOrInlineDv", "offset"],
            mask=pc.is_null(st),
        )
        keys = file_keys(pa.StructArray.from_arrays([path, ref], names=["path",
                                                                        "deletionVector"]), root)
    ts = (pa.nulls(n, pa.int64()) if is_add
          else _column(actions, "deletionTimestamp").cast(pa.int64()))
    return pa.Table.from_arrays(
        [keys, path.cast(pa.string()), _constant_bool(is_add, n), ts, st,
         dv.field("pathOrInlineDv").cast(pa.string())],
        schema=ROW_SCHEMA,
    )


def _dict_rows(actions: list[dict], is_add: bool, root: str, *, version: int | None,
               file: str | None) -> pa.Table:
    """Rows of add or remove actions parsed as JSON (the action-by-action reader and JSON
    checkpoints); a `deletionTimestamp` written as a string of digits is read as its
    number, as Spark reads it."""
    if not actions:
        return _empty_rows()
    paths, ts, st, dvp, offset = [], [], [], [], []
    for action in actions:
        path = action.get("path")
        if not isinstance(path, str):
            raise CorruptLogError(
                f"file action without a path: {action!r:.200}",
                table=root, version=version, file=file,
            )
        dv = action.get("deletionVector")
        dv = dv if isinstance(dv, dict) else {}
        stamp = action.get("deletionTimestamp")
        try:
            ts.append(None if is_add or stamp is None else int(stamp))
            offset.append(None if dv.get("offset") is None else int(dv["offset"]))
        except (TypeError, ValueError) as exc:
            raise CorruptLogError(
                f"file action {path!r} has a deletionTimestamp or deletion vector offset "
                f"that is not a number: {action!r:.200}",
                table=root, version=version, file=file,
            ) from exc
        paths.append(path)
        st.append(dv.get("storageType"))
        dvp.append(dv.get("pathOrInlineDv"))
    typ = REFERENCE_ADD_TYPE if is_add else REFERENCE_REMOVE_TYPE
    st_arr = pa.array(st, pa.string())
    dv_arr = pa.StructArray.from_arrays(
        [st_arr, pa.array(dvp, pa.string()), pa.array(offset, pa.int32()),
         pa.nulls(len(paths), pa.int32()), pa.nulls(len(paths), pa.int64())],
        fields=list(typ.field("deletionVector").type),
        mask=pc.is_null(st_arr),
    )
    arrays = [pa.array(paths, pa.string()), dv_arr]
    if not is_add:
        arrays.insert(1, pa.array(ts, pa.int64()))
    table = pa.Table.from_arrays(arrays, schema=pa.schema(list(typ)))
    return _action_rows(table, is_add, None, root)


def _commit_files(
    segment: LogSegment, blobs: Mapping[str, bytes], *, compaction_first_wins: bool = True
) -> list[CommitFile]:
    # Every delta's lines oldest first (a compaction's reversed): one last-wins stream.
    return [
        CommitFile(d.end, d.file.path, delta_lines_oldest_first(
            blobs[d.file.path], is_compaction=d.is_compaction and compaction_first_wins),
            is_compaction=d.is_compaction)
        for d in segment.deltas
    ]


def _commit_rows_columnar(
    segment: LogSegment, blobs: Mapping[str, bytes], root: str, *,
    compaction_first_wins: bool = True,
) -> pa.Table | None:
    """The newest action per file key among the segment's commits, as rows, from
    `log.replay.columnar_commits.reconcile` in references-only mode; None when it steps aside."""
    if not segment.deltas:
        return _empty_rows()
    files = _commit_files(segment, blobs, compaction_first_wins=compaction_first_wins)
    fast = reconcile_commits(files, root, references_only=True)
    if fast is None:
        return None
    return pa.concat_tables([
        _action_rows(fast.adds, True, fast.add_keys, root),
        _action_rows(fast.removes, False, fast.remove_keys, root),
    ])


def _commit_rows_python(
    segment: LogSegment, blobs: Mapping[str, bytes], root: str, *,
    compaction_first_wins: bool = True,
) -> pa.Table:
    """`_commit_rows_columnar` action by action (`log.replay.full_replay._Reconciler`), for logs the
    columnar reader steps aside from; errors name the file (and line)."""
    rec = _Reconciler(root)
    for delta in reversed(segment.deltas):
        path = delta.file.path
        data = delta_lines_oldest_first(
            blobs[path], is_compaction=delta.is_compaction and compaction_first_wins
        )
        actions = parse_json_actions(data, table=root, version=delta.end, file=path)
        if not delta.is_compaction:  # in one commit an add wins over a remove of a key, as
            # in the columnar references-only mode (`log.replay.columnar_commits` says why)
            actions.sort(key=lambda obj: obj.get("add") is not None)
        rec.apply_newest_first(actions, table=root, version=delta.end, file=path)
    version = segment.version
    return pa.concat_tables([
        _dict_rows(rec.adds, True, root, version=version, file=None),
        _dict_rows(rec.removes, False, root, version=version, file=None),
    ])


def _delta_batches(
    segment: LogSegment, blobs: Mapping[str, bytes], batch_bytes: int
) -> Iterator[LogSegment]:
    """`segment`'s deltas in runs of about `batch_bytes` bytes (at least one delta each),
    newest run first, each as a segment of its own without the checkpoint."""
    run: list = []
    size = 0
    for delta in reversed(segment.deltas):
        n = len(blobs[delta.file.path])
        if run and size + n > batch_bytes:
            yield replace(segment, checkpoint=None, deltas=tuple(reversed(run)))
            run, size = [], 0
        run.append(delta)
        size += n
    if run:
        yield replace(segment, checkpoint=None, deltas=tuple(reversed(run)))


def commit_rows(
    segment: LogSegment, blobs: Mapping[str, bytes], root: str, *,
    compaction_first_wins: bool = True, batch_bytes: int | None = None,
) -> pa.Table:
    """The newest action per file key among the segment's deltas, as rows, read in runs of
    about `batch_bytes` bytes of JSON (`COMMIT_BATCH_BYTES` when None), newest run first:
    each run reconciled by `_commit_rows_columnar` (`_commit_rows_python` where that steps
    aside), and its rows kept only for keys no newer run touched. A key's newest action is
    in the newest run that names it, so the runs together reconcile as one; the columnar
    reader's buffers stay the size of one run, not of the whole log since the checkpoint."""
    limit = COMMIT_BATCH_BYTES if batch_bytes is None else max(1, int(batch_bytes))
    order = {"compaction_first_wins": compaction_first_wins}
    parts: list[pa.Table] = []
    for run in _delta_batches(segment, blobs, limit):
        rows = _commit_rows_columnar(run, blobs, root, **order)
        if rows is None:
            rows = _commit_rows_python(run, blobs, root, **order)
        if rows.num_rows:
            parts.append(rows)
    if len(parts) <= 1:
        return parts[0] if parts else _empty_rows()
    # Each run holds a key once; across runs the first row of a key (newest run) wins,
    # found in one hash pass over all the rows rather than one per run.
    # (`index_in` gives the first index of a repeated value; `group_by` would import
    # pandas.)
    rows = pa.concat_tables(parts)
    keys = _column(rows, "key")
    return rows.take(pc.index_in(pc.unique(keys), value_set=keys))


def read_checkpoint_references(storage: Storage, checkpoint: CheckpointFiles) -> pa.Table:
    """The adds and removes of a checkpoint (every part and sidecar) as rows, reference
    columns only.

    Raises:
        UnusableCheckpointError: A part or sidecar cannot be read (SidecarMissingError when
            a V2 checkpoint's sidecar does not exist).
        CorruptLogError: A sidecar path points outside the table.
    """
    table = storage.root
    parts: list[pa.Table] = []
    sidecars: list[str] = []
    for lf, info in zip(checkpoint.log_files, checkpoint.files, strict=True):
        if lf.format == "json":
            actions = read_json_part(storage, lf.version, info.path)
            for name, is_add in (("add", True), ("remove", False)):
                rows = [a[name] for a in actions if isinstance(a.get(name), dict)]
                parts.append(_dict_rows(rows, is_add, table, version=lf.version, file=info.path))
            sidecars += [
                a["sidecar"]["path"] for a in actions
                if isinstance(a.get("sidecar"), dict) and a["sidecar"].get("path")
            ]
        else:
            found = _read_parquet_refs(storage, info.path, lf.version)
            parts += [found.adds, found.removes]
            sidecars += found.sidecars
    paths = sidecar_files(sidecars, table, checkpoint.version, checkpoint.files[0].path)

    def read_sidecar(path: str) -> _ParquetRefs:
        require_sidecar(storage, path, checkpoint.version)
        return _read_parquet_refs(storage, path, checkpoint.version)

    if len(paths) > 1:
        found_sidecars = io_map(read_sidecar, paths)
    else:
        found_sidecars = [read_sidecar(p) for p in paths]
    for found in found_sidecars:
        parts += [found.adds, found.removes]
    parts = [p for p in parts if p.num_rows]
    return pa.concat_tables(parts) if parts else _empty_rows()


@dataclass
class _ParquetRefs:
    adds: pa.Table
    removes: pa.Table
    sidecars: list[str]


def _read_parquet_refs(storage: Storage, path: str, version: int) -> _ParquetRefs:
    found = _read_parquet_actions(
        storage, path, version, add_type=REFERENCE_ADD_TYPE, remove_type=REFERENCE_REMOVE_TYPE,
        non_file_columns=_SIDECAR_ONLY,
    )
    root = storage.root
    sidecars = [
        a["sidecar"]["path"] for a in found.non_file
        if isinstance(a.get("sidecar"), dict) and a["sidecar"].get("path")
    ]
    return _ParquetRefs(
        _action_rows(found.adds, True, None, root),
        _action_rows(found.removes, False, None, root),
        sidecars,
    )


def reference_rows(
    storage: Storage,
    segment: LogSegment,
    blobs: Mapping[str, bytes] | None = None,
    *,
    compaction_first_wins: bool = True,
) -> pa.Table:
    """The state at `segment.version` as one row per logical file (its newest action:
    `ROW_SCHEMA`), adds and removes alike, reference columns only.

    Args:
        storage: The table's storage.
        segment: The log segment of the version.
        blobs: The bytes of every delta of the segment, by path (read when None).
        compaction_first_wins: How a compaction file's repeated keys are read: the first
            line wins (Databricks' newest-first form, and every delta reader here); False
            reads its lines oldest first, the last one winning (the other order a writer
            that does not reconcile could use; see `file_references`).

    Raises:
        CorruptLogError: Unreadable commits, or file actions without a path.
        UnusableCheckpointError: The checkpoint cannot be read (SidecarMissingError for a
            V2 checkpoint whose sidecar is missing).
    """
    root = storage.root
    if blobs is None:
        blobs = read_deltas(storage, segment)
    rows = commit_rows(segment, blobs, root, compaction_first_wins=compaction_first_wins)
    if segment.checkpoint is None:
        return rows
    cp = read_checkpoint_references(storage, segment.checkpoint)
    if rows.num_rows and cp.num_rows:
        # The checkpoint's actions only for keys no commit touched.
        cp = cp.filter(pc.invert(pc.is_in(cp.column("key"), value_set=_column(rows, "key"))))
    return pa.concat_tables([rows, cp])


# --------------------------------------------------------------------------------------
# What VACUUM protects
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

    def union(self, other: FileReferences) -> FileReferences:
        """What either reading references: a file either keeps is kept (and so not expired)."""
        keep = sorted_unique(pa.concat_arrays([self.keep, other.keep]))
        written = sorted_unique(pa.concat_arrays([self.written, other.written]))
        expired = sorted_unique(pa.concat_arrays([self.expired, other.expired]))
        return FileReferences(keep=keep, expired=not_in(expired, keep), written=written)

    # The same reading interface as the spilled references (`log.replay.reference_buckets`).

    def keep_chunks(self) -> Iterator[pa.Array]:
        """`keep`, in pieces (here one)."""
        yield self.keep

    def written_chunks(self) -> Iterator[pa.Array]:
        """`written`, in pieces (here one)."""
        yield self.written

    def expired_keys(self) -> pa.Array:
        """`expired`."""
        return self.expired

    def close(self) -> None:
        """Nothing to release (the spilled references remove their files)."""


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


def _file_paths(rows: pa.Table, resolve: _DvResolver) -> pa.Array:
    """The paths `rows` name as strings, then those of the DV files they reference (each
    once; see `_DvResolver`); the path column itself when there are none."""
    paths = _column(rows, "path").cast(pa.string())
    st = _column(rows, "st")
    has_file = pc.is_in(st, value_set=string_array(["u", "p"]))
    if not rows.num_rows or not pc.any(has_file).as_py():
        return paths
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
    return pa.concat_arrays([paths, string_array(out)]) if out else paths


def _relative_key_array(paths: pa.Array, root: str) -> pa.Array:
    """`relative_key` of each path (the file the spec's reading names), those pointing
    outside the root left out; only those `read_otherwise` flags go through Python."""
    paths = paths.cast(pa.string()).drop_null()
    if not len(paths):
        return paths
    odd = read_otherwise(paths)
    if not pc.any(odd).as_py():
        return paths
    fixed = [k for p in paths.filter(odd).to_pylist() if (k := relative_key(p, root)) is not None]
    return pa.concat_arrays([paths.filter(pc.invert(odd)), string_array(fixed)])


def file_references(
    storage: Storage,
    segment: LogSegment,
    blobs: Mapping[str, bytes] | None,
    delete_before: int,
) -> FileReferences:
    """What the state at `segment.version` references, for VACUUM: live adds and
    tombstones with `deletionTimestamp >= delete_before` protect their files and DV files.

    A compaction file is a shortcut for the commits it covers, and its reading depends on
    its writer's line order (Databricks writes the commits newest first without reconciling,
    and one key's first line wins; the spec's form is reconciled; a writer that neither
    reconciles nor reverses would need the last line to win). A wrong order would make a
    live file look removed, so when the segment uses compaction files, the references are
    also read through the commits they cover (the independent path) where those are still
    in the log, else through the compaction files read in the other order, and VACUUM
    protects what either reading references.

    Args:
        storage: The table's storage.
        segment: The log segment of the latest version.
        blobs: The bytes of every delta of the segment, by path (read when None).
        delete_before: Tombstones with `deletionTimestamp` before this (ms) are expired.

    Raises:
        CorruptLogError: Unreadable log files (UnusableCheckpointError for a checkpoint
            that cannot be read, SidecarMissingError for a V2 checkpoint whose sidecar is
            missing).
        DeletionVectorError: A `u` descriptor that does not decode.
    """
    refs = _references(storage, reference_rows(storage, segment, blobs), delete_before)
    if not any(d.is_compaction for d in segment.deltas):
        return refs
    try:
        commits = build_log_segment(storage, segment.version, use_compactions=False)
        rows = reference_rows(storage, commits)
    except DeltaOpsError:
        # The covered commits are gone (or that segment's checkpoint cannot be read): the
        # compaction files read in the other order stand in for them.
        rows = reference_rows(storage, segment, blobs, compaction_first_wins=False)
    return refs.union(_references(storage, rows, delete_before))


def reference_parts(
    rows: pa.Table, delete_before: int, root: str
) -> tuple[pa.Array, pa.Array, pa.Array]:
    """(written, keep, expired) of some rows of the state (`ROW_SCHEMA`), each unique within
    these rows and in ascending order (`sorted_unique`): the paths live adds and
    unexpired tombstones name as written (DV files of `u` descriptors resolved) and their
    listing keys (`reader_keys`, `written` itself when every path is its own key), and the
    listing keys of what expired tombstones name (the spec's reading), NOT yet without
    `keep`. Row by row: the parts of several slices of a state, united, are the parts of
    the whole.
    A tombstone without a `deletionTimestamp` (optional) never expires: when it was
    written is unknown here, and versions before it may be within the retention."""
    ts = pc.fill_null(rows.column("ts"), _int_scalar(delete_before))
    live = pc.or_(rows.column("is_add"), pc.greater_equal(ts, _int_scalar(delete_before)))
    live = pc.fill_null(live, _bool_scalar(False))
    resolve = _DvResolver(root)
    if pc.all(live).as_py() is not False:  # no expired tombstone (or no rows): no copy
        kept = rows
        # A new empty array, not an empty slice of `rows` (which would hold its buffers).
        expired = string_array([])
    else:
        kept, gone = rows.filter(live), rows.filter(pc.invert(live))
        expired = sorted_unique(_relative_key_array(_file_paths(gone, resolve), root))
    written = sorted_unique(_file_paths(kept, resolve))
    keys = reader_key_array(written, root)
    # Paths that each name only themselves (the usual case) are their own listing keys:
    # `keep` is then `written` itself, already unique, and held once.
    keep = written if keys is written else sorted_unique(keys)
    return written, keep, expired


def _references(storage: Storage, rows: pa.Table, delete_before: int) -> FileReferences:
    written, keep, expired = reference_parts(rows, delete_before, storage.root)
    return FileReferences(keep=keep, expired=not_in(expired, keep), written=written)

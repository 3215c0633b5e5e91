"""Checkpoint files: what one checkpoint holds, read one way for every operation.

Spec sections: "Checkpoints" and "Checkpoint Naming Scheme" (classic, multi-part and
UUID-named files), "Checkpoint Specs" (V1 and V2: a V2 checkpoint holds exactly one
`checkpointMetadata` action and may reference sidecars), "Allowed combinations for
`checkpoint spec` <-> `checkpoint file naming`", "Sidecar Files" and "Sidecar File
Information" (where a sidecar is), "Last Checkpoint File Schema" (`size`, `sizeInBytes`,
`numOfAddFiles`, `parts`: the counts this module gives) and "Metadata Cleanup" (a
checkpoint relied on must be readable).

Three depths, cheapest first:

* `read_sidecar_references`: the `sidecar` actions of a checkpoint (the `sidecar` column
  of a Parquet file; a JSON file parsed). Metadata cleanup uses it to protect sidecars.
* `inspect_checkpoint`: the shape (classic / multi-part / V2 classic-named / V2 UUID-named,
  JSON or Parquet), the number of actions and of add actions, the total size, and every
  sidecar (present, its footer read). Parquet footers, the `add.path` column and the
  non-file columns `checkpointMetadata` and `sidecar` are read; the rest is not decoded.
* `verify_checkpoint`: the full read. Every part and sidecar is decoded by the log reader
  (`delta_ops.log.replay.read_checkpoint`), protocol and metaData are reconstructed and
  checked, then every Parquet file is decoded once more column by column (the all-null
  columns the reader skips included). Cleanup relies on it before deleting anything older.

One sidecar-path rule (`sidecar_file_path`), used by the log reader, cleanup and the
checkpoint writer alike: the action's path is URI-encoded; a relative one is relative to
`_delta_log/_sidecars` (the spec encourages writing only the file name), an absolute one
(`/a/b` or a URI) is taken as it is. Either way the file must be inside the table's own
`_delta_log/_sidecars` ("sidecar files must always reside in the table's own
_delta_log/_sidecars directory"); a path that leads elsewhere is a corrupt checkpoint.

Counting add actions: a row holds an add action when its `add` struct is set, with its
required `path`. The count is taken from the decoded `add.path` column, never from the
Parquet footer's null counts: those are optional in the Parquet format (a writer may omit
them, per row group), and a reader cannot tell a wrong one from a right one, while
`numOfAddFiles` in `_last_checkpoint` is read by other engines to size their work. Reading
one string column is cheap next to the checkpoint's full read, and always right.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.errors import CorruptLogError, DeltaOpsError
from delta_ops.log.replay import parse_json_actions, read_checkpoint
from delta_ops.log.segment import CheckpointFiles
from delta_ops.log.sidecars import SIDECARS, sidecar_file_path
from delta_ops.protocol.filenames import LogFile, LogFileKind
from delta_ops.storage import FileInfo, Storage

if TYPE_CHECKING:
    import pyarrow.parquet as pq

__all__ = [
    "SIDECARS",
    "CheckpointFileFacts",
    "CheckpointInspection",
    "CheckpointShape",
    "SidecarReference",
    "inspect_checkpoint",
    "read_sidecar_references",
    "sidecar_file_path",
    "verify_checkpoint",
]


class CheckpointShape(str, enum.Enum):
    """A checkpoint's naming scheme and spec (the spec's allowed combinations)."""

    CLASSIC = "classic"  # n.checkpoint.parquet, V1 spec
    MULTI_PART = "multi-part"  # n.checkpoint.o.p.parquet, V1 spec
    V2_CLASSIC = "v2-classic"  # n.checkpoint.parquet, V2 spec (has checkpointMetadata)
    V2_UUID = "v2-uuid"  # n.checkpoint.<uuid>.json|parquet, V2 spec

    def __str__(self) -> str:
        return self.value

    @property
    def is_v2(self) -> bool:
        return self in (CheckpointShape.V2_CLASSIC, CheckpointShape.V2_UUID)


@dataclass(frozen=True)
class SidecarReference:
    """One `sidecar` action of a V2 checkpoint.

    Attributes:
        path: the sidecar file, relative to the table root (`sidecar_file_path`).
        written: the action's `path` as written.
        size_in_bytes: the action's `sizeInBytes` (None when absent).
        modification_time: the action's `modificationTime` (None when absent).
    """

    path: str
    written: str
    size_in_bytes: int | None = None
    modification_time: int | None = None

    @property
    def name(self) -> str:
        """The sidecar's path below `_delta_log/_sidecars` (usually a bare file name)."""
        return self.path[len(SIDECARS) + 1 :]


@dataclass(frozen=True)
class CheckpointFileFacts:
    """What one checkpoint file (a top-level file, a part, or a sidecar) holds.

    Attributes:
        path: the file, relative to the table root.
        format: "parquet" or "json".
        size_in_bytes: its size.
        modification_time: its modification time (ms since the epoch).
        num_actions: its actions (rows of a Parquet file, lines of a JSON one).
        num_adds: its add actions.
        has_checkpoint_metadata: it holds a `checkpointMetadata` action (V2 spec).
        sidecars: the `sidecar` actions it holds.
        schema: the Arrow schema of a Parquet file (None for JSON).
    """

    path: str
    format: str
    size_in_bytes: int
    modification_time: int
    num_actions: int
    num_adds: int
    has_checkpoint_metadata: bool
    sidecars: tuple[SidecarReference, ...]
    schema: pa.Schema | None = None


@dataclass(frozen=True)
class CheckpointInspection:
    """What a checkpoint holds, from `inspect_checkpoint`.

    Attributes:
        checkpoint: the checkpoint inspected.
        shape: its naming scheme and spec. A UUID-named checkpoint is `V2_UUID` even when
            it lacks its `checkpointMetadata` (see `is_valid_shape`).
        format: format of the top-level file(s): "parquet" or "json".
        files: the top-level file(s), in part order.
        sidecars: the sidecar files referenced (every one present), in reference order.
        num_actions: actions in all files and sidecars (`_last_checkpoint.size`).
        num_adds: add actions in all of them (`_last_checkpoint.numOfAddFiles`).
        size_in_bytes: bytes of all of them, sidecars included as Spark counts them
            (`_last_checkpoint.sizeInBytes`).
    """

    checkpoint: CheckpointFiles
    shape: CheckpointShape
    format: str
    files: tuple[CheckpointFileFacts, ...]
    sidecars: tuple[CheckpointFileFacts, ...]
    num_actions: int
    num_adds: int
    size_in_bytes: int

    @property
    def version(self) -> int:
        return self.checkpoint.version

    @property
    def sidecar_references(self) -> tuple[SidecarReference, ...]:
        return tuple(ref for f in self.files for ref in f.sidecars)

    @property
    def has_checkpoint_metadata(self) -> bool:
        return any(f.has_checkpoint_metadata for f in self.files)

    @property
    def is_valid_shape(self) -> bool:
        """The spec's allowed combinations: UUID-named files follow the V2 spec; multi-part
        ones the V1 spec (no checkpointMetadata, no sidecars)."""
        if self.shape is CheckpointShape.V2_UUID:
            return self.has_checkpoint_metadata
        if self.shape is CheckpointShape.MULTI_PART:
            return not self.has_checkpoint_metadata and not self.sidecar_references
        return True

    @property
    def parts(self) -> int | None:
        """Number of parts of a multi-part checkpoint (`_last_checkpoint.parts`)."""
        return len(self.files) if self.shape is CheckpointShape.MULTI_PART else None


# --------------------------------------------------------------------------------------
# Reading one file
# --------------------------------------------------------------------------------------


def _count_adds(pf: pq.ParquetFile) -> int:
    """Rows holding an add action (its struct and its required path set), from the decoded
    `add.path` column (see the module docstring for why not from footer null counts)."""
    if "add" not in pf.schema_arrow.names:
        return 0
    t = pf.read(columns=["add.path"], use_threads=False)
    if "add" in t.column_names:
        paths = pc.struct_field(t.column("add"), "path")  # honours the struct's own nulls
    else:  # some pyarrow versions flatten a nested selection
        paths = t.column("add.path")
    return len(paths) - paths.null_count


def _references(
    rows: list[Any], table: str, version: int, file: str
) -> tuple[SidecarReference, ...]:
    out = []
    for row in rows:
        if not isinstance(row, dict) or not isinstance(row.get("path"), str) or not row["path"]:
            raise CorruptLogError(
                f"sidecar action without a path: {row!r}", table=table, version=version,
                file=file,
            )
        size, mtime = row.get("sizeInBytes"), row.get("modificationTime")
        out.append(SidecarReference(
            path=sidecar_file_path(row["path"], table, version=version, file=file),
            written=row["path"],
            size_in_bytes=size if isinstance(size, int) else None,
            modification_time=mtime if isinstance(mtime, int) else None,
        ))
    return tuple(out)


def _parquet_file(
    storage: Storage, info: FileInfo, version: int, *, counts: bool
) -> CheckpointFileFacts:
    import pyarrow.parquet as pq  # here, not at module level: JSON-only logs never need it

    table, path = storage.root, info.path
    try:
        with storage.open_input(path) as fh:
            pf = pq.ParquetFile(fh)
            schema = pf.schema_arrow
            meta_cols = [c for c in ("checkpointMetadata", "sidecar") if c in schema.names]
            has_cm, rows = False, []
            if meta_cols:
                t = pf.read(columns=meta_cols, use_threads=False)
                if "checkpointMetadata" in t.column_names:
                    has_cm = t.column("checkpointMetadata").null_count < t.num_rows
                if "sidecar" in t.column_names:
                    col = t.column("sidecar")
                    rows = col.filter(pc.is_valid(col)).to_pylist(maps_as_pydicts="strict")
            num_adds = _count_adds(pf) if counts else 0
            num_rows = pf.metadata.num_rows
    except (OSError, pa.ArrowException) as exc:
        raise CorruptLogError(
            f"checkpoint file cannot be read as Parquet: {exc}",
            table=table, version=version, file=path,
        ) from exc
    return CheckpointFileFacts(
        path=path, format="parquet", size_in_bytes=info.size,
        modification_time=info.modification_time, num_actions=num_rows,
        num_adds=num_adds, has_checkpoint_metadata=has_cm,
        sidecars=_references(rows, table, version, path), schema=schema,
    )


def _json_file(storage: Storage, info: FileInfo, version: int) -> CheckpointFileFacts:

    table, path = storage.root, info.path
    actions = parse_json_actions(storage.read(path), table=table, version=version, file=path)
    rows = [a["sidecar"] for a in actions if a.get("sidecar") is not None]
    return CheckpointFileFacts(
        path=path, format="json", size_in_bytes=info.size,
        modification_time=info.modification_time, num_actions=len(actions),
        num_adds=sum(1 for a in actions if a.get("add") is not None),
        has_checkpoint_metadata=any(a.get("checkpointMetadata") is not None for a in actions),
        sidecars=_references(rows, table, version, path),
    )


def _file_facts(
    storage: Storage, lf: LogFile, info: FileInfo, *, counts: bool
) -> CheckpointFileFacts:
    if lf.format == "json":
        return _json_file(storage, info, lf.version)
    return _parquet_file(storage, info, lf.version, counts=counts)


# --------------------------------------------------------------------------------------
# The three depths
# --------------------------------------------------------------------------------------


def read_sidecar_references(
    storage: Storage, checkpoint: CheckpointFiles
) -> tuple[SidecarReference, ...]:
    """The sidecars a checkpoint references (no sidecar is opened; multi-part checkpoints
    follow the V1 spec and reference none, so their parts are not read).

    Raises:
        CorruptLogError: a file cannot be read, or a sidecar path leads outside
            `_delta_log/_sidecars`; names the table, version and file.
        StorageError: the storage failed.
    """
    if checkpoint.kind == LogFileKind.CHECKPOINT_MULTIPART:
        return ()
    return tuple(
        ref
        for lf, info in zip(checkpoint.log_files, checkpoint.files, strict=True)
        for ref in _file_facts(storage, lf, info, counts=False).sidecars
    )


def inspect_checkpoint(storage: Storage, checkpoint: CheckpointFiles) -> CheckpointInspection:
    """Shape, counts, size and sidecars of a checkpoint (footers and a few columns read).

    Raises:
        CorruptLogError: a file or a sidecar cannot be read (not Parquet, not JSON lines),
            a sidecar is missing or its path leads outside `_delta_log/_sidecars`; names the
            table, version and file.
        StorageError: the storage failed.
    """
    table, version = storage.root, checkpoint.version
    files = tuple(
        _file_facts(storage, lf, info, counts=True)
        for lf, info in zip(checkpoint.log_files, checkpoint.files, strict=True)
    )
    sidecars = []
    for ref in (r for f in files for r in f.sidecars):
        found = storage.info(ref.path)
        if found is None:
            raise CorruptLogError(
                "V2 checkpoint references a sidecar that does not exist",
                table=table, version=version, file=ref.path,
            )
        sidecars.append(_parquet_file(storage, found, version, counts=True))
    if checkpoint.kind == LogFileKind.CHECKPOINT_MULTIPART:
        shape = CheckpointShape.MULTI_PART
    elif checkpoint.kind == LogFileKind.CHECKPOINT_UUID:
        shape = CheckpointShape.V2_UUID
    elif files[0].has_checkpoint_metadata:
        shape = CheckpointShape.V2_CLASSIC
    else:
        shape = CheckpointShape.CLASSIC
    every = (*files, *sidecars)
    return CheckpointInspection(
        checkpoint=checkpoint,
        shape=shape,
        format=files[0].format,
        files=files,
        sidecars=tuple(sidecars),
        num_actions=sum(f.num_actions for f in every),
        num_adds=sum(f.num_adds for f in every),
        size_in_bytes=sum(f.size_in_bytes for f in every),
    )


def verify_checkpoint(storage: Storage, checkpoint: CheckpointFiles) -> CorruptLogError | None:
    """Why a complete checkpoint cannot be relied on, or None when it can (the full read).

    The checkpoint is read by the log reader (`read_checkpoint`): every part and every
    sidecar decoded as Parquet or JSON, the add and remove rows conformed to their schemas;
    its protocol and metaData must be there and well formed. Then every Parquet file of it is
    decoded once more column by column, the columns the reader skips as all null included
    (other readers decode those too). The error names the table, version and the file at
    fault where one is.
    """

    table, version = storage.root, checkpoint.version
    for info in checkpoint.files:
        if info.size == 0:
            return CorruptLogError(
                "checkpoint file is empty", table=table, version=version, file=info.path
            )
    try:
        content = read_checkpoint(storage, checkpoint)
    except CorruptLogError as exc:
        return exc
    except DeltaOpsError as exc:  # e.g. a storage error: it could not be proven readable
        return CorruptLogError(
            f"checkpoint could not be read: {exc}", table=table, version=version,
            file=exc.file or checkpoint.files[0].path,
        )
    first = checkpoint.files[0].path
    protocol = content.protocol
    if protocol is None:
        return CorruptLogError(
            "checkpoint holds no protocol action", table=table, version=version, file=first
        )
    if not all(
        isinstance(protocol.get(k), int) for k in ("minReaderVersion", "minWriterVersion")
    ):
        return CorruptLogError(
            f"checkpoint protocol lacks integer reader/writer versions: {protocol!r}",
            table=table, version=version, file=first,
        )
    metadata = content.metadata
    if metadata is None or not metadata.id or not metadata.schema_string:
        return CorruptLogError(
            "checkpoint holds no metaData action with an id and a schema", table=table,
            version=version, file=first,
        )
    try:
        metadata.schema  # noqa: B018 - parsing it is the check
    except (ValueError, TypeError, KeyError, DeltaOpsError) as exc:
        return CorruptLogError(
            f"checkpoint metaData schema does not parse: {exc}", table=table,
            version=version, file=first,
        )
    parquet = [info.path for lf, info in zip(checkpoint.log_files, checkpoint.files, strict=True)
               if lf.format != "json"]
    parquet += [sidecar_file_path(p, table, version=version, file=first)
                for p in content.sidecars]
    for path in parquet:
        problem = _decode_every_column(storage, path, version)
        if problem is not None:
            return problem
    return None


def _decode_every_column(storage: Storage, path: str, version: int) -> CorruptLogError | None:
    """Decode every column of every row group of a Parquet file (results dropped)."""
    import pyarrow.parquet as pq

    try:
        with storage.open_input(path) as fh:
            for _batch in pq.ParquetFile(fh).iter_batches(batch_size=65_536):
                pass
    except (OSError, pa.ArrowException) as exc:
        return CorruptLogError(
            f"checkpoint file cannot be read as Parquet: {exc}", table=storage.root,
            version=version, file=path,
        )
    except DeltaOpsError as exc:
        return CorruptLogError(
            f"checkpoint file could not be read: {exc}", table=storage.root, version=version,
            file=path,
        )
    return None

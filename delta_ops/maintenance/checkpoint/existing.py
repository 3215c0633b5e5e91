"""Find a valid checkpoint of a given kind that already exists at a version.

Spec sections: "Checkpoints" (naming schemes; "readers must ignore multi-part checkpoints
with missing parts"; a V2 checkpoint whose sidecars are missing is unusable), "Sidecar
File Information", "Last Checkpoint File".

A checkpoint counts as existing when every file it needs is present and readable (Parquet
footers parse, JSON lines parse, every referenced sidecar is there and inside
`_delta_log/_sidecars`) and its content matches the kind asked for; its action counts are
read from the files (`delta_ops.log.files.checkpoint_files.inspect_checkpoint`, the log's one
checkpoint-file inspector) so that `_last_checkpoint` can be advanced to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from delta_ops.errors import CorruptLogError, StorageError
from delta_ops.log import CheckpointFiles, CheckpointInspection, inspect_checkpoint
from delta_ops.maintenance.checkpoint.plan import CheckpointKind
from delta_ops.protocol import filenames
from delta_ops.protocol.checkpoint_schema import spark_schema_json
from delta_ops.protocol.filenames import LOG_DIR, SIDECAR_DIR, LogFile, LogFileKind
from delta_ops.storage import FileInfo, Storage


@dataclass(frozen=True)
class ExistingCheckpoint:
    """A complete, readable checkpoint found in the log.

    Attributes:
        kind: its kind.
        names: its files relative to `_delta_log` (sidecars as `_sidecars/<name>`).
        num_actions: actions in all its files.
        num_add_files: add actions in all its files.
        size_in_bytes: total size of its files.
        parts: number of parts (multi-part only).
        checkpoint_schema: Spark schema JSON of its (top-level) Parquet file, if Parquet.
        v2_checkpoint: the `_last_checkpoint.v2Checkpoint` object for V2 checkpoints.
    """

    kind: CheckpointKind
    names: tuple[str, ...]
    num_actions: int
    num_add_files: int
    size_in_bytes: int
    parts: int | None = None
    checkpoint_schema: dict | None = None
    v2_checkpoint: dict | None = None


def _schema_json(schema: pa.Schema | None) -> dict | None:
    if schema is None:
        return None
    try:
        return spark_schema_json(schema)
    except TypeError:
        return None


def _inspect(
    storage: Storage, version: int, kind: LogFileKind, found: list[tuple[LogFile, FileInfo]]
) -> CheckpointInspection | None:
    """The inspection of a candidate, or None when it is not complete or not readable."""
    checkpoint = CheckpointFiles(
        version, kind, tuple(i for _, i in found), tuple(lf for lf, _ in found)
    )
    try:
        return inspect_checkpoint(storage, checkpoint)
    except (CorruptLogError, StorageError):
        return None


def _v2_checkpoint(inspection: CheckpointInspection) -> dict:
    """The `_last_checkpoint.v2Checkpoint` object of a V2 checkpoint."""
    top = inspection.checkpoint
    v2: dict[str, Any] = {
        "path": top.log_files[0].name,
        "sizeInBytes": top.files[0].size,
        "modificationTime": top.files[0].modification_time,
    }
    files = []
    for ref, side in zip(inspection.sidecar_references, inspection.sidecars, strict=True):
        mtime = ref.modification_time
        files.append({
            "path": ref.written,
            "sizeInBytes": side.size_in_bytes,
            "modificationTime": mtime if mtime is not None else side.modification_time,
        })
    if files:
        v2["sidecarFiles"] = files
    return v2


def find_existing(
    storage: Storage, version: int, kind: CheckpointKind, *, parts: int | None = None
) -> ExistingCheckpoint | None:
    """A valid checkpoint of `kind` at `version`, or None.

    Args:
        storage: the table's storage.
        version: the checkpoint version.
        kind: the kind asked for (classic means a V1 classic file, v2-classic a V2 one).
        parts: for multi-part, the number of parts asked for (None: any).
    """
    listing: list[tuple[LogFile, FileInfo]] = []
    for info in storage.list_dir(LOG_DIR, start=filenames.version_prefix(version)):
        lf = filenames.parse(info.path.rsplit("/", 1)[-1])
        if lf is not None and lf.version == version and lf.is_checkpoint:
            listing.append((lf, info))
        elif lf is not None and lf.version > version:
            break
    if kind is CheckpointKind.MULTI_PART:
        return _find_multipart(storage, version, listing, parts)
    wanted = LogFileKind.CHECKPOINT_UUID if kind is CheckpointKind.V2_UUID else (
        LogFileKind.CHECKPOINT_CLASSIC
    )
    for lf, info in listing:
        if lf.kind != wanted:
            continue
        inspection = _inspect(storage, version, lf.kind, [(lf, info)])
        if (
            inspection is None
            or CheckpointKind(inspection.shape.value) is not kind
            or not inspection.is_valid_shape
        ):
            continue
        top = inspection.files[0]
        return ExistingCheckpoint(
            kind,
            (lf.name, *(f"{SIDECAR_DIR}/{ref.name}" for ref in inspection.sidecar_references)),
            inspection.num_actions,
            inspection.num_adds,
            inspection.size_in_bytes,
            checkpoint_schema=_schema_json(top.schema),
            v2_checkpoint=_v2_checkpoint(inspection) if kind.is_v2 else None,
        )
    return None


def _find_multipart(
    storage: Storage, version: int, listing: list[tuple[LogFile, FileInfo]], parts: int | None
) -> ExistingCheckpoint | None:
    groups: dict[int, dict[int, tuple[LogFile, FileInfo]]] = {}
    for lf, info in listing:
        if lf.kind == LogFileKind.CHECKPOINT_MULTIPART and lf.num_parts and lf.part:
            groups.setdefault(lf.num_parts, {})[lf.part] = (lf, info)
    for num_parts in sorted(groups, reverse=True):
        if parts is not None and num_parts != parts:
            continue
        found = groups[num_parts]
        if num_parts < 2 or len(found) != num_parts:
            continue
        ordered = [found[p] for p in range(1, num_parts + 1)]
        inspection = _inspect(storage, version, LogFileKind.CHECKPOINT_MULTIPART, ordered)
        if inspection is None:
            continue
        schema = next((f.schema for f in inspection.files if f.schema is not None), None)
        return ExistingCheckpoint(
            CheckpointKind.MULTI_PART,
            tuple(lf.name for lf, _ in ordered),
            inspection.num_actions,
            inspection.num_adds,
            inspection.size_in_bytes,
            parts=num_parts,
            checkpoint_schema=_schema_json(schema),
        )
    return None

"""Find a valid checkpoint of a given kind that already exists at a version, and describe
it for `_last_checkpoint`.

Spec sections: "Checkpoints" (naming schemes; "readers must ignore multi-part checkpoints
with missing parts"; a V2 checkpoint whose sidecars are missing is unusable), "Sidecar
File Information", "Last Checkpoint File".

A checkpoint counts as existing when every file it needs is present and readable (Parquet
footers parse, JSON lines parse, every referenced sidecar is there and inside
`_delta_log/_sidecars`) and its content matches the kind asked for; its action counts are
read from the files (`log.files.checkpoint_files.inspect_checkpoint`, the log's one
checkpoint-file inspector) so that `_last_checkpoint` can be advanced to it
(`describe_checkpoint`, which the `_last_checkpoint` writer uses to repair a hint a concurrent
writer may have moved backward). The checkpoints at a version come from the log's one listing
and its one rule of multi-part completeness (`log.files.log_listing`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa

from delta_ops.errors import CorruptLogError, StorageError
from delta_ops.log.files.checkpoint_files import CheckpointInspection, inspect_checkpoint
from delta_ops.log.files.log_listing import CheckpointFiles, complete_checkpoints, list_log
from delta_ops.protocol.checkpoint_kind import CheckpointKind
from delta_ops.protocol.checkpoint_schema import CHECKPOINT_SCHEMA_THRESHOLD, spark_schema_json
from delta_ops.protocol.filenames import SIDECAR_DIR, LogFileKind
from delta_ops.protocol.last_checkpoint import LastCheckpoint, build_last_checkpoint
from delta_ops.storage import Storage


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


def _inspect(storage: Storage, checkpoint: CheckpointFiles) -> CheckpointInspection | None:
    """The inspection of a candidate, or None when it is not complete or not readable."""
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
    storage: Storage, version: int, kind: CheckpointKind | str, *, parts: int | None = None
) -> ExistingCheckpoint | None:
    """A valid checkpoint of `kind` at `version`, or None.

    Args:
        storage: the table's storage.
        version: the checkpoint version.
        kind: the kind asked for (classic means a V1 classic file, v2-classic a V2 one; a
            string of the same value is accepted).
        parts: for multi-part, the number of parts asked for (None: any).
    """
    kind = CheckpointKind(kind)
    at_version = [
        c for c in complete_checkpoints(list_log(storage, version), version)
        if c.version == version
    ]
    if kind is CheckpointKind.MULTI_PART:
        return _find_multipart(storage, version, at_version, parts)
    wanted = LogFileKind.CHECKPOINT_UUID if kind is CheckpointKind.V2_UUID else (
        LogFileKind.CHECKPOINT_CLASSIC
    )
    for checkpoint in at_version:
        if checkpoint.kind != wanted:
            continue
        inspection = _inspect(storage, checkpoint)
        if inspection is None or inspection.shape is not kind or not inspection.is_valid_shape:
            continue
        top = inspection.files[0]
        return ExistingCheckpoint(
            kind,
            (
                checkpoint.log_files[0].name,
                *(f"{SIDECAR_DIR}/{ref.name}" for ref in inspection.sidecar_references),
            ),
            inspection.num_actions,
            inspection.num_adds,
            inspection.size_in_bytes,
            checkpoint_schema=_schema_json(top.schema),
            v2_checkpoint=_v2_checkpoint(inspection) if kind.is_v2 else None,
        )
    return None


def _find_multipart(
    storage: Storage, version: int, at_version: list[CheckpointFiles], parts: int | None
) -> ExistingCheckpoint | None:
    complete = [c for c in at_version if c.kind == LogFileKind.CHECKPOINT_MULTIPART]
    for checkpoint in sorted(complete, key=lambda c: len(c.files), reverse=True):
        num_parts = len(checkpoint.files)
        if (parts is not None and num_parts != parts) or num_parts < 2:
            continue
        inspection = _inspect(storage, checkpoint)
        if inspection is None:
            continue
        schema = next((f.schema for f in inspection.files if f.schema is not None), None)
        return ExistingCheckpoint(
            CheckpointKind.MULTI_PART,
            tuple(checkpoint.names),
            inspection.num_actions,
            inspection.num_adds,
            inspection.size_in_bytes,
            parts=num_parts,
            checkpoint_schema=_schema_json(schema),
        )
    return None


def schema_for_last_checkpoint(schema: pa.Schema | dict | None) -> dict | None:
    """`checkpointSchema` for `_last_checkpoint`, left out when longer than Spark's limit."""
    if schema is None:
        return None
    obj = spark_schema_json(schema) if isinstance(schema, pa.Schema) else schema
    return obj if len(orjson.dumps(obj)) <= CHECKPOINT_SCHEMA_THRESHOLD else None


def describe_checkpoint(storage: Storage, version: int) -> LastCheckpoint | None:
    """`_last_checkpoint` content for the complete, readable checkpoint at `version` (at one
    version the kinds are preferred as readers prefer them: UUID-named V2, classic-named,
    multi-part), or None when none reads."""
    for kind in (
        CheckpointKind.V2_UUID, CheckpointKind.CLASSIC, CheckpointKind.V2_CLASSIC,
        CheckpointKind.MULTI_PART,
    ):
        existing = find_existing(storage, version, kind)
        if existing is not None:
            return last_checkpoint_of(existing, version)
    return None


def last_checkpoint_of(existing: ExistingCheckpoint, version: int) -> LastCheckpoint:
    """`_last_checkpoint` content describing an existing checkpoint at `version`."""
    return build_last_checkpoint(
        version=version,
        size=existing.num_actions,
        size_in_bytes=existing.size_in_bytes,
        num_of_add_files=existing.num_add_files,
        parts=existing.parts,
        checkpoint_schema=schema_for_last_checkpoint(existing.checkpoint_schema),
        v2_checkpoint=existing.v2_checkpoint,
    )

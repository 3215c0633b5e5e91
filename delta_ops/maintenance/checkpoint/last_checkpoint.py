"""`_last_checkpoint`: what a new (or found) checkpoint puts there, and moving it forward.

Spec section: "Last Checkpoint File" (version, size, parts, sizeInBytes, numOfAddFiles,
checkpointSchema, checksum; V2 details as Spark writes them under `v2Checkpoint`). The file
only ever moves to a newer version; it is written after the checkpoint it names is complete.

`advance_last_checkpoint` is the only writer of the file in delta_ops: the checkpoint writer
and metadata cleanup both go through it. It reads, compares and then writes, so a writer that
publishes a newer hint in the instant between another's read and write can still be
overwritten (storage has no compare-and-swap for it); the hint is only a hint, and readers
list past it, so that costs a longer listing, never a wrong state.
"""

from __future__ import annotations

import orjson
import pyarrow as pa

from delta_ops.maintenance.checkpoint.existing import ExistingCheckpoint
from delta_ops.protocol import filenames
from delta_ops.protocol.checkpoint_schema import CHECKPOINT_SCHEMA_THRESHOLD, spark_schema_json
from delta_ops.protocol.filenames import LAST_CHECKPOINT, LOG_DIR
from delta_ops.protocol.last_checkpoint import (
    LastCheckpoint,
    build_last_checkpoint,
    parse_last_checkpoint,
)
from delta_ops.storage import Storage

#: Spark's defaults for the V2 details copied into `_last_checkpoint` (non-file actions and
#: sidecar list are left out when longer).
LAST_CHECKPOINT_LIST_THRESHOLD = 30


def schema_for_last_checkpoint(schema: pa.Schema | dict | None) -> dict | None:
    """`checkpointSchema` for `_last_checkpoint`, left out when longer than Spark's limit."""
    if schema is None:
        return None
    obj = spark_schema_json(schema) if isinstance(schema, pa.Schema) else schema
    return obj if len(orjson.dumps(obj)) <= CHECKPOINT_SCHEMA_THRESHOLD else None


def _names_present_checkpoint(storage: Storage, lc: LastCheckpoint) -> bool:
    """Whether the checkpoint a `_last_checkpoint` describes is (still) in the log."""
    v = lc.version
    if lc.v2_checkpoint and isinstance(lc.v2_checkpoint.get("path"), str):
        return storage.exists(f"{LOG_DIR}/{lc.v2_checkpoint['path']}")
    if lc.parts:
        return all(
            storage.exists(f"{LOG_DIR}/{filenames.multipart_checkpoint_name(v, p, lc.parts)}")
            for p in range(1, lc.parts + 1)
        )
    return storage.exists(f"{LOG_DIR}/{filenames.classic_checkpoint_name(v)}")


def advance_last_checkpoint(
    storage: Storage, lc: LastCheckpoint, *, replace_same_version: bool = True
) -> bool:
    """Write `_last_checkpoint` unless it already names a newer version.

    The pointer never moves back: a file naming a newer version is kept even if its
    checksum fails. One naming this version is replaced when `replace_same_version` (the
    checkpoint `lc` describes was just written), or when it is invalid or the checkpoint it
    describes is gone; one that is not JSON with a version is replaced.

    Returns:
        True when the file was written.
    """
    path = f"{LOG_DIR}/{LAST_CHECKPOINT}"
    if storage.exists(path):
        try:
            current = parse_last_checkpoint(storage.read(path))
        except ValueError:
            current = None
        if current is not None:
            if current.version > lc.version:
                return False
            if (
                current.version == lc.version
                and not replace_same_version
                and current.checksum_valid is not False
                and _names_present_checkpoint(storage, current)
            ):
                return False
    storage.put_atomic(path, lc.to_json_bytes())
    return True


def last_checkpoint_of(existing: ExistingCheckpoint, version: int) -> LastCheckpoint:
    return build_last_checkpoint(
        version=version,
        size=existing.num_actions,
        size_in_bytes=existing.size_in_bytes,
        num_of_add_files=existing.num_add_files,
        parts=existing.parts,
        checkpoint_schema=schema_for_last_checkpoint(existing.checkpoint_schema),
        v2_checkpoint=existing.v2_checkpoint,
    )

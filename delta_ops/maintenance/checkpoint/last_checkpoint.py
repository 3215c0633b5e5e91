"""What a checkpoint puts in `_last_checkpoint`, and how the checkpoint writer advances it.

Spec section: "Last Checkpoint File" (version, size, parts, sizeInBytes, numOfAddFiles,
checkpointSchema, checksum; V2 details as Spark writes them under `v2Checkpoint`).

Reading, checking and writing the file belong to the log
(`delta_ops.log.files.last_checkpoint_file`, whose `advance_last_checkpoint` is the only writer).
This module builds the content for a checkpoint (`last_checkpoint_of`, `schema_for_last_checkpoint`)
and describes an existing checkpoint found at a version (`describe_checkpoint`), which the writer
uses to repair a hint a concurrent writer may have moved backward. `advance_last_checkpoint` here is
the log's, with that describer.
"""

from __future__ import annotations

import orjson
import pyarrow as pa

from delta_ops.log import advance_last_checkpoint as log_advance_last_checkpoint
from delta_ops.maintenance.checkpoint.existing import ExistingCheckpoint, find_existing
from delta_ops.maintenance.checkpoint.plan import CheckpointKind
from delta_ops.protocol.checkpoint_schema import CHECKPOINT_SCHEMA_THRESHOLD, spark_schema_json
from delta_ops.protocol.last_checkpoint import LastCheckpoint, build_last_checkpoint
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


def advance_last_checkpoint(
    storage: Storage, lc: LastCheckpoint, *, replace_same_version: bool = True
) -> bool:
    """`delta_ops.log.files.last_checkpoint_file.advance_last_checkpoint` repairing with
    `describe_checkpoint` (the checkpoint writer's and cleanup's way to publish a hint)."""
    return log_advance_last_checkpoint(
        storage, lc, replace_same_version=replace_same_version, describe=describe_checkpoint
    )


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

"""The kinds of checkpoint the spec allows: a naming scheme combined with a checkpoint spec.

Spec sections: "Checkpoints" (classic, multi-part and UUID-named checkpoint files), "V2 Spec"
and "V1 Spec" (a classic-named checkpoint may follow either; multi-part ones follow V1,
UUID-named ones V2).

One enum for the writer's request (`maintenance.checkpoint`, `delta-ops checkpoint --kind`)
and for what an existing checkpoint is (`log.files.checkpoint_files.inspect_checkpoint`). The
standard library only: the command line builds its parser from it without loading pyarrow.
Pure: no I/O.
"""

from __future__ import annotations

import enum

__all__ = ["CheckpointKind"]


class CheckpointKind(str, enum.Enum):
    """A checkpoint's naming scheme and spec (the spec's allowed combinations)."""

    CLASSIC = "classic"  # n.checkpoint.parquet, V1 spec
    MULTI_PART = "multi-part"  # n.checkpoint.o.p.parquet, V1 spec
    V2_CLASSIC = "v2-classic"  # n.checkpoint.parquet, V2 spec (has checkpointMetadata)
    V2_UUID = "v2-uuid"  # n.checkpoint.<uuid>.json|parquet, V2 spec

    def __str__(self) -> str:
        return self.value

    @property
    def is_v2(self) -> bool:
        return self in (CheckpointKind.V2_CLASSIC, CheckpointKind.V2_UUID)

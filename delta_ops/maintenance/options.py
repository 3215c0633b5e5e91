"""The maintenance options a caller names before any work runs: checkpoint kinds and the
defaults the command line shows in its help.

Light on purpose (the standard library only): `delta-ops` builds its argument parser from
these without importing pyarrow or the operations. Each operation's module re-exports what
it uses, so `delta_ops.maintenance.checkpoint.CheckpointKind`,
`delta_ops.maintenance.checksum.DEFAULT_ALL_FILES_THRESHOLD` and
`delta_ops.maintenance.row_tracking.DEFAULT_BATCH_SIZE` are these objects.
"""

from __future__ import annotations

import enum

__all__ = [
    "DEFAULT_ALL_FILES_THRESHOLD",
    "DEFAULT_BACKFILL_CHECKPOINT_EVERY",
    "DEFAULT_BATCH_SIZE",
    "CheckpointKind",
]


class CheckpointKind(str, enum.Enum):
    """The kinds of checkpoint the spec defines (naming scheme x spec)."""

    CLASSIC = "classic"  # n.checkpoint.parquet, V1 spec
    MULTI_PART = "multi-part"  # n.checkpoint.o.p.parquet, V1 spec
    V2_CLASSIC = "v2-classic"  # n.checkpoint.parquet, V2 spec
    V2_UUID = "v2-uuid"  # n.checkpoint.<uuid>.json|parquet, V2 spec

    def __str__(self) -> str:
        return self.value

    @property
    def is_v2(self) -> bool:
        return self in (CheckpointKind.V2_CLASSIC, CheckpointKind.V2_UUID)


#: Spark's default threshold (allFilesInCrc.thresholdNumFiles): a version checksum lists
#: the live files (`allFiles`) up to this many.
DEFAULT_ALL_FILES_THRESHOLD = 50

#: Row-tracking backfill: most files re-committed per commit.
DEFAULT_BATCH_SIZE = 20_000

#: Row-tracking backfill of a large (streamed) table: backfilled files after which the table
#: is checkpointed. 250,000 recommitted adds are about 75 MB of JSON, which a streamed load
#: (the next round's, a reader's, a resumed run's) would otherwise hold decoded (~175 MB).
DEFAULT_BACKFILL_CHECKPOINT_EVERY = 250_000

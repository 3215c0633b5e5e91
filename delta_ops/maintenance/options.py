"""The maintenance defaults a caller names before any work runs, as the command line shows
them in its help.

Light on purpose (the standard library only): `delta-ops` builds its argument parser from
these without importing pyarrow or the operations (the checkpoint kinds it offers are
`delta_ops.protocol.checkpoint_kind.CheckpointKind`). Each operation's module re-exports what
it uses, so `delta_ops.maintenance.checksum.DEFAULT_ALL_FILES_THRESHOLD` and
`delta_ops.maintenance.row_tracking.DEFAULT_BATCH_SIZE` are these objects.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_ALL_FILES_THRESHOLD",
    "DEFAULT_BACKFILL_CHECKPOINT_EVERY",
    "DEFAULT_BATCH_SIZE",
]


#: Spark's default threshold (allFilesInCrc.thresholdNumFiles): a version checksum lists
#: the live files (`allFiles`) up to this many.
DEFAULT_ALL_FILES_THRESHOLD = 50

#: Row-tracking backfill: most files re-committed per commit.
DEFAULT_BATCH_SIZE = 20_000

#: Row-tracking backfill of a large (streamed) table: backfilled files after which the table
#: is checkpointed. 250,000 recommitted adds are about 75 MB of JSON, which a streamed load
#: (the next round's, a reader's, a resumed run's) would otherwise hold decoded (~175 MB).
DEFAULT_BACKFILL_CHECKPOINT_EVERY = 250_000

"""Metadata cleanup: delete expired commits, checkpoints, checksums, compactions and sidecars.

Spec sections: "Metadata Cleanup" (the algorithm below), "Checkpoints" ("Metadata cleanup
MUST provide a checkpoint for the oldest kept table version"), "Last Checkpoint File",
"V2 Checkpoint Table Feature" (sidecars), "Log Compaction Files", "Version Checksum File",
"In-Commit Timestamps" (commit timestamps), and the table properties
`delta.logRetentionDuration` (default 30 days) and `delta.enableExpiredLogCleanup`.

The algorithm, as the spec words it:

1. `cutOffTimestamp` is midnight UTC of (now - log retention). `cutoffCommit` is the newest
   commit not newer than it. Commit timestamps are in-commit timestamps from the version
   where they are enabled, else commit file modification times made monotonic as Spark does
   (a commit never counts as older than the one before it).
2. `cutOffCheckpoint` is the newest complete checkpoint not newer than `cutoffCommit`
   (multi-part: every part present; V2: every sidecar present). Before anything is deleted
   it is read in full with the log reader (every part and sidecar decoded, protocol and
   metaData reconstructed); one that does not read is passed over for the next older one,
   which then decides what goes. When no checkpoint at or before the cutoff reads, cleanup
   refuses (CorruptLogError naming the checkpoint file) instead of deleting.
3. Delete every commit, checkpoint (any kind), version checksum (`.crc`) and Hadoop side
   checksum (`.<name>.crc`) older than `cutOffCheckpoint`, and every compaction file whose
   start version is at or below it.
4. Sidecars: keep those referenced by any remaining checkpoint and those younger than one
   day (midnight UTC); delete the rest.

Before deleting, the plan is proven: the log left behind must still reach the latest version
from the kept checkpoint (no commit it needs is on the list). A retention shorter than
`delta.logRetentionDuration` is refused unless forced (`force_retention`). Temporary files a
killed writer left in `_delta_log` (`.<name>.<uuid>.tmp`, see `Storage`) are removed once
they are older than the log retention (and at least one day old: a live writer's are not).

Crash safety: `_last_checkpoint` is moved forward first when it names a checkpoint that is
about to go (through the log's forward-only writer: a newer one written meanwhile is kept,
or put back when it was written in the instant between our read and our write); then
files go oldest version first (within a version: compactions, the commit, its checksum, and
the checkpoint last, each Hadoop side file just before its file); sidecars and writers'
temporary files go last. Every version from `cutOffCheckpoint` on stays readable at every
step, and a re-run finishes an interrupted run.

No full snapshot is built: a listing of `_delta_log`, the protocol and metadata (the log's
light replay, `delta_ops.log.segment.protocol_metadata`), the checkpoint kept (read in full) and the
sidecar references of the other checkpoints that are kept (both through the log's
checkpoint-file inspector, `delta_ops.log.files.checkpoint_files`).

Modules: `listing` (the `_delta_log` listing, expiry rule, deletion order, writers'
temporary files), `cutoff` (retention and the cutoff commit), `plan` (`plan_cleanup`: pure
decisions from what the log reads), `apply` (`cleanup_metadata`, `apply_cleanup`,
`describe`).
"""

from __future__ import annotations

from delta_ops.log import is_writer_temp_file
from delta_ops.maintenance.cleanup.apply import (
    CleanupResult,
    apply_cleanup,
    cleanup_metadata,
    describe,
)
from delta_ops.maintenance.cleanup.cutoff import (
    DAY_MS,
    checked_retention,
    cutoff_commit,
    midnight_utc,
)
from delta_ops.maintenance.cleanup.plan import CleanupPlan, plan_cleanup

__all__ = [
    "CleanupPlan",
    "CleanupResult",
    "DAY_MS",
    "apply_cleanup",
    "checked_retention",
    "cleanup_metadata",
    "cutoff_commit",
    "describe",
    "is_writer_temp_file",
    "midnight_utc",
    "plan_cleanup",
]

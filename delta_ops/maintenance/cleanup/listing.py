"""`_delta_log` as metadata cleanup sees it: the spec's expiry rule and the deletion order.
What lies there (log files, Hadoop side checksums, sidecars and writers' leftover temporary
files) the log lists (`delta_ops.log.list_log_dir`).

Spec sections: "Metadata Cleanup" (what is older than the cutoff checkpoint), "Log
Compaction Files" (a compaction goes with its start version), "Sidecar Files".
"""

from __future__ import annotations

from delta_ops.protocol.filenames import LogFile, LogFileKind

# Deletion order inside one version: compactions, the commit, its checksum, checkpoints.
_KIND_RANK = {
    LogFileKind.COMPACTION: 0,
    LogFileKind.COMMIT: 1,
    LogFileKind.CHECKSUM: 2,
    LogFileKind.CHECKPOINT_MULTIPART: 3,
    LogFileKind.CHECKPOINT_CLASSIC: 3,
    LogFileKind.CHECKPOINT_UUID: 3,
}


def expired(lf: LogFile, checkpoint_version: int) -> bool:
    """The spec's rule for log files: older than the cutoff checkpoint (compactions: start
    version at or below it)."""
    if lf.kind == LogFileKind.COMPACTION:
        return lf.start_version <= checkpoint_version
    return lf.version < checkpoint_version


def deletion_order_key(lf: LogFile, is_side: bool) -> tuple:
    version = lf.start_version if lf.kind == LogFileKind.COMPACTION else lf.version
    return (version, _KIND_RANK[lf.kind], lf.name, 0 if is_side else 1)

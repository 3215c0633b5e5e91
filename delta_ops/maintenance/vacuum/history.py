"""VACUUM in the table's history: the `VACUUM START` and `VACUUM END` commits delta-spark
writes around its deletes.

Spec sections: "Commit Provenance Information" (a commit of only a `commitInfo`), "Delta
Log Entries" (put-if-absent commits, through `commit.Transaction`: conflict check and
retry like every commit this project writes), "In-Commit Timestamps".

What Spark writes (delta-spark `VacuumCommandImpl.logVacuumStart` / `logVacuumEnd`,
`DeltaOperations.VacuumStart` / `VacuumEnd`), and so what is written here: two commits of
one `commitInfo` each, `isolationLevel` `SnapshotIsolation`, `isBlindAppend` true;

* `VACUUM START` before the first delete: `operationParameters`
  `retentionCheckEnabled` (false when the retention check was overridden: `--force-retention`),
  `defaultRetentionMillis` (the table's `delta.deletedFileRetentionDuration`) and, when a
  retention was given, `specifiedRetentionMillis`; `operationMetrics` `numFilesToDelete`
  and `sizeOfDataToDelete`;
* `VACUUM END` after the deletes: `operationParameters` `status` (`COMPLETED`, or `FAILED`
  when deleting raised, then without metrics); `operationMetrics` `numDeletedFiles` (the
  deletes storage confirmed) and `numVacuumedDirectories` (the directories the plan
  deleted files from or removed, plus the root; Spark counts every directory it listed).

Off by default (`record_history`). Refused on catalog-managed tables: their commits go
through the catalog, which this tool does not speak to.
"""

from __future__ import annotations

from collections.abc import Sequence

from delta_ops.clock import Clock
from delta_ops.commit.transaction import Transaction
from delta_ops.errors import UnsupportedFeatureError
from delta_ops.storage import Storage

__all__ = [
    "VACUUM_END",
    "VACUUM_START",
    "record_vacuum_end",
    "record_vacuum_start",
    "refuse_catalog_managed",
    "vacuumed_directories",
]

VACUUM_START = "VACUUM START"
VACUUM_END = "VACUUM END"
_ISOLATION = "SnapshotIsolation"


def refuse_catalog_managed(table: str, version: int) -> None:
    """Refuse to record VACUUM in a catalog-managed table's history.

    Raises:
        UnsupportedFeatureError: Always.
    """
    raise UnsupportedFeatureError(
        "refusing to record VACUUM in the history of a catalog-managed table "
        "(catalogManaged feature): its commits go through the catalog; vacuum without "
        "recording it (no --record-history)",
        table=table, version=version,
    )


def record_vacuum_start(
    storage: Storage,
    *,
    num_files: int,
    size_bytes: int,
    retention_check_enabled: bool,
    default_retention_ms: int,
    specified_retention_ms: int | None,
    clock: Clock | None = None,
) -> int:
    """Commit `VACUUM START`; returns the version written."""
    params: dict[str, object] = {
        "retentionCheckEnabled": retention_check_enabled,
        "defaultRetentionMillis": default_retention_ms,
    }
    if specified_retention_ms is not None:
        params["specifiedRetentionMillis"] = specified_retention_ms
    txn = Transaction(
        storage, operation=VACUUM_START, operation_parameters=params,
        operation_metrics={"numFilesToDelete": num_files, "sizeOfDataToDelete": size_bytes},
        isolation_level=_ISOLATION, clock=clock,
    )
    return txn.commit().version


def record_vacuum_end(
    storage: Storage,
    *,
    num_deleted: int | None,
    num_directories: int | None,
    clock: Clock | None = None,
) -> int:
    """Commit `VACUUM END` (`FAILED`, without metrics, when `num_deleted` is None);
    returns the version written."""
    completed = num_deleted is not None and num_directories is not None
    metrics = (
        {"numDeletedFiles": num_deleted, "numVacuumedDirectories": num_directories}
        if completed else None
    )
    txn = Transaction(
        storage, operation=VACUUM_END,
        operation_parameters={"status": "COMPLETED" if completed else "FAILED"},
        operation_metrics=metrics, isolation_level=_ISOLATION, clock=clock,
    )
    return txn.commit().version


def vacuumed_directories(files: Sequence[str], removed: Sequence[str]) -> int:
    """The directories a VACUUM deleted files from or removed, plus the root."""
    dirs = {p.rpartition("/")[0] for p in files if "/" in p} | set(removed)
    return len(dirs - {""}) + 1

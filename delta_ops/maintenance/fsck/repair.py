"""fsck's repair: one commit of `remove` actions for the live data files that are missing,
or whose deletion vector is missing or does not decode.

Spec sections: "Add File and Remove File" (a `remove` with `dataChange: true` takes a file
out of the table; `extendedFileMetadata`, `partitionValues`, `size` and `stats` carried from
the add as delta-spark's `AddFile.removeWithTimestamp` carries them, with its
`deletionVector`, `baseRowId`, `defaultRowCommitVersion` and `tags`), "Deletion Vectors"
(the remove names the DV, so the `(path, dv)` key is the live one), "Commit Provenance
Information" (`commitInfo.operation` `FSCK`, with `operationMetrics` in the spirit of
Databricks' FSCK REPAIR TABLE: missing data files, missing and corrupt deletion vectors,
files removed, rows lost).

Safety: nothing is removed that is not proven damaged twice. The check listed the table
(a listing error is a refusal, never "missing"); before the commit every file is looked at
again directly (`Storage.exists` for a missing data or DV file; the DV file read and decoded
again for a corrupt one). A file found on the second look is kept and named; a storage error
on the second look refuses the whole repair (nothing committed). The commit is planned on
the snapshot that was checked, so a concurrent writer that touched the same files makes it
a conflict (`commit.Transaction`), not a blind remove.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from delta_ops.clock import Clock, system_clock
from delta_ops.commit.row_ids import num_records_from_stats
from delta_ops.commit.transaction import Transaction
from delta_ops.errors import DeletionVectorError, StorageError
from delta_ops.maintenance.fsck.data_files import LiveFile, dv_problem
from delta_ops.protocol.deletion_vectors import DeletionVectorDescriptor
from delta_ops.storage import Storage

FSCK_OPERATION = "FSCK"


def _as_dict(value: Any) -> dict[str, Any]:
    """A map column as Arrow hands it (a list of pairs) or a dict, as a dict."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    return dict(value)


def remove_action(row: Mapping[str, Any], deletion_ms: int) -> dict[str, Any]:
    """The `remove` delta-spark writes for a live add (`removeWithTimestamp`, dataChange
    true)."""
    out: dict[str, Any] = {
        "path": row["path"],
        "deletionTimestamp": deletion_ms,
        "dataChange": True,
        "extendedFileMetadata": True,
        "partitionValues": _as_dict(row.get("partitionValues")),
        "size": row["size"],
    }
    if row.get("tags"):
        out["tags"] = _as_dict(row["tags"])
    dv = row.get("deletionVector")
    if dv is not None and dv.get("storageType") is not None:
        out["deletionVector"] = {k: v for k, v in dv.items() if v is not None}
    for name in ("baseRowId", "defaultRowCommitVersion", "stats"):
        if row.get(name) is not None:
            out[name] = row[name]
    return out


def rows_of(row: Mapping[str, Any]) -> int | None:
    """Rows a live file holds: `numRecords` less its DV's cardinality (None without stats)."""
    n = num_records_from_stats(row.get("stats"))
    if n is None:
        return None
    dv = row.get("deletionVector") or {}
    return n - (dv.get("cardinality") or 0)


def second_look(storage: Storage, f: LiveFile, *, table: str, version: int) -> str | None:
    """Why `f` is not proven damaged on a direct look (None: proven).

    Raises:
        StorageError: the direct look failed (the repair is refused).
    """
    try:
        if f.missing and storage.exists(f.key):
            return "the data file exists on a direct look (the listing did not show it)"
        if f.dv_key is not None and f.dv_missing and storage.exists(f.dv_key):
            return "its deletion vector file exists on a direct look"
        if f.dv_key is not None and f.dv_corrupt and not f.dv_missing:
            descriptor = DeletionVectorDescriptor.from_dict(f.row["deletionVector"])
            problem = dv_problem(storage.read(f.dv_key), descriptor, f.dv_key)
            if problem is None or not problem[1]:
                return "its deletion vector decodes on a second read"
    except DeletionVectorError:
        return None
    except StorageError as exc:
        raise StorageError(
            f"refusing to repair: could not look at {f.key} directly ({exc.reason}); "
            "nothing was committed",
            table=table, version=version, file=exc.file or f.key,
        ) from exc
    return None


def commit_repair(
    storage: Storage,
    snapshot: Any,
    files: list[LiveFile],
    metrics: Mapping[str, int],
    *,
    verify_data: bool,
    clock: Clock | None = None,
) -> int:
    """Commit the removes of `files` on `snapshot`; returns the version written."""
    now = (clock or system_clock)()
    # Planned on the version checked (a streamed state: the transaction reads it itself).
    on = {"read_version": snapshot.version} if snapshot.streamed else {"snapshot": snapshot}
    txn = Transaction(
        storage, **on, operation=FSCK_OPERATION,
        operation_parameters={"verifyData": verify_data},
        operation_metrics=dict(metrics), clock=clock,
    )
    txn.remove_files(remove_action(f.row, now) for f in files)
    return txn.commit().version


__all__ = ["FSCK_OPERATION", "commit_repair", "remove_action", "rows_of", "second_look"]

"""delta_ops: Delta Lake table maintenance implemented on the Delta transaction protocol.

The public face. A table and its maintenance verbs:

    from delta_ops import DeltaTable

    table = DeltaTable("s3://bucket/table", storage_options={...})
    table.checkpoint()                # CheckpointResult
    table.vacuum()                    # VacuumResult of a dry run; dry_run=False deletes

The same operations as functions that take a `TableLike` (a DeltaTable, a `Storage` or a
table URI): `write_checkpoint`, `cleanup_metadata`, `vacuum`, `write_checksum`,
`verify_checksum`, `compact_log`, `backfill_row_tracking`, `what_is_due`, `fsck`, `history`
(also `table_history`) and `restore`, and the layout wing's `optimize`, `purge` and
`compute_stats` (file statistics from data, `delta_ops.layout.stats`); their frozen
Results, the policies they take, `Retention` (a `datetime.timedelta`, at most
`MAX_RETENTION`), and every exception of `delta_ops.errors` (`DeltaOpsError` and below).

Names resolve lazily (PEP 562): `import delta_ops` imports only this module and the
exceptions, so it never loads pyarrow; the first use of a name imports its module.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from delta_ops import errors as _errors

__version__ = "0.1.0"

#: Public name -> the module it lives in (imported on first use).
_LAZY: dict[str, str] = {
    "DeltaTable": "delta_ops.table",
    "TableLike": "delta_ops.storage",
    "Storage": "delta_ops.storage",
    "Snapshot": "delta_ops.log",
    "Retention": "delta_ops.protocol.retention",
    "MAX_RETENTION": "delta_ops.protocol.retention",
    "write_checkpoint": "delta_ops.maintenance.checkpoint",
    "CheckpointKind": "delta_ops.maintenance.checkpoint",
    "CheckpointResult": "delta_ops.maintenance.checkpoint",
    "cleanup_metadata": "delta_ops.maintenance.cleanup",
    "CleanupResult": "delta_ops.maintenance.cleanup",
    "vacuum": "delta_ops.maintenance.vacuum",
    "InventorySource": "delta_ops.maintenance.vacuum",
    "VacuumResult": "delta_ops.maintenance.vacuum",
    "write_checksum": "delta_ops.maintenance.checksum",
    "verify_checksum": "delta_ops.maintenance.checksum",
    "ChecksumPolicy": "delta_ops.maintenance.checksum",
    "ChecksumWriteResult": "delta_ops.maintenance.checksum",
    "VerifyResult": "delta_ops.maintenance.checksum",
    "compact_log": "delta_ops.maintenance.compaction",
    "CompactionResult": "delta_ops.maintenance.compaction",
    "backfill_row_tracking": "delta_ops.maintenance.row_tracking",
    "BackfillResult": "delta_ops.maintenance.row_tracking",
    "what_is_due": "delta_ops.maintenance.due",
    "DuePolicy": "delta_ops.maintenance.due",
    "DueReport": "delta_ops.maintenance.due",
    "fsck": "delta_ops.maintenance.fsck",
    "FsckResult": "delta_ops.maintenance.fsck",
    "history": "delta_ops.maintenance.history",
    "table_history": "delta_ops.maintenance.history",
    "HistoryEntry": "delta_ops.maintenance.history",
    "HistoryResult": "delta_ops.maintenance.history",
    "restore": "delta_ops.maintenance.restore",
    "RestoreResult": "delta_ops.maintenance.restore",
    "optimize": "delta_ops.layout.optimize",
    "OptimizeResult": "delta_ops.layout.optimize",
    "purge": "delta_ops.layout.purge",
    "PurgeResult": "delta_ops.layout.purge",
    "compute_stats": "delta_ops.layout.stats",
    "StatsResult": "delta_ops.layout.stats",
}

#: Every exception class of `delta_ops.errors` (the one exception tree).
_ERRORS: tuple[str, ...] = tuple(sorted(
    name for name, value in vars(_errors).items()
    if isinstance(value, type) and issubclass(value, Exception)
    and value.__module__ == _errors.__name__ and not name.startswith("_")
))

__all__ = ["__version__", *sorted(_LAZY), *_ERRORS]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # later look-ups skip this function
        return value
    if name in _ERRORS:
        return getattr(_errors, name)
    raise AttributeError(f"module 'delta_ops' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:
    from delta_ops.errors import *  # noqa: F403  (the exception tree, as _ERRORS lists it)
    from delta_ops.layout.optimize import OptimizeResult as OptimizeResult
    from delta_ops.layout.optimize import optimize as optimize
    from delta_ops.layout.purge import PurgeResult as PurgeResult
    from delta_ops.layout.purge import purge as purge
    from delta_ops.layout.stats import StatsResult as StatsResult
    from delta_ops.layout.stats import compute_stats as compute_stats
    from delta_ops.log import Snapshot as Snapshot
    from delta_ops.maintenance.checkpoint import CheckpointKind as CheckpointKind
    from delta_ops.maintenance.checkpoint import CheckpointResult as CheckpointResult
    from delta_ops.maintenance.checkpoint import write_checkpoint as write_checkpoint
    from delta_ops.maintenance.checksum import ChecksumPolicy as ChecksumPolicy
    from delta_ops.maintenance.checksum import ChecksumWriteResult as ChecksumWriteResult
    from delta_ops.maintenance.checksum import VerifyResult as VerifyResult
    from delta_ops.maintenance.checksum import verify_checksum as verify_checksum
    from delta_ops.maintenance.checksum import write_checksum as write_checksum
    from delta_ops.maintenance.cleanup import CleanupResult as CleanupResult
    from delta_ops.maintenance.cleanup import cleanup_metadata as cleanup_metadata
    from delta_ops.maintenance.compaction import CompactionResult as CompactionResult
    from delta_ops.maintenance.compaction import compact_log as compact_log
    from delta_ops.maintenance.due import DuePolicy as DuePolicy
    from delta_ops.maintenance.due import DueReport as DueReport
    from delta_ops.maintenance.due import what_is_due as what_is_due
    from delta_ops.maintenance.fsck import FsckResult as FsckResult
    from delta_ops.maintenance.fsck import fsck as fsck
    from delta_ops.maintenance.history import HistoryEntry as HistoryEntry
    from delta_ops.maintenance.history import HistoryResult as HistoryResult
    from delta_ops.maintenance.history import history as history
    from delta_ops.maintenance.history import table_history as table_history
    from delta_ops.maintenance.restore import RestoreResult as RestoreResult
    from delta_ops.maintenance.restore import restore as restore
    from delta_ops.maintenance.row_tracking import BackfillResult as BackfillResult
    from delta_ops.maintenance.row_tracking import backfill_row_tracking as backfill_row_tracking
    from delta_ops.maintenance.vacuum import InventorySource as InventorySource
    from delta_ops.maintenance.vacuum import VacuumResult as VacuumResult
    from delta_ops.maintenance.vacuum import vacuum as vacuum
    from delta_ops.protocol.retention import MAX_RETENTION as MAX_RETENTION
    from delta_ops.protocol.retention import Retention as Retention
    from delta_ops.storage import Storage as Storage
    from delta_ops.storage import TableLike as TableLike
    from delta_ops.table import DeltaTable as DeltaTable

"""`DeltaTable`: the user-facing handle on one table.

Maintenance is a verb on the table: `table.snapshot()`, `table.checkpoint()`,
`table.cleanup_metadata()`, `table.vacuum()`, `table.write_checksum()`,
`table.verify_checksum()`, `table.compact_log(start=, end=)`,
`table.backfill_row_tracking()`, `table.compute_stats()`, `table.due()`,
`table.fsck()`, `table.history(limit=)`, `table.restore(version=)`, `table.optimize()`
and `table.purge()`. Each is a thin method over its operation in `delta_ops.maintenance`
(`delta_ops.layout` for the data's maintenance; imported when first called), with the
same keyword arguments and defaults (destructive ones are dry runs unless
`dry_run=False`) and the same frozen Result. A DeltaTable holds only its storage; every
call reads the log afresh, so a long-lived handle never acts on stale state.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from delta_ops.log import ReadOptions, Snapshot, load_snapshot
from delta_ops.storage import Storage

if TYPE_CHECKING:
    from delta_ops.clock import Clock
    from delta_ops.engine.base import Engine
    from delta_ops.engine.progress import Progress
    from delta_ops.layout.optimize import OptimizeResult
    from delta_ops.layout.purge import PurgeResult
    from delta_ops.layout.stats import StatsProgress, StatsResult
    from delta_ops.maintenance.checkpoint import CheckpointKind, CheckpointResult
    from delta_ops.maintenance.checksum import (
        ChecksumPolicy,
        ChecksumWriteResult,
        Method,
        VerifyResult,
    )
    from delta_ops.maintenance.cleanup import CleanupResult
    from delta_ops.maintenance.compaction import CompactionResult
    from delta_ops.maintenance.due import DuePolicy, DueReport
    from delta_ops.maintenance.fsck import FsckResult
    from delta_ops.maintenance.history import HistoryResult
    from delta_ops.maintenance.restore import RestoreResult
    from delta_ops.maintenance.row_tracking import BackfillProgress, BackfillResult
    from delta_ops.maintenance.vacuum import InventorySource, VacuumResult


class DeltaTable:
    """A Delta table at a URI (local path, `file://`, `s3://`, `memory://`).

    Args:
        uri: where the table root is.
        storage_options: fsspec options for the scheme (e.g. S3 endpoint and keys). They
            are passed to storage only and never logged.
        storage: an existing Storage to use instead of building one from `uri`.
    """

    def __init__(
        self,
        uri: str | os.PathLike[str] | None = None,
        *,
        storage_options: Mapping[str, str] | None = None,
        storage: Storage | None = None,
    ) -> None:
        if storage is None:
            if uri is None:
                raise ValueError("DeltaTable needs a uri or a storage")
            storage = Storage.for_uri(os.fspath(uri), dict(storage_options or {}))
        self.storage = storage

    @property
    def uri(self) -> str:
        return self.storage.root

    def __repr__(self) -> str:
        return f"DeltaTable({self.uri!r})"

    def snapshot(
        self, version: int | None = None, *, timestamp: datetime | int | None = None
    ) -> Snapshot:
        """The table at `version` (latest when None) or as of `timestamp`."""
        return load_snapshot(self.storage, version, timestamp=timestamp)

    def checkpoint(
        self,
        *,
        version: int | None = None,
        kind: CheckpointKind | str | None = None,
        fmt: str = "parquet",
        sidecar_actions: int | None = None,
        parts: int | None = None,
        now_ms: int | None = None,
        clock: Clock | None = None,
        engine: Engine | None = None,
        stream_threshold: int | None = None,
        rebuild: bool | None = None,
        rebuild_threshold: int | None = None,
        buckets: int | None = None,
        read_options: ReadOptions | None = None,
    ) -> CheckpointResult:
        """Write a checkpoint at `version` (latest when None): the arguments and Result of
        `delta_ops.maintenance.checkpoint.write_checkpoint`."""
        from delta_ops.maintenance.checkpoint import write_checkpoint

        return write_checkpoint(
            self, version=version, kind=kind, fmt=fmt, sidecar_actions=sidecar_actions,
            parts=parts, now_ms=now_ms, clock=clock, engine=engine,
            stream_threshold=stream_threshold, rebuild=rebuild,
            rebuild_threshold=rebuild_threshold, buckets=buckets, read_options=read_options,
        )

    def cleanup_metadata(
        self,
        *,
        retention: timedelta | None = None,
        ensure_checkpoint: bool = False,
        dry_run: bool = True,
        clock: Clock | None = None,
        now_ms: int | None = None,
        force_retention: bool = False,
        allow_catalog_managed: bool = False,
    ) -> CleanupResult:
        """Delete expired log files (a dry run unless `dry_run=False`): the arguments and
        Result of `delta_ops.maintenance.cleanup.cleanup_metadata`."""
        from delta_ops.maintenance.cleanup import cleanup_metadata

        return cleanup_metadata(
            self, retention=retention, ensure_checkpoint=ensure_checkpoint, dry_run=dry_run,
            clock=clock, now_ms=now_ms, force_retention=force_retention,
            allow_catalog_managed=allow_catalog_managed,
        )

    def vacuum(
        self,
        *,
        retention: timedelta | None = None,
        retention_hours: float | None = None,
        force_retention: bool = False,
        lite: bool = False,
        dry_run: bool = True,
        clock: Clock | None = None,
        now_ms: int | None = None,
        engine: Engine | None = None,
        allow_catalog_managed: bool = False,
        inventory: str | InventorySource | None = None,
        lite_fallback: bool = False,
        record_history: bool = False,
        progress: Progress | None = None,
        keep_versions: Sequence[int] = (),
    ) -> VacuumResult:
        """Delete unreferenced data files older than the retention (a dry run unless
        `dry_run=False`): the arguments and Result of `delta_ops.maintenance.vacuum.vacuum`."""
        from delta_ops.maintenance.vacuum import vacuum

        return vacuum(
            self, retention=retention, retention_hours=retention_hours,
            force_retention=force_retention, lite=lite, dry_run=dry_run, clock=clock,
            now_ms=now_ms, engine=engine, allow_catalog_managed=allow_catalog_managed,
            inventory=inventory, lite_fallback=lite_fallback, record_history=record_history,
            progress=progress, keep_versions=keep_versions,
        )

    def fsck(
        self,
        *,
        repair: bool = False,
        confirm: bool = False,
        verify_data: bool = False,
        leftovers: bool = True,
        engine: Engine | None = None,
        clock: Clock | None = None,
    ) -> FsckResult:
        """Check that the table is whole; with `repair=True, confirm=True`, remove the live
        files proven missing or whose deletion vector is (a dry run without `confirm`): the
        arguments and Result of `delta_ops.maintenance.fsck.fsck`."""
        from delta_ops.maintenance.fsck import fsck

        return fsck(
            self, repair=repair, confirm=confirm, verify_data=verify_data,
            leftovers=leftovers, engine=engine, clock=clock,
        )

    def optimize(
        self,
        *,
        where: str | None = None,
        target_size: int | str | None = None,
        min_file_size: int | str | None = None,
        min_files: int = 2,
        max_deleted_rows_ratio: float = 0.05,
        dry_run: bool = True,
        engine: Engine | None = None,
        bins_per_commit: int = 16,
        row_group_bytes: int | None = None,
        clock: Callable[[], int] | None = None,
    ) -> OptimizeResult:
        """Compact small files (a dry run unless `dry_run=False`): the arguments and Result
        of `delta_ops.layout.optimize.optimize`."""
        from delta_ops.layout.optimize import optimize

        return optimize(
            self, where=where, target_size=target_size, min_file_size=min_file_size,
            min_files=min_files, max_deleted_rows_ratio=max_deleted_rows_ratio,
            dry_run=dry_run, engine=engine, bins_per_commit=bins_per_commit,
            row_group_bytes=row_group_bytes, clock=clock,
        )

    def purge(
        self,
        *,
        where: str | None = None,
        target_size: int | str | None = None,
        dry_run: bool = True,
        engine: Engine | None = None,
        bins_per_commit: int = 16,
        row_group_bytes: int | None = None,
        clock: Callable[[], int] | None = None,
    ) -> PurgeResult:
        """Rewrite every file with a deletion vector without its deleted rows (a dry run
        unless `dry_run=False`): the arguments and Result of `delta_ops.layout.purge.purge`."""
        from delta_ops.layout.purge import purge

        return purge(
            self, where=where, target_size=target_size, dry_run=dry_run, engine=engine,
            bins_per_commit=bins_per_commit, row_group_bytes=row_group_bytes, clock=clock,
        )

    def write_checksum(
        self,
        *,
        version: int | None = None,
        engine: Engine | None = None,
        method: Method = "auto",
        policy: ChecksumPolicy | None = None,
        read_options: ReadOptions | None = None,
    ) -> ChecksumWriteResult:
        """Write `version.crc` (latest when None) unless it exists: the arguments and Result
        of `delta_ops.maintenance.checksum.write_checksum`."""
        from delta_ops.maintenance.checksum import write_checksum

        return write_checksum(
            self, version=version, engine=engine, method=method, policy=policy,
            read_options=read_options,
        )

    def verify_checksum(
        self,
        *,
        version: int | None = None,
        all_versions: bool = False,
        engine: Engine | None = None,
        read_options: ReadOptions | None = None,
    ) -> VerifyResult:
        """Compare recorded `.crc` files with the state they describe: the arguments and
        Result of `delta_ops.maintenance.checksum.verify_checksum`."""
        from delta_ops.maintenance.checksum import verify_checksum

        return verify_checksum(
            self, version=version, all_versions=all_versions, engine=engine,
            read_options=read_options,
        )

    def compact_log(self, *, start: int, end: int) -> CompactionResult:
        """Write `start.end.compacted.json`: the arguments and Result of
        `delta_ops.maintenance.compaction.compact_log`."""
        from delta_ops.maintenance.compaction import compact_log

        return compact_log(self, start=start, end=end)

    def backfill_row_tracking(
        self,
        *,
        batch_size: int = 20_000,
        enable: bool = True,
        engine: Any = None,
        clock: Clock | None = None,
        progress: Callable[[BackfillProgress], None] | None = None,
        max_conflicts: int = 20,
        max_retries: int = 30,
        sleep: Callable[[float], None] | None = None,
        stream_threshold: int | None = None,
        checkpoint_every: int = 250_000,
        read_options: ReadOptions | None = None,
        confirm_protocol_upgrade: bool = False,
    ) -> BackfillResult:
        """Give every live file row IDs, then (by default) enable row tracking: the
        arguments and Result of `delta_ops.maintenance.row_tracking.backfill_row_tracking`
        (a table whose protocol must gain the rowTracking and domainMetadata features,
        which other writers may lack, needs `confirm_protocol_upgrade=True`)."""
        from delta_ops.maintenance.row_tracking import backfill_row_tracking

        return backfill_row_tracking(
            self, batch_size=batch_size, enable=enable, engine=engine, clock=clock,
            progress=progress, max_conflicts=max_conflicts, max_retries=max_retries,
            sleep=sleep, stream_threshold=stream_threshold, checkpoint_every=checkpoint_every,
            read_options=read_options, confirm_protocol_upgrade=confirm_protocol_upgrade,
        )

    def compute_stats(
        self,
        *,
        dry_run: bool = True,
        recompute_all: bool = False,
        batch_size: int = 1000,
        max_conflicts: int = 20,
        clock: Clock | None = None,
        progress: Callable[[StatsProgress], None] | None = None,
    ) -> StatsResult:
        """Give live files the statistics the table asks for, computed from their data (a
        dry run unless `dry_run=False`): the arguments and Result of
        `delta_ops.layout.stats.compute_stats`."""
        from delta_ops.layout.stats import compute_stats

        return compute_stats(
            self, dry_run=dry_run, recompute_all=recompute_all, batch_size=batch_size,
            max_conflicts=max_conflicts, clock=clock, progress=progress,
        )

    def due(self, policy: DuePolicy | None = None) -> DueReport:
        """What the table needs now, from a cheap read of its log: the arguments and Result
        of `delta_ops.maintenance.due.what_is_due`."""
        from delta_ops.maintenance.due import what_is_due

        return what_is_due(self, policy)

    def history(self, *, limit: int | None = None) -> HistoryResult:
        """Each version's commitInfo, newest first: the arguments and Result of
        `delta_ops.maintenance.history.table_history`."""
        from delta_ops.maintenance.history import table_history

        return table_history(self, limit=limit)

    def restore(
        self,
        *,
        version: int | None = None,
        timestamp: datetime | int | None = None,
        dry_run: bool = True,
        clock: Clock | None = None,
        max_retries: int = 10,
    ) -> RestoreResult:
        """Restore the state of an earlier version in one RESTORE commit (a dry run unless
        `dry_run=False`): the arguments and Result of `delta_ops.maintenance.restore.restore`."""
        from delta_ops.maintenance.restore import restore

        return restore(
            self, version=version, timestamp=timestamp, dry_run=dry_run, clock=clock,
            max_retries=max_retries,
        )

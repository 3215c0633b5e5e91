"""Carry out metadata cleanup: the public operation `cleanup_metadata`, `apply_cleanup`
(move `_last_checkpoint` forward, then delete in the planned order) and the text summary.

Spec sections: "Metadata Cleanup", "Last Checkpoint File" (never moved backward).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import timedelta
from typing import Any

from delta_ops.clock import Clock, start_time
from delta_ops.log import advance_last_checkpoint
from delta_ops.maintenance.cleanup.cutoff import iso_utc
from delta_ops.maintenance.cleanup.plan import CleanupPlan, plan_cleanup
from delta_ops.storage import Storage, TableLike


@dataclass(frozen=True)
class CleanupResult:
    """Outcome of `cleanup_metadata` (the CLI's --json object).

    Attributes:
        table: Table root URI.
        cutoff_timestamp: `cutOffTimestamp` in ms since the epoch (None when disabled).
        cutoff_version: `cutoffCommit`, the newest commit not newer than the cutoff.
        checkpoint_version: `cutOffCheckpoint`, the oldest version kept.
        files: Files deleted (or, in a dry run, to delete), relative to the table root,
            in deletion order.
        num_files: len(files).
        dry_run: Nothing was written or deleted.
        retention_hours: The log retention used, in hours.
        enabled: `delta.enableExpiredLogCleanup`.
        checkpoint_written: Version of the checkpoint written first (`ensure_checkpoint`);
            in a dry run, the version one would be written at.
        last_checkpoint_updated: `_last_checkpoint` was (dry run: would be) moved forward;
            False when a newer one was written meanwhile (it is never moved back).
        reason: Why nothing was deleted, when nothing was.
        messages: Other notes.
        temp_files: Leftover temporary files of killed writers deleted (dry run: to
            delete), relative to the table root; not counted in `num_files`.
    """

    table: str
    cutoff_timestamp: int | None
    cutoff_version: int | None
    checkpoint_version: int | None
    files: tuple[str, ...]
    num_files: int
    dry_run: bool
    retention_hours: float
    enabled: bool = True
    checkpoint_written: int | None = None
    last_checkpoint_updated: bool = False
    reason: str | None = None
    messages: tuple[str, ...] = field(default_factory=tuple)
    temp_files: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        # Shallow: every field is a scalar or a tuple of strings, which `asdict` would
        # deep-copy one element at a time (tens of ms for 20,000 files).
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["files"] = list(self.files)
        out["messages"] = list(self.messages)
        out["temp_files"] = list(self.temp_files)
        return out


def _result(
    plan: CleanupPlan, *, dry_run: bool, written: int | None, last_checkpoint_updated: bool
) -> CleanupResult:
    return CleanupResult(
        table=plan.table,
        cutoff_timestamp=plan.cutoff_timestamp,
        cutoff_version=plan.cutoff_version,
        checkpoint_version=plan.checkpoint_version,
        files=plan.files,
        num_files=len(plan.files),
        dry_run=dry_run,
        retention_hours=plan.retention_ms / 3_600_000,
        enabled=plan.enabled,
        checkpoint_written=written,
        last_checkpoint_updated=last_checkpoint_updated,
        reason=plan.reason,
        messages=plan.messages,
        temp_files=plan.temp_files,
    )


def cleanup_metadata(
    table_or_storage: TableLike,
    *,
    retention: timedelta | None = None,
    ensure_checkpoint: bool = False,
    dry_run: bool = True,
    clock: Clock | None = None,
    now_ms: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
    force_retention: bool = False,
    allow_catalog_managed: bool = False,
) -> CleanupResult:
    """Delete expired log files and unreferenced sidecars (spec "Metadata Cleanup"), and
    temporary files killed writers left in `_delta_log` once older than the retention.

    Args:
        table_or_storage: A `DeltaTable`, a `Storage`, or a table URI.
        retention: Log retention instead of `delta.logRetentionDuration` (default 30 days);
            a shorter one than the table's needs `force_retention`; at most
            `protocol.retention.MAX_RETENTION` (1,000,000 hours).
        ensure_checkpoint: When there is no checkpoint at the cutoff version, write one
            there first, so that everything before it can go.
        dry_run: Only report what would be deleted (the default: pass `dry_run=False` to
            delete).
        clock: Milliseconds since the epoch, read once at the start (retention cutoff,
            age of sidecars and writers' temporary files); default the system clock.
        now_ms: The current time as a number instead of a clock (kept for callers that
            pass one); give `clock` or `now_ms`, not both.
        storage_options: Used when `table_or_storage` is a URI.
        force_retention: Allow a `retention` shorter than `delta.logRetentionDuration`
            (versions readers may still time travel to are deleted).
        allow_catalog_managed: Clean up a catalog-managed table; only when the managing
            catalog permits metadata cleanup.

    Returns:
        The result; "nothing to do" (disabled, nothing old enough, no checkpoint) is a
        normal result whose `reason` says why.

    Raises:
        ValueError: Both `clock` and `now_ms` given.
        RetentionError: `retention` shorter than the table's log retention, not forced,
            negative or beyond `MAX_RETENTION` (nothing deleted).
        UnsupportedFeatureError: Unknown or unsupported table features (nothing deleted).
        CorruptLogError: No checkpoint at or before the cutoff reads in full (nothing
            deleted); names the table, version and the unreadable file.
        StorageError: A deletion or write failed (files deleted before it stay deleted;
            every kept version is still readable and a re-run finishes the job).
    """
    now = start_time(clock, now_ms, operation="cleanup_metadata")
    storage = Storage.of(table_or_storage, storage_options)
    options = {"force_retention": force_retention, "allow_catalog_managed": allow_catalog_managed}
    plan = plan_cleanup(
        storage, now_ms=now, retention=retention, ensure_checkpoint=ensure_checkpoint, **options
    )
    written = plan.write_checkpoint_at
    if dry_run:
        return _result(
            plan, dry_run=True, written=written,
            last_checkpoint_updated=plan.last_checkpoint is not None,
        )
    if written is not None:
        from delta_ops.maintenance.checkpoint import write_checkpoint

        write_checkpoint(storage, version=written, now_ms=now)
        plan = plan_cleanup(
            storage, now_ms=now, retention=retention, ensure_checkpoint=False, **options
        )
        plan = replace(plan, messages=(
            f"wrote a checkpoint at the cutoff version {written}", *plan.messages
        ))
    updated = apply_cleanup(storage, plan)
    return _result(plan, dry_run=False, written=written, last_checkpoint_updated=updated)


def apply_cleanup(storage: Storage, plan: CleanupPlan) -> bool:
    """Carry out a plan from `plan_cleanup`: move `_last_checkpoint` forward (never back:
    a newer one written since the plan is kept, and one a checkpoint writer published in the
    instant between our read and write is put back; see `delta_ops.log.files.last_checkpoint_file`),
    then delete `plan.files` one at a time in order (a crash leaves a prefix deleted and the
    rest in place), then the temporary files.

    Returns:
        Whether `_last_checkpoint` was written.
    """
    updated = False
    if plan.last_checkpoint is not None:
        updated = advance_last_checkpoint(
            storage, plan.last_checkpoint, replace_same_version=False
        )
    for path in plan.files:
        storage.delete(path)
    for path in plan.temp_files:
        storage.delete(path)
    return updated


def describe(result: CleanupResult) -> str:
    """Human-readable summary of a result (the CLI's text output)."""
    verb = "would delete" if result.dry_run else "deleted"
    lines = [f"table       {result.table}"]
    if result.cutoff_timestamp is not None:
        lines.append(f"cutoff      {iso_utc(result.cutoff_timestamp)} (retention "
                     f"{result.retention_hours:g} h)")
    lines.append(f"cutoff commit     {_fmt(result.cutoff_version)}")
    lines.append(f"kept checkpoint   {_fmt(result.checkpoint_version)}")
    if result.checkpoint_written is not None:
        lines.append(
            f"checkpoint  {'would be ' if result.dry_run else ''}written at version "
            f"{result.checkpoint_written}"
        )
    lines.append(f"{verb} {result.num_files} files")
    lines += [f"  {p}" for p in result.files]
    if result.temp_files:
        lines.append(f"{verb} {len(result.temp_files)} leftover temporary files of writers")
        lines += [f"  {p}" for p in result.temp_files]
    if result.reason:
        lines.append(result.reason)
    lines += result.messages
    return "\n".join(lines)


def _fmt(v: int | None) -> str:
    return "-" if v is None else str(v)

"""VACUUM's run: plan (shared with the dry run), then delete, side checksums first, then
the directories the deletion emptied. Right before deleting, the commits written since the
plan (staged, and published after its version) are read again
(`proof.prove_unchanged_since_plan`): one re-adding a file of the plan refuses the run.

A real run then records, as delta-spark does, the newest commit older than the retention
cut-off in `_delta_log/_last_vacuum_info` (what lets a later lite run start there; not on
catalog-managed tables), and, when asked (`record_history`), `VACUUM START` before the
deletes and `VACUUM END` after them as commits of their own (`history.py`). Progress of
the deletes (files, bytes, rate) goes to `progress` (`engine.progress`), a batch at a time.

A crash in between leaves data files whose side checksums are gone, which a re-run finds
again, never a side checksum whose data file is gone. Empty directories are removed only
below the data directories, and at the top level only when no empty directory lies under
`_delta_log` (nothing under the log is ever touched).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Any

from delta_ops.clock import Clock, start_time
from delta_ops.engine.base import Engine
from delta_ops.engine.progress import DELETE, Progress
from delta_ops.errors import CorruptLogError, StorageError
from delta_ops.log import read_last_vacuum_info, write_last_vacuum_info
from delta_ops.maintenance.vacuum.history import (
    record_vacuum_end,
    record_vacuum_start,
    refuse_catalog_managed,
    vacuumed_directories,
)
from delta_ops.maintenance.vacuum.inventory import InventorySource
from delta_ops.maintenance.vacuum.listing import _has_directories, is_hidden
from delta_ops.maintenance.vacuum.plan import HOUR_MS, VacuumPlan, plan_vacuum
from delta_ops.maintenance.vacuum.proof import prove_unchanged_since_plan
from delta_ops.protocol.filenames import LOG_DIR
from delta_ops.storage import Storage, TableLike


@dataclass(frozen=True)
class VacuumResult:
    """Outcome of `vacuum` (the CLI's --json object).

    Attributes:
        table: Table root URI.
        version: The table version whose state decided what is kept.
        files: Files deleted (dry run: to delete), relative to the root, sorted.
        num_files: len(files).
        size_bytes: Their total size.
        directories: Directories removed because they were (or became) empty; in a dry
            run, those this deletion would empty.
        dry_run: Nothing was deleted.
        retention_hours: The retention used, in hours.
        lite: Lite mode (tombstones from the log instead of a listing).
        messages: Notes (e.g. what lite mode cannot see).
    """

    table: str
    version: int
    files: tuple[str, ...]
    num_files: int
    size_bytes: int
    directories: tuple[str, ...]
    dry_run: bool
    retention_hours: float
    lite: bool = False
    messages: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        # Shallow: every field is a scalar or a tuple of strings, which `asdict` would
        # deep-copy one element at a time (tens of ms for 20,000 files).
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["files"] = list(self.files)
        out["directories"] = list(self.directories)
        out["messages"] = list(self.messages)
        return out


# With progress, files are deleted this many at a time (a report after each batch).
_DELETE_BATCH = 10_000


def _delete(
    eng: Engine,
    storage: Storage,
    paths: Sequence[str],
    sizes: Mapping[str, int],
    progress: Progress | None,
) -> int:
    """Delete `paths`; how many existed (confirmed deletes). With `progress`, a batch at a
    time, each reported as phase `delete` (files confirmed, their bytes)."""
    if not paths:
        return 0
    if progress is None:
        return int(eng.delete_files(storage, paths) or 0)
    done = 0
    for start in range(0, len(paths), _DELETE_BATCH):
        part = paths[start : start + _DELETE_BATCH]
        n = int(eng.delete_files(storage, part) or 0)
        done += n
        size = sum(sizes.get(p, 0) for p in part)
        # Bytes of the batch in proportion to the deletes confirmed (missing files free none).
        progress.advance(DELETE, pages=1, files=n, bytes=size * n // len(part))
    return done


def _remove_empty_dirs(storage: Storage, plan: VacuumPlan) -> list[str]:
    """Remove the empty data directories below the top-level ones the plan names, and
    those top-level ones the deletion emptied. Never a hidden directory nor anything below
    one (`listing.is_hidden`, as the listing decides it: `_delta_log`, `_temporary`, a
    nested table's `_delta_log`, `metadata`, ...): they are not the table's data, and a
    writer may be about to write into an empty one."""
    if not _has_directories(storage):
        return []  # object stores have none: two listings per top directory saved

    def hidden(name: str) -> bool:
        return name == LOG_DIR or is_hidden(name, plan.partition_prefixes)

    tops = [t for t in plan.top_dirs if not hidden(t)]
    removed: list[str] = []
    for top in tops:
        removed += storage.remove_empty_dirs(top, keep=hidden)
    if any(not storage.list_dir(t) and not storage.list_subdirs(t) for t in tops):
        # `Storage` removes only the empty directories *below* a directory: for an emptied
        # top-level one the sweep starts at the root, leaving hidden ones as they are.
        removed += storage.remove_empty_dirs("", keep=hidden)
    return removed


def vacuum(
    table_or_storage: TableLike,
    *,
    retention: timedelta | None = None,
    retention_hours: float | None = None,
    force_retention: bool = False,
    lite: bool = False,
    dry_run: bool = True,
    clock: Clock | None = None,
    now_ms: int | None = None,
    engine: Engine | None = None,
    storage_options: Mapping[str, Any] | None = None,
    allow_catalog_managed: bool = False,
    inventory: str | InventorySource | None = None,
    lite_fallback: bool = False,
    record_history: bool = False,
    progress: Progress | None = None,
    keep_versions: Sequence[int] = (),
) -> VacuumResult:
    """Delete files the table no longer references once they are older than the retention.

    Args:
        table_or_storage: A `DeltaTable`, a `Storage`, or a table URI.
        retention: Retention instead of `delta.deletedFileRetentionDuration` (default 1
            week); at most `protocol.retention.MAX_RETENTION` (1,000,000 hours).
        retention_hours: The same in hours (the command line's unit); give one of the two.
        force_retention: Allow a retention shorter than the table's (and a log retention
            shorter than the file retention).
        lite: Use expired tombstones from the log instead of listing the table.
        dry_run: Only report what would be deleted (the default: pass `dry_run=False` to
            delete).
        clock: The clock (`delta_ops.clock`), read once at the start (default: the system
            clock).
        now_ms: The current time in ms since the epoch, instead of a clock.
        engine: Where listing and deleting run (default: `LocalEngine`).
        storage_options: Used when `table_or_storage` is a URI.
        allow_catalog_managed: Accept a catalog-managed table (`catalogManaged` feature):
            only when the catalog that owns it permits it. Every file a staged commit
            (`_delta_log/_staged_commits`, any version) names is kept as well; commits the
            catalog holds inline are protected only by the retention.
        inventory: Take the table's files from an inventory instead of listing it: an S3
            Inventory `manifest.json`, or a Parquet file, directory or Delta table in
            delta-spark's `USING INVENTORY` schema (a path or `InventorySource`; read with
            `storage_options`). See `maintenance/vacuum/inventory.py`.
        lite_fallback: In lite mode, when the log no longer covers the commits since the
            last VACUUM, list the table instead of refusing (the result says so).
        record_history: Record the run in the table's history as delta-spark does
            (`VACUUM START` / `VACUUM END` commits); refused on catalog-managed tables.
        progress: Hears of listing pages, probes and deletes (`engine.progress`).
        keep_versions: Versions to keep readable, like deltalake's
            `vacuum(keep_versions=...)`: every data file and deletion vector file their
            live adds name is kept whatever the retention (the plan and the proof each read
            them; `log.kept_version_references`).

    Raises:
        ValueError: Both `clock` and `now_ms` are given, or both `retention` and
            `retention_hours`.
        UnsupportedFeatureError: The table has reader or writer features this tool does not
            know (nothing listed, nothing deleted); `features` names them.
        RetentionError: The retention is unsafe (see `retention_for`).
        UnsafeDeletionError: A file chosen for deletion could not be proven unreferenced
            and inside the root, a staged commit cannot be read, or which file a
            referenced path reaches cannot be established (nothing deleted).
        StorageError: Listing or deleting failed (a re-run finishes the job).
        InventoryError: The inventory is stale, lacks fields, names paths outside the
            root, or cannot be read (nothing deleted).
        LiteVacuumUnavailableError: Lite mode cannot see every file a full VACUUM would
            delete and `lite_fallback` is off (nothing deleted).
        VersionNotFoundError: A version in `keep_versions` is not in the table, or its log
            is gone (log cleanup) so what it needs is unknown (nothing deleted).
    """
    now = start_time(clock, now_ms, operation="vacuum")
    storage = Storage.of(table_or_storage, storage_options)
    source = InventorySource(inventory) if isinstance(inventory, str) else inventory
    plan = plan_vacuum(
        storage, now_ms=now, retention=retention, retention_hours=retention_hours,
        force_retention=force_retention,
        lite=lite, engine=engine, allow_catalog_managed=allow_catalog_managed,
        inventory=source, lite_fallback=lite_fallback, progress=progress,
        keep_versions=keep_versions,
    )
    directories: Sequence[str] = plan.directories
    messages = list(plan.messages)
    if record_history and plan.catalog_managed:
        refuse_catalog_managed(plan.table, plan.version)
    if not dry_run:
        history_versions: list[int] = []
        if record_history:
            history_versions.append(record_vacuum_start(
                storage, num_files=len(plan.files), size_bytes=int(sum(plan.sizes)),
                retention_check_enabled=not force_retention,
                default_retention_ms=plan.default_retention_ms,
                specified_retention_ms=(
                    None if retention is None and retention_hours is None else plan.retention_ms
                ),
                clock=clock,
            ))
        sizes = dict(zip(plan.files, plan.sizes, strict=True))
        if progress is not None:
            progress.begin(DELETE, total_files=len(plan.files), total_bytes=sum(plan.sizes))
        owned = engine is None
        eng = engine
        if eng is None:
            from delta_ops.engine.local import LocalEngine

            eng = LocalEngine()
        try:
            # Side checksums first: a crash in between leaves their data files, which a
            # re-run finds again, never a side file whose data file is gone.
            # The listing proved each file exists: the engine deletes in batches without
            # asking again (on S3, DeleteObjects of 1,000 keys side by side) and counts
            # what the store confirms.
            sides = [p for p in plan.files if p in plan.side_files]
            mains = [p for p in plan.files if p not in plan.side_files]
            # A commit written since the plan may re-add an old file: read them again.
            phase, deleted = "proof", 0
            prove_unchanged_since_plan(storage, plan.files, plan.version)
            phase = "sides"
            deleted = _delete(eng, storage, sides, sizes, progress)
            phase = "mains"
            deleted += _delete(eng, storage, mains, sizes, progress)
        except BaseException as exc:
            if record_history:
                record_vacuum_end(storage, num_deleted=None, num_directories=None, clock=clock)
            if isinstance(exc, StorageError) and exc.table is None:  # name the table
                first = (f"{deleted} side checksum files were deleted, then "
                         if phase == "mains" and sides else "")
                rest = (f"; the plan's other {len(mains)} files were not tried (side "
                        "checksum files go first)" if phase == "sides" and mains else "")
                raise StorageError(first + exc.reason + rest, table=plan.table,
                                   version=plan.version, file=exc.file) from exc
            raise
        finally:
            if owned:
                eng.close()
        if progress is not None:
            progress.end(DELETE)
        removed = _remove_empty_dirs(storage, plan)
        directories = sorted(set(removed), key=lambda c: (-c.count("/"), c))
        if deleted < len(plan.files):
            messages.append(
                f"{len(plan.files) - deleted} file(s) of the plan were already gone when "
                f"deleted; {deleted} deletes confirmed"
            )
        if record_history:
            history_versions.append(record_vacuum_end(
                storage, num_deleted=deleted,
                num_directories=vacuumed_directories(plan.files, directories), clock=clock,
            ))
            messages.append(
                f"recorded in the table history: VACUUM START (version {history_versions[0]}) "
                f"and VACUUM END (version {history_versions[1]})"
            )
        _record_last_vacuum(storage, plan)
    return VacuumResult(
        table=plan.table,
        version=plan.version,
        files=plan.files,
        num_files=len(plan.files),
        size_bytes=int(sum(plan.sizes)),
        directories=tuple(directories),
        dry_run=dry_run,
        retention_hours=plan.retention_ms / HOUR_MS,
        lite=plan.lite,
        messages=tuple(messages),
    )


def _record_last_vacuum(storage: Storage, plan: VacuumPlan) -> None:
    """`_delta_log/_last_vacuum_info` after a real run: the newest commit older than the
    retention cut-off, whose removes this run has dealt with (never moved back; not on
    catalog-managed tables, whose log the catalog owns)."""
    if plan.catalog_managed or plan.window_end is None:
        return
    try:
        previous = read_last_vacuum_info(storage)
    except CorruptLogError:
        previous = None  # unreadable: replaced, as delta-spark overwrites it
    if previous is None or plan.window_end > previous:
        write_last_vacuum_info(storage, plan.window_end)


def describe(result: VacuumResult) -> str:
    """Human-readable summary of a result (the CLI's text output)."""
    verb = "would delete" if result.dry_run else "deleted"
    lines = [
        f"table       {result.table} (version {result.version})",
        f"retention   {result.retention_hours:g} hours{' (lite)' if result.lite else ''}",
        f"{verb} {result.num_files} files ({result.size_bytes} bytes)",
    ]
    lines += [f"  {p}" for p in result.files]
    if result.directories:
        lines.append(f"{'would remove' if result.dry_run else 'removed'} "
                     f"{len(result.directories)} empty directories")
        lines += [f"  {d}/" for d in result.directories]
    lines += result.messages
    return "\n".join(lines)

"""VACUUM's run: plan (shared with the dry run), then delete, side checksums first, then
the directories the deletion emptied.

A crash in between leaves data files whose side checksums are gone, which a re-run finds
again, never a side checksum whose data file is gone. Empty directories are removed only
below the data directories, and at the top level only when no empty directory lies under
`_delta_log` (nothing under the log is ever touched).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from delta_ops.clock import Clock, start_time
from delta_ops.engine.base import Engine
from delta_ops.maintenance.vacuum.listing import _has_directories
from delta_ops.maintenance.vacuum.plan import HOUR_MS, VacuumPlan, plan_vacuum
from delta_ops.protocol.filenames import LOG_DIR
from delta_ops.storage import Storage


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



def _remove_empty_dirs(storage: Storage, plan: VacuumPlan) -> tuple[list[str], list[str]]:
    """Remove empty directories below the data directories; (removed, notes)."""
    if not _has_directories(storage):
        return [], []  # object stores have none: two listings per top directory saved
    removed: list[str] = []
    notes: list[str] = []
    for top in plan.top_dirs:
        removed += storage.remove_empty_dirs(top)
    emptied_tops = [
        t for t in plan.top_dirs if not storage.list_dir(t) and not storage.list_subdirs(t)
    ]
    if emptied_tops:
        removed += _remove_top_level(storage, emptied_tops, notes)
    return removed, notes


def _empty_dir_below(storage: Storage, directory: str) -> str | None:
    """An empty directory at any depth below `directory`, or None."""
    for sub in storage.list_subdirs(directory):
        inner = storage.list_subdirs(sub)
        if not inner and not storage.list_dir(sub):
            return sub
        found = _empty_dir_below(storage, sub)
        if found is not None:
            return found
    return None


def _remove_top_level(storage: Storage, tops: list[str], notes: list[str]) -> list[str]:
    """Remove empty top-level directories.

    `Storage` can only remove the empty directories *below* a directory, so for these the
    sweep has to start at the root. It runs only when the log directory holds no empty
    directory, so that nothing under `_delta_log` is ever touched.
    """
    blocker = _empty_dir_below(storage, LOG_DIR)
    if blocker is not None:
        notes.append(
            f"empty directories {tops} were left in place: removing them would also remove "
            f"the empty log directory {blocker}"
        )
        return []
    return storage.remove_empty_dirs("")


def vacuum(
    table_or_storage: Any,
    *,
    retention_hours: float | None = None,
    force_retention: bool = False,
    lite: bool = False,
    dry_run: bool = False,
    clock: Clock | None = None,
    now_ms: int | None = None,
    engine: Engine | None = None,
    storage_options: Mapping[str, Any] | None = None,
    allow_catalog_managed: bool = False,
) -> VacuumResult:
    """Delete files the table no longer references once they are older than the retention.

    Args:
        table_or_storage: A `DeltaTable`, a `Storage`, or a table URI.
        retention_hours: Retention instead of `delta.deletedFileRetentionDuration`
            (default 1 week).
        force_retention: Allow a retention shorter than the table's (and a log retention
            shorter than the file retention).
        lite: Use expired tombstones from the log instead of listing the table.
        dry_run: Only report what would be deleted.
        clock: The clock (`delta_ops.clock`), read once at the start (default: the system
            clock).
        now_ms: The current time in ms since the epoch, instead of a clock.
        engine: Where listing and deleting run (default: `LocalEngine`).
        storage_options: Used when `table_or_storage` is a URI.
        allow_catalog_managed: Accept a catalog-managed table (`catalogManaged` feature):
            only when the catalog that owns it is known not to need the files.

    Raises:
        ValueError: Both `clock` and `now_ms` are given.
        UnsupportedFeatureError: The table has reader or writer features this tool does not
            know (nothing listed, nothing deleted); `features` names them.
        RetentionError: The retention is unsafe (see `retention_for`).
        UnsafeDeletionError: A file chosen for deletion could not be proven unreferenced
            and inside the root (nothing deleted).
        StorageError: Listing or deleting failed (a re-run finishes the job).
    """
    now = start_time(clock, now_ms, operation="vacuum")
    storage = Storage.of(table_or_storage, storage_options)
    plan = plan_vacuum(
        storage, now_ms=now, retention_hours=retention_hours, force_retention=force_retention,
        lite=lite, engine=engine, allow_catalog_managed=allow_catalog_managed,
    )
    directories: Sequence[str] = plan.directories
    messages = list(plan.messages)
    if not dry_run:
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
            confirmed = 0
            if sides:
                confirmed += eng.delete_files(storage, sides)
            if mains:
                confirmed += eng.delete_files(storage, mains)
        finally:
            if owned:
                eng.close()
        if confirmed < len(plan.files):
            messages.append(
                f"{len(plan.files) - confirmed} of the {len(plan.files)} files planned were "
                "already gone when deleted (another VACUUM, or a previous run killed midway)"
            )
        removed, notes = _remove_empty_dirs(storage, plan)
        directories = sorted(set(removed), key=lambda c: (-c.count("/"), c))
        messages += notes
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

"""VACUUM's plan: what is deleted, decided once and proven before it is returned.

Spec sections: "VACUUM Protocol Check" (the reader and writer protocol is checked before
anything is listed), "Add File and Remove File" (tombstones expire `deletedFileRetention`
after their `deletionTimestamp`), and the table properties
`delta.deletedFileRetentionDuration` (default 1 week) and `delta.logRetentionDuration`.

The log is read through `log/` only: the segment, protocol and metadata by
`log.segment.protocol_metadata`, the references by `log.replay.references.file_references` (the
references-only replay), and a checkpoint found unusable is left out by
`log.replay.checkpoint_fallback.read_with_usable_checkpoint`, as `load_snapshot` does. Retention
is checked first. A full run lists the table (the engine's `find_unreferenced`); lite mode
probes only the files expired tombstones name. Every file of the plan is then proven
(`proof._prove_deletable`): a dry run and a real run share the plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.engine.base import UNREADABLE_PREFIX, Engine
from delta_ops.engine.local import lists_in_ranges
from delta_ops.engine.progress import LIST, PROBE, Progress
from delta_ops.engine.threads import io_map, io_submit
from delta_ops.errors import (
    CorruptLogError,
    DeltaOpsError,
    LiteVacuumUnavailableError,
    RetentionError,
    StorageError,
    UnsafeDeletionError,
)
from delta_ops.log import (
    STAGED_DIR,
    FileReferences,
    LiteWindow,
    LogSegment,
    ReadOptions,
    SpilledReferences,
    expired_removed_keys,
    kept_version_references,
    lite_window,
    read_deltas,
    read_protocol_metadata,
    read_references,
    read_with_usable_checkpoint,
    staged_references,
)
from delta_ops.maintenance.vacuum.aliases import reached_through_aliases
from delta_ops.maintenance.vacuum.inventory import InventorySource, inventory_candidates
from delta_ops.maintenance.vacuum.listing import (
    _dirs_emptied,
    _has_directories,
    _hidden_path,
    _listing_dirs,
    _select,
    _side_file,
    nested_references,
    nested_tables,
    partition_prefixes,
)
from delta_ops.maintenance.vacuum.proof import _prove_deletable
from delta_ops.protocol.arrays import sorted_strings, string_array
from delta_ops.protocol.filenames import LOG_DIR
from delta_ops.protocol.properties import TableProperties
from delta_ops.protocol.retention import given_retention
from delta_ops.protocol.table_configuration import IctEnablement, TableConfiguration
from delta_ops.storage import FileInfo, Storage

HOUR_MS = 3_600_000
# The bytes of a segment's deltas, by path (`log.replay.references.read_deltas`).
_read_deltas = read_deltas


@dataclass(frozen=True)
class VacuumPlan:
    """What a VACUUM deletes.

    Attributes:
        table: Table root URI.
        version: The table version whose state decided what is kept.
        retention_ms: The retention used.
        delete_before: Files modified before this (ms) and tombstones deleted before it
            are old enough.
        files: Paths to delete, relative to the root, sorted.
        sizes: Their sizes in bytes (same order).
        side_files: The Hadoop side checksums among `files` (deleted before the others).
        directories: Directories this deletion empties (and that go with it), deepest first.
        top_dirs: Top-level directories whose empty subdirectories are swept after deleting.
        lite: Lite mode (no listing).
        messages: Notes (what lite mode cannot see).
        source: Where the files came from: `listing`, `inventory` or `lite`.
        default_retention_ms: The table's `delta.deletedFileRetentionDuration`.
        catalog_managed: The table has the `catalogManaged` feature.
        window_end: The newest commit older than the retention cut-off (None: none is):
            what `_delta_log/_last_vacuum_info` records after a real run.
        partition_prefixes: `<partition column>=` of each partition column (physical
            names too): such directories are data even when their name looks hidden.
    """

    table: str
    version: int
    retention_ms: int
    delete_before: int
    files: tuple[str, ...]
    sizes: tuple[int, ...]
    side_files: frozenset[str]
    directories: tuple[str, ...]
    top_dirs: tuple[str, ...]
    lite: bool
    messages: tuple[str, ...] = ()
    source: str = "listing"
    default_retention_ms: int = 0
    catalog_managed: bool = False
    window_end: int | None = None
    partition_prefixes: tuple[str, ...] = ()


def retention_for(
    props: TableProperties,
    *,
    retention: timedelta | None = None,
    retention_hours: float | None = None,
    force_retention: bool,
    table: str,
    version: int,
) -> timedelta:
    """The retention VACUUM uses, after the safety checks.

    Args:
        props: The table's properties.
        retention: The retention asked for (None: `delta.deletedFileRetentionDuration`).
        retention_hours: The same in hours (give one of the two).
        force_retention: Allow one shorter than the table's.
        table: The table, for errors.
        version: The version read, for errors.

    Raises:
        RetentionError: Not a valid retention (`protocol.retention.check_retention`:
            negative, or beyond `MAX_RETENTION`; hours not a finite number); shorter than
            `delta.deletedFileRetentionDuration`; or `delta.logRetentionDuration` shorter
            than it (the last two unless forced).
        ValueError: Both `retention` and `retention_hours`.
    """
    configured = props.deleted_file_retention
    given = given_retention(
        retention, retention_hours, operation="VACUUM", table=table, version=version
    )
    retention = configured if given is None else given
    hours = retention.total_seconds() / 3600
    if retention < configured and not force_retention:
        raise RetentionError(
            f"refusing to VACUUM with a retention of {hours:g} hours, shorter than "
            f"delta.deletedFileRetentionDuration ({configured.total_seconds() / 3600:g} "
            "hours): files that concurrent readers or writers still use could be deleted. "
            "Use at least that retention, or force it (force_retention=True / "
            "--force-retention) if nothing else is using the table",
            table=table, version=version,
        )
    if props.log_retention < retention and not force_retention:
        raise RetentionError(
            f"refusing to VACUUM: delta.logRetentionDuration "
            f"({props.log_retention.total_seconds() / 3600:g} hours) is shorter than the file "
            f"retention ({hours:g} hours); raise the log retention (or force it with "
            "force_retention=True / --force-retention)",
            table=table, version=version,
        )
    return retention


@dataclass(frozen=True)
class _LogRead:
    """What `plan_vacuum` reads from the log of one segment."""

    config: TableConfiguration
    retention_ms: int
    delete_before: int
    refs: FileReferences | SpilledReferences
    default_retention_ms: int = 0
    catalog_managed: bool = False


def plan_vacuum(
    storage: Storage,
    *,
    now_ms: int,
    retention: timedelta | None = None,
    retention_hours: float | None = None,
    force_retention: bool = False,
    lite: bool = False,
    engine: Engine | None = None,
    allow_catalog_managed: bool = False,
    partition_files: int | None = None,
    buckets: int | None = None,
    inventory: InventorySource | None = None,
    lite_fallback: bool = False,
    progress: Progress | None = None,
    keep_versions: Sequence[int] = (),
) -> VacuumPlan:
    """Decide what VACUUM deletes (reads the log and lists the table; deletes nothing).

    Every file of the plan is proven deletable before the plan is returned (see
    `_prove_deletable`): a dry run and a real run share it. A large table's references
    are spilled by bucket and anti-joined with the listing bucket by bucket
    (`log.replay.reference_buckets`); the plan is the same as the in-memory path's.

    Args:
        storage: The table's storage.
        now_ms: Current time in ms since the epoch.
        retention: See `vacuum`.
        retention_hours: See `vacuum`.
        force_retention: See `vacuum`.
        lite: See `vacuum`.
        engine: See `vacuum`.
        allow_catalog_managed: See `vacuum`.
        partition_files: Estimated file actions from which the references are spilled by
            bucket (`log.replay.reference_buckets.partition_threshold`: default 500,000,
            `$DELTA_OPS_VACUUM_PARTITION_FILES`; 0 spills every table's).
        buckets: The bucket count when spilled (default from the estimate,
            `$DELTA_OPS_VACUUM_BUCKETS`).
        inventory: Take the table's files from this inventory instead of listing it
            (`inventory.py`); read after the protocol check, refused when stale, lacking
            fields or naming paths outside the root.
        lite_fallback: In lite mode, when the log no longer covers the window
            (`log.replay.vacuum_info.lite_window`), list the table instead of refusing (and say so).
        progress: Hears of listing pages and probes (`engine.progress`).
        keep_versions: Versions whose every file (data and DV) is kept whatever the
            retention (`log.kept_version_references`); the proof checks them again
            through their full snapshots.

    Raises:
        UnsupportedFeatureError: Unknown or unsupported reader or writer features (checked
            before any data directory is listed).
        RetentionError: See `retention_for`.
        UnsafeDeletionError: A chosen file cannot be proven unreferenced and inside the
            root, a staged commit cannot be read, or which file a referenced path reaches
            cannot be established (nothing is deleted).
        ValueError: Both `lite` and `inventory`.
        InventoryError: The inventory cannot be used (see `inventory.py`).
        LiteVacuumUnavailableError: Lite mode when the log no longer holds every commit
            since the last VACUUM, without `lite_fallback`.
        VersionNotFoundError: A kept version is not in the table or its log is gone
            (nothing listed, nothing deleted).
    """
    table = storage.root
    kept_versions = tuple(sorted({int(v) for v in keep_versions}))
    if lite and inventory is not None:
        raise ValueError(
            "VACUUM takes its files from the log (lite) or from an inventory, not both"
        )

    def read(segment: LogSegment) -> _LogRead:
        blobs = read_deltas(storage, segment)
        # The protocol check comes before anything else is read or listed.
        found = read_protocol_metadata(storage, segment, blobs=blobs)
        found.ensure_supported(
            "vacuum",
            permitted=frozenset({"catalogManaged"}) if allow_catalog_managed else frozenset(),
        )
        props = found.properties
        used = retention_for(
            props, retention=retention, retention_hours=retention_hours,
            force_retention=force_retention, table=table, version=segment.version,
        )
        retention_ms = int(used.total_seconds() * 1000)
        delete_before = now_ms - retention_ms
        # The staged commits are read beside the references (their listing waits on the
        # store while the references decode); a refusal to read them still comes first.
        staged_task = io_submit(_staged, storage, delete_before, segment.version)
        try:
            refs = read_references(
                storage, segment, blobs, delete_before, threshold=partition_files,
                buckets=buckets, options=ReadOptions.from_env(),
            )
        except BaseException:
            staged_task.result()
            raise
        try:
            staged = staged_task.result()
            if kept_versions:
                staged = staged.union(kept_version_references(storage, kept_versions))
        except BaseException:
            refs.close()
            raise
        if len(staged.keep) or len(staged.written):
            if isinstance(refs, SpilledReferences):
                try:
                    refs.include(staged)
                except BaseException:
                    refs.close()
                    raise
            else:
                refs = refs.union(staged)
        if isinstance(refs, FileReferences) and lists_in_ranges(storage):
            # Each cut of the listing into key ranges takes its bounds from the referenced
            # paths in order (`range_specs`). `reference_parts` sorts them already; this
            # checks that in one pass, and sorts what arrived otherwise, once.
            refs = replace(refs, keep=sorted_strings(refs.keep))
        return _LogRead(
            found, retention_ms, delete_before, refs,
            default_retention_ms=int(props.deleted_file_retention.total_seconds() * 1000),
            catalog_managed=found.is_feature_supported("catalogManaged"),
        )

    # A checkpoint that cannot be read (corrupt, or a V2 one missing a sidecar) is left
    # out, as every reader of the log does; nothing is listed before the log is read.
    segment, log = read_with_usable_checkpoint(storage, read)
    try:
        return _plan(
            storage, segment, log, lite=lite, engine=engine, inventory=inventory,
            lite_fallback=lite_fallback, progress=progress, now_ms=now_ms,
            kept_versions=kept_versions,
        )
    finally:
        log.refs.close()  # spilled references remove their files


def _staged(storage: Storage, delete_before: int, version: int) -> FileReferences:
    """What the staged commits protect (`log.replay.staged_commits`), or a refusal naming the
    file when one cannot be read: a catalog may still publish any of them."""
    try:
        return staged_references(storage, delete_before)
    except (StorageError, CorruptLogError) as exc:
        raise UnsafeDeletionError(
            f"refusing to VACUUM: cannot read the staged commits in {STAGED_DIR} "
            f"({exc.reason}); the catalog may still publish any of them, so the files they "
            "reference must be kept, and which those are is unknown; nothing was deleted",
            table=storage.root, version=version, file=exc.file or STAGED_DIR,
        ) from exc


def _aliased(
    storage: Storage, candidates: list[str], refs: FileReferences | SpilledReferences,
    version: int,
) -> set[str]:
    """The candidates a referenced path reaches through another spelling of a directory
    (`aliases.reached_through_aliases`), or a refusal when that cannot be told."""
    try:
        return reached_through_aliases(storage, candidates, refs.written_chunks())
    except StorageError as exc:
        raise UnsafeDeletionError(
            f"refusing to VACUUM: cannot tell which file a referenced path reaches "
            f"({exc.reason}), so it cannot be proven outside the files to delete; nothing "
            "was deleted",
            table=storage.root, version=version, file=exc.file,
        ) from exc


def _plan(
    storage: Storage,
    segment: LogSegment,
    log: _LogRead,
    *,
    lite: bool,
    engine: Engine | None,
    inventory: InventorySource | None = None,
    lite_fallback: bool = False,
    progress: Progress | None = None,
    now_ms: int = 0,
    kept_versions: tuple[int, ...] = (),
) -> VacuumPlan:
    table = storage.root
    metadata, retention_ms, delete_before, refs = (
        log.config.metadata, log.retention_ms, log.delete_before, log.refs
    )
    prefixes = partition_prefixes(metadata)
    window: LiteWindow | None = None
    window_task = None
    if lite:
        window = lite_window(storage, delete_before, log.config.ict, strict=True)
    else:
        # A full VACUUM needs the window only for its record: read beside the listing.
        window_task = io_submit(_record_window, storage, delete_before, log.config.ict)
    common: dict[str, Any] = {
        "table": table, "version": segment.version, "retention_ms": retention_ms,
        "delete_before": delete_before, "lite": lite,
        "default_retention_ms": log.default_retention_ms,
        "catalog_managed": log.catalog_managed,
        "window_end": None if window is None else window.outside,
        "partition_prefixes": prefixes,
    }
    notes: list[str] = []
    if kept_versions:
        notes.append(
            "kept every data and deletion vector file of version(s) "
            + ", ".join(map(str, kept_versions)) + ", whatever the retention"
        )
    if lite and window is not None:
        if window.covered:
            plan = _plan_lite(
                storage, refs, prefixes, common, segment.version, window, progress
            )
            _prove_deletable(storage, plan.files, refs, version=segment.version,
                             keep_versions=kept_versions)
            return replace(plan, messages=(*notes, *plan.messages))
        reason = window.gap()
        if not lite_fallback:
            raise LiteVacuumUnavailableError(
                f"VACUUM LITE cannot see every file a full VACUUM would delete: {reason}; "
                "nothing was deleted. Run a full VACUUM once (it lists the table and records "
                "_delta_log/_last_vacuum_info, after which lite works again)",
                table=table, version=segment.version,
            )
        notes.append(f"lite mode fell back to a full listing: {reason}")
        common["lite"] = False
    if inventory is not None:
        found, dirs, inv_notes = inventory_candidates(
            storage, inventory, refs, prefixes, now_ms=now_ms, delete_before=delete_before,
            progress=progress,
        )
        notes += inv_notes
        common["source"] = "inventory"
    else:
        owned = engine is None
        eng = engine
        if eng is None:
            from delta_ops.engine.local import LocalEngine

            eng = LocalEngine()
        try:
            dirs = _listing_dirs(storage, prefixes, refs.keep)
            # Only when asked: an Engine written before `progress` existed still works.
            extra = {} if progress is None else {"progress": progress}
            if progress is not None:
                progress.begin(LIST)
            found = eng.find_unreferenced(storage, dirs, refs.keep, delete_before, **extra)
            if progress is not None:
                progress.end(LIST)
        finally:
            if owned:
                eng.close()
    paths = found.column("path").to_pylist()
    sizes = found.column("size").to_pylist()
    unreadable = [p[len(UNREADABLE_PREFIX):] for p in paths if p.startswith(UNREADABLE_PREFIX)]
    if unreadable:
        keep_rows = [i for i, p in enumerate(paths) if not p.startswith(UNREADABLE_PREFIX)]
        paths = [paths[i] for i in keep_rows]
        sizes = [sizes[i] for i in keep_rows]
    # A legal POSIX name the storage layer refuses to address (a backslash is a separator
    # elsewhere): left and named, not a refusal of the whole VACUUM.
    unsafe = [p for p in paths if "\\" in p]
    if unsafe:
        keep_rows = [i for i, p in enumerate(paths) if "\\" not in p]
        paths = [paths[i] for i in keep_rows]
        sizes = [sizes[i] for i in keep_rows]
    aliased = _aliased(storage, paths, refs, segment.version)
    if aliased:
        keep_rows = [i for i, p in enumerate(paths) if p not in aliased]
        paths = [paths[i] for i in keep_rows]
        sizes = [sizes[i] for i in keep_rows]
    chosen, side_idx = _select(paths, prefixes)
    idx = sorted(set(chosen) | set(side_idx))
    nested = nested_tables(storage, [paths[i] for i in idx], prefixes, paths,
                           partitions_too=inventory is not None)
    if nested:
        # Another table's files: its own log names them, not this one's.
        below = tuple(f"{d}/" for d in nested)
        left = sum(1 for i in idx if paths[i].startswith(below))
        idx = [i for i in idx if not paths[i].startswith(below)]
        side_idx = [i for i in side_idx if not paths[i].startswith(below)]
        shown = ", ".join(f"{d}/{LOG_DIR}" for d in nested[:5])
        more = f" and {len(nested) - 5} more" if len(nested) > 5 else ""
        notes.append(
            f"left {left} file(s) of Delta tables nested in this one ({shown}{more}): "
            "their own logs name them, not this table's; VACUUM each such table on its own"
        )
        named = nested_references(storage, nested, version=segment.version)
        cloned = [i for i in idx if paths[i] in named]
        if cloned:
            idx = [i for i in idx if paths[i] not in named]
            side_idx = [i for i in side_idx if paths[i] not in named]
            notes.append(
                f"left {len(cloned)} file(s) that tables nested in this one name by absolute "
                f"paths (a shallow clone's files; first: {paths[cloned[0]]})"
            )
    files = [paths[i] for i in idx]
    _prove_deletable(storage, files, refs, version=segment.version,
                     keep_versions=kept_versions)
    messages: list[str] = list(notes)
    if unreadable:
        shown = ", ".join(sorted(unreadable)[:20])
        more = f" and {len(unreadable) - 20} more" if len(unreadable) > 20 else ""
        messages.append(
            f"left {len(unreadable)} file(s) whose names are not valid UTF-8 (a Delta log "
            f"cannot name them; never deleted, delete by hand if unused): {shown}{more}"
        )
    if unsafe:
        messages.append(
            f"left {len(unsafe)} file(s) whose names hold a backslash (a path separator on "
            "other systems: delta_ops never deletes such a name; delete by hand if unused): "
            + ", ".join(sorted(unsafe)[:20]) + (" and more" if len(unsafe) > 20 else ""))
    if _has_directories(storage):
        linked = sorted(
            set(storage.list_subdirs("")) - set(storage.list_subdirs("", follow_symlinks=False))
        )
        if linked:
            messages.append(
                "symbolic links to directories were neither followed nor deleted: "
                + ", ".join(linked)
            )
    if window_task is not None:
        window = window_task.result()
        common["window_end"] = None if window is None else window.outside
    return VacuumPlan(
        **common,
        files=tuple(files),
        sizes=tuple(sizes[i] for i in idx),
        side_files=frozenset(paths[i] for i in side_idx),
        directories=tuple(_dirs_emptied(storage, files, refs.keep_chunks())),
        top_dirs=tuple(d for d in dirs if d),
        messages=tuple(messages),
    )


def _record_window(
    storage: Storage, delete_before: int, ict: IctEnablement
) -> LiteWindow | None:
    """The lite window a full VACUUM records, or None when it cannot be read (a full
    VACUUM does not need it, and then records nothing)."""
    try:
        return lite_window(storage, delete_before, ict, strict=False)
    except DeltaOpsError:
        return None


def _plan_lite(
    storage: Storage,
    refs: FileReferences | SpilledReferences,
    prefixes: tuple[str, ...],
    common: dict[str, Any],
    version: int,
    window: LiteWindow | None = None,
    progress: Progress | None = None,
) -> VacuumPlan:
    expired = refs.expired_keys()
    if window is not None and window.outside is not None and window.start <= window.outside:
        # The removes of the window's commits (as delta-spark's lite reads them): those a
        # checkpoint may have dropped from the state. Still referenced ones stay.
        removed = expired_removed_keys(
            storage, window.start, window.outside, common["delete_before"]
        )
        if len(removed):
            named = pc.is_in(removed, value_set=string_array([]))
            for keep in refs.keep_chunks():
                if len(keep):
                    named = pc.or_(named, pc.is_in(removed, value_set=keep.cast(pa.string())))
            expired = pc.unique(pa.concat_arrays([expired, removed.filter(pc.invert(named))]))
    candidates = sorted(
        p for p in expired.to_pylist()
        if not p.startswith(f"{LOG_DIR}/") and not _hidden_path(p, prefixes)
    )
    aliased = _aliased(storage, candidates, refs, version)
    candidates = [p for p in candidates if p not in aliased]
    probes = candidates + [_side_file(p) for p in candidates]
    infos: list[FileInfo | None] = []
    if probes:
        if progress is not None:
            progress.begin(PROBE, total_files=len(probes))

        def probe(path: str) -> FileInfo | None:
            got = storage.info(path)
            if progress is not None:
                progress.advance(PROBE, files=1, bytes=0 if got is None else max(got.size, 0))
            return got

        infos = io_map(probe, probes)
        if progress is not None:
            progress.end(PROBE)
    old = {
        p: info for p, info in zip(probes, infos, strict=True)
        if info is not None and info.modification_time < common["delete_before"]
    }
    chosen = [p for p in candidates if p in old]
    sides = [s for p in chosen if (s := _side_file(p)) in old]
    files = sorted(chosen + sides)
    messages = (
        "lite mode: only files named by expired tombstones (in the log state and in the "
        "removes of the commits since the last VACUUM) and their deletion vector files were "
        "considered; it cannot see files never committed (failed or aborted writes) or "
        "change data files (_change_data); run a full VACUUM to remove those",
    )
    return VacuumPlan(
        **{**common, "source": "lite"},
        files=tuple(files),
        sizes=tuple(old[p].size for p in files),
        side_files=frozenset(sides),
        directories=tuple(_dirs_emptied(storage, files, refs.keep_chunks())),
        top_dirs=tuple(sorted({p.split("/", 1)[0] for p in files if "/" in p})),
        messages=messages,
    )

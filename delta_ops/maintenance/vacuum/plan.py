"""VACUUM's plan: what is deleted, decided once and proven before it is returned.

Spec sections: "VACUUM Protocol Check" (the reader and writer protocol is checked before
anything is listed), "Add File and Remove File" (tombstones expire `deletedFileRetention`
after their `deletionTimestamp`), and the table properties
`delta.deletedFileRetentionDuration` (default 1 week) and `delta.logRetentionDuration`.

The log is read through `log/` only: the segment, protocol and metadata by
`log.protocol_metadata`, the references by `log.references.file_references` (the
references-only replay), and a checkpoint found unusable is left out by
`log.checkpoint_fallback.read_with_usable_checkpoint`, as `load_snapshot` does. Retention
is checked first. A full run lists the table (the engine's `find_unreferenced`); lite mode
probes only the files expired tombstones name. Every file of the plan is then proven
(`proof._prove_deletable`): a dry run and a real run share the plan.
"""

from __future__ import annotations

import math
import numbers
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from delta_ops.engine.base import UNREADABLE_PREFIX, Engine
from delta_ops.errors import RetentionError
from delta_ops.log.checkpoint_fallback import read_with_usable_checkpoint
from delta_ops.log.protocol_metadata import read_protocol_metadata
from delta_ops.log.reference_buckets import SpilledReferences, read_references
from delta_ops.log.references import FileReferences, read_deltas
from delta_ops.log.segment import LogSegment
from delta_ops.maintenance.vacuum.listing import (
    _dirs_emptied,
    _has_directories,
    _hidden_path,
    _listing_dirs,
    _select,
    _side_file,
    partition_prefixes,
)
from delta_ops.maintenance.vacuum.proof import _prove_deletable
from delta_ops.protocol import features
from delta_ops.protocol.actions import Metadata
from delta_ops.protocol.filenames import LOG_DIR
from delta_ops.protocol.properties import TableProperties
from delta_ops.storage import FileInfo, Storage

HOUR_MS = 3_600_000
# The longest retention accepted (100,000 years): beyond it, times in ms since the epoch
# and `timedelta` stop being exact or overflow.
_MAX_RETENTION_HOURS = 100_000 * 8766
_IO_THREADS = 16

# The bytes of a segment's deltas, by path (`log.references.read_deltas`).
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


def retention_for(
    props: TableProperties,
    *,
    retention_hours: float | None,
    force_retention: bool,
    table: str,
    version: int,
) -> timedelta:
    """The retention VACUUM uses, after the safety checks.

    Raises:
        RetentionError: Not a finite number of hours, negative or beyond 100,000 years;
            shorter than `delta.deletedFileRetentionDuration`; or
            `delta.logRetentionDuration` shorter than it (the last two unless forced).
    """
    configured = props.deleted_file_retention
    if retention_hours is None:
        retention = configured
    else:
        if isinstance(retention_hours, bool) or not isinstance(retention_hours, numbers.Real):
            raise RetentionError(
                f"VACUUM retention must be a number of hours, got "
                f"{type(retention_hours).__name__}",
                table=table, version=version,
            )
        if not math.isfinite(retention_hours):
            raise RetentionError(
                f"VACUUM retention must be a finite number of hours, got {retention_hours!r}",
                table=table, version=version,
            )
        if retention_hours < 0:
            raise RetentionError(
                f"VACUUM retention cannot be negative ({retention_hours} hours)",
                table=table, version=version,
            )
        if retention_hours > _MAX_RETENTION_HOURS:
            raise RetentionError(
                f"VACUUM retention of {retention_hours:g} hours is longer than "
                f"{_MAX_RETENTION_HOURS:g} hours (100,000 years), the most it can express",
                table=table, version=version,
            )
        retention = timedelta(hours=retention_hours)
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

    metadata: Metadata
    retention_ms: int
    delete_before: int
    refs: FileReferences | SpilledReferences


def plan_vacuum(
    storage: Storage,
    *,
    now_ms: int,
    retention_hours: float | None = None,
    force_retention: bool = False,
    lite: bool = False,
    engine: Engine | None = None,
    allow_catalog_managed: bool = False,
    partition_files: int | None = None,
    buckets: int | None = None,
) -> VacuumPlan:
    """Decide what VACUUM deletes (reads the log and lists the table; deletes nothing).

    Every file of the plan is proven deletable before the plan is returned (see
    `_prove_deletable`): a dry run and a real run share it. A large table's references
    are spilled by bucket and anti-joined with the listing bucket by bucket
    (`log.reference_buckets`); the plan is the same as the in-memory path's.

    Args:
        storage: The table's storage.
        now_ms: Current time in ms since the epoch.
        retention_hours: See `vacuum`.
        force_retention: See `vacuum`.
        lite: See `vacuum`.
        engine: See `vacuum`.
        allow_catalog_managed: See `vacuum`.
        partition_files: Estimated file actions from which the references are spilled by
            bucket (`log.reference_buckets.partition_threshold`: default 500,000,
            `$DELTA_OPS_VACUUM_PARTITION_FILES`; 0 spills every table's).
        buckets: The bucket count when spilled (default from the estimate,
            `$DELTA_OPS_VACUUM_BUCKETS`).

    Raises:
        UnsupportedFeatureError: Unknown or unsupported reader or writer features (checked
            before any data directory is listed).
        RetentionError: See `retention_for`.
        UnsafeDeletionError: A chosen file cannot be proven unreferenced and inside the
            root (nothing is deleted).
    """
    table = storage.root

    def read(segment: LogSegment) -> _LogRead:
        blobs = read_deltas(storage, segment)
        # The protocol check comes before anything else is read or listed.
        found = read_protocol_metadata(storage, segment, blobs=blobs)
        features.ensure_supported(
            found.protocol, "vacuum", table=table, version=segment.version,
            permitted=frozenset({"catalogManaged"}) if allow_catalog_managed else frozenset(),
        )
        props = TableProperties.from_configuration(
            found.metadata.configuration, table=table, version=segment.version
        )
        retention = retention_for(
            props, retention_hours=retention_hours, force_retention=force_retention,
            table=table, version=segment.version,
        )
        retention_ms = int(retention.total_seconds() * 1000)
        delete_before = now_ms - retention_ms
        refs = read_references(
            storage, segment, blobs, delete_before, threshold=partition_files, buckets=buckets
        )
        return _LogRead(found.metadata, retention_ms, delete_before, refs)

    # A checkpoint that cannot be read (corrupt, or a V2 one missing a sidecar) is left
    # out, as every reader of the log does; nothing is listed before the log is read.
    segment, log = read_with_usable_checkpoint(storage, read)
    try:
        return _plan(storage, segment, log, lite=lite, engine=engine)
    finally:
        log.refs.close()  # spilled references remove their files


def _plan(
    storage: Storage, segment: LogSegment, log: _LogRead, *, lite: bool, engine: Engine | None
) -> VacuumPlan:
    table = storage.root
    metadata, retention_ms, delete_before, refs = (
        log.metadata, log.retention_ms, log.delete_before, log.refs
    )
    prefixes = partition_prefixes(metadata)
    common = {
        "table": table, "version": segment.version, "retention_ms": retention_ms,
        "delete_before": delete_before, "lite": lite,
    }
    if lite:
        plan = _plan_lite(storage, refs, prefixes, common)
        _prove_deletable(storage, plan.files, refs, version=segment.version)
        return plan
    owned = engine is None
    eng = engine
    if eng is None:
        from delta_ops.engine.local import LocalEngine

        eng = LocalEngine()
    try:
        dirs = _listing_dirs(storage, prefixes, refs.keep)
        found = eng.find_unreferenced(storage, dirs, refs.keep, delete_before)
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
    chosen, side_idx = _select(paths, prefixes)
    idx = sorted(set(chosen) | set(side_idx))
    files = [paths[i] for i in idx]
    _prove_deletable(storage, files, refs, version=segment.version)
    messages: list[str] = []
    if unreadable:
        shown = ", ".join(sorted(unreadable)[:20])
        more = f" and {len(unreadable) - 20} more" if len(unreadable) > 20 else ""
        messages.append(
            f"left {len(unreadable)} file(s) whose names are not valid UTF-8 (a Delta log "
            f"cannot name them; never deleted, delete by hand if unused): {shown}{more}"
        )
    if _has_directories(storage):
        linked = sorted(
            set(storage.list_subdirs("")) - set(storage.list_subdirs("", follow_symlinks=False))
        )
        if linked:
            messages.append(
                "symbolic links to directories were neither followed nor deleted: "
                + ", ".join(linked)
            )
    return VacuumPlan(
        **common,
        files=tuple(files),
        sizes=tuple(sizes[i] for i in idx),
        side_files=frozenset(paths[i] for i in side_idx),
        directories=tuple(_dirs_emptied(storage, files, refs.keep_chunks())),
        top_dirs=tuple(d for d in dirs if d),
        messages=tuple(messages),
    )


def _plan_lite(
    storage: Storage,
    refs: FileReferences | SpilledReferences,
    prefixes: tuple[str, ...],
    common: dict[str, Any],
) -> VacuumPlan:
    candidates = [
        p for p in refs.expired_keys().to_pylist()
        if not p.startswith(f"{LOG_DIR}/") and not _hidden_path(p, prefixes)
    ]
    probes = candidates + [_side_file(p) for p in candidates]
    infos: list[FileInfo | None] = []
    if probes:
        with ThreadPoolExecutor(min(_IO_THREADS, len(probes))) as pool:
            infos = list(pool.map(storage.info, probes))
    old = {
        p: info for p, info in zip(probes, infos, strict=True)
        if info is not None and info.modification_time < common["delete_before"]
    }
    chosen = [p for p in candidates if p in old]
    sides = [s for p in chosen if (s := _side_file(p)) in old]
    files = sorted(chosen + sides)
    messages = (
        "lite mode: only files named by expired tombstones still in the log state (and "
        "their deletion vector files) were considered; it cannot see files never committed "
        "(failed or aborted writes), files whose tombstones were already dropped from "
        "checkpoints, or change data files (_change_data); run a full VACUUM to remove those",
    )
    return VacuumPlan(
        **common,
        files=tuple(files),
        sizes=tuple(old[p].size for p in files),
        side_files=frozenset(sides),
        directories=tuple(_dirs_emptied(storage, files, refs.keep_chunks())),
        top_dirs=tuple(sorted({p.split("/", 1)[0] for p in files if "/" in p})),
        messages=messages,
    )

"""Metadata cleanup: delete expired commits, checkpoints, checksums, compactions and sidecars.

Spec sections: "Metadata Cleanup" (the algorithm below), "Checkpoints" ("Metadata cleanup
MUST provide a checkpoint for the oldest kept table version"), "Last Checkpoint File",
"V2 Checkpoint Table Feature" (sidecars), "Log Compaction Files", "Version Checksum File",
"In-Commit Timestamps" (commit timestamps), and the table properties
`delta.logRetentionDuration` (default 30 days) and `delta.enableExpiredLogCleanup`.

The algorithm, as the spec words it:

1. `cutOffTimestamp` is midnight UTC of (now - log retention). `cutoffCommit` is the newest
   commit not newer than it. Commit timestamps are in-commit timestamps from the version
   where they are enabled, else commit file modification times made monotonic as Spark does
   (a commit never counts as older than the one before it).
2. `cutOffCheckpoint` is the newest complete checkpoint not newer than `cutoffCommit`
   (multi-part: every part present; V2: every sidecar present). Before anything is deleted
   it is read in full with the log reader (every part and sidecar decoded, protocol and
   metaData reconstructed); one that does not read is passed over for the next older one,
   which then decides what goes. When no checkpoint at or before the cutoff reads, cleanup
   refuses (CorruptLogError naming the checkpoint file) instead of deleting.
3. Delete every commit, checkpoint (any kind), version checksum (`.crc`) and Hadoop side
   checksum (`.<name>.crc`) older than `cutOffCheckpoint`, and every compaction file whose
   start version is at or below it.
4. Sidecars: keep those referenced by any remaining checkpoint and those younger than one
   day (midnight UTC); delete the rest.

Before deleting, the plan is proven: the log left behind must still reach the latest version
from the kept checkpoint (no commit it needs is on the list). A retention shorter than
`delta.logRetentionDuration` is refused unless forced (`force_retention`). Temporary files a
killed writer left in `_delta_log` (`.<name>.<uuid>.tmp`, see `Storage`) are removed once
they are older than the log retention (and at least one day old: a live writer's are not).

Crash safety: `_last_checkpoint` is moved forward first when it names a checkpoint that is
about to go (through the log's forward-only writer: a newer one written meanwhile is kept,
or put back when it was written in the instant between our read and our write); then
files go oldest version first (within a version: compactions, the commit, its checksum, and
the checkpoint last, each Hadoop side file just before its file); sidecars and writers'
temporary files go last. Every version from `cutOffCheckpoint` on stays readable at every
step, and a re-run finishes an interrupted run.

No full snapshot is built: a listing of `_delta_log`, the protocol and metadata (the log's
light replay, `delta_ops.log.protocol_metadata`), the checkpoint kept (read in full) and the
sidecar references of the other checkpoints that are kept.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from delta_ops.clock import Clock
from delta_ops.clock import now_ms as read_clock
from delta_ops.errors import CorruptLogError, DeltaOpsError, RetentionError
from delta_ops.log.checkpoint_files import (
    SIDECARS,
    inspect_checkpoint,
    read_sidecar_references,
    verify_checkpoint,
)
from delta_ops.log.last_checkpoint import advance_last_checkpoint, read_last_checkpoint
from delta_ops.log.protocol_metadata import read_protocol_metadata
from delta_ops.log.segment import (
    CheckpointFiles,
    LogSegment,
    _complete_checkpoints,
    build_log_segment,
)
from delta_ops.log.timestamps import IctEnablement, monotonize, read_in_commit_timestamp
from delta_ops.protocol import features, filenames
from delta_ops.protocol.actions import Metadata
from delta_ops.protocol.filenames import LAST_CHECKPOINT, LOG_DIR, LogFile, LogFileKind
from delta_ops.protocol.last_checkpoint import LastCheckpoint, build_last_checkpoint
from delta_ops.protocol.properties import TableProperties
from delta_ops.storage import FileInfo, Storage

__all__ = [
    "CleanupPlan",
    "CleanupResult",
    "DAY_MS",
    "apply_cleanup",
    "checked_retention",
    "cleanup_metadata",
    "is_writer_temp_file",
    "midnight_utc",
    "plan_cleanup",
]

DAY_MS = 86_400_000
# Deletion order inside one version: compactions, the commit, its checksum, checkpoints.
_KIND_RANK = {
    LogFileKind.COMPACTION: 0,
    LogFileKind.COMMIT: 1,
    LogFileKind.CHECKSUM: 2,
    LogFileKind.CHECKPOINT_MULTIPART: 3,
    LogFileKind.CHECKPOINT_CLASSIC: 3,
    LogFileKind.CHECKPOINT_UUID: 3,
}


# A writer's temporary file: `.<target name>.<uuid>.tmp` (`Storage` writes a 32-digit hex
# uuid; Hadoop-based writers the dashed form). No Delta log file starts with "." and ends
# with ".tmp" (Hadoop side checksums are `.<name>.crc`), and the target must itself be a
# log file name, `_last_checkpoint` or (under `_sidecars`) a Parquet file.
_TEMP = re.compile(
    r"\.(?P<target>[^/]+)\."
    r"(?:[0-9a-f]{32}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
    r"\.tmp"
)


def is_writer_temp_file(name: str, *, sidecar_dir: bool = False) -> bool:
    """Whether `name` (a bare file name in `_delta_log`, or in `_delta_log/_sidecars` when
    `sidecar_dir`) is a temporary file a writer creates before publishing its target."""
    m = _TEMP.fullmatch(name)
    if m is None:
        return False
    target = m.group("target")
    if target.startswith("."):
        return False
    if sidecar_dir:
        return target.endswith(".parquet") and not target.startswith("_")
    return target == LAST_CHECKPOINT or filenames.parse(target) is not None


def midnight_utc(ms: int) -> int:
    """The start (00:00 UTC) of the day holding `ms` milliseconds since the epoch."""
    return ms - ms % DAY_MS


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat()


# --------------------------------------------------------------------------------------
# The checkpoints cleanup relies on (read by the log's inspector, delta_ops.log.checkpoint_files)
# --------------------------------------------------------------------------------------


def _last_checkpoint_for(storage: Storage, checkpoint: CheckpointFiles) -> LastCheckpoint:
    """A `_last_checkpoint` describing an existing checkpoint (its sidecars counted in, as
    Spark counts them)."""
    inspection = inspect_checkpoint(storage, checkpoint)
    return build_last_checkpoint(
        version=checkpoint.version, size=inspection.num_actions,
        size_in_bytes=inspection.size_in_bytes, num_of_add_files=inspection.num_adds,
        parts=inspection.parts,
    )


# --------------------------------------------------------------------------------------
# Commit timestamps and the cutoff commit
# --------------------------------------------------------------------------------------


def cutoff_commit(
    storage: Storage,
    commits: Sequence[tuple[int, FileInfo]],
    ict: IctEnablement,
    cutoff_ms: int,
) -> int | None:
    """The newest commit whose timestamp is not after `cutoff_ms` (None when none is).

    Commits before the in-commit-timestamp enablement version use their files'
    modification times, made monotonic; later ones their `inCommitTimestamp` (monotonic
    by the spec), found by binary search so only a few commits are read.

    Args:
        storage: The table's storage.
        commits: (version, file) of every commit present, oldest first.
        ict: Whether and since when in-commit timestamps are enabled.
        cutoff_ms: The cutoff, milliseconds since the epoch.
    """
    versions = [v for v, _ in commits]
    split = len(versions)
    if ict.enabled:
        split = bisect.bisect_left(versions, ict.version or 0)
    if split < len(versions):
        def ts(i: int) -> int:
            return read_in_commit_timestamp(storage, versions[i])

        if ts(split) <= cutoff_ms:
            lo, hi = split, len(versions) - 1
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if ts(mid) <= cutoff_ms:
                    lo = mid
                else:
                    hi = mid - 1
            return versions[lo]
    times = monotonize([info.modification_time for _, info in commits[:split]])
    idx = bisect.bisect_right(times, cutoff_ms) - 1
    return versions[idx] if idx >= 0 else None


# --------------------------------------------------------------------------------------
# Plan and apply
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CleanupPlan:
    """What a cleanup run deletes, and in which order.

    Attributes:
        table: Table root URI.
        version: The latest version of the table.
        enabled: `delta.enableExpiredLogCleanup`.
        retention_ms: The log retention used.
        cutoff_timestamp: `cutOffTimestamp` (ms), None when cleanup is disabled.
        cutoff_version: `cutoffCommit`, None when no commit is old enough.
        checkpoint_version: `cutOffCheckpoint`, None when none qualifies.
        write_checkpoint_at: The version a checkpoint must be written at first
            (`ensure_checkpoint`), or None.
        files: Paths to delete, relative to the table root, in deletion order.
        last_checkpoint: New `_last_checkpoint` to write before deleting, or None.
        reason: Why nothing is deleted, when nothing is.
        messages: Other things worth telling (skipped checkpoints, sidecar cleanup).
        temp_files: Temporary files killed writers left in `_delta_log`, older than the
            retention, to delete after `files`.
    """

    table: str
    version: int
    enabled: bool
    retention_ms: int
    cutoff_timestamp: int | None
    cutoff_version: int | None
    checkpoint_version: int | None
    write_checkpoint_at: int | None
    files: tuple[str, ...]
    last_checkpoint: LastCheckpoint | None
    reason: str | None
    messages: tuple[str, ...] = ()
    temp_files: tuple[str, ...] = ()


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
        out = asdict(self)
        out["files"] = list(self.files)
        out["messages"] = list(self.messages)
        out["temp_files"] = list(self.temp_files)
        return out


@dataclass(frozen=True)
class _Listing:
    """`_delta_log` parsed: log files, Hadoop side checksums, sidecars, writers' temp files."""

    log: list[tuple[LogFile, FileInfo]]
    side: list[tuple[LogFile, FileInfo]]  # (the main file's parse, the side file)
    sidecars: dict[str, FileInfo]  # name -> file
    sidecar_side: dict[str, FileInfo]  # main sidecar name -> its side file
    temp: list[FileInfo]  # `.<name>.<uuid>.tmp` left by writers (log and sidecar folders)


def _list(storage: Storage) -> _Listing:
    log: list[tuple[LogFile, FileInfo]] = []
    side: list[tuple[LogFile, FileInfo]] = []
    temp: list[FileInfo] = []
    for info in storage.list_dir(LOG_DIR):
        name = info.path.rsplit("/", 1)[-1]
        lf = filenames.parse(name)
        if lf is not None:
            log.append((lf, info))
        elif name.startswith(".") and name.endswith(".crc"):
            main = filenames.parse(name[1:-4])
            if main is not None:
                side.append((main, info))
        elif is_writer_temp_file(name):
            temp.append(info)
    sidecars: dict[str, FileInfo] = {}
    sidecar_side: dict[str, FileInfo] = {}
    for info in storage.list_dir(SIDECARS):
        name = info.path.rsplit("/", 1)[-1]
        if name.startswith(".") and name.endswith(".crc"):
            sidecar_side[name[1:-4]] = info
        elif is_writer_temp_file(name, sidecar_dir=True):
            temp.append(info)
        elif not name.startswith((".", "_")):
            sidecars[name] = info
    return _Listing(log, side, sidecars, sidecar_side, temp)


def _expired(lf: LogFile, checkpoint_version: int) -> bool:
    """The spec's rule for log files: older than the cutoff checkpoint (compactions: start
    version at or below it)."""
    if lf.kind == LogFileKind.COMPACTION:
        return lf.start_version <= checkpoint_version
    return lf.version < checkpoint_version


def _order_key(lf: LogFile, is_side: bool) -> tuple:
    version = lf.start_version if lf.kind == LogFileKind.COMPACTION else lf.version
    return (version, _KIND_RANK[lf.kind], lf.name, 0 if is_side else 1)


def _retention_ms(retention: timedelta) -> int:
    ms = int(retention.total_seconds() * 1000)
    if ms < 0:
        raise ValueError(f"log retention cannot be negative: {retention}")
    return ms


def _hours(td: timedelta) -> str:
    return f"{td.total_seconds() / 3600:g} hours"


def checked_retention(
    props: TableProperties,
    retention: timedelta | None,
    *,
    force_retention: bool,
    table: str,
    version: int,
) -> timedelta:
    """The log retention cleanup uses, after the safety check.

    Raises:
        RetentionError: `retention` is shorter than `delta.logRetentionDuration` and not
            forced.
        ValueError: `retention` is negative.
    """
    configured = props.log_retention
    if retention is None:
        return configured
    _retention_ms(retention)
    if retention < configured and not force_retention:
        raise RetentionError(
            f"refusing to clean up the log with a retention of {_hours(retention)}, shorter "
            f"than delta.logRetentionDuration ({_hours(configured)}): versions readers may "
            "still time travel to, and log files concurrent readers may be reading, would be "
            "deleted. Use at least that retention, or force it with force_retention "
            "(--force-retention on the command line) if nothing needs those versions",
            table=table, version=version,
        )
    return retention


def _latest_protocol_metadata(
    storage: Storage, listing: _Listing
) -> tuple[LogSegment, dict, Metadata]:
    """The latest segment with its protocol and metaData; a checkpoint that cannot be read
    is passed over for an older one (as readers do), never trusted."""
    excluded: set[str] = set()
    first_error: CorruptLogError | None = None
    while True:
        try:
            segment = build_log_segment(
                storage, listing=listing.log, exclude_checkpoints=frozenset(excluded)
            )
        except DeltaOpsError as exc:
            if first_error is None:
                raise
            raise first_error from exc
        try:
            found = read_protocol_metadata(storage, segment)
        except CorruptLogError as exc:
            cp = segment.checkpoint
            if cp is None or exc.file not in {info.path for info in cp.files}:
                raise
            excluded.add(cp.identity)
            first_error = first_error or exc
            continue
        return segment, found.protocol, found.metadata


def _plan_temp_files(listing: _Listing, now_ms: int, retention_ms: int) -> list[str]:
    """Writers' temporary files older than the retention and at least a day old."""
    threshold = now_ms - max(retention_ms, DAY_MS)
    return sorted(info.path for info in listing.temp if info.modification_time < threshold)


def plan_cleanup(
    storage: Storage,
    *,
    now_ms: int,
    retention: timedelta | None = None,
    ensure_checkpoint: bool = False,
    force_retention: bool = False,
    allow_catalog_managed: bool = False,
) -> CleanupPlan:
    """Decide what metadata cleanup deletes (reads the log; writes nothing).

    The checkpoint kept as the oldest version is read in full first; when it cannot be
    read an older one that can is used instead, and the log left behind is checked to reach
    the latest version from it before any deletion is planned.

    Args:
        storage: The table's storage.
        now_ms: Current time, ms since the epoch.
        retention: Log retention to use instead of `delta.logRetentionDuration`.
        ensure_checkpoint: Plan a checkpoint at `cutoffCommit` when there is none there
            (and something older could go); the deletions are planned as if it existed.
        force_retention: Allow a `retention` shorter than `delta.logRetentionDuration`.
        allow_catalog_managed: Clean up a catalog-managed table (only when the managing
            catalog permits metadata cleanup).

    Raises:
        RetentionError: `retention` shorter than the table's log retention, not forced.
        UnsupportedFeatureError: The protocol has features cleanup does not support.
        CorruptLogError: No checkpoint at or before the cutoff can be read (and none is to
            be written), or the log left behind would not reach the latest version; the
            error names the table, version and file.
        NotATableError: No readable Delta log.
    """
    table = storage.root
    listing = _list(storage)
    segment, protocol, metadata = _latest_protocol_metadata(storage, listing)
    features.ensure_supported(
        protocol, "cleanup", table=table, version=segment.version,
        permitted=frozenset({"catalogManaged"}) if allow_catalog_managed else frozenset(),
    )
    props = TableProperties.from_configuration(
        metadata.configuration, table=table, version=segment.version
    )
    retention_ms = _retention_ms(checked_retention(
        props, retention, force_retention=force_retention, table=table, version=segment.version
    ))
    common: dict[str, Any] = {
        "table": table, "version": segment.version, "retention_ms": retention_ms,
        "write_checkpoint_at": None, "files": (), "last_checkpoint": None,
    }
    if not props.enable_expired_log_cleanup:
        return CleanupPlan(
            **common, enabled=False, cutoff_timestamp=None, cutoff_version=None,
            checkpoint_version=None,
            reason="delta.enableExpiredLogCleanup is false: metadata cleanup is disabled for "
            "this table; nothing deleted",
        )
    temp = tuple(_plan_temp_files(listing, now_ms, retention_ms))
    cutoff_ts = midnight_utc(now_ms - retention_ms)
    commits = sorted(
        ((lf.version, info) for lf, info in listing.log if lf.kind == LogFileKind.COMMIT),
        key=lambda c: c[0],
    )
    cutoff_v = cutoff_commit(storage, commits, IctEnablement.from_metadata(metadata), cutoff_ts)
    if cutoff_v is None:
        return CleanupPlan(
            **common, enabled=True, cutoff_timestamp=cutoff_ts, cutoff_version=None,
            checkpoint_version=None, temp_files=temp,
            reason=f"no commit is older than the cutoff {_iso(cutoff_ts)}; nothing deleted",
        )

    messages: list[str] = []
    complete = _complete_checkpoints(listing.log, None)  # newest first
    candidates = [c for c in complete if c.version <= cutoff_v]
    problems: list[CorruptLogError] = []
    checkpoint = _first_usable(storage, candidates, messages, problems)
    checkpoint_v = checkpoint.version if checkpoint is not None else None
    oldest = min(
        (lf.start_version if lf.kind == LogFileKind.COMPACTION else lf.version)
        for lf, _ in listing.log
    )
    write_at = None
    if ensure_checkpoint and checkpoint_v != cutoff_v and oldest < cutoff_v:
        write_at = checkpoint_v = cutoff_v
        messages.append(f"a checkpoint is written at the cutoff version {cutoff_v} first")
    if checkpoint_v is None:
        if problems:
            bad = problems[0]
            raise CorruptLogError(
                f"refusing to clean up: no checkpoint at or before the cutoff version "
                f"{cutoff_v} can be read, so nothing older is provably unneeded; the newest "
                f"one is unusable: {bad.reason}. Nothing was deleted; repair or remove that "
                "checkpoint, or write a new one (ensure_checkpoint / --ensure-checkpoint)",
                table=table, version=bad.version, file=bad.file,
            )
        return CleanupPlan(
            **{**common, "write_checkpoint_at": write_at}, enabled=True,
            cutoff_timestamp=cutoff_ts, cutoff_version=cutoff_v, checkpoint_version=None,
            reason=f"no complete checkpoint at or before the cutoff version {cutoff_v}; the "
            "spec requires one for the oldest kept version, so nothing is deleted (write one "
            "with ensure_checkpoint / --ensure-checkpoint)",
            messages=tuple(messages), temp_files=temp,
        )

    # Log files (and their Hadoop side checksums), oldest first.
    doomed: list[tuple[tuple, str]] = [
        (_order_key(lf, False), info.path)
        for lf, info in listing.log
        if _expired(lf, checkpoint_v)
    ]
    doomed += [
        (_order_key(lf, True), info.path) for lf, info in listing.side if _expired(lf, checkpoint_v)
    ]
    doomed.sort()
    files = [p for _, p in doomed]
    if checkpoint is not None and write_at is None:
        _prove_reachable(storage, listing, complete, checkpoint, set(files), segment.version)

    # _last_checkpoint must never name a checkpoint that is gone.
    last_cp = None
    hint, _problem = read_last_checkpoint(storage)
    if hint is not None and hint.version < checkpoint_v:
        newest = _first_usable(
            storage, [c for c in complete if c.version >= checkpoint_v], [], []
        )
        if newest is not None:
            last_cp = _last_checkpoint_for(storage, newest)
            messages.append(
                f"_last_checkpoint (version {hint.version}) is moved forward to checkpoint "
                f"{newest.version} before anything is deleted"
            )
        else:
            messages.append(
                f"_last_checkpoint (version {hint.version}) will be moved forward once the "
                f"checkpoint at version {write_at} is written"
            )

    files += _plan_sidecars(storage, listing, checkpoint_v, now_ms, messages)
    reason = None
    if not files:
        reason = (
            f"nothing to delete: no log file is older than the checkpoint at version "
            f"{checkpoint_v}, the oldest version kept"
        )
    return CleanupPlan(
        **{**common, "files": tuple(files), "last_checkpoint": last_cp,
           "write_checkpoint_at": write_at},
        enabled=True, cutoff_timestamp=cutoff_ts, cutoff_version=cutoff_v,
        checkpoint_version=checkpoint_v, reason=reason, messages=tuple(messages),
        temp_files=temp,
    )


def _first_usable(
    storage: Storage,
    checkpoints: Sequence[CheckpointFiles],
    messages: list[str],
    problems: list[CorruptLogError],
) -> CheckpointFiles | None:
    """The first checkpoint of `checkpoints` (newest first) that reads in full
    (`verify_checkpoint`: every part and sidecar decoded, protocol and metaData rebuilt)."""
    for cp in checkpoints:
        problem = verify_checkpoint(storage, cp)
        if problem is None:
            return cp
        problems.append(problem)
        messages.append(
            f"checkpoint {cp.identity} is not usable ({problem}); an older one is kept instead"
        )
    return None


def _prove_reachable(
    storage: Storage,
    listing: _Listing,
    complete: Sequence[CheckpointFiles],
    keep: CheckpointFiles,
    doomed: set[str],
    latest: int,
) -> None:
    """Refuse unless the log left behind reaches `latest` from `keep` (validated) through
    commits and compactions alone: then every version from `keep` on can be rebuilt
    whichever other checkpoint turns out to be unreadable."""
    remaining = [(lf, info) for lf, info in listing.log if info.path not in doomed]
    others = frozenset(c.identity for c in complete if c.identity != keep.identity)
    try:
        seg = build_log_segment(storage, listing=remaining, exclude_checkpoints=others)
    except DeltaOpsError as exc:
        raise CorruptLogError(
            f"refusing to clean up: after deleting the planned files the log would not reach "
            f"the latest version {latest} from the checkpoint at version {keep.version}: "
            f"{exc.reason}. Nothing was deleted",
            table=storage.root, version=exc.version, file=exc.file,
        ) from exc
    if (
        seg.checkpoint is None
        or seg.checkpoint.identity != keep.identity
        or seg.version != latest
    ):
        raise CorruptLogError(
            f"refusing to clean up: the log left behind would rebuild version {seg.version} "
            f"from checkpoint {seg.checkpoint_version}, not the latest version {latest} from "
            f"the checkpoint kept at version {keep.version}. Nothing was deleted",
            table=storage.root, version=keep.version, file=keep.files[0].path,
        )


def _plan_sidecars(
    storage: Storage, listing: _Listing, checkpoint_v: int, now_ms: int, messages: list[str]
) -> list[str]:
    """Sidecars referenced by no remaining checkpoint and older than one day (midnight UTC)."""
    threshold = midnight_utc(now_ms) - DAY_MS
    old = {n for n, info in listing.sidecars.items() if info.modification_time < threshold}
    orphan_sides = {
        n for n, info in listing.sidecar_side.items()
        if n not in listing.sidecars and info.modification_time < threshold
    }
    if not old and not orphan_sides:
        return []
    referenced: set[str] = set()  # names below _delta_log/_sidecars
    for lf, info in listing.log:
        if not lf.is_checkpoint or _expired(lf, checkpoint_v):
            continue
        try:
            refs = read_sidecar_references(
                storage, CheckpointFiles(lf.version, lf.kind, (info,), (lf,))
            )
        except CorruptLogError as exc:
            messages.append(
                f"sidecar cleanup skipped: a kept checkpoint cannot be read ({exc})"
            )
            return []
        referenced.update(ref.name for ref in refs)
    out: list[str] = []
    for name in sorted((old - referenced) | orphan_sides):
        side = listing.sidecar_side.get(name)
        if side is not None:
            out.append(side.path)
        if name in listing.sidecars:
            out.append(listing.sidecars[name].path)
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
    table_or_storage: Any,
    *,
    retention: timedelta | None = None,
    ensure_checkpoint: bool = False,
    dry_run: bool = False,
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
            a shorter one than the table's needs `force_retention`.
        ensure_checkpoint: When there is no checkpoint at the cutoff version, write one
            there first, so that everything before it can go.
        dry_run: Only report what would be deleted.
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
        RetentionError: `retention` shorter than the table's log retention, not forced
            (nothing deleted).
        UnsupportedFeatureError: Unknown or unsupported table features (nothing deleted).
        CorruptLogError: No checkpoint at or before the cutoff reads in full (nothing
            deleted); names the table, version and the unreadable file.
        StorageError: A deletion or write failed (files deleted before it stay deleted;
            every kept version is still readable and a re-run finishes the job).
    """
    if clock is not None and now_ms is not None:
        raise ValueError("give clock or now_ms, not both")
    now = int(now_ms) if now_ms is not None else read_clock(clock)
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
    instant between our read and write is put back; see `delta_ops.log.last_checkpoint`),
    then delete `plan.files` one at a time in order (a crash leaves a prefix deleted and the
    rest in place), then the temporary files.

    Returns:
        Whether `_last_checkpoint` was written.
    """
    from delta_ops.maintenance.checkpoint.last_checkpoint import describe_checkpoint

    updated = False
    if plan.last_checkpoint is not None:
        updated = advance_last_checkpoint(
            storage, plan.last_checkpoint, replace_same_version=False,
            describe=describe_checkpoint,
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
        lines.append(f"cutoff      {_iso(result.cutoff_timestamp)} (retention "
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

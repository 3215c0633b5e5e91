"""Plan metadata cleanup: what goes, in which order, proven safe before anything is deleted.

Spec sections: "Metadata Cleanup" (steps 2-5), "Checkpoints" ("Metadata cleanup MUST
provide a checkpoint for the oldest kept table version"), "Last Checkpoint File", "V2
Checkpoint Table Feature" (sidecars). The checkpoints relied on are read through the log's
checkpoint-file inspector (`delta_ops.log.files.checkpoint_files`): the kept one in full
(`verify_checkpoint`), the other kept ones for their sidecar references only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from delta_ops.errors import CorruptLogError, DeltaOpsError
from delta_ops.log import (
    CheckpointFiles,
    LogListing,
    LogSegment,
    build_log_segment,
    inspect_checkpoint,
    list_log_dir,
    read_last_checkpoint,
    read_protocol_metadata,
    read_sidecar_references,
    verify_checkpoint,
)
from delta_ops.log import (
    complete_checkpoints as _complete_checkpoints,
)
from delta_ops.maintenance.cleanup.cutoff import (
    DAY_MS,
    checked_retention,
    cutoff_commit,
    iso_utc,
    midnight_utc,
    retention_to_ms,
)
from delta_ops.maintenance.cleanup.listing import deletion_order_key, expired
from delta_ops.protocol.filenames import LogFileKind
from delta_ops.protocol.last_checkpoint import LastCheckpoint, build_last_checkpoint
from delta_ops.protocol.table_configuration import TableConfiguration
from delta_ops.storage import Storage


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


def _last_checkpoint_for(storage: Storage, checkpoint: CheckpointFiles) -> LastCheckpoint:
    """A `_last_checkpoint` describing an existing checkpoint (its sidecars counted in, as
    Spark counts them)."""
    inspection = inspect_checkpoint(storage, checkpoint)
    return build_last_checkpoint(
        version=checkpoint.version, size=inspection.num_actions,
        size_in_bytes=inspection.size_in_bytes, num_of_add_files=inspection.num_adds,
        parts=inspection.parts,
    )


def _latest_configuration(
    storage: Storage, listing: LogListing
) -> tuple[LogSegment, TableConfiguration]:
    """The latest segment with its configuration; a checkpoint that cannot be read
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
        return segment, found


def _plan_temp_files(listing: LogListing, now_ms: int, retention_ms: int) -> list[str]:
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
    listing = list_log_dir(storage)
    segment, config = _latest_configuration(storage, listing)
    config.ensure_supported(
        "cleanup",
        permitted=frozenset({"catalogManaged"}) if allow_catalog_managed else frozenset(),
    )
    props = config.properties
    retention_ms = retention_to_ms(checked_retention(
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
    cutoff_v = cutoff_commit(storage, commits, config.ict, cutoff_ts)
    if cutoff_v is None:
        return CleanupPlan(
            **common, enabled=True, cutoff_timestamp=cutoff_ts, cutoff_version=None,
            checkpoint_version=None, temp_files=temp,
            reason=f"no commit is older than the cutoff {iso_utc(cutoff_ts)}; nothing deleted",
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
        (deletion_order_key(lf, False), info.path)
        for lf, info in listing.log
        if expired(lf, checkpoint_v)
    ]
    doomed += [
        (deletion_order_key(lf, True), info.path)
        for lf, info in listing.side
        if expired(lf, checkpoint_v)
    ]
    doomed.sort()
    files = [p for _, p in doomed]
    if checkpoint is not None and write_at is None:
        note = _prove_reachable(storage, listing, complete, checkpoint, set(files),
                                segment.version)
        if note:
            messages.append(note)

    # _last_checkpoint must never name a checkpoint that is gone.
    last_cp = None
    hint, problem = read_last_checkpoint(storage)
    # An unusable hint (a checksum that does not match, not JSON) may still name a version
    # a reader trusts: it is replaced like an old one.
    if (hint is not None and hint.version < checkpoint_v) or (hint is None and problem):
        was = f"version {hint.version}" if hint is not None else "unusable"
        newest = _first_usable(
            storage, [c for c in complete if c.version >= checkpoint_v], [], []
        )
        if newest is not None:
            last_cp = _last_checkpoint_for(storage, newest)
            messages.append(
                f"_last_checkpoint ({was}) is moved forward to checkpoint "
                f"{newest.version} before anything is deleted"
            )
        else:
            messages.append(
                f"_last_checkpoint ({was}) will be moved forward once the "
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
    listing: LogListing,
    complete: Sequence[CheckpointFiles],
    keep: CheckpointFiles,
    doomed: set[str],
    latest: int,
) -> str | None:
    """Refuse unless the log left behind reaches `latest` from `keep` (validated) through
    commits and compactions alone: then every version from `keep` on can be rebuilt
    whichever other checkpoint turns out to be unreadable. A gap the log had before (a
    commit missing at a newer checkpoint's version) is no refusal: the note says so."""
    remaining = [(lf, info) for lf, info in listing.log if info.path not in doomed]
    others = frozenset(c.identity for c in complete if c.identity != keep.identity)
    try:
        seg = build_log_segment(storage, listing=remaining, exclude_checkpoints=others)
    except DeltaOpsError as exc:
        if _gap_already_there(storage, listing.log, others, remaining, latest):
            return (f"the log does not reach version {latest} from checkpoint {keep.version} "
                    f"by commits alone ({exc.reason}), before this cleanup as after it: a "
                    "newer checkpoint bridges the gap, and what is deleted lies before it")
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
    return None


def _gap_already_there(
    storage: Storage, log: Sequence[Any], others: frozenset, remaining: Sequence[Any],
    latest: int,
) -> bool:
    """Whether the whole log, before any deletion, fails the same way (a commit missing
    after the kept checkpoint), while the log left behind still reaches `latest` through
    the newer checkpoints: then the deletion makes nothing unreadable that was readable."""
    try:
        build_log_segment(storage, listing=list(log), exclude_checkpoints=others)
        return False
    except DeltaOpsError:
        pass
    try:
        return build_log_segment(storage, listing=list(remaining)).version == latest
    except DeltaOpsError:
        return False


def _plan_sidecars(
    storage: Storage, listing: LogListing, checkpoint_v: int, now_ms: int, messages: list[str]
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
        if not lf.is_checkpoint or expired(lf, checkpoint_v):
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

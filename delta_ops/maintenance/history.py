"""History: each version's `commitInfo`, newest first, read cheaply from what the log keeps.

Spec sections: "Commit Provenance Information" (`commitInfo`: operation, parameters,
metrics, engine, whatever else the writer recorded), "In-Commit Timestamps" (a version's
timestamp is its `inCommitTimestamp` once in-commit timestamps are enabled for it),
"Metadata Cleanup" (old commits may be deleted once a checkpoint covers them).

`_delta_log` is listed once (`log.commit_listing`). Only the commits asked for (the newest
`limit`) are read, side by side on the one I/O pool, and each only up to its `commitInfo`
line (`log.read_commit_info`: a million adds after it are skipped unparsed). When a commit
read carries an `inCommitTimestamp`, the protocol and metadata of the latest version (the
light replay) tell whether in-commit timestamps apply to it.

A version's timestamp, and which one it is (`timestamp_source`):
`inCommitTimestamp` when in-commit timestamps are enabled for that version (and the commit
carries one), else `commitInfo.timestamp` (what every writer records: deltalake's
`history()` reports it), else the commit file's modification time (`modificationTime`).
Spark's DESCRIBE HISTORY shows the file's modification time where we show
`commitInfo.timestamp`; both are in the entry.

Versions below the earliest commit file still present were removed by log cleanup: they
are reported as one range, with the checkpoint that now stands for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from delta_ops.engine.threads import io_map
from delta_ops.errors import DeltaOpsError
from delta_ops.log import (
    CommitListing,
    IctEnablement,
    build_log_segment,
    commit_listing,
    read_commit_info,
    read_protocol_metadata,
)
from delta_ops.storage import FileInfo, Storage, TableLike

__all__ = [
    "HistoryEntry",
    "HistoryResult",
    "RemovedVersions",
    "history",
    "table_history",
]

#: How a timestamp was found (HistoryEntry.timestamp_source).
ICT = "inCommitTimestamp"
COMMIT_INFO = "commitInfo.timestamp"
MODIFICATION_TIME = "modificationTime"
#: What a version below the earliest commit file is (RemovedVersions.reason).
REMOVED_BY_CLEANUP = "removed by log cleanup"


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class HistoryEntry:
    """One version's commit, as its `commitInfo` records it.

    Attributes:
        version: the version.
        timestamp: milliseconds since the epoch (see `timestamp_source`).
        timestamp_source: `inCommitTimestamp`, `commitInfo.timestamp` or `modificationTime`.
        operation: `commitInfo.operation` (None: the commit has no commitInfo or no
            operation).
        operation_parameters: `commitInfo.operationParameters` ({} when absent).
        operation_metrics: `commitInfo.operationMetrics` ({} when absent).
        engine_info: `commitInfo.engineInfo` (Spark, delta-rs `delta-rs:<v>`, ...).
        client_version: `commitInfo.clientVersion` (delta-rs writes it).
        is_blind_append: `commitInfo.isBlindAppend`.
        read_version: `commitInfo.readVersion`.
        isolation_level: `commitInfo.isolationLevel`.
        user_metadata: `commitInfo.userMetadata`.
        in_commit_timestamp: `commitInfo.inCommitTimestamp`.
        modification_time: the commit file's modification time (ms).
        commit_info: the whole `commitInfo` as written ({} when the commit has none).
    """

    version: int
    timestamp: int
    timestamp_source: str
    operation: str | None
    operation_parameters: Mapping[str, Any]
    operation_metrics: Mapping[str, Any]
    engine_info: str | None
    client_version: str | None
    is_blind_append: bool | None
    read_version: int | None
    isolation_level: str | None
    user_metadata: str | None
    in_commit_timestamp: int | None
    modification_time: int
    commit_info: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "timestamp": self.timestamp,
            "timestamp_iso": _iso(self.timestamp),
            "timestamp_source": self.timestamp_source,
            "operation": self.operation,
            "operation_parameters": dict(self.operation_parameters),
            "operation_metrics": dict(self.operation_metrics),
            "engine_info": self.engine_info,
            "client_version": self.client_version,
            "is_blind_append": self.is_blind_append,
            "read_version": self.read_version,
            "isolation_level": self.isolation_level,
            "user_metadata": self.user_metadata,
            "in_commit_timestamp": self.in_commit_timestamp,
            "modification_time": self.modification_time,
            "commit_info": dict(self.commit_info),
        }


@dataclass(frozen=True)
class RemovedVersions:
    """Versions whose commit files log cleanup already deleted.

    Attributes:
        first: the first removed version (0).
        last: the last removed version.
        checkpoint: the oldest complete checkpoint at or after `last`, where the log now
            starts (None when the log has none). It holds the state of its own version
            only: a removed version other than that one can no longer be read.
        reason: `removed by log cleanup`.
    """

    first: int
    last: int
    checkpoint: int | None
    reason: str = REMOVED_BY_CLEANUP

    def to_dict(self) -> dict[str, Any]:
        return {"first": self.first, "last": self.last, "checkpoint": self.checkpoint,
                "reason": self.reason}

    def describe(self) -> str:
        span = f"{self.first}" if self.first == self.last else f"{self.first}-{self.last}"
        if self.checkpoint is None:
            cover = "; no checkpoint covers them"
        elif self.checkpoint == self.last:  # its checkpoint holds that one version's state
            cover = (f"; version {self.last} still reads from its checkpoint"
                     + (", the ones before it no longer" if self.first < self.last else ""))
        else:  # a checkpoint holds the state of its own version only
            cover = ("; they can no longer be read: the log now starts at the checkpoint "
                     f"at version {self.checkpoint}")
        label = "version" if self.first == self.last else "versions"
        return f"{label} {span}: {self.reason}{cover}"


@dataclass(frozen=True)
class HistoryResult:
    """A table's history.

    Attributes:
        table: the table root URI.
        latest_version: the newest version (None: an empty log).
        entries: one per commit read, newest first (at most `limit`).
        removed: the versions log cleanup already deleted (None: none).
        ict: in-commit-timestamp enablement of the latest version (None: no commit read
            carries an `inCommitTimestamp`, so it was not needed, or the protocol and
            metadata could not be read, and a commit's `inCommitTimestamp` is then trusted
            where present).
        complete: every commit still in the log is among `entries` (no `limit` cut).
    """

    table: str
    latest_version: int | None
    entries: tuple[HistoryEntry, ...]
    removed: RemovedVersions | None
    ict: IctEnablement | None
    complete: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "latest_version": self.latest_version,
            "entries": [e.to_dict() for e in self.entries],
            "removed": None if self.removed is None else self.removed.to_dict(),
            "in_commit_timestamps_from": (
                self.ict.version or 0 if self.ict is not None and self.ict.enabled else None
            ),
            "complete": self.complete,
        }


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _entry(version: int, info: FileInfo, ci: Mapping[str, Any] | None,
           ict: IctEnablement | None) -> HistoryEntry:
    ci = ci or {}
    in_commit = _int(ci.get("inCommitTimestamp"))
    recorded = _int(ci.get("timestamp"))
    ict_applies = ict.applies_to(version) if ict is not None else True
    if in_commit is not None and ict_applies:
        ts, source = in_commit, ICT
    elif recorded is not None:
        ts, source = recorded, COMMIT_INFO
    else:
        ts, source = info.modification_time, MODIFICATION_TIME
    params = ci.get("operationParameters")
    metrics = ci.get("operationMetrics")
    blind = ci.get("isBlindAppend")
    return HistoryEntry(
        version=version,
        timestamp=ts,
        timestamp_source=source,
        operation=_str(ci.get("operation")),
        operation_parameters=dict(params) if isinstance(params, Mapping) else {},
        operation_metrics=dict(metrics) if isinstance(metrics, Mapping) else {},
        engine_info=_str(ci.get("engineInfo")),
        client_version=_str(ci.get("clientVersion")),
        is_blind_append=blind if isinstance(blind, bool) else None,
        read_version=_int(ci.get("readVersion")),
        isolation_level=_str(ci.get("isolationLevel")),
        user_metadata=_str(ci.get("userMetadata")),
        in_commit_timestamp=in_commit,
        modification_time=info.modification_time,
        commit_info=dict(ci),
    )


def _ict_of(storage: Storage, listing: CommitListing) -> IctEnablement | None:
    """In-commit-timestamp enablement of the latest version, from the light replay over
    the listing already made (None when the protocol and metadata cannot be read)."""
    if listing.latest_version is None:
        return None
    try:
        segment = build_log_segment(storage, listing=list(listing.listing))
        return read_protocol_metadata(storage, segment).ict
    except DeltaOpsError:
        return None


def table_history(
    table: TableLike,
    *,
    limit: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> HistoryResult:
    """Each version's `commitInfo`, newest first.

    Args:
        table: a DeltaTable, Storage or table URI.
        limit: read only the newest `limit` commits (None: every commit still in the log).
        storage_options: for a URI `table`.

    Returns:
        The entries, newest first, and the versions log cleanup removed.

    Raises:
        ValueError: `limit` below 1.
        NotATableError: no commit or checkpoint in `_delta_log`.
        CorruptLogError: a commit's line before its `commitInfo` is not JSON (names the file).
        StorageError: the log cannot be listed or a commit read.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    storage = Storage.of(table, storage_options)
    listing = commit_listing(storage)
    if listing.latest_version is None:
        from delta_ops.errors import NotATableError

        raise NotATableError("no commit or checkpoint in the log", table=storage.root)
    newest = list(reversed(listing.commits))
    chosen = newest if limit is None else newest[:limit]
    infos = io_map(lambda item: read_commit_info(storage, item[0]), chosen)
    # The protocol and metadata are read only when a commit carries an inCommitTimestamp.
    carries_ict = any(ci and ci.get("inCommitTimestamp") is not None for ci in infos)
    ict = _ict_of(storage, listing) if carries_ict else None
    entries = tuple(
        _entry(v, info, ci, ict) for (v, info), ci in zip(chosen, infos, strict=True)
    )
    removed_before = listing.removed_before()
    removed = (
        RemovedVersions(0, removed_before - 1, listing.covering_checkpoint())
        if removed_before > 0 else None
    )
    return HistoryResult(
        table=storage.root,
        latest_version=listing.latest_version,
        entries=entries,
        removed=removed,
        ict=ict,
        complete=len(chosen) == len(newest),
    )


#: The library verb's other name (`delta_ops.history`).
history = table_history


def describe(result: HistoryResult) -> str:
    """The text `delta-ops history` prints: one line per version, newest first."""
    lines = [f"table       {result.table}", f"version     {result.latest_version}"]
    for e in result.entries:
        engine = e.engine_info or e.client_version or "-"
        params = ", ".join(f"{k}={v}" for k, v in e.operation_parameters.items())
        metrics = ", ".join(f"{k}={v}" for k, v in e.operation_metrics.items())
        blind = (
            "" if e.is_blind_append is None
            else f"  blindAppend={str(e.is_blind_append).lower()}"
        )
        lines.append(
            f"{e.version:>6}  {_iso(e.timestamp)} ({e.timestamp_source})  "
            f"{e.operation or '(no commitInfo)'}  engine={engine}{blind}"
        )
        if params:
            lines.append(f"        parameters: {params}")
        if metrics:
            lines.append(f"        metrics: {metrics}")
    if not result.complete:
        lines.append("        ... older versions not read (--limit)")
    if result.removed is not None:
        lines.append(f"        {result.removed.describe()}")
    return "\n".join(lines)

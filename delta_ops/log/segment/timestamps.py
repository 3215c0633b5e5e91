"""Commit timestamps and time travel.

Spec sections: "In-Commit Timestamps" (enablement version and timestamp, monotonic
`inCommitTimestamp` in the first `commitInfo`), "Commit Provenance Information". A
version's timestamp is its `inCommitTimestamp` when in-commit timestamps are enabled at
that version, else the modification time of its commit file. Like Spark, file modification
times are made monotonic (a commit never appears older than the one before it).

The newest commit at or before a time is searched one way (`commit_at_or_before`), for time
travel (`version_at_timestamp`) and for metadata cleanup's cutoff.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import orjson

from delta_ops.errors import CorruptLogError, VersionNotFoundError
from delta_ops.log.files.log_listing import list_log
from delta_ops.protocol import filenames
from delta_ops.protocol.filenames import LogFileKind
from delta_ops.protocol.table_configuration import IctEnablement
from delta_ops.storage import FileInfo, Storage


def read_in_commit_timestamp(storage: Storage, version: int) -> int:
    """The `inCommitTimestamp` of commit `version` (in its commitInfo, the first action)."""
    path = f"{filenames.LOG_DIR}/{filenames.commit_name(version)}"
    data = storage.read(path)
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise CorruptLogError(f"a line is not JSON ({exc})", table=storage.root,
                                  version=version, file=path) from exc
        ci = obj.get("commitInfo") if isinstance(obj, dict) else None
        value = ci.get("inCommitTimestamp") if isinstance(ci, dict) else None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    raise CorruptLogError(
        "in-commit timestamps are enabled but the commit has no commitInfo object with an "
        "integer inCommitTimestamp",
        table=storage.root,
        version=version,
        file=path,
    )


def monotonize(mtimes: Sequence[int]) -> list[int]:
    """Spark's adjustment: each timestamp is at least the previous one plus 1 ms."""
    out: list[int] = []
    prev = None
    for t in mtimes:
        if prev is not None and t <= prev:
            t = prev + 1
        out.append(t)
        prev = t
    return out


def list_commits(storage: Storage) -> list[tuple[int, FileInfo]]:
    """Every commit file in the log, oldest first."""
    return [(lf.version, info) for lf, info in list_log(storage) if lf.kind == LogFileKind.COMMIT]


def commit_at_or_before(
    storage: Storage,
    commits: Sequence[tuple[int, FileInfo]],
    ict: IctEnablement,
    timestamp_ms: int,
) -> int | None:
    """The newest commit whose timestamp is not after `timestamp_ms` (None when none is): the
    one search of commit timestamps.

    Commits before the in-commit-timestamp enablement version use their files'
    modification times, made monotonic; later ones their `inCommitTimestamp` (monotonic
    by the spec), found by binary search so only a few commits are read.

    Args:
        storage: The table's storage.
        commits: (version, file) of the commits searched, oldest first.
        ict: Whether and since when in-commit timestamps are enabled.
        timestamp_ms: The time, milliseconds since the epoch.
    """
    versions = [v for v, _ in commits]
    split = len(versions)
    if ict.enabled:
        split = bisect.bisect_left(versions, ict.version or 0)
    if split < len(versions):
        def ts(i: int) -> int:
            return read_in_commit_timestamp(storage, versions[i])

        if ts(split) <= timestamp_ms:
            lo, hi = split, len(versions) - 1
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if ts(mid) <= timestamp_ms:
                    lo = mid
                else:
                    hi = mid - 1
            return versions[lo]
    times = monotonize([info.modification_time for _, info in commits[:split]])
    idx = bisect.bisect_right(times, timestamp_ms) - 1
    return versions[idx] if idx >= 0 else None


def version_at_timestamp(
    storage: Storage,
    timestamp_ms: int,
    ict: IctEnablement,
    *,
    earliest_version: int | None = None,
) -> int:
    """The latest version whose commit timestamp is at or before `timestamp_ms`.

    Args:
        storage: the table's storage.
        timestamp_ms: milliseconds since the epoch.
        ict: in-commit-timestamp enablement of the latest snapshot
            (`TableConfiguration.ict`).
        earliest_version: the oldest version that can be reconstructed (a checkpoint or
            version 0); earlier commits are not candidates.

    Raises:
        VersionNotFoundError: the timestamp is before the first commit or after the last.
    """
    table = storage.root
    commits = list_commits(storage)
    if earliest_version is not None:
        commits = [(v, i) for v, i in commits if v >= earliest_version]
    if not commits:
        raise VersionNotFoundError("the log has no commits to time travel to", table=table)
    versions = [v for v, _ in commits]
    # Versions before ICT enablement use (monotonized) file modification times.
    split = len(versions)
    if ict.enabled:
        split = bisect.bisect_left(versions, ict.version or 0)
    file_times = monotonize([i.modification_time for _, i in commits[:split]])

    def ts_of(idx: int) -> int:
        if idx < split:
            return file_times[idx]
        return read_in_commit_timestamp(storage, versions[idx])

    last_ts = ts_of(len(versions) - 1)
    if timestamp_ms > last_ts:
        raise VersionNotFoundError(
            f"timestamp {timestamp_ms} is after the latest commit "
            f"(version {versions[-1]} at {last_ts})",
            table=table,
        )
    if timestamp_ms == last_ts:
        return versions[-1]
    # The search, not version 0's time, decides "too early": at or after the ICT
    # enablement only versions with in-commit timestamps count (spec "In-Commit
    # Timestamps"), whatever the earlier files' modification times (a copy resets them).
    found = commit_at_or_before(storage, commits, ict, timestamp_ms)
    if found is None:
        raise VersionNotFoundError(
            f"timestamp {timestamp_ms} is before the earliest available commit "
            f"(version {versions[0]} at {ts_of(0)})",
            table=table,
        )
    return found

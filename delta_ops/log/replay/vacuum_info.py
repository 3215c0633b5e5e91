"""What VACUUM LITE reads from the log: `_delta_log/_last_vacuum_info`, the window of
commits whose removes it must see, and those removes.

Spec sections: "Add File and Remove File" (a remove's `deletionTimestamp`; tombstones
expire `deletedFileRetention` after it, and checkpoint writers may then drop them), "Delta
Log Entries" (commits), "In-Commit Timestamps" (a commit's time), "Deletion Vectors".

delta-spark's `VACUUM ... LITE` (`VacuumCommand.getFilesFromDeltaLog`) reads the removes of
the commits from the one after `_last_vacuum_info`'s
`latestCommitVersionOutsideOfRetentionWindow` (or the earliest commit) to the newest
commit older than the retention cut-off, and fails (`DELTA_CANNOT_VACUUM_LITE`) when the
log no longer starts at version 0 and no recorded version is at or after its earliest
commit: metadata cleanup has removed commits whose removes nobody has seen. The same file,
the same bytes (`{"latestCommitVersionOutsideOfRetentionWindow":N}` and a newline,
overwritten), and the same rule are used here (`lite_window`), less one needless refusal:
Spark also refuses when the recorded version is the one just before the earliest commit,
although every commit lite needs (the ones after it) is then in the log; this accepts it.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson
import pyarrow as pa

from delta_ops.errors import CorruptLogError
from delta_ops.log.files.json_actions import parse_json_actions
from delta_ops.log.replay.references import _dict_rows, _empty_rows, reference_parts
from delta_ops.log.segment.timestamps import (
    list_commits,
    monotonize,
    read_in_commit_timestamp,
)
from delta_ops.protocol import filenames
from delta_ops.protocol.table_configuration import IctEnablement
from delta_ops.storage import Storage

__all__ = [
    "LAST_VACUUM_INFO_FIELD",
    "LiteWindow",
    "expired_removed_keys",
    "lite_window",
    "read_last_vacuum_info",
    "write_last_vacuum_info",
]

LAST_VACUUM_INFO_FIELD = "latestCommitVersionOutsideOfRetentionWindow"
_PATH = f"{filenames.LOG_DIR}/{filenames.LAST_VACUUM_INFO}"


def read_last_vacuum_info(storage: Storage) -> int | None:
    """`latestCommitVersionOutsideOfRetentionWindow` of `_last_vacuum_info`; None when the
    file is absent or records no version (delta-spark's full VACUUM writes none).

    Raises:
        CorruptLogError: The file is not a JSON object with an integer (or null) version.
    """
    info = storage.info(_PATH)
    if info is None:
        return None
    raw = storage.read(_PATH)
    try:
        obj = orjson.loads(raw) if raw.strip() else {}
    except orjson.JSONDecodeError as exc:
        raise CorruptLogError(
            f"_last_vacuum_info is not JSON: {exc}", table=storage.root, file=_PATH
        ) from exc
    value = obj.get(LAST_VACUUM_INFO_FIELD) if isinstance(obj, dict) else "?"
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CorruptLogError(
            f"_last_vacuum_info holds {LAST_VACUUM_INFO_FIELD}={value!r}, not a version",
            table=storage.root, file=_PATH,
        )
    return value


def write_last_vacuum_info(storage: Storage, version: int | None) -> None:
    """Record the newest commit whose removes a VACUUM has dealt with (overwrites, as
    delta-spark does; visible whole: `Storage.put_atomic`)."""
    body = {} if version is None else {LAST_VACUUM_INFO_FIELD: int(version)}
    storage.put_atomic(_PATH, orjson.dumps(body) + b"\n")


@dataclass(frozen=True)
class LiteWindow:
    """The commits VACUUM LITE reads, and whether they are all still in the log.

    Attributes:
        earliest: The oldest commit still in the log.
        latest: The newest commit.
        last_vacuum: `_last_vacuum_info`'s version (None: none recorded).
        outside: The newest commit older than the retention cut-off (None: none is).
        start: The first commit whose removes are read.
        covered: Every commit since the last VACUUM (or since version 0) is in the log.
    """

    earliest: int
    latest: int
    last_vacuum: int | None
    outside: int | None
    start: int
    covered: bool

    def gap(self) -> str:
        """Why the log does not cover the window (when not `covered`)."""
        if self.last_vacuum is None:
            return (
                f"the log starts at version {self.earliest}, not 0, and "
                "_delta_log/_last_vacuum_info records no earlier VACUUM: the removes of the "
                "commits cleaned up before it were never seen"
            )
        return (
            f"the last VACUUM dealt with commits up to version {self.last_vacuum}, but the "
            f"log now starts at version {self.earliest}: the removes of the commits in "
            "between were cleaned up unseen"
        )


def _newest_before(
    storage: Storage, commits: list[int], mtimes: list[int], ict: IctEnablement, cutoff: int,
) -> int | None:
    """The newest commit whose timestamp is before `cutoff` (None when none is)."""
    times = monotonize(mtimes)

    def ts_of(i: int) -> int:
        if ict.applies_to(commits[i]):
            return read_in_commit_timestamp(storage, commits[i])
        return times[i]

    if not commits or ts_of(0) >= cutoff:
        return None
    lo, hi = 0, len(commits) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ts_of(mid) < cutoff:
            lo = mid
        else:
            hi = mid - 1
    return commits[lo]


def lite_window(
    storage: Storage,
    delete_before: int,
    ict: IctEnablement,
    *,
    strict: bool = True,
) -> LiteWindow:
    """Which commits VACUUM LITE reads, by delta-spark's rule (see the module).

    Args:
        storage: The table's storage.
        delete_before: The retention cut-off (ms).
        ict: In-commit-timestamp enablement of the latest version (`TableConfiguration.ict`).
        strict: Raise on an unreadable `_last_vacuum_info` (else read it as none: a full
            VACUUM does not depend on it, and then replaces it).

    Raises:
        CorruptLogError: `_last_vacuum_info` cannot be read (when `strict`).
    """
    found = list_commits(storage)
    versions = [v for v, _ in found]
    try:
        last = read_last_vacuum_info(storage)
    except CorruptLogError:
        if strict:
            raise
        last = None
    if not versions:
        return LiteWindow(0, -1, last, None, 0, covered=False)
    earliest, latest = versions[0], versions[-1]
    outside = _newest_before(
        storage, versions, [i.modification_time for _, i in found], ict, delete_before
    )
    # Every commit after the recorded one is still in the log (or the log is whole).
    covered = earliest == 0 or (last is not None and last + 1 >= earliest)
    start = min(latest, last + 1 if last is not None else earliest)
    return LiteWindow(earliest, latest, last, outside, start, covered)


def expired_removed_keys(
    storage: Storage, start: int, end: int, delete_before: int
) -> pa.Array:
    """Listing keys of the files (and DV files) named by the removes of commits
    `start..end` whose `deletionTimestamp` is before `delete_before`, unique. Whether
    something still references them is the caller's to check.

    Raises:
        CorruptLogError: A commit is missing or unreadable.
    """
    root = storage.root
    tables = [_empty_rows()]
    for version in range(start, end + 1):
        path = f"{filenames.LOG_DIR}/{filenames.commit_name(version)}"
        if storage.info(path) is None:
            raise CorruptLogError(
                "commit missing from the log while reading removes for VACUUM LITE",
                table=root, version=version, file=path,
            )
        actions = parse_json_actions(storage.read(path), table=root, version=version, file=path)
        removes = [a["remove"] for a in actions if isinstance(a.get("remove"), dict)]
        if removes:
            tables.append(_dict_rows(removes, False, root, version=version, file=path))
    rows = pa.concat_tables(tables)
    _written, _keep, expired = reference_parts(rows, delete_before, root)
    return expired

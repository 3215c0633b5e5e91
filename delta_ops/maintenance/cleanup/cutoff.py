"""The cutoff of metadata cleanup: the log retention (checked) and the newest commit not
newer than midnight UTC of (now - retention).

Spec sections: "Metadata Cleanup" (step 1), "In-Commit Timestamps", and the table
properties `delta.logRetentionDuration` and `delta.enableExpiredLogCleanup`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

from delta_ops.errors import RetentionError
from delta_ops.log import commit_at_or_before
from delta_ops.protocol.properties import TableProperties
from delta_ops.protocol.retention import check_retention
from delta_ops.protocol.table_configuration import IctEnablement
from delta_ops.storage import FileInfo, Storage

DAY_MS = 86_400_000


def midnight_utc(ms: int) -> int:
    """The start (00:00 UTC) of the day holding `ms` milliseconds since the epoch."""
    return ms - ms % DAY_MS


def iso_utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat()


def cutoff_commit(
    storage: Storage,
    commits: Sequence[tuple[int, FileInfo]],
    ict: IctEnablement,
    cutoff_ms: int,
) -> int | None:
    """The newest commit whose timestamp is not after `cutoff_ms` (None when none is): the
    log's one search of commit timestamps (`delta_ops.log.commit_at_or_before`).

    Args:
        storage: The table's storage.
        commits: (version, file) of every commit present, oldest first.
        ict: Whether and since when in-commit timestamps are enabled.
        cutoff_ms: The cutoff, milliseconds since the epoch.
    """
    return commit_at_or_before(storage, commits, ict, cutoff_ms)


def retention_to_ms(retention: timedelta) -> int:
    """A checked retention (`protocol.retention.check_retention`) in milliseconds."""
    return int(check_retention(retention, operation="log").total_seconds() * 1000)


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
        RetentionError: `retention` is negative or beyond `MAX_RETENTION`.
    """
    configured = props.log_retention
    if retention is None:
        return configured
    check_retention(retention, operation="log", table=table, version=version)
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

"""Retention: the one type and the one limit of how long a destructive operation keeps
what it could delete (spec table properties `delta.logRetentionDuration` for metadata
cleanup, `delta.deletedFileRetentionDuration` for VACUUM).

A retention is a `datetime.timedelta` (`Retention`) in every operation:
`cleanup_metadata(retention=...)`, `vacuum(retention=...)`. Hours are accepted at the edges
only (the command line's `--retention-hours`, a Dagster policy, vacuum's older
`retention_hours=` keyword) and converted here, by `retention_from_hours`. Every retention
passes `check_retention`: not negative, and at most `MAX_RETENTION`, 1,000,000 hours (about
114 years): a longer one reaches back before the Unix epoch, where the log's millisecond
timestamps begin, so it would keep everything anyway. Pure: no I/O.
"""

from __future__ import annotations

import math
import numbers
from datetime import timedelta

from delta_ops.errors import RetentionError

#: The type of a retention everywhere in the library.
Retention = timedelta

#: The longest retention accepted, in hours (about 114 years).
MAX_RETENTION_HOURS = 1_000_000
#: The longest retention accepted.
MAX_RETENTION = timedelta(hours=MAX_RETENTION_HOURS)


def _number(hours: float) -> str:
    return f"{hours:,.10g}"


def _hours(retention: timedelta) -> str:
    return f"{_number(retention.total_seconds() / 3600)} hours"


def check_retention(
    retention: Retention,
    *,
    operation: str,
    table: str | None = None,
    version: int | None = None,
) -> Retention:
    """`retention`, once it is a timedelta from 0 to `MAX_RETENTION`.

    Args:
        retention: The retention asked for.
        operation: What it is for, as messages name it (`VACUUM`, `log`).
        table: The table, for the error.
        version: The version, for the error.

    Raises:
        RetentionError: Not a timedelta, negative, or longer than `MAX_RETENTION`.
    """
    where = {"table": table, "version": version}
    if not isinstance(retention, timedelta):
        raise RetentionError(
            f"{operation} retention must be a datetime.timedelta, got "
            f"{type(retention).__name__}", **where,
        )
    if retention < timedelta(0):
        raise RetentionError(
            f"{operation} retention cannot be negative ({_hours(retention)})", **where
        )
    if retention > MAX_RETENTION:
        raise RetentionError(
            f"{operation} retention of {_hours(retention)} is longer than "
            f"{MAX_RETENTION_HOURS:,} hours (about 114 years), the longest accepted", **where,
        )
    return retention


def retention_from_hours(
    hours: float,
    *,
    operation: str,
    table: str | None = None,
    version: int | None = None,
) -> Retention:
    """A number of hours as a checked retention (see `check_retention`).

    Raises:
        RetentionError: Not a finite number, negative, or longer than `MAX_RETENTION`.
    """
    where = {"table": table, "version": version}
    if isinstance(hours, bool) or not isinstance(hours, numbers.Real):
        raise RetentionError(
            f"{operation} retention must be a number of hours, got {type(hours).__name__}",
            **where,
        )
    if not math.isfinite(hours):
        raise RetentionError(
            f"{operation} retention must be a finite number of hours, got {hours!r}", **where
        )
    if hours < 0:
        raise RetentionError(
            f"{operation} retention cannot be negative ({_number(hours)} hours)", **where
        )
    if hours > MAX_RETENTION_HOURS:
        raise RetentionError(
            f"{operation} retention of {_number(hours)} hours is longer than "
            f"{MAX_RETENTION_HOURS:,} hours (about 114 years), the longest accepted", **where,
        )
    return check_retention(timedelta(hours=float(hours)), operation=operation, **where)


def given_retention(
    retention: Retention | None,
    retention_hours: float | None,
    *,
    operation: str,
    table: str | None = None,
    version: int | None = None,
) -> Retention | None:
    """The retention a caller gave, as a timedelta (None: none given, the table's applies),
    from either spelling an operation accepts.

    Raises:
        ValueError: Both are given.
        RetentionError: The one given is not a valid retention.
    """
    where = {"operation": operation, "table": table, "version": version}
    if retention is not None and retention_hours is not None:
        raise ValueError("give a retention or retention_hours, not both")
    if retention_hours is not None:
        return retention_from_hours(retention_hours, **where)
    if retention is not None:
        return check_retention(retention, **where)
    return None

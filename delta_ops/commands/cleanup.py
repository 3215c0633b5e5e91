"""`delta-ops cleanup`: delete expired log files and unreferenced sidecars (spec "Metadata
Cleanup")."""

from __future__ import annotations

import argparse
import re
from datetime import timedelta
from typing import Any

from delta_ops.commands.common import add_table_arguments, open_table
from delta_ops.errors import RetentionError
from delta_ops.protocol.properties import parse_interval
from delta_ops.protocol.retention import check_retention

_SHORT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_SHORT_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_duration(text: str) -> timedelta:
    """`30 days`, `interval 1 week`, `12 hours` (as table properties spell them) or the
    short forms `30d`, `12h`, `90m`, `2w`, `45s`; from 0 to the one limit of
    `protocol.retention`."""
    m = _SHORT.match(text)
    if m:
        text = f"{m.group(1)} {_SHORT_UNITS[m.group(2)]}"
    try:
        value = parse_interval(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    if value < timedelta(0):
        raise argparse.ArgumentTypeError(f"retention cannot be negative: {text!r}")
    try:
        return check_retention(value, operation="log")
    except RetentionError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc.reason}") from None


def _cmd_cleanup(args: argparse.Namespace) -> tuple[dict[str, Any], str, int]:
    from delta_ops.maintenance.cleanup import cleanup_metadata, describe

    result = cleanup_metadata(
        open_table(args),
        retention=args.retention,
        ensure_checkpoint=args.ensure_checkpoint,
        dry_run=args.dry_run,
        force_retention=args.force_retention,
        allow_catalog_managed=args.allow_catalog_managed,
    )
    return result.to_dict(), describe(result), 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "cleanup",
        help="delete commits, checkpoints, checksums, compactions and sidecars older than "
        "the log retention (and temporary files killed writers left in _delta_log)",
        description="Delete log files older than the newest checkpoint at or before the "
        "retention cutoff. That checkpoint is read in full first; when it cannot be read an "
        "older readable one is kept instead, and when none can, nothing is deleted.",
    )
    add_table_arguments(p)
    p.add_argument(
        "--retention",
        type=parse_duration,
        metavar="DURATION",
        help="log retention instead of delta.logRetentionDuration, e.g. '30 days' or 7d; "
        "a shorter one than the table's is refused unless --force-retention",
    )
    p.add_argument(
        "--force-retention",
        action="store_true",
        help="allow a --retention shorter than delta.logRetentionDuration: versions readers "
        "may still time travel to, and log files a running reader may be reading, are deleted",
    )
    p.add_argument(
        "--allow-catalog-managed",
        action="store_true",
        help="clean up a catalog-managed table; only when the managing catalog permits "
        "metadata cleanup",
    )
    p.add_argument(
        "--ensure-checkpoint",
        action="store_true",
        help="write a checkpoint at the cutoff version first when there is none there",
    )
    p.add_argument("--dry-run", action="store_true", help="only list what would be deleted")
    p.set_defaults(handler=_cmd_cleanup)

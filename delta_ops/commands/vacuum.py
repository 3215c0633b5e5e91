"""`delta-ops vacuum`: delete data files the table no longer references (spec "VACUUM
Protocol Check", "Add File and Remove File", "Deletion Vectors", "Change Data Files")."""

from __future__ import annotations

import argparse
import math
from typing import Any

from delta_ops.commands.common import add_table_arguments, open_table

#: The longest retention accepted, in hours (about 114 years): longer keeps everything
#: anyway, and every retention must fit the millisecond timestamps of the log.
MAX_RETENTION_HOURS = 1_000_000


def _hours(text: str) -> float:
    """`--retention-hours`: a finite number of hours from 0 to `MAX_RETENTION_HOURS`."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of hours: {text!r}") from None
    if math.isnan(value) or math.isinf(value):
        raise argparse.ArgumentTypeError(
            f"retention must be a finite number of hours, not {text!r}"
        )
    if value < 0:
        raise argparse.ArgumentTypeError(f"retention cannot be negative: {text!r}")
    if value > MAX_RETENTION_HOURS:
        raise argparse.ArgumentTypeError(
            f"retention {text!r} is longer than {MAX_RETENTION_HOURS} hours (about 114 years)"
        )
    return value


def _cmd_vacuum(args: argparse.Namespace) -> tuple[dict[str, Any], str, int]:
    from delta_ops.maintenance.vacuum import describe, vacuum

    result = vacuum(
        open_table(args),
        retention_hours=args.retention_hours,
        force_retention=args.force_retention,
        allow_catalog_managed=args.allow_catalog_managed,
        lite=args.lite,
        dry_run=args.dry_run,
        engine=args.engine,
    )
    return result.to_dict(), describe(result), 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "vacuum", help="delete unreferenced data files older than the retention"
    )
    add_table_arguments(p, engine=True)
    p.add_argument(
        "--retention-hours",
        type=_hours,
        metavar="H",
        help="retention instead of delta.deletedFileRetentionDuration (default 168 hours)",
    )
    p.add_argument(
        "--force-retention",
        action="store_true",
        help="allow a retention shorter than the table's delta.deletedFileRetentionDuration "
        "(readers and time travel to older versions may then fail)",
    )
    p.add_argument(
        "--allow-catalog-managed",
        action="store_true",
        help="vacuum a catalog-managed table (catalogManaged feature): only with the "
        "catalog's permission, since the catalog owns the table. Kept besides what the "
        "published commits reference: every path (and deletion vector file) any commit in "
        "_delta_log/_staged_commits adds or removes, of any version, ratified or not (the "
        "catalog alone knows which it will publish); an unreadable staged commit refuses "
        "the run. Commits the catalog holds inline are protected only by the retention",
    )
    p.add_argument(
        "--lite",
        action="store_true",
        help="use expired tombstones from the log instead of listing the table",
    )
    p.add_argument("--dry-run", action="store_true", help="only list what would be deleted")
    p.set_defaults(handler=_cmd_vacuum)

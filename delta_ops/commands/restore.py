"""`delta-ops restore`: bring the table back to an earlier version's state in one commit,
as delta-spark's RESTORE does (spec "Add File and Remove File", "Deletion Vectors", "Row
Tracking", "Table Features").

    delta-ops restore TABLE (--version N | --timestamp T) [--dry-run] [--json]

Re-adds the files of version N that are not live and removes the live ones N did not have
(compared by path and deletion vector), with N's metadata and a protocol that is never
downgraded (`delta_ops.maintenance.restore.restore`). Every file to re-add and its deletion
vector file are looked up first: one that is gone (VACUUM) refuses the restore, naming it.
`--dry-run` plans and checks without committing. Exit 1 on a refusal.
"""

from __future__ import annotations

import argparse
from typing import Any

from delta_ops.commands.argtypes import version_number
from delta_ops.commands.common import (
    add_table_arguments,
    open_table,
    parse_timestamp,
)


def _cmd_restore(args: argparse.Namespace) -> tuple[dict[str, Any], str, int]:
    from delta_ops.maintenance.restore import describe, restore

    result = restore(
        open_table(args), version=args.version, timestamp=args.timestamp,
        dry_run=args.dry_run,
    )
    return result.to_dict(), describe(result), 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "restore",
        help="restore the table to the state of an earlier version (or time) in one RESTORE "
        "commit, as delta-spark does; refused, naming the files, when a file the version "
        "needs was deleted (e.g. by VACUUM)",
    )
    add_table_arguments(p)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--version", type=version_number, metavar="N", help="the version to restore")
    which.add_argument(
        "--timestamp", type=parse_timestamp, metavar="T",
        help="restore the newest version at or before this time (ISO 8601; UTC when no "
        "offset is given)",
    )
    p.add_argument(
        "--dry-run", action="store_true",
        help="plan and check that every needed file exists; commit nothing",
    )
    p.set_defaults(handler=_cmd_restore)

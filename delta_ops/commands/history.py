"""`delta-ops history`: each version's `commitInfo`, newest first (spec "Commit Provenance
Information", "In-Commit Timestamps").

    delta-ops history TABLE [--limit N] [--json]

Lists `_delta_log` once and reads only the newest N commits, each up to its `commitInfo`
(`delta_ops.maintenance.history.table_history`). Each line says where its timestamp comes
from (`inCommitTimestamp`, `commitInfo.timestamp` or the file's `modificationTime`), and
the versions log cleanup already removed are named with the checkpoint that covers them.
"""

from __future__ import annotations

import argparse
from typing import Any

from delta_ops.commands.argtypes import positive_int
from delta_ops.commands.common import add_table_arguments, open_table


def _cmd_history(args: argparse.Namespace) -> tuple[dict[str, Any], str, int]:
    from delta_ops.maintenance.history import describe, table_history

    result = table_history(open_table(args), limit=args.limit)
    return result.to_dict(), describe(result), 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "history",
        help="show each version's commitInfo (operation, parameters, metrics, timestamp and "
        "its source, engine), newest first, and which versions log cleanup removed; "
        "reads only the newest --limit commits; writes nothing",
    )
    add_table_arguments(p)
    p.add_argument(
        "--limit", type=positive_int, metavar="N",
        help="read only the newest N commits (default: every commit still in the log)",
    )
    p.set_defaults(handler=_cmd_history)

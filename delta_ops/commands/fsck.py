"""`delta-ops fsck`: is the table whole? (the seed of verify and repair)

    delta-ops fsck TABLE --check-files [--engine local|spark ...] [--json]

`--check-files`: every data file the latest version references exists
(`delta_ops.maintenance.fsck.check_files_exist`, listed on the engine). Exit code 0 when the
table is whole, 1 when files are missing or the table cannot be read.
"""

from __future__ import annotations

import argparse
from typing import Any

from delta_ops.commands.common import add_table_arguments, open_table

#: The most missing files the text output names (the JSON names them all).
SHOWN = 20


def _cmd_fsck(args: argparse.Namespace) -> tuple[dict[str, Any], str, int]:
    from delta_ops.maintenance.fsck import check_files_exist

    result = check_files_exist(open_table(args), engine=args.engine)
    lines = [
        f"table       {result.table}",
        f"version     {result.version}",
        f"files       {result.num_checked} checked, {len(result.missing)} missing"
        + (f", {result.num_outside_table} outside the table root (not checked)"
           if result.num_outside_table else ""),
    ]
    lines += [f"  missing   {key}" for key in result.missing[:SHOWN]]
    if len(result.missing) > SHOWN:
        lines.append(f"  ... and {len(result.missing) - SHOWN} more (--json lists them all)")
    return {"files": result.to_dict(), "ok": result.ok}, "\n".join(lines), 0 if result.ok else 1


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "fsck",
        help="check that the table is whole: --check-files looks for every data file the "
        "latest version references (exit 1 when some are missing); writes nothing",
    )
    add_table_arguments(p, engine=True)
    p.add_argument(
        "--check-files", action="store_true", required=True,
        help="check that every live data file of the latest version exists (listed on the "
        "engine)",
    )
    p.set_defaults(handler=_cmd_fsck)

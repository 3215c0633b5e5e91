"""`delta-ops compact`: write a log compaction file (`x.y.compacted.json`).

    delta-ops compact TABLE --start X --end Y [--json]
    delta-ops compact TABLE --interval N [--json]     (every window the policy asks for)
"""

from __future__ import annotations

import argparse
from typing import Any

from delta_ops.commands.argtypes import positive_int, version_number
from delta_ops.commands.common import add_table_arguments, open_table


def _cmd_compact(args: argparse.Namespace) -> tuple[dict[str, Any], str, int]:
    from delta_ops.maintenance.compaction import compact_by_policy, compact_log

    table = open_table(args)
    if args.interval is not None:
        if args.start is not None or args.end is not None:
            raise ValueError("give either --interval or --start/--end, not both")
        results = compact_by_policy(table, interval=args.interval)
        obj: dict[str, Any] = {"compactions": [r.to_dict() for r in results]}
        lines = [_line(r) for r in results] or ["nothing to compact"]
        bad = any(r.existing_matches is False for r in results)
        return obj, "\n".join(lines), 1 if bad else 0
    if args.start is None or args.end is None:
        raise ValueError("--start and --end are required (or --interval)")
    result = compact_log(table, start=args.start, end=args.end)
    return result.to_dict(), _line(result), 1 if result.existing_matches is False else 0


def _line(r) -> str:
    if not r.already_existed:
        return f"wrote {r.file} ({r.num_actions} actions)"
    if r.existing_matches:
        return f"{r.file} already exists and matches commits {r.start}..{r.end}"
    return (
        f"{r.file} already exists but does NOT match commits {r.start}..{r.end}; "
        "it was left in place"
    )


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compact", help="write a log compaction file for a range of commits")
    add_table_arguments(p)
    p.add_argument("--start", type=version_number, metavar="X", help="first commit of the range")
    p.add_argument("--end", type=version_number, metavar="Y", help="last commit of the range")
    p.add_argument(
        "--interval", type=positive_int, metavar="N",
        help="compact the commits after the latest checkpoint in windows of N commits "
        "(at least 1)",
    )
    p.set_defaults(handler=_cmd_compact)

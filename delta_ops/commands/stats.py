"""`delta-ops stats`: compute the file statistics the table asks for, from the files' data
(like Delta Spark's `ANALYZE TABLE t COMPUTE DELTA STATISTICS`; `delta_ops.layout.stats`).

    delta-ops stats TABLE [--dry-run] [--all] [--batch-size N] [--json]
"""

from __future__ import annotations

import argparse
from typing import Any

from delta_ops.commands.argtypes import positive_int
from delta_ops.commands.common import add_table_arguments, open_table


def _cmd_stats(args: argparse.Namespace) -> tuple[dict[str, Any], str, int]:
    from delta_ops.layout.stats import compute_stats

    result = compute_stats(
        open_table(args),
        dry_run=args.dry_run,
        recompute_all=args.all,
        batch_size=args.batch_size,
    )
    return result.to_dict(), describe(result), 0


def describe(r: Any) -> str:
    """One paragraph for a `StatsResult`."""
    lines = [
        f"version {r.read_version}: {r.files_total} live files, {r.files_missing_stats} "
        f"without statistics, {r.files_stale_stats} with fewer columns than the table asks for"
    ]
    if r.files_kept:
        lines.append(f"{r.files_kept} files keep their statistics (variant bounds)")
    if r.dry_run:
        lines.append(f"dry run: would compute statistics for {r.files_planned} files")
    elif not r.files_planned:
        lines.append("nothing to do")
    else:
        committed = ", ".join(str(v) for v in r.versions) or "none"
        lines.append(
            f"computed statistics for {r.files_updated} files (committed versions: "
            f"{committed})"
        )
        if r.files_skipped:
            lines.append(
                f"{r.files_skipped} files were removed or changed by concurrent commits "
                "and left alone"
            )
    return "\n".join(lines)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "stats",
        help="compute missing file statistics from the data (COMPUTE STATS)",
        description="Compute the statistics (numRecords, minValues, maxValues, nullCount, "
        "tightBounds) of live files that have none, or fewer columns than the table asks "
        "for, from their data, and commit them as dataChange=false re-adds.",
    )
    add_table_arguments(p)
    p.add_argument(
        "--dry-run", action="store_true", help="only say which files would get statistics"
    )
    p.add_argument(
        "--all", action="store_true", help="recompute the statistics of every live file"
    )
    p.add_argument(
        "--batch-size", type=positive_int, default=1000, metavar="N",
        help="files re-added per commit (default 1000)",
    )
    p.set_defaults(handler=_cmd_stats)

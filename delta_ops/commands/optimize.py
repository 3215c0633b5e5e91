"""`delta-ops optimize`: bin-packing compaction of small files (Spark's OPTIMIZE).

Spec sections: "Add File and Remove File", "Deletion Vectors", "Row Tracking", "Commit
Provenance Information" (see `delta_ops.layout`). `--dry-run` prints the plan (bins, files,
bytes) and writes nothing; without it, the bins are rewritten on the engine and committed
in batches of `dataChange=false` OPTIMIZE commits.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from delta_ops.commands.argtypes import positive_int
from delta_ops.commands.common import add_table_arguments, open_table

if TYPE_CHECKING:
    from delta_ops.layout.run import LayoutResult


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text!r}")
    return value


def _size(text: str) -> int:
    from delta_ops.layout.plan import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def render(result: LayoutResult) -> str:
    """The text report of an OPTIMIZE or PURGE run (or its dry run)."""
    plan = result.plan
    lines = [
        f"table            {result.table}",
        f"version          {result.read_version}",
        f"target size      {result.target_size} bytes",
        f"plan             {plan['bins']} bins, {plan['files']} files, {plan['bytes']} bytes"
        + (f" (where {plan['where']})" if plan.get("where") else ""),
    ]
    if result.dry_run:
        for b in plan["bin_details"]:
            part = ", ".join(f"{k}={'null' if v is None else v}"
                             for k, v in b["partition"].items()) or "(unpartitioned)"
            lines.append(f"  bin {part}: {b['files']} files, {b['bytes']} bytes, "
                         f"{b['deletion_vectors']} with deletion vectors")
        lines.append("dry run: nothing written")
        return "\n".join(lines)
    lines += [
        f"committed        {result.bins_committed}/{result.bins} bins in versions "
        f"{', '.join(map(str, result.versions)) or '-'}",
        f"files            {result.files_before} -> {result.files_after} "
        f"(removed {result.files_removed}, added {result.files_added})",
        f"bytes            {result.bytes_before} -> {result.bytes_after}",
        f"rows rewritten   {result.rows_rewritten} (deleted rows dropped: {result.rows_deleted})",
        f"seconds          {result.seconds:.1f}",
    ]
    for index, why in sorted(result.failed.items()):
        lines.append(f"bin {index} not committed: {why}")
    return "\n".join(lines)


def _cmd_optimize(args: argparse.Namespace) -> tuple[dict[str, Any], str, int]:
    from delta_ops.layout.optimize import optimize

    table = open_table(args)
    result = optimize(
        table,
        where=args.where,
        target_size=args.target_size,
        min_files=args.min_files,
        max_deleted_rows_ratio=args.max_deleted_rows_ratio,
        dry_run=args.dry_run,
        engine=args.engine,
    )
    return result.to_dict(), render(result), 1 if result.failed else 0


def add_layout_arguments(p: argparse.ArgumentParser) -> None:
    """`--where`, `--target-size` and `--dry-run`, which optimize and purge share."""
    p.add_argument("--where", metavar="PREDICATE",
                   help="only partitions matching this predicate on partition columns, e.g. "
                   "\"date = '2024-01-01' AND region IN ('eu', 'us')\"")
    p.add_argument("--target-size", type=_size, metavar="BYTES",
                   help="target file size, e.g. 268435456 or 256mb (default: the table's "
                   "delta.targetFileSize, else 256 MiB)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan (bins, files, bytes) and write nothing")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("optimize",
                       help="compact small data files into files of the target size")
    add_table_arguments(p, engine=True)
    add_layout_arguments(p)
    p.add_argument("--min-files", type=positive_int, default=2, metavar="N",
                   help="compact a partition only when it has at least N small files "
                   "(default 2)")
    p.add_argument("--max-deleted-rows-ratio", type=_ratio, default=0.05, metavar="R",
                   help="also rewrite a file whose deletion vector deletes more than this "
                   "share of its rows, however large (default 0.05, Spark's)")
    p.set_defaults(handler=_cmd_optimize)

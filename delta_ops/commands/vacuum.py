"""`delta-ops vacuum`: delete data files the table no longer references (spec "VACUUM
Protocol Check", "Add File and Remove File", "Deletion Vectors", "Change Data Files").

On a terminal (stderr a TTY, no `--json`) long listings, probes and deletes show a
progress bar (`tqdm`: pages, files, bytes, rate); `--json` output is never touched by it.
When `--lite` finds the log no longer covers the commits since the last VACUUM, it says so
and, on a terminal, offers a full listing once (`--full-if-needed` accepts it ahead).
"""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta
from typing import Any, TextIO

from delta_ops.commands.argtypes import version_number
from delta_ops.commands.common import (
    add_table_arguments,
    open_table,
    parse_timestamp,
)
from delta_ops.engine.progress import PhaseTotals, Tracker, human_bytes
from delta_ops.errors import RetentionError
from delta_ops.protocol.retention import retention_from_hours


def _hours(text: str) -> timedelta:
    """`--retention-hours`: a finite number of hours from 0 to 1,000,000 (about 114 years,
    `protocol.retention.MAX_RETENTION`), as the library's retention."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of hours: {text!r}") from None
    try:
        return retention_from_hours(value, operation="VACUUM")
    except RetentionError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc.reason}") from None


class TerminalProgress(Tracker):
    """Progress bars on a terminal, one per phase, through `tqdm` (imported when built).

    Args:
        stream: Where the bars go (stderr).
    """

    def __init__(self, stream: TextIO) -> None:
        super().__init__(min_interval_s=0.1)
        from tqdm import tqdm

        self._tqdm = tqdm
        self._stream = stream
        self._bars: dict[str, Any] = {}

    def show(self, totals: PhaseTotals) -> None:
        bar = self._bars.get(totals.phase)
        if bar is None:
            bar = self._bars[totals.phase] = self._tqdm(
                total=totals.total_files, desc=f"vacuum {totals.phase}", unit=" files",
                file=self._stream, leave=True, dynamic_ncols=True,
            )
        bar.n = totals.files
        extra = human_bytes(totals.bytes)
        if totals.pages:
            extra = f"{totals.pages:,} pages, {extra}"
        bar.set_postfix_str(extra, refresh=False)
        bar.refresh()
        if totals.done:
            bar.close()
            self._bars.pop(totals.phase, None)


def _progress_for(args: argparse.Namespace, stream: TextIO) -> Tracker | None:
    """Bars only on a terminal and never with --json."""
    if args.json or not stream.isatty():
        return None
    return TerminalProgress(stream)


def _ask_full_listing(reason: str) -> bool:
    """Ask once, on the terminal, whether to list the table instead of lite mode."""
    print(f"delta-ops vacuum: {reason}", file=sys.stderr)
    sys.stderr.write("List the whole table instead (a full VACUUM)? [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")


def _versions(text: str) -> tuple[int, ...]:
    """`--keep-versions 12,15`: comma-separated versions (each at least 0)."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise argparse.ArgumentTypeError(
                f"--keep-versions takes versions separated by commas (e.g. 12,15), got {text!r}"
            )
        out.append(version_number(part))
    return tuple(out)


def _inventory_time(text: str) -> int:
    """`--inventory-time`: ISO 8601 or milliseconds since the epoch."""
    if text.isdigit():
        return int(text)
    return int(parse_timestamp(text).timestamp() * 1000)


def _cmd_vacuum(args: argparse.Namespace) -> tuple[dict[str, Any], str, int]:
    from delta_ops.errors import LiteVacuumUnavailableError
    from delta_ops.maintenance.vacuum import describe, vacuum
    from delta_ops.maintenance.vacuum.inventory import InventorySource

    if args.inventory_time is not None and args.inventory is None:
        raise argparse.ArgumentTypeError("--inventory-time needs --inventory")
    inventory = None
    if args.inventory is not None:
        inventory = InventorySource(args.inventory, inventory_time_ms=args.inventory_time)
    table = open_table(args)
    progress = _progress_for(args, sys.stderr)

    def run(lite_fallback: bool) -> Any:
        return vacuum(
            table,
            retention=args.retention,
            force_retention=args.force_retention,
            allow_catalog_managed=args.allow_catalog_managed,
            lite=args.lite,
            dry_run=args.dry_run,
            engine=args.engine,
            inventory=inventory,
            lite_fallback=lite_fallback,
            record_history=args.record_history,
            progress=progress,
            keep_versions=args.keep_versions,
        )

    try:
        result = run(args.full_if_needed)
    except LiteVacuumUnavailableError as exc:
        interactive = not args.json and sys.stdin.isatty() and sys.stderr.isatty()
        if not interactive or not _ask_full_listing(exc.reason):
            raise
        result = run(True)
    return result.to_dict(), describe(result), 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "vacuum", help="delete unreferenced data files older than the retention"
    )
    add_table_arguments(p, engine=True)
    p.add_argument(
        "--retention-hours",
        type=_hours,
        dest="retention",
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
        "catalog alone knows which it will publish); an unreadable staged commit (or a "
        "subdirectory there) refuses the run. Commits the catalog holds inline are protected "
        "only by the retention",
    )
    p.add_argument(
        "--lite",
        action="store_true",
        help="use expired tombstones from the log instead of listing the table; refused "
        "(with the reason, and on a terminal an offer to list the table once) when the log "
        "no longer holds every commit since the last VACUUM",
    )
    p.add_argument(
        "--full-if-needed",
        action="store_true",
        help="with --lite: list the table instead of refusing when the log no longer covers "
        "the commits since the last VACUUM",
    )
    p.add_argument(
        "--inventory",
        metavar="PATH",
        help="take the table's files from an inventory instead of listing it: an S3 "
        "Inventory manifest.json (CSV or Parquet), or a Parquet file, directory or Delta "
        "table with delta-spark's USING INVENTORY schema (path, length, isDir, "
        "modificationTime); refused when older than the retention window, lacking fields "
        "or naming paths outside the table",
    )
    p.add_argument(
        "--inventory-time",
        type=_inventory_time,
        metavar="TIME",
        help="when a Parquet/Delta inventory was taken (ISO 8601 or ms since the epoch; "
        "default: the newest modification time of its files)",
    )
    p.add_argument(
        "--record-history",
        action="store_true",
        help="record the run in the table's history as delta-spark does (VACUUM START and "
        "VACUUM END commits with its metrics); refused on catalog-managed tables",
    )
    p.add_argument(
        "--keep-versions",
        type=_versions,
        default=(),
        metavar="V[,V...]",
        help="keep every data and deletion vector file these versions need, whatever the "
        "retention, so they stay readable (like deltalake's keep_versions); refused when a "
        "version is not in the table or its log is gone",
    )
    p.add_argument("--dry-run", action="store_true", help="only list what would be deleted")
    p.set_defaults(handler=_cmd_vacuum)

"""`delta-ops row-tracking backfill`: assign row IDs to every file and enable row tracking.

Spec section: "Row Tracking" (see `delta_ops.maintenance.row_tracking`).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from delta_ops.commands.common import add_table_arguments, open_table, positive_int
from delta_ops.maintenance.options import DEFAULT_BACKFILL_CHECKPOINT_EVERY, DEFAULT_BATCH_SIZE

if TYPE_CHECKING:
    from delta_ops.maintenance.row_tracking import BackfillProgress


def _report(progress: BackfillProgress) -> None:
    print(
        f"  {progress.step:8s} v{progress.version}: "
        f"{progress.files_done}/{progress.files_total} files",
        file=sys.stderr,
    )


def _cmd_backfill(args: argparse.Namespace) -> tuple[dict[str, Any], str, int]:
    from delta_ops.maintenance.row_tracking import backfill_row_tracking

    table = open_table(args)
    result = backfill_row_tracking(
        table.storage,
        batch_size=args.batch_size,
        enable=not args.no_enable,
        progress=None if args.json or args.quiet else _report,
        engine=args.engine,
        checkpoint_every=args.checkpoint_every,
    )
    obj = result.to_dict()
    if result.already_enabled:
        text = (
            f"{result.table}: row tracking already enabled "
            f"(high-water mark {result.high_water_mark})"
        )
    else:
        text = "\n".join(
            [
                f"table             {result.table}",
                f"protocol upgraded {'yes' if result.protocol_upgraded else 'no'}",
                f"batches           {result.batches}",
                f"files backfilled  {result.files_backfilled}",
                f"high-water mark   {result.high_water_mark}",
                f"enabled           {'yes' if result.enabled else 'no'}",
                f"versions          {', '.join(map(str, result.versions)) or '-'}",
                f"state             {'streamed' if result.streamed else 'loaded'}",
                f"checkpoints       {', '.join(map(str, result.checkpoints)) or '-'}",
            ]
        )
    return obj, text, 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("row-tracking", help="row tracking: backfill row IDs and enable it")
    actions = p.add_subparsers(dest="row_tracking_command", required=True, metavar="ACTION")
    b = actions.add_parser(
        "backfill",
        help="give every live file row IDs (in batches), then set delta.enableRowTracking=true",
    )
    add_table_arguments(b, engine=True)
    b.add_argument(
        "--batch-size",
        type=positive_int,
        default=DEFAULT_BATCH_SIZE,
        metavar="N",
        help=f"most files re-committed per commit (default {DEFAULT_BATCH_SIZE})",
    )
    b.add_argument(
        "--checkpoint-every",
        type=positive_int,
        default=DEFAULT_BACKFILL_CHECKPOINT_EVERY,
        metavar="N",
        help="large (streamed) tables: checkpoint after every N backfilled files "
        f"(default {DEFAULT_BACKFILL_CHECKPOINT_EVERY}); the stream threshold is "
        "$DELTA_OPS_STREAM_THRESHOLD_BYTES",
    )
    b.add_argument(
        "--no-enable",
        action="store_true",
        help="backfill only; leave delta.enableRowTracking unset",
    )
    b.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    b.set_defaults(handler=_cmd_backfill)

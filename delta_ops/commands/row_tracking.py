"""`delta-ops row-tracking backfill`: assign row IDs to every file and enable row tracking.

A table whose protocol lacks rowTracking and domainMetadata gets them in the backfill's
first commit, after which writers that do not implement them (delta-rs among them) can no
longer write it. Before anything is committed, the command says which features it adds and
which writers lose access, and goes ahead only with `--confirm-protocol-upgrade` or, when
stdin is a terminal (and not with `--json`), a `yes` typed at its prompt; otherwise it
refuses with exit 1. A table that supports both features already needs no confirmation.

Spec section: "Row Tracking" (see `delta_ops.maintenance.row_tracking`), "Table Features".
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from delta_ops.commands.argtypes import positive_int
from delta_ops.commands.common import add_table_arguments, open_table
from delta_ops.maintenance.options import DEFAULT_BACKFILL_CHECKPOINT_EVERY, DEFAULT_BATCH_SIZE

if TYPE_CHECKING:
    from delta_ops.maintenance.row_tracking import BackfillProgress, ProtocolUpgrade


def _report(progress: BackfillProgress) -> None:
    print(
        f"  {progress.step:8s} v{progress.version}: "
        f"{progress.files_done}/{progress.files_total} files",
        file=sys.stderr,
    )


def _confirmed(args: argparse.Namespace, upgrade: ProtocolUpgrade) -> bool:
    """Whether the protocol upgrade may go ahead: the flag, else a `yes` at a prompt when
    stdin is a terminal (never with --json, whose caller is a program)."""
    if args.confirm_protocol_upgrade:
        return True
    if args.json or not sys.stdin.isatty():
        return False
    sys.stderr.write(
        f"{args.table}: the backfill {upgrade.describe()}.\n"
        "Upgrade the protocol and backfill? [y/N] "
    )
    sys.stderr.flush()
    answer = sys.stdin.readline()
    return answer.strip().lower() in ("y", "yes")


def _cmd_backfill(args: argparse.Namespace) -> tuple[dict[str, Any], str, int]:
    from delta_ops.errors import ProtocolUpgradeNotConfirmedError
    from delta_ops.maintenance.row_tracking import (
        backfill_protocol_upgrade,
        backfill_row_tracking,
    )

    table = open_table(args)
    upgrade = backfill_protocol_upgrade(table.storage)
    if upgrade.needed:
        if not _confirmed(args, upgrade):
            raise ProtocolUpgradeNotConfirmedError(
                f"the backfill {upgrade.describe()}. Nothing was committed; run again with "
                "--confirm-protocol-upgrade to go ahead",
                table=table.uri,
            )
        if not (args.json or args.quiet):
            print(f"{table.uri}: the backfill {upgrade.describe()} (confirmed)", file=sys.stderr)
    result = backfill_row_tracking(
        table.storage,
        batch_size=args.batch_size,
        enable=not args.no_enable,
        progress=None if args.json or args.quiet else _report,
        engine=args.engine,
        checkpoint_every=args.checkpoint_every,
        confirm_protocol_upgrade=True,  # asked above
    )
    obj = result.to_dict()
    obj["protocol_upgrade"] = upgrade.to_dict()
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
    b.add_argument(
        "--confirm-protocol-upgrade",
        action="store_true",
        help="go ahead when the table's protocol lacks rowTracking/domainMetadata: the "
        "backfill adds them, after which writers without them (delta-rs, the deltalake "
        "package) can no longer write the table. Without it, the command asks when stdin "
        "is a terminal and refuses otherwise (and always with --json)",
    )
    b.set_defaults(handler=_cmd_backfill)

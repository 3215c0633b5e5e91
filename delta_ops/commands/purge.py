"""`delta-ops purge`: rewrite every file with a deletion vector without its deleted rows
(Spark's `REORG TABLE ... APPLY (PURGE)`).

Spec sections: "Deletion Vectors", "Row Tracking", "Commit Provenance Information" (see
`delta_ops.layout`). `--dry-run` prints the plan and writes nothing; without it, no live
file carries a deletion vector afterwards (bins a concurrent writer changed are reported
and left, exit 1).
"""

from __future__ import annotations

import argparse
from typing import Any

from delta_ops.commands.common import add_table_arguments, open_table
from delta_ops.commands.optimize import add_layout_arguments, render


def _cmd_purge(args: argparse.Namespace) -> tuple[dict[str, Any], str, int]:
    from delta_ops.layout.purge import purge

    table = open_table(args)
    result = purge(table, where=args.where, target_size=args.target_size,
                   dry_run=args.dry_run, engine=args.engine)
    return result.to_dict(), render(result), 1 if result.failed else 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("purge",
                       help="rewrite files with deletion vectors without their deleted rows")
    add_table_arguments(p, engine=True)
    add_layout_arguments(p)
    p.set_defaults(handler=_cmd_purge)

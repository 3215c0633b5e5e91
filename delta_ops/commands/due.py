"""`delta-ops due`: what a table needs now (checkpoint, version checksum, log compaction) and
why, read cheaply (no snapshot replay): the same decisions the Dagster sensor and assets make
(`delta_ops.maintenance.due`).

    delta-ops due TABLE [--checkpoint-interval N] [--compaction-interval N] [--no-checksums]
                        [--json]

Exit code 0 whatever is due (the answer is the output); 1 when the table cannot be read.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from delta_ops.commands.argtypes import positive_int
from delta_ops.commands.common import add_table_arguments, open_table

if TYPE_CHECKING:
    from delta_ops.maintenance.due import DueReport, Need

#: How each component is named in the text output.
_LABELS = {"checkpoint": "checkpoint", "version_checksum": "checksum",
           "log_compaction": "compaction"}


def _compaction_interval(text: str) -> int:
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from exc
    if value < 0 or value == 1:
        raise argparse.ArgumentTypeError(
            f"a compaction covers at least 2 commits (0 switches it off), got {value}"
        )
    return value


def _verdict(need: Need) -> str:
    if need.due and need.blocked_by:
        return (f"due, but blocked by features delta_ops cannot maintain "
                f"({', '.join(need.blocked_by)}): {need.reason}")
    return f"{'due' if need.due else 'not due'}: {need.reason}"


def render(report: DueReport) -> str:
    """The text output: the table's version and checkpoint, then one line per component."""
    ckpt = report.checkpoint_version
    lines = [
        f"table       {report.table}",
        f"version     {report.version} ("
        + (f"checkpoint at {ckpt}" if ckpt is not None else "no checkpoint")
        + f", {report.commits_since_checkpoint} commits since)",
    ]
    lines += [f"{_LABELS[n.component]:<11} {_verdict(n)}" for n in report.needs]
    return "\n".join(lines)


def _cmd_due(args: argparse.Namespace) -> tuple[dict[str, Any], str, int]:
    from delta_ops.maintenance.due import DuePolicy, what_is_due

    policy = DuePolicy(
        checkpoint_interval=args.checkpoint_interval,
        checksums=not args.no_checksums,
        compaction_interval=args.compaction_interval,
    )
    report = what_is_due(open_table(args), policy)
    return report.to_dict(), render(report), 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "due",
        help="what the table needs now (checkpoint, checksum, compaction) and why; "
        "reads the log cheaply, writes nothing",
    )
    add_table_arguments(p)
    p.add_argument(
        "--checkpoint-interval", type=positive_int, metavar="N",
        help="commits between checkpoints (default: the table's delta.checkpointInterval, 10)",
    )
    p.add_argument(
        "--compaction-interval", type=_compaction_interval, metavar="N",
        help="commits per compaction file; 0: off (default: the table's "
        "delta.logCompactionInterval, else off)",
    )
    p.add_argument(
        "--no-checksums", action="store_true",
        help="do not count a missing version checksum (.crc) as due",
    )
    p.set_defaults(handler=_cmd_due)

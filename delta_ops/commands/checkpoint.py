"""`delta-ops checkpoint`: write a checkpoint (classic, multi-part or V2) and `_last_checkpoint`."""

from __future__ import annotations

import argparse
from typing import Any

from delta_ops.commands.argtypes import version_number
from delta_ops.commands.common import add_table_arguments, open_table
from delta_ops.protocol.checkpoint_kind import CheckpointKind
from delta_ops.protocol.filenames import LOG_DIR


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from exc
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _positive(text: str) -> int:
    value = _non_negative(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


#: Most parts of a multi-part checkpoint asked for on the command line. Every part is a
#: file of its own (about 7 KB of Parquet schema and footer even when empty, one PUT, and
#: one listing entry every reader of the table meets from then on), so parts beyond the
#: actions cost time and space for nothing: 1,000 parts take 3 s and 7 MB on a table of 9
#: actions, a million would take an hour and 7 GB. 10,000 parts at the default 50,000
#: actions per part hold 500 million actions, beyond the largest tables. (The protocol's
#: own limit, 10 digits in the part file name, is far above.)
MAX_PARTS = 10_000


def _parts(text: str) -> int:
    value = _non_negative(text)
    if value > MAX_PARTS:
        raise argparse.ArgumentTypeError(
            f"at most {MAX_PARTS:,} parts, got {value:,} (each part is a file of its own; "
            f"{MAX_PARTS:,} parts of 50,000 actions hold 500 million actions)"
        )
    return value


def _buckets(text: str) -> int:
    """A rebuild's bucket count: 1 to `log.snapshot.rebuild.MAX_BUCKETS` (1,024), the most the
    rebuild's own estimate picks (1,024 buckets of 250,000 actions hold 256 million file
    actions). Every bucket keeps two spill files open while the log is read (a descriptor
    each, and a write buffer of at least 64 KiB), so the bound also caps that at 2,048
    files and 128 MiB; a million buckets would ask for 128 GiB."""
    from delta_ops.log import MAX_BUCKETS

    value = _positive(text)
    if value > MAX_BUCKETS:
        raise argparse.ArgumentTypeError(
            f"at most {MAX_BUCKETS:,} buckets, got {value:,} (each bucket keeps spill files "
            f"open while the log is read; {MAX_BUCKETS:,} buckets of 250,000 file actions "
            "hold 256 million)"
        )
    return value


def _cmd_checkpoint(args: argparse.Namespace) -> tuple[dict[str, Any], str, int]:
    from delta_ops.maintenance.checkpoint import write_checkpoint

    table = open_table(args)
    result = write_checkpoint(
        table,
        version=args.version,
        kind=args.kind,
        fmt=args.format,
        sidecar_actions=args.sidecar_actions,
        parts=args.parts,
        engine=args.engine,
        rebuild=True if args.rebuild else None,
        buckets=args.buckets,
    )
    obj = result.to_dict()
    state = "already existed" if result.already_existed else "written"
    lines = [
        f"checkpoint  {result.kind} at version {result.version} ({state})",
        f"actions     {result.num_actions} ({result.num_add_files} add files), "
        f"{result.size_in_bytes} bytes",
        f"_last_checkpoint {'updated' if result.last_checkpoint_updated else 'unchanged'}",
    ]
    if result.rebuilt_buckets:
        lines.append(f"rebuilt     by bucket ({result.rebuilt_buckets} buckets)")
    lines += [f"  {LOG_DIR}/{name}" for name in result.files]
    return obj, "\n".join(lines), 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "checkpoint",
        help="write a checkpoint of a version (default: latest) and update _last_checkpoint",
    )
    add_table_arguments(p, engine=True)
    p.add_argument("--version", type=version_number, help="version to checkpoint (default: latest)")
    p.add_argument(
        "--kind",
        choices=[k.value for k in CheckpointKind],
        help="checkpoint kind (default: v2-uuid when delta.checkpointPolicy=v2, else classic)",
    )
    p.add_argument(
        "--format",
        choices=["json", "parquet"],
        default="parquet",
        help="top-level file format of a v2-uuid checkpoint (default: parquet)",
    )
    p.add_argument(
        "--sidecar-actions",
        type=_non_negative,
        metavar="N",
        help="V2: most file actions per sidecar (default 50000); 0 embeds them all",
    )
    p.add_argument(
        "--parts",
        type=_parts,
        metavar="N",
        help=f"multi-part: number of parts, 2 to {MAX_PARTS:,}: each part is a file of its "
        "own, and 10,000 hold 500 million actions (implies --kind multi-part)",
    )
    p.add_argument(
        "--rebuild",
        action="store_true",
        help="reconcile the whole state (previous checkpoint and commits) from scratch, "
        "spilled by file key to local temporary files and reconciled one bucket at a time, "
        "instead of loading it or streaming the previous checkpoint; a log without a "
        "checkpoint whose commits hold 64 MiB or more (DELTA_OPS_REBUILD_THRESHOLD_BYTES) "
        "is rebuilt this way without asking",
    )
    p.add_argument(
        "--buckets",
        type=_buckets,
        metavar="B",
        help="rebuild: the number of buckets, 1 to 1,024: each keeps two spill files open "
        "while the log is read, and 1,024 hold 256 million file actions (default: one per "
        "250,000 file actions estimated from the log's size)",
    )
    p.set_defaults(handler=_cmd_checkpoint)

"""`delta-ops crc`: compute, write and verify version checksums (`N.crc`).

    delta-ops crc compute TABLE [--version N] [--full] [--json]
    delta-ops crc write TABLE [--version N | --from A --to B] [--full] [--json]
    delta-ops crc verify TABLE [--version N | --all] [--json]     (exit 1 on a mismatch)
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

import orjson

from delta_ops.commands.argtypes import version_number
from delta_ops.commands.common import add_table_arguments, open_table
from delta_ops.maintenance.options import DEFAULT_ALL_FILES_THRESHOLD
from delta_ops.protocol.histograms import HISTOGRAM_FIELD, LEGACY_HISTOGRAM_FIELD

if TYPE_CHECKING:
    from delta_ops.maintenance.checksum import ChecksumPolicy


def _policy(args: argparse.Namespace) -> ChecksumPolicy:
    from delta_ops.maintenance.checksum import ChecksumPolicy

    threshold = args.all_files_threshold
    return ChecksumPolicy(
        all_files_threshold=None if threshold is not None and threshold < 0 else threshold,
        histogram_field=args.histogram_field,
    )


def _cmd_compute(args: argparse.Namespace) -> tuple[dict[str, Any], str, int]:
    from delta_ops.maintenance.checksum import compute_version_checksum

    table = open_table(args)
    computed = compute_version_checksum(
        table,
        version=args.version,
        method="full" if args.full else "auto",
        policy=_policy(args),
        engine=args.engine,
    )
    obj = computed.checksum.to_dict()
    c = computed.checksum
    lines = [
        f"version       {computed.version} ({computed.method}"
        + (f": {computed.fallback_reason})" if computed.fallback_reason else ")"),
        f"files         {c.num_files} ({c.table_size_bytes} bytes)",
        f"txns          {len(c.set_transactions) if c.set_transactions is not None else '-'}",
        f"domains       {len(c.domain_metadata) if c.domain_metadata is not None else '-'}",
    ]
    if c.num_deletion_vectors is not None:
        lines.append(
            f"deletion vectors {c.num_deletion_vectors} ({c.num_deleted_records} rows deleted)"
        )
    hist = c.file_size_histogram
    if hist is not None:
        used = [
            (b, n) for b, n in zip(hist.sorted_bin_boundaries, hist.file_counts, strict=True) if n
        ]
        lines.append("size bins     " + (", ".join(f">={b}: {n}" for b, n in used) or "-"))
    lines.append("(--json prints the checksum object)")
    return obj, "\n".join(lines), 0


def _cmd_write(args: argparse.Namespace) -> tuple[dict[str, Any], str, int]:
    from delta_ops.maintenance.checksum import write_checksum, write_checksums

    table = open_table(args)
    policy = _policy(args)
    if args.from_version is not None or args.to_version is not None:
        if args.from_version is None or args.to_version is None:
            raise ValueError("--from and --to go together")
        if args.version is not None:
            raise ValueError("give either --version or --from/--to, not both")
        result = write_checksums(
            table, start=args.from_version, end=args.to_version, policy=policy, engine=args.engine
        )
        obj = result.to_dict()
        text = (
            f"versions {result.start}..{result.end}: wrote {len(result.written)}, "
            f"{len(result.already_existed)} already existed "
            f"({result.incremental_computations} incremental, "
            f"{result.full_computations} full computations)"
        )
        return obj, text, 0
    one = write_checksum(
        table,
        version=args.version,
        method="full" if args.full else "auto",
        policy=policy,
        engine=args.engine,
    )
    obj = one.to_dict()
    if one.written:
        text = f"wrote {one.file} ({one.method})"
    else:
        text = f"{one.file} already exists; not overwritten"
    return obj, text, 0


def _cmd_verify(args: argparse.Namespace) -> tuple[dict[str, Any], str, int]:
    from delta_ops.maintenance.checksum import verify_checksum

    table = open_table(args)
    result = verify_checksum(
        table, version=args.version, all_versions=args.all, engine=args.engine
    )
    obj = result.to_dict()
    removed = ""
    if result.removed_versions:
        removed = (f"; not verified: the .crc of version(s) "
                   f"{', '.join(map(str, result.removed_versions))}, whose commits log "
                   "cleanup removed (no reader needs them)")
    if result.ok:
        versions = ", ".join(map(str, result.versions)) or "none"
        return obj, f"ok: checksums match the table state (versions {versions}){removed}", 0
    lines = [f"MISMATCH in {len({m.version for m in result.mismatches})} version(s):"]
    for m in result.mismatches:
        lines.append(
            f"  version {m.version} {m.field}: recorded {_short(m.recorded)}, "
            f"computed {_short(m.computed)}"
        )
    return obj, "\n".join(lines), 1


def _short(value: Any, limit: int = 200) -> str:
    text = orjson.dumps(value, default=str).decode()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _content_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--full", action="store_true",
        help="recompute from the full table state instead of from the previous .crc",
    )
    p.add_argument(
        "--histogram-field", choices=(LEGACY_HISTOGRAM_FIELD, HISTOGRAM_FIELD),
        default=LEGACY_HISTOGRAM_FIELD,
        help="name of the file size histogram field (Spark writes histogramOpt)",
    )
    p.add_argument(
        "--all-files-threshold", type=int, default=DEFAULT_ALL_FILES_THRESHOLD, metavar="N",
        help="list allFiles when the table has at most N files (-1: never)",
    )


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("crc", help="compute, write and verify version checksums (.crc)")
    crc = p.add_subparsers(dest="crc_command", required=True, metavar="ACTION")

    c = crc.add_parser("compute", help="print the checksum object that would be written")
    add_table_arguments(c, engine=True)
    c.add_argument("--version", type=version_number, help="table version (default: latest)")
    _content_options(c)
    c.set_defaults(handler=_cmd_compute)

    w = crc.add_parser("write", help="write missing .crc files (never overwrites)")
    add_table_arguments(w, engine=True)
    w.add_argument("--version", type=version_number, help="table version (default: latest)")
    w.add_argument("--from", dest="from_version", type=version_number, metavar="A",
                   help="first version")
    w.add_argument("--to", dest="to_version", type=version_number, metavar="B", help="last version")
    _content_options(w)
    w.set_defaults(handler=_cmd_write)

    v = crc.add_parser("verify", help="compare .crc files with the recomputed table state")
    add_table_arguments(v, engine=True)
    which = v.add_mutually_exclusive_group()
    which.add_argument("--version", type=version_number, help="table version (default: latest)")
    which.add_argument("--all", action="store_true", help="every .crc in the log")
    v.set_defaults(handler=_cmd_verify)

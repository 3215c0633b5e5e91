"""`delta-ops snapshot`: print the state of a table at a version."""

from __future__ import annotations

import argparse
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from delta_ops.commands.argtypes import version_number
from delta_ops.commands.common import (
    add_table_arguments,
    parse_storage_options,
    parse_timestamp,
)
from delta_ops.errors import CorruptLogError

if TYPE_CHECKING:
    from delta_ops.log import SmallSnapshot, Snapshot


def snapshot_summary(snap: Snapshot | SmallSnapshot, *, with_files: bool = False) -> dict[str, Any]:
    """The `snapshot --json` object for a snapshot (the same for both kinds)."""
    from delta_ops.protocol.actions import dv_unique_id

    md = snap.metadata
    warnings: list[str] = []
    try:
        timestamp = snap.timestamp
    except CorruptLogError as exc:
        # Inspection keeps going on a table whose in-commit timestamp is missing; the file
        # modification time stands in and the problem is reported.
        timestamp = snap.file_timestamp
        warnings.append(str(exc))
    out: dict[str, Any] = {
        "table": snap.table,
        "version": snap.version,
        "timestamp": timestamp,
        "protocol": snap.protocol,
        "metadata": {
            "id": md.id,
            "name": md.name,
            "description": md.description,
            "partitionColumns": md.partition_columns,
            "configuration": md.configuration,
            "createdTime": md.created_time,
            "schemaString": md.schema_string,
        },
        "num_files": snap.num_files,
        "size_bytes": snap.size_bytes,
        "num_tombstones": snap.num_tombstones,
        "txns": {app: t.version for app, t in sorted(snap.txns.items())},
        "domains": {d: m.configuration for d, m in sorted(snap.domains.items())},
        "checkpoint_version": snap.checkpoint_version,
        "features": sorted(snap.reader_features | snap.writer_features),
        "unsupported_features": snap.unsupported_features("read"),
        "refused_operations": snap.table_configuration.refused_operations(),
        "warnings": warnings,
    }
    if with_files:
        out["files"] = [
            {
                "path": p,
                "size": s,
                "deletion_vector": dv_unique_id(dv) if dv and dv.get("storageType") else None,
            }
            for p, s, dv in snap.file_rows()
        ]
    return out


def _load(args: argparse.Namespace) -> Snapshot | SmallSnapshot:
    """The table's snapshot: reconciled in Python when its log is small (no pyarrow
    imported, `log.snapshot.small_snapshot`), else the Arrow `Snapshot`; both print the same."""
    from delta_ops.log import ReadOptions, load_small_snapshot
    from delta_ops.storage import Storage

    storage = Storage.for_uri(args.table, parse_storage_options(args.storage_option))
    if args.timestamp is None:
        budget = ReadOptions.from_env().small_log_bytes
        small = load_small_snapshot(storage, args.version, max_bytes=budget)
        if small is not None:
            return small
    from delta_ops.table import DeltaTable

    return DeltaTable(storage=storage).snapshot(args.version, timestamp=args.timestamp)


def _cmd_snapshot(args: argparse.Namespace) -> tuple[dict[str, Any], str, int]:
    snap = _load(args)
    obj = snapshot_summary(snap, with_files=args.files)
    timestamp = obj["timestamp"]
    unsupported = obj["unsupported_features"]
    lines = [
        f"table       {snap.table}",
        f"version     {snap.version} (checkpoint {snap.checkpoint_version})",
        f"timestamp   {datetime.fromtimestamp(timestamp / 1000, timezone.utc).isoformat()}",
        f"protocol    reader {snap.protocol.get('minReaderVersion')}, "
        f"writer {snap.protocol.get('minWriterVersion')}",
        f"features    {', '.join(sorted(snap.reader_features | snap.writer_features)) or '-'}",
        f"files       {snap.num_files} ({snap.size_bytes} bytes), "
        f"{obj['num_tombstones']} tombstones",
        f"partitions  {', '.join(snap.partition_columns) or '-'}",
    ]
    if unsupported["read"] or unsupported["write"]:
        lines.append(
            f"unsupported read: {unsupported['read'] or '-'}, write: {unsupported['write'] or '-'}"
        )
    for op, names in obj["refused_operations"].items():
        lines.append(f"refuses     {op} ({', '.join(names)})")
    lines += [f"warning     {w}" for w in obj["warnings"]]
    if args.files:
        lines += [f"  {f['path']}  {f['size']}" for f in obj["files"]]
    return obj, "\n".join(lines), 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("snapshot", help="print the state of a table at a version")
    add_table_arguments(p)
    when = p.add_mutually_exclusive_group()
    when.add_argument("--version", type=version_number, help="table version (default: latest)")
    when.add_argument(
        "--timestamp", type=parse_timestamp, help="ISO 8601 time; the version current then"
    )
    p.add_argument("--files", action="store_true", help="list the live files")
    p.set_defaults(handler=_cmd_snapshot)

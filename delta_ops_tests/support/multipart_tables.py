"""Tables with multi-part checkpoints and aged logs, and the two readings of a table the
cleanup-safety and `_last_checkpoint` race tests compare: `ours` (delta_ops) and `theirs`
(deltalake)."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable as RsTable
from deltalake import write_deltalake

from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
from delta_ops.maintenance.checkpoint import write_checkpoint
from delta_ops.maintenance.cleanup import (
    DAY_MS,
)
from delta_ops.storage import Storage

HOUR_MS = 3_600_000


# Noon UTC, so that "n days before now" never straddles the cutoff's midnight rounding.
NOW = 1_700_000_000_000 - 1_700_000_000_000 % DAY_MS + 12 * HOUR_MS
LOG = "_delta_log"


def set_mtime(path: Path, ms: int) -> None:
    os.utime(path, ns=(ms * 1_000_000, ms * 1_000_000))


def commit_ms(v: int, *, cutoff: int, latest: int, retention_days: int) -> int:
    """Commit v's time: versions up to `cutoff` older than the retention cutoff (midnight
    UTC of now - retention), later ones within the last hours."""
    if v <= cutoff:
        return NOW - (retention_days + cutoff - v + 1) * DAY_MS
    return NOW - (latest - v + 1) * HOUR_MS


def age_log(root: Path, *, cutoff: int, latest: int, retention_days: int) -> None:
    """Every file of the log (sidecars too) gets the time of the version its name starts
    with; others (e.g. `_last_checkpoint`) the latest commit's."""
    for path in (root / LOG).rglob("*"):
        if not path.is_file():
            continue
        head = path.name.lstrip(".")[:20]
        v = int(head) if head.isdigit() else latest
        set_mtime(path, commit_ms(v, cutoff=cutoff, latest=latest, retention_days=retention_days))


def ours(root: Path, version: int | None = None) -> tuple[int, list[str]]:
    """(version, live file paths) as delta_ops reads the table."""
    snap = load_snapshot(Storage.for_uri(str(root)), version)
    return snap.version, sorted(snap.files.column("path").to_pylist())


def theirs(root: Path, version: int | None = None) -> tuple[int, list[str]]:
    """(version, live file names relative to the root) as deltalake reads the table."""
    t = RsTable(str(root), version=version)
    prefix = str(root).rstrip("/") + "/"
    return t.version(), sorted(u.removeprefix(prefix) for u in t.file_uris())


RETENTION_DAYS = 13


def multipart_table(root: Path, *, with_valid_older: bool, with_newer: bool) -> Path:
    """Ten commits by deltalake (partitioned, some deletes); multi-part checkpoints (ours) at
    3 (when `with_valid_older`) and 6, a classic one at 9 (when `with_newer`)."""
    for i in range(10):
        rows = pa.table({"x": [i, i + 100], "p": [str(i % 3), str((i + 1) % 3)]})
        if i == 5:
            RsTable(str(root)).delete("x = 1")
            continue
        write_deltalake(
            str(root), rows, mode="append", partition_by=["p"],
            configuration={"delta.logRetentionDuration": f"interval {RETENTION_DAYS} days"}
            if i == 0 else None,
        )
    assert RsTable(str(root)).version() == 9
    if with_valid_older:
        write_checkpoint(str(root), version=3, kind="multi-part", parts=2, now_ms=NOW)
    write_checkpoint(str(root), version=6, kind="multi-part", parts=2, now_ms=NOW)
    if with_newer:
        write_checkpoint(str(root), version=9, kind="classic", now_ms=NOW)
    age_log(root, cutoff=6, latest=9, retention_days=RETENTION_DAYS)
    return root

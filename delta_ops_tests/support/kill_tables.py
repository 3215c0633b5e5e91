"""Large-ish Delta tables for the kill tests, written as JSON commits directly.

`build_table(root, spec)` writes a table whose log and data files look like what a long-lived
writer leaves behind: hundreds of commits that add small real Parquet files (pyarrow) and
remove older ones, data files no commit ever referenced (for VACUUM), commits whose file
modification times lie days in the past (for metadata cleanup), optional checkpoints and
version checksums written through `delta_ops` at chosen versions, and optionally adds without
stats (so a row-tracking backfill has to read Parquet footers).

The retention properties are short (`delta.logRetentionDuration` and
`delta.deletedFileRetentionDuration` one hour) and every file is aged with `os.utime`, so
VACUUM and cleanup do their work with the table's own retention and no force flag.

The schema is `id long, value string`; ids are unique across the table.
"""

from __future__ import annotations

import io
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["TableSpec", "build_table", "log_names", "DAY_S"]

DAY_S = 86_400
SCHEMA_STRING = orjson.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "value", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
).decode()


@dataclass(frozen=True)
class TableSpec:
    """Shape of a generated table.

    Attributes:
        commits: number of commits after version 0 (which holds protocol and metadata).
        adds_per_commit: files added by each commit.
        removes_per_commit: live files removed by each commit (oldest first).
        orphans: data files on disk that no commit references.
        no_stats_every: every n-th add has no stats (0: all have stats).
        checkpoints: versions that get a classic checkpoint (written by delta_ops).
        checksums: versions that get a `.crc` (written by delta_ops).
        v2: the table supports v2Checkpoint and has `delta.checkpointPolicy=v2`.
        age_days: how far in the past the oldest commit and data file lie.
    """

    commits: int = 300
    adds_per_commit: int = 8
    removes_per_commit: int = 3
    orphans: int = 0
    no_stats_every: int = 0
    checkpoints: tuple[int, ...] = ()
    checksums: tuple[int, ...] = ()
    v2: bool = False
    age_days: int = 10
    extra_config: dict[str, str] = field(default_factory=dict)


def _parquet_blobs(count: int) -> list[tuple[bytes, int]]:
    """`count` small Parquet files' bytes with 1..count rows; ids are rebased per file
    through the stats only (the bytes are shared), so each blob is (bytes, rows)."""
    blobs = []
    for n in range(1, count + 1):
        t = pa.table(
            {
                "id": pa.array(range(n), pa.int64()),
                "value": pa.array([f"v{i}" for i in range(n)], pa.string()),
            }
        )
        buf = io.BytesIO()
        pq.write_table(t, buf)
        blobs.append((buf.getvalue(), n))
    return blobs


def _stats(rows: int) -> str:
    return orjson.dumps(
        {
            "numRecords": rows,
            "minValues": {"id": 0, "value": "v0"},
            "maxValues": {"id": rows - 1, "value": f"v{rows - 1}"},
            "nullCount": {"id": 0, "value": 0},
        }
    ).decode()


def _line(obj: dict) -> bytes:
    return orjson.dumps(obj) + b"\n"


def build_table(root: Path, spec: TableSpec) -> Path:
    """Write the table described by `spec` at `root` (created) and return `root`."""
    root.mkdir(parents=True)
    log = root / "_delta_log"
    log.mkdir()
    base_s = time.time() - spec.age_days * DAY_S
    blobs = _parquet_blobs(6)
    config = {
        "delta.logRetentionDuration": "interval 1 hours",
        "delta.deletedFileRetentionDuration": "interval 1 hours",
        **spec.extra_config,
    }
    if spec.v2:
        protocol = {
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": ["v2Checkpoint"],
            "writerFeatures": ["v2Checkpoint"],
        }
        config["delta.checkpointPolicy"] = "v2"
    else:
        protocol = {"minReaderVersion": 1, "minWriterVersion": 2}
    aged: list[tuple[Path, float]] = []

    def write_log(version: int, lines: list[bytes]) -> None:
        p = log / f"{version:020d}.json"
        p.write_bytes(b"".join(lines))
        aged.append((p, base_s + version))

    created_ms = int(base_s * 1000)
    write_log(
        0,
        [
            _line({"commitInfo": {"timestamp": created_ms, "operation": "CREATE TABLE"}}),
            _line({"protocol": protocol}),
            _line(
                {
                    "metaData": {
                        "id": str(uuid.UUID(int=0x5EED)),
                        "format": {"provider": "parquet", "options": {}},
                        "schemaString": SCHEMA_STRING,
                        "partitionColumns": [],
                        "configuration": config,
                        "createdTime": created_ms,
                    }
                }
            ),
        ],
    )
    live: list[tuple[str, int, int]] = []  # path, size, rows
    counter = 0
    for v in range(1, spec.commits + 1):
        ts_ms = int((base_s + v) * 1000)
        lines = [_line({"commitInfo": {"timestamp": ts_ms, "operation": "WRITE"}})]
        for _ in range(min(spec.removes_per_commit, max(len(live) - 1, 0))):
            path, size, _rows = live.pop(0)
            lines.append(
                _line(
                    {
                        "remove": {
                            "path": path,
                            "deletionTimestamp": ts_ms,
                            "dataChange": True,
                            "extendedFileMetadata": True,
                            "partitionValues": {},
                            "size": size,
                        }
                    }
                )
            )
        for _ in range(spec.adds_per_commit):
            data, rows = blobs[counter % len(blobs)]
            name = f"part-{counter:05d}-{uuid.UUID(int=counter)}-c000.snappy.parquet"
            p = root / name
            p.write_bytes(data)
            aged.append((p, base_s + v))
            add = {
                "path": name,
                "partitionValues": {},
                "size": len(data),
                "modificationTime": ts_ms,
                "dataChange": True,
            }
            counter += 1
            if not (spec.no_stats_every and counter % spec.no_stats_every == 0):
                add["stats"] = _stats(rows)
            lines.append(_line({"add": add}))
            live.append((name, len(data), rows))
        write_log(v, lines)
    for i in range(spec.orphans):
        data, _rows = blobs[i % len(blobs)]
        p = root / f"part-orphan-{i:05d}-{uuid.UUID(int=1 << 64 | i)}-c000.snappy.parquet"
        p.write_bytes(data)
        aged.append((p, base_s))
    for p, t in aged:
        os.utime(p, (t, t))
    _maintenance_files(root, spec, base_s)
    return root


def _maintenance_files(root: Path, spec: TableSpec, base_s: float) -> None:
    """Checkpoints and checksums at the spec's versions, written by delta_ops (they are
    part of the table as found, not what is under test), aged like their commits."""
    if not spec.checkpoints and not spec.checksums:
        return
    from delta_ops.maintenance.checkpoint import write_checkpoint
    from delta_ops.maintenance.checksum import write_checksum
    from delta_ops.table import DeltaTable

    table = DeltaTable(str(root))
    log = root / "_delta_log"
    for v in spec.checkpoints:
        before = set(os.listdir(log))
        write_checkpoint(table.storage, version=v, now_ms=int((base_s + v) * 1000))
        for name in set(os.listdir(log)) - before - {"_last_checkpoint"}:
            os.utime(log / name, (base_s + v, base_s + v))
    for v in spec.checksums:
        write_checksum(table, version=v)
        os.utime(log / f"{v:020d}.crc", (base_s + v, base_s + v))


def log_names(root: Path) -> set[str]:
    """Every file name under `_delta_log` (sidecars as `_sidecars/<name>`)."""
    log = root / "_delta_log"
    names = {n for n in os.listdir(log) if (log / n).is_file()}
    side = log / "_sidecars"
    if side.is_dir():
        names |= {f"_sidecars/{n}" for n in os.listdir(side)}
    return names

"""Synthetic tables shared by the benchmarks, generated once under benchmarks/data/.

- M: 1,000 commits x 100 adds with stats, partitioned by `part` (10 values); from commit 1
  on, each commit also removes 20 files added by the commit before it (20% removed).
  With `with_files=True` the data files exist (1 byte each) so VACUUM has something to list.
- L: 1,000,000 adds in a classic checkpoint at version 1 (commit 0 cleaned up as metadata
  cleanup would leave it), plus commit 2 with 100 more adds.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from delta_ops.protocol.actions import ADD_TYPE, REMOVE_TYPE
from delta_ops.protocol.last_checkpoint import build_last_checkpoint

DATA = Path(__file__).resolve().parent / "data"
SCHEMA_STRING = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "value", "type": "string", "nullable": True, "metadata": {}},
            {"name": "part", "type": "integer", "nullable": True, "metadata": {}},
        ],
    }
)
PROTOCOL = {"minReaderVersion": 1, "minWriterVersion": 2}
T0 = 1_700_000_000_000


def _metadata(partitioned: bool) -> dict:
    return {
        "id": "00000000-0000-0000-0000-00000000bench",
        "format": {"provider": "parquet", "options": {}},
        "schemaString": SCHEMA_STRING,
        "partitionColumns": ["part"] if partitioned else [],
        "configuration": {},
        "createdTime": T0,
    }


def _stats(i: int) -> str:
    return json.dumps(
        {
            "numRecords": 100,
            "minValues": {"id": i * 100, "value": f"a{i}"},
            "maxValues": {"id": i * 100 + 99, "value": f"z{i}"},
            "nullCount": {"id": 0, "value": 0},
        },
        separators=(",", ":"),
    )


def _add(i: int, version: int) -> dict:
    part = i % 10
    return {
        "add": {
            "path": f"part={part}/part-{i:08d}-c000.snappy.parquet",
            "partitionValues": {"part": str(part)},
            "size": 1000 + (i * 7919) % 100_000,
            "modificationTime": T0 + version * 1000,
            "dataChange": True,
            "stats": _stats(i),
        }
    }


def table_m(*, with_files: bool = False, commits: int = 1000, per_commit: int = 100) -> Path:
    """The M table (created once; returns its root)."""
    root = DATA / f"M{'_files' if with_files else ''}_{commits}x{per_commit}"
    if (root / "_delta_log" / f"{commits - 1:020d}.json").exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    log = root / "_delta_log"
    log.mkdir(parents=True)
    n = 0
    for v in range(commits):
        lines = []
        ts = T0 + v * 1000
        lines.append({"commitInfo": {"timestamp": ts, "operation": "WRITE"}})
        if v == 0:
            lines += [{"protocol": PROTOCOL}, {"metaData": _metadata(True)}]
        else:
            prev_start = (v - 1) * per_commit
            for i in range(prev_start, prev_start + per_commit // 5):
                a = _add(i, v - 1)["add"]
                lines.append(
                    {
                        "remove": {
                            "path": a["path"],
                            "deletionTimestamp": ts,
                            "dataChange": True,
                            "extendedFileMetadata": True,
                            "partitionValues": a["partitionValues"],
                            "size": a["size"],
                        }
                    }
                )
        for _ in range(per_commit):
            lines.append(_add(n, v))
            if with_files:
                f = root / lines[-1]["add"]["path"]
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_bytes(b"x")
            n += 1
        (log / f"{v:020d}.json").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
        os.utime(log / f"{v:020d}.json", (ts / 1000, ts / 1000))
    return root


def checkpoint_schema() -> pa.Schema:
    """The top-level columns of a classic checkpoint as Spark writes it (txn, add, remove,
    metaData, protocol), for generators that write checkpoints directly."""
    proto_t = pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32())])
    fmt_t = pa.struct([("provider", pa.string()), ("options", pa.map_(pa.string(), pa.string()))])
    md_t = pa.struct(
        [
            ("id", pa.string()),
            ("name", pa.string()),
            ("description", pa.string()),
            ("format", fmt_t),
            ("schemaString", pa.string()),
            ("partitionColumns", pa.list_(pa.string())),
            ("configuration", pa.map_(pa.string(), pa.string())),
            ("createdTime", pa.int64()),
        ]
    )
    txn_t = pa.struct(
        [("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())]
    )
    return pa.schema(
        [
            ("txn", txn_t),
            ("add", ADD_TYPE),
            ("remove", REMOVE_TYPE),
            ("metaData", md_t),
            ("protocol", proto_t),
        ]
    )


def table_l(*, files: int = 1_000_000) -> Path:
    """The L table (created once; returns its root)."""
    root = DATA / f"L_{files}"
    if (root / "_delta_log" / "00000000000000000002.json").exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    log = root / "_delta_log"
    log.mkdir(parents=True)
    batch = 100_000
    schema = checkpoint_schema()
    path = log / "00000000000000000001.checkpoint.parquet"
    with pq.ParquetWriter(path, schema, compression="snappy") as writer:
        md = dict(_metadata(False), name=None, description=None)
        md["format"] = {"provider": "parquet", "options": []}
        md["configuration"] = []
        head = pa.Table.from_pylist([{"protocol": PROTOCOL}, {"metaData": md}], schema=schema)
        writer.write_table(head)
        for start in range(0, files, batch):
            rows = []
            for i in range(start, min(files, start + batch)):
                a = _add(i, 1)["add"]
                a["partitionValues"] = []
                rows.append({"add": a})
            writer.write_table(pa.Table.from_pylist(rows, schema=schema), row_group_size=batch)
    size = path.stat().st_size
    lc = build_last_checkpoint(
        version=1, size=files + 2, size_in_bytes=size, num_of_add_files=files
    )
    (log / "_last_checkpoint").write_bytes(lc.to_json_bytes())
    (log / "00000000000000000001.json").write_text(
        json.dumps({"commitInfo": {"timestamp": T0 + 1000, "operation": "WRITE"}}) + "\n"
    )
    lines = [{"commitInfo": {"timestamp": T0 + 2000, "operation": "WRITE"}}]
    lines += [_add(files + i, 2) for i in range(100)]
    for a in lines[1:]:
        a["add"]["partitionValues"] = {}
        a["add"]["path"] = a["add"]["path"].split("/", 1)[1]
    (log / "00000000000000000002.json").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return root

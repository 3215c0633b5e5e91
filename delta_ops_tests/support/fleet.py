"""A fleet of small generated Delta tables under one prefix, for the Dagster layer at scale
(the 1,000-table tests and `benchmarks/bench_dagster.py`).

Tables sit at `<domain>/<entity>_<6 hex digits>` below the root (discovered as
`<domain>__<entity>_<hex>`, 20-30 characters, about as varied as real table names). Each
has `commits` commits of one add each (protocol and metaData in version 0, no checkpoint, no
`.crc`), so every table is due for a version checksum, and for a checkpoint once `commits`
exceeds the interval. Protocols and properties vary: some tables are on writer version 4,
some set `delta.checkpointInterval`, and each sets properties the due rules do not read,
one of them different in every table.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

DOMAINS = ("sales", "marketing", "finance", "support", "logistics", "hr", "product",
           "analytics", "billing", "identity")
ENTITIES = ("orders", "customers", "invoices", "events", "shipments", "tickets", "payments",
            "sessions", "accounts", "inventory", "returns", "campaigns")
SCHEMA = json.dumps({"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": False, "metadata": {}},
    {"name": "payload", "type": "string", "nullable": True, "metadata": {}},
]})


def fleet_path(i: int) -> str:
    """The path, relative to the fleet root, of table number `i`."""
    digest = hashlib.sha1(f"table-{i}".encode()).hexdigest()[:6]
    return f"{DOMAINS[i % len(DOMAINS)]}/{ENTITIES[(i // 10) % len(ENTITIES)]}_{digest}"


def fleet_configuration(i: int) -> dict[str, str]:
    config = {
        "owner.team": f"team-{i % 7}",
        "delta.dataSkippingNumIndexedCols": str(1 + i % 30),
        "created.by.job": f"ingest-{i:05d}",
    }
    if i % 5 == 0:
        config["delta.checkpointInterval"] = "2"
    return config


def write_table(table: Path, i: int, commits: int) -> None:
    log = table / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    for v in range(commits):
        actions: list[dict] = [
            {"commitInfo": {"timestamp": 1_700_000_000_000 + v, "operation": "WRITE"}}
        ]
        if v == 0:
            actions.append({"protocol": {"minReaderVersion": 1,
                                         "minWriterVersion": 4 if i % 10 == 3 else 2}})
            actions.append({"metaData": {
                "id": f"fleet-{i}", "format": {"provider": "parquet", "options": {}},
                "schemaString": SCHEMA, "partitionColumns": [],
                "configuration": fleet_configuration(i), "createdTime": 1_700_000_000_000}})
        actions.append({"add": {
            "path": f"part-{v:05d}.parquet", "partitionValues": {}, "size": 100 + v,
            "modificationTime": 1_700_000_000_000 + v, "dataChange": True,
            "stats": json.dumps({"numRecords": 10 + v})}})
        (log / f"{v:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")


def write_fleet(root: Path, count: int, *, commits: int = 3, start: int = 0) -> list[str]:
    """Tables number `start` .. `start + count - 1` under `root`; their relative paths."""
    paths = []
    for i in range(start, start + count):
        relative = fleet_path(i)
        write_table(root / relative, i, commits)
        paths.append(relative)
    return paths


def numbered_fleet(base: Path, count: int, commits: int = 12) -> dict[str, Path]:
    """Tables `t00`, `t01`, ... under `base/lake` (table number i at `t<i>`): name -> root."""
    out = {}
    for i in range(count):
        out[f"t{i:02d}"] = base / "lake" / f"t{i:02d}"
        write_table(out[f"t{i:02d}"], i, commits)
    return out


__all__ = ["fleet_configuration", "fleet_path", "numbered_fleet", "write_fleet", "write_table"]

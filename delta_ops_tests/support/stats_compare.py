"""Comparing file statistics field by field, for the layout wing's statistics tests.

`differences(recorded, ours)` walks both `stats` objects (parsed with decimals, so `0.10`
and `0.1` are one number and no float rounding hides a difference) and lists every leaf
whose values differ, or that only one side has. `same_instant` tells whether two timestamp
texts name the same instant (Spark writes a `timestamp` bound in its session time zone,
`2000-01-01T00:00:00.000-08:00`; delta_ops in UTC, `2000-01-01T08:00:00.000Z`).

`configuration(fields, ...)` builds a `TableConfiguration` from schema fields written as the
spec's JSON (`field("a", "long", physical="col-1", field_id=1)`, `struct(...)`).

`strip_stats(storage)` commits every live file again without statistics (`dataChange=false`),
the state an old writer leaves. `stats_at_add_version(storage)` gives, for each live file,
the table configuration in force at the version that added it.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from delta_ops.commit import Transaction
from delta_ops.log import load_snapshot
from delta_ops.maintenance.row_tracking.plan import recommits
from delta_ops.protocol.path_identity import dv_unique_id
from delta_ops.protocol.table_configuration import TableConfiguration
from delta_ops.storage import Storage

MISSING = "<absent>"


@dataclass(frozen=True)
class Difference:
    """One leaf of the statistics that differs: its path (`("maxValues", "a", "b")`), the
    recorded value and ours (`MISSING` where a side lacks it)."""

    path: tuple[str, ...]
    recorded: Any
    ours: Any


def parse(text: str) -> dict[str, Any]:
    return json.loads(text, parse_float=Decimal)


def _leaves(tree: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _leaves(v, (*prefix, k))
    else:
        yield prefix, tree


def differences(recorded: dict[str, Any], ours: dict[str, Any]) -> list[Difference]:
    """Every leaf whose value differs, in a stable order."""
    a = dict(_leaves(recorded))
    b = dict(_leaves(ours))
    out = []
    for path in sorted(set(a) | set(b)):
        x, y = a.get(path, MISSING), b.get(path, MISSING)
        if x != y or type(x) is not type(y):
            out.append(Difference(path, x, y))
    return out


def instant(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


def same_instant(recorded: Any, ours: Any) -> bool:
    """Both are zoned timestamp texts naming the same instant."""
    if not (isinstance(recorded, str) and isinstance(ours, str)):
        return False
    try:
        a, b = instant(recorded), instant(ours)
    except ValueError:
        return False
    return a.tzinfo is not None and b.tzinfo is not None and a == b


def strip_stats(storage: Storage) -> int:
    """Commit every live file again without statistics (`dataChange=false`); the version."""
    snap = load_snapshot(storage)
    adds = recommits(snap.files)
    for add in adds:
        add.pop("stats", None)
    txn = Transaction(storage, snapshot=snap, operation="WRITE")
    txn.add_files(adds)
    return txn.commit().version


def configurations_at_add(storage: Storage) -> dict[tuple[str, str | None], TableConfiguration]:
    """For each live file (path, DV id), the configuration at the first loadable version
    whose state holds it (the version that added it, unless a checkpoint hides the older
    versions)."""
    latest = load_snapshot(storage)
    out: dict[tuple[str, str | None], TableConfiguration] = {}
    for version in range(latest.version + 1):
        try:
            snap = load_snapshot(storage, version)
        except Exception:  # noqa: BLE001 - versions before a checkpoint-only start
            continue
        for row in snap.files.select(["path", "deletionVector"]).to_pylist():
            key = (row["path"], dv_unique_id(row["deletionVector"]))
            out.setdefault(key, snap.table_configuration)
    return out


LEGACY_PROTOCOL = {"minReaderVersion": 1, "minWriterVersion": 2}
DV_PROTOCOL = {
    "minReaderVersion": 3, "minWriterVersion": 7,
    "readerFeatures": ["deletionVectors"], "writerFeatures": ["deletionVectors"],
}


def field(name: str, typ: Any, *, physical: str | None = None,
          field_id: int | None = None) -> dict[str, Any]:
    """A schema field in the spec's JSON, with column-mapping metadata when given."""
    meta: dict[str, Any] = {}
    if physical is not None:
        meta["delta.columnMapping.physicalName"] = physical
    if field_id is not None:
        meta["delta.columnMapping.id"] = field_id
    return {"name": name, "type": typ, "nullable": True, "metadata": meta}


def struct(*fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "struct", "fields": list(fields)}


def configuration(fields: list[dict[str, Any]], *, partitions: tuple[str, ...] = (),
                  conf: dict[str, str] | None = None,
                  protocol: dict[str, Any] = LEGACY_PROTOCOL) -> TableConfiguration:
    """The configuration of a table with these fields, partition columns and properties."""
    metadata = {
        "id": "t", "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(struct(*fields)),
        "partitionColumns": list(partitions), "configuration": dict(conf or {}),
    }
    return TableConfiguration.of(protocol, metadata)

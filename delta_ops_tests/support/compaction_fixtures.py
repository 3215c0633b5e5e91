"""A generated table whose log compactions exist in both forms, for "reads like the commits".

Log compaction files come in two forms (spec section "Log Compaction Files"):

- the spec's: the action reconciliation of the covered commits, one line per key, in any
  order (what `delta_ops.maintenance.compaction.compact_log` writes);
- Databricks': every action of the covered commits except `commitInfo`, unreconciled,
  NEWEST COMMIT FIRST, so one key may have several lines (a `remove` above the older `add`
  it cancels, a `remove` without DV and an `add` with DV of the same path, superseded txns,
  domains, metaData and protocol below the newer ones). Inside such a file the first line
  for a key wins, as delta-kernel-rs reads them.

`build_compaction_table` commits, through delta_ops' commit API, a history made to tell
the two reading rules apart (real Parquet data files, inline and on-disk deletion vectors):

    v0   create (deletion vectors)                                  protocol, metaData
    v1   append A, B, C, D (5 rows each)
    v2   txn app-1=1, domain d1 set                                 protocol (domainMetadata)
    v3   DELETE from A: remove A (no DV), add A + inline DV1
    v4   DELETE from A: remove A + DV1, add A + on-disk DV2
    v5   OPTIMIZE: remove B, C, D, add E (their rows)               dataChange false
    v6   txn app-1=2, txn app-2=1, domain d1 set again, domain d2 set
    v7   remove E
    v8   metaData change, txn app-1=3
    v9   add E again (removed at v7, re-added)
    v10  domain d1 removed (tombstone), append F
    v11  DELETE from A: remove A + DV2, add A + inline DV3, txn app-2=2, metaData change
    v12  append G

`write_databricks_compaction` and `write_spec_compaction` write a range in either form.
`snapshot_state` (of a snapshot) and `segment_state` (of the replay of one log segment) are
everything reconciliation decides, in a comparable form.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from delta_ops.commit import Transaction, append_files
from delta_ops.log.replay.full_replay import replay
from delta_ops.log.segment.log_segment import LogSegment
from delta_ops.log.snapshot.loaded_snapshot import Snapshot, load_snapshot
from delta_ops.protocol.deletion_vectors import (
    DeletionVectorDescriptor,
    serialize_bitmap,
)
from delta_ops.protocol.filenames import commit_name
from delta_ops.storage import Storage
from delta_ops_tests.support.dv_writer import encode_uuid_path, inline_descriptor, write_dv_file
from delta_ops_tests.support.histories import (
    StepClock,
    databricks_compaction_bytes,
    new_table,
    write_compaction,
    write_data_file,
)

__all__ = [
    "CompactionTable",
    "build_compaction_table",
    "commit_lines",
    "databricks_compaction_bytes",
    "segment_state",
    "snapshot_state",
    "write_databricks_compaction",
    "write_spec_compaction",
]

LOG = "_delta_log"


@dataclass
class CompactionTable:
    """The table `build_compaction_table` made.

    Attributes:
        storage: its storage.
        root: its directory.
        latest: the latest version (12).
        files: data file path by name (A..G).
        reference: `snapshot_state` of every version, read from the commits only (before
            any compaction file existed).
    """

    storage: Storage
    root: Path
    latest: int
    files: dict[str, str] = field(default_factory=dict)
    reference: dict[int, dict] = field(default_factory=dict)


def _rows(table: Any) -> list[bytes]:
    return sorted(
        orjson.dumps(r, default=str, option=orjson.OPT_SORT_KEYS) for r in table.to_pylist()
    )


def snapshot_state(snap: Snapshot) -> dict:
    """Everything reconciliation decides at one version: protocol, metadata, live files,
    tombstones, txns, domains (removed ones included), as comparable plain values."""
    return {
        "version": snap.version,
        "protocol": snap.protocol,
        "metadata": orjson.loads(orjson.dumps(snap.metadata.raw, default=str)),
        "files": _rows(snap.files),
        "tombstones": _rows(snap.tombstones),
        "txns": {k: t.to_dict() for k, t in snap.txns.items()},
        "domains": {k: d.to_dict() for k, d in snap.all_domains.items()},
    }


def segment_state(storage: Storage, segment: LogSegment) -> dict:
    """`snapshot_state` of the replay of one log segment (e.g. one built with
    `use_compactions=False`, the commits-only path)."""
    state = replay(storage, segment)
    assert state.metadata is not None
    return {
        "version": segment.version,
        "protocol": state.protocol,
        "metadata": orjson.loads(orjson.dumps(state.metadata.raw, default=str)),
        "files": _rows(state.adds),
        "tombstones": _rows(state.removes),
        "txns": {k: t.to_dict() for k, t in state.txns.items()},
        "domains": {k: d.to_dict() for k, d in state.domains.items()},
    }


def _remove_of(add: dict[str, Any], now: int, *, data_change: bool = True) -> dict[str, Any]:
    rm = {
        "path": add["path"],
        "deletionTimestamp": now,
        "dataChange": data_change,
        "extendedFileMetadata": True,
        "partitionValues": add["partitionValues"],
        "size": add["size"],
    }
    for key in ("deletionVector", "stats", "tags"):
        if key in add:
            rm[key] = add[key]
    return rm


def _on_disk_dv(storage: Storage, rows: list[int]) -> dict[str, Any]:
    """Write a DV file (`deletion_vector_<uuid>.bin` at the root) holding `rows`; its
    descriptor (storage type `u`)."""
    u = uuid.uuid4()
    data, [(offset, size)] = write_dv_file([serialize_bitmap(rows)])
    storage.put_atomic(f"deletion_vector_{u}.bin", data)
    return DeletionVectorDescriptor("u", encode_uuid_path(u), offset, size, len(rows)).to_dict()


def build_compaction_table(root: Path) -> CompactionTable:
    """Commit the history of the module docstring under `root` (an empty directory) and
    record every version's state read from the commits."""
    root.mkdir(parents=True, exist_ok=True)
    storage = Storage.for_uri(str(root))
    clock = StepClock()
    new_table(storage, deletion_vectors=True, clock=clock)

    def data_file(start_id: int, rows: int) -> dict[str, Any]:
        return write_data_file(storage, rows=rows, start_id=start_id, modification_time=clock())

    # v1: A, B, C, D
    a, b, c, d = (data_file(5 * i, 5) for i in range(4))
    append_files(storage, [a, b, c, d], clock=clock)
    # v2: txn, domain (the protocol gains domainMetadata)
    txn = Transaction(storage, operation="SET DOMAIN", clock=clock)
    txn.add_features(["domainMetadata"])
    txn.set_txn("app-1", 1, last_updated=clock()).set_domain("d1", '{"v":2}')
    txn.commit()
    # v3: remove A (no DV), add A with an inline DV
    a1 = {**a, "deletionVector": inline_descriptor([0]).to_dict()}
    Transaction(storage, operation="DELETE", clock=clock).remove_files(
        [_remove_of(a, clock())]
    ).add_files([a1]).commit()
    # v4: remove A + DV1, add A with an on-disk DV
    a2 = {**a, "deletionVector": _on_disk_dv(storage, [0, 1])}
    Transaction(storage, operation="DELETE", clock=clock).remove_files(
        [_remove_of(a1, clock())]
    ).add_files([a2]).commit()
    # v5: OPTIMIZE B, C, D into E
    e = {**data_file(5, 15), "dataChange": False}
    now = clock()
    Transaction(storage, operation="OPTIMIZE", clock=clock).remove_files(
        [_remove_of(x, now, data_change=False) for x in (b, c, d)]
    ).add_files([e]).commit()
    # v6: txns and domains superseded later in the range
    txn = Transaction(storage, operation="STREAMING UPDATE", clock=clock)
    txn.set_txn("app-1", 2, last_updated=clock()).set_txn("app-2", 1, last_updated=clock())
    txn.set_domain("d1", '{"v":6}').set_domain("d2", '{"v":6}')
    txn.commit()
    # v7: remove E
    Transaction(storage, operation="DELETE", clock=clock).remove_files(
        [_remove_of(e, clock())]
    ).commit()
    # v8: metaData change, txn
    txn = Transaction(storage, operation="SET TBLPROPERTIES", clock=clock)
    txn.update_configuration({"fixture.step": "8"}).set_txn("app-1", 3, last_updated=clock())
    txn.commit()
    # v9: E again
    e_again = {**e, "dataChange": True, "modificationTime": clock()}
    Transaction(storage, operation="RESTORE", clock=clock).add_files([e_again]).commit()
    # v10: domain d1 removed, F appended
    f = data_file(20, 3)
    txn = Transaction(storage, operation="WRITE", clock=clock)
    txn.set_domain("d1", "", removed=True).add_files([f])
    txn.commit()
    # v11: remove A + DV2, add A + DV3, txn, metaData change
    a3 = {**a, "deletionVector": inline_descriptor([0, 1, 4]).to_dict()}
    txn = Transaction(storage, operation="DELETE", clock=clock)
    txn.remove_files([_remove_of(a2, clock())]).add_files([a3])
    txn.set_txn("app-2", 2, last_updated=clock()).update_configuration({"fixture.step": "11"})
    txn.commit()
    # v12: G
    g = data_file(23, 2)
    result = append_files(storage, [g], clock=clock)
    table = CompactionTable(
        storage,
        root,
        result.version,
        {n: x["path"] for n, x in zip("ABCDEFG", (a, b, c, d, e, f, g), strict=True)},
    )
    assert table.latest == 12, table.latest
    table.reference = {
        v: snapshot_state(load_snapshot(storage, v)) for v in range(table.latest + 1)
    }
    return table


def commit_lines(storage: Storage, version: int) -> list[bytes]:
    """The non-blank lines of commit `version`, as written."""
    data = storage.read(f"{LOG}/{commit_name(version)}")
    return [line for line in data.splitlines() if line.strip()]


def write_databricks_compaction(storage: Storage, start: int, end: int) -> str:
    """Write `start.end.compacted.json` in Databricks' form (`databricks_compaction_bytes`:
    newest commit first, unreconciled, no commitInfo); returns its path."""
    return write_compaction(storage, start, end, form="databricks")


def write_spec_compaction(storage: Storage, start: int, end: int) -> str:
    """Write `start.end.compacted.json` in the spec's (reconciled) form, with delta_ops'
    writer; returns its path."""
    return write_compaction(storage, start, end, form="spec")

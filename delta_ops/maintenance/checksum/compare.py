"""Comparing a recorded version checksum with the state of its version: the one comparison
`crc verify` (`verify_checksum`) and the Dagster check `checksum_matches` (which calls it)
make.

Spec section: "Version Checksum File" (readers may validate a version against its
checksum; `allFiles` lists the live adds with `dataChange: false`) and "Checkpoint Schema"
(`add.stats_parsed`, the typed statistics a checkpoint may keep instead of JSON `stats`).

The state is aggregated again (`checksum_from_snapshot`, with the recorded histogram's bin
boundaries and `allFiles` when recorded) and compared field by field
(`delta_ops.protocol.crc.compare_checksums`): counts always, optional fields when both
have them, `allFiles` as a set keyed by file. Statistics are compared by what they say:

* JSON with JSON: the parsed objects, null values dropped, numbers as numbers
  (`protocol.crc.stats_meaning`).
* A live file whose statistics the checkpoint keeps only typed (`stats_parsed`; writers
  leave JSON `stats` out when `delta.checkpoint.writeStatsAsJson` is false, as
  delta-kernel-rs's `*-struct-stats-only` tables are written): the recorded JSON is read
  into that same typed struct, the way the checkpoint writer fills `stats_parsed`
  (`maintenance.checkpoint.actions.parse_stats`: dates, timestamps with their offsets,
  decimals at their scale, floats at their width), and the typed values are compared.
  Columns the struct leaves out are not compared; recorded statistics that do not fit the
  struct are a mismatch.
* A side without statistics (a checkpoint that keeps neither form) compares nothing.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pyarrow as pa

from delta_ops.engine.base import Engine
from delta_ops.log import Snapshot, read_parsed_stats
from delta_ops.maintenance.checksum.base import (
    ChecksumPolicy,
    _sorted_txns,
    _txn_dict,
)
from delta_ops.maintenance.checksum.full import checksum_from_snapshot
from delta_ops.protocol.crc import (
    FILE_SIZE_BIN_BOUNDARIES,
    FieldMismatch,
    VersionChecksum,
    compare_checksums,
    stats_meaning,
)
from delta_ops.protocol.file_actions import file_keys
from delta_ops.protocol.path_identity import file_key


def compare_with_state(
    recorded: VersionChecksum, snapshot: Snapshot, *, engine: Engine | None = None
) -> list[FieldMismatch]:
    """Every field of `recorded` (the `.crc` of `snapshot.version`) that the state of that
    version contradicts (see the module docstring for what is compared and how)."""
    boundaries = (
        recorded.file_size_histogram.sorted_bin_boundaries
        if recorded.file_size_histogram is not None
        else FILE_SIZE_BIN_BOUNDARIES
    )
    policy = ChecksumPolicy(
        all_files_threshold=None if recorded.all_files is None else snapshot.num_files,
        boundaries=boundaries,
    )
    computed = checksum_from_snapshot(snapshot, engine=engine, policy=policy)
    if computed.set_transactions is None:  # retention configured: compare every txn
        txns = _sorted_txns({k: _txn_dict(t.to_dict()) for k, t in snapshot.txns.items()})
        computed = replace(computed, set_transactions=txns)
    shown: dict[int, dict] = {}
    if recorded.all_files is not None and computed.all_files is not None:
        recorded, computed, shown = _typed_stats(recorded, computed, snapshot)
    mismatches = compare_checksums(recorded, computed, root=snapshot.table)
    if not shown:
        return mismatches
    # Files are shown as the `.crc` lists them and, for the state, with the typed
    # statistics it was compared on, as JSON can hold them.
    return [
        replace(
            m,
            recorded=[_jsonable(shown.get(id(a), a)) for a in m.recorded],
            computed=[_jsonable(shown.get(id(a), a)) for a in m.computed],
        )
        if m.field == "allFiles" else m
        for m in mismatches
    ]


def _typed_stats(
    recorded: VersionChecksum, computed: VersionChecksum, snapshot: Snapshot
) -> tuple[VersionChecksum, VersionChecksum, dict[int, dict]]:
    """Both checksums with the statistics of every live file that has only typed ones in
    the checkpoint replaced, on both sides, by typed values of the checkpoint's struct;
    and how to show each replaced entry (by `id`): the recorded one as recorded, the
    computed one with its typed statistics as `stats_parsed` in JSON values."""
    assert recorded.all_files is not None and computed.all_files is not None
    root = snapshot.table
    checkpoint = snapshot.segment.checkpoint
    untyped = {
        file_key(a["path"], _dv(a), root): i
        for i, a in enumerate(computed.all_files)
        if stats_meaning(a.get("stats")) is None
    }
    if checkpoint is None or not untyped:
        return recorded, computed, {}
    typed: dict[str, tuple[pa.DataType, Any]] = {}
    for t in read_parsed_stats(snapshot.storage, checkpoint):
        if not t.num_rows:
            continue
        keys = file_keys(
            pa.StructArray.from_arrays(
                [_one_chunk(t.column("path")), _one_chunk(t.column("deletionVector"))],
                names=["path", "deletionVector"],
            ),
            root,
        ).to_pylist()
        column = _one_chunk(t.column("stats_parsed"))
        for row, key in enumerate(keys):
            if key in untyped and column[row].is_valid:
                typed[key] = (column.type, column[row].as_py())
    if not typed:
        return recorded, computed, {}
    shown: dict[int, dict] = {}
    com = list(computed.all_files)
    for key, (_, value) in typed.items():
        original = com[untyped[key]]
        com[untyped[key]] = dict(original, stats=value)
        shown[id(com[untyped[key]])] = dict(original, stats_parsed=_jsonable(value))
    rec = list(recorded.all_files)
    for i, a in enumerate(rec):
        found = typed.get(file_key(a["path"], _dv(a), root)) if a.get("path") else None
        if found is not None and stats_meaning(a.get("stats")) is not None:
            rec[i] = dict(a, stats=_json_as_typed(a["stats"], found[0]))
            shown[id(rec[i])] = a
    return (
        replace(recorded, all_files=tuple(rec)),
        replace(computed, all_files=tuple(com)),
        shown,
    )


def _jsonable(value: Any) -> Any:
    """Typed statistics as JSON can hold them: dates and timestamps in ISO 8601, decimals
    and anything else without a JSON form as strings."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def _json_as_typed(stats: Any, typ: pa.DataType) -> Any:
    """Recorded JSON statistics read into the typed struct `typ` (as the checkpoint writer
    reads them); the JSON itself when it does not fit (then it differs from any typed
    value)."""
    from delta_ops.maintenance.checkpoint.actions import parse_stats

    text = stats if isinstance(stats, str) else _json_text(stats)
    value = parse_stats(pa.array([text], pa.string()), typ)[0]
    if not value.is_valid:
        return text
    return value.as_py()


def _json_text(stats: Any) -> str:
    import orjson

    return orjson.dumps(stats).decode()


def _dv(a: dict) -> dict | None:
    dv = a.get("deletionVector")
    return dv if isinstance(dv, dict) and dv.get("storageType") is not None else None


def _one_chunk(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return col


__all__ = ["compare_with_state"]

"""A small table's snapshot without Arrow: the commits reconciled action by action.

Spec sections: "Action Reconciliation", "Delta Log Entries".

Importing pyarrow (and NumPy, which it loads) costs a process more than reconciling a log
of a few megabytes of JSON in Python. `load_small_snapshot` reconciles such a log with the
one action-by-action rule (`log.replay.action_replay`, the rule `log.replay.full_replay` falls back
to) and keeps of each live file what a summary prints (path, size, deletion vector). It applies
when:

- the segment has no checkpoint and no compaction file (commits only), and
- the commit files total at most `max_bytes` (`ReadOptions.small_log_bytes`, which
  `delta-ops snapshot` reads from `$DELTA_OPS_SMALL_LOG_BYTES`; default
  `DEFAULT_SMALL_LOG_BYTES`; 0 turns this path off), and
- every winning add and remove has the types the Arrow schema of file actions gives its
  fields (`ADD_FIELDS`, `REMOVE_FIELDS`): then converting them to Arrow would change
  nothing, so every answer equals the Arrow snapshot's.

Otherwise it returns None and the caller loads the Arrow `Snapshot`. `delta-ops snapshot`
uses it; the operations, which work on Arrow tables anyway, do not.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass

from delta_ops.log.read_options import DEFAULT_SMALL_LOG_BYTES
from delta_ops.log.replay.action_replay import ActionReconciler, read_log_files
from delta_ops.log.segment.log_segment import LogSegment, build_log_segment
from delta_ops.log.snapshot.snapshot_base import SnapshotBase, check_readable
from delta_ops.protocol.actions import CommitInfo, DomainMetadata, Metadata, Txn
from delta_ops.storage import Storage

_STR, _INT64, _INT32, _BOOL, _MAP, _DV = "string", "int64", "int32", "bool", "map", "dv"

#: The fields of `protocol.file_actions.ADD_TYPE` and `REMOVE_TYPE` and the Python type
#: (from JSON) each takes without conversion: string, 64- or 32-bit integer, boolean, a
#: map of strings (an object whose values are strings or null), the deletion vector
#: struct (`DV_FIELDS`). A test checks these against the Arrow types.
ADD_FIELDS = {
    "path": _STR, "partitionValues": _MAP, "size": _INT64, "modificationTime": _INT64,
    "dataChange": _BOOL, "stats": _STR, "tags": _MAP, "deletionVector": _DV,
    "baseRowId": _INT64, "defaultRowCommitVersion": _INT64, "clusteringProvider": _STR,
}
REMOVE_FIELDS = {
    "path": _STR, "deletionTimestamp": _INT64, "dataChange": _BOOL,
    "extendedFileMetadata": _BOOL, "partitionValues": _MAP, "size": _INT64, "stats": _STR,
    "tags": _MAP, "deletionVector": _DV, "baseRowId": _INT64,
    "defaultRowCommitVersion": _INT64,
}
DV_FIELDS = {
    "storageType": _STR, "pathOrInlineDv": _STR, "offset": _INT32, "sizeInBytes": _INT32,
    "cardinality": _INT64,
}
_CLASS = {_STR: str, _INT64: int, _INT32: int, _BOOL: bool, _MAP: dict, _DV: dict}
_INT64_END = 1 << 63


@dataclass(frozen=True)
class SmallSnapshot(SnapshotBase):
    """One version of a small table: everything `Snapshot` knows but the file actions, of
    which it keeps what a summary reads (see the module).

    Attributes:
        storage, segment, protocol, metadata, txns, all_domains, commit_infos: as in
            `log.snapshot.loaded_snapshot.Snapshot`.
        files: (path, size, deletionVector) of each live add action, in the order of
            `Snapshot.files`; the action's other fields are dropped once checked.
        num_tombstones: remove actions still in the state (expired ones included).
    """

    storage: Storage
    segment: LogSegment
    protocol: dict
    metadata: Metadata
    files: list[tuple[str, int | None, dict | None]]
    num_tombstones: int
    txns: dict[str, Txn]
    all_domains: dict[str, DomainMetadata]
    commit_infos: dict[int, CommitInfo]

    @property
    def num_files(self) -> int:
        return len(self.files)

    @property
    def size_bytes(self) -> int:
        return sum(size or 0 for _, size, _ in self.files)

    def file_rows(self) -> list[tuple[str, int | None, dict | None]]:
        """(path, size, deletionVector) of each live file, as `Snapshot.file_rows`."""
        return [(path, size, _dv_row(dv)) for path, size, dv in self.files]


def load_small_snapshot(
    storage: Storage, version: int | None = None, *, max_bytes: int | None = None
) -> SmallSnapshot | None:
    """The snapshot of `version` (latest when None) reconciled in Python, or None when the
    log is not small (see the module) and the Arrow `Snapshot` is the one to load.

    Raises:
        The errors of `log.snapshot.loaded_snapshot.load_snapshot` for a log this path reads: the
        segment cannot be built, a commit does not parse, the state has no protocol or metadata,
        or the table cannot be read.
    """
    budget = DEFAULT_SMALL_LOG_BYTES if max_bytes is None else max_bytes
    if budget <= 0:
        return None
    segment = build_log_segment(storage, version)
    deltas = segment.deltas
    if (
        segment.checkpoint is not None
        or any(d.is_compaction for d in deltas)
        or sum(d.file.size for d in deltas) > budget
    ):
        return None
    table = storage.root
    newest_first = deltas[::-1]
    paths = [d.file.path for d in newest_first]
    # Read one at a time as they are applied (the memory of one is reused for the next),
    # or all at once, concurrently, where each read waits on the network.
    blobs = iter(read_log_files(storage, paths)) if storage.latency_bound else map(
        storage.read, paths
    )
    rec = ActionReconciler(table)
    files: list[tuple[str, int | None, dict | None]] = []  # newest first
    tombstones = 0
    # The parsed actions hold no reference cycles: the collector, which would walk every
    # dict made so far again and again as they accumulate, has nothing to find.
    collecting = gc.isenabled()
    gc.disable()
    try:
        for d, data in zip(newest_first, blobs, strict=True):
            rec.apply_file(data, table=table, version=d.end, file=d.file.path)
            del data
            # This delta's winners are final (every later delta was applied before it):
            # checked, then only what the summary reads is kept, so the memory of the rest
            # (statistics, partition values) goes to the next delta's parse.
            adds, removes = rec.take_winners()
            if not (_conform(adds, ADD_FIELDS) and _conform(removes, REMOVE_FIELDS)):
                return None
            files += [(a["path"], a.get("size"), a.get("deletionVector")) for a in adds]
            tombstones += len(removes)
            del adds, removes
    finally:
        if collecting:
            gc.enable()
    files.reverse()
    state = rec.state
    check_readable(table, segment.version, state.protocol, state.metadata)
    return SmallSnapshot(
        storage=storage,
        segment=segment,
        protocol=state.protocol,
        metadata=state.metadata,
        files=files,
        num_tombstones=tombstones,
        txns=state.txns,
        all_domains=state.domains,
        commit_infos=state.commit_infos,
    )


def _conform(actions: list[dict], fields: dict[str, str]) -> bool:
    """Whether every field of every action that the Arrow type has holds null or exactly
    the Python type that field takes unchanged (other fields are ignored, as Arrow does).

    One pass, one dictionary lookup per field (this runs over every live file). orjson
    gives an int only within 64 bits and a float beyond -2**63, so an int64 field needs
    only its upper bound checked."""
    expect = {name: _CLASS[kind] for name, kind in fields.items()}.get
    for action in actions:
        for name, value in action.items():
            cls = expect(name)
            if cls is None or value is None:
                continue
            if value.__class__ is not cls:
                return False
            if cls is int:
                if value >= _INT64_END or fields[name] == _INT32 and not _in_int32(value):
                    return False
            elif cls is dict:
                if fields[name] == _DV:
                    if not _conform([value], DV_FIELDS):
                        return False
                else:
                    for v in value.values():
                        if v is not None and v.__class__ is not str:
                            return False
    return True


def _in_int32(value: int) -> bool:
    return -(1 << 31) <= value < 1 << 31


def _dv_row(dv: dict | None) -> dict | None:
    """A deletion vector as Arrow gives it back: every field of the struct, missing ones
    null (None stays None)."""
    if dv is None:
        return None
    return {name: dv.get(name) for name in DV_FIELDS}

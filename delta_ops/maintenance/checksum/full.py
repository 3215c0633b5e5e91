"""Full computation of a version checksum: aggregate the snapshot of version N (checkpoint
plus commits); the file size histogram is aggregated by the Engine, so on Spark it runs
where the files are.

Spec section: "Version Checksum File" (every field, from the reconstructed state).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.engine.base import Engine
from delta_ops.errors import (
    CorruptLogError,
    VersionNotFoundError,
)
from delta_ops.log import BATCH_ROWS, Snapshot, StreamedActions, read_commit_info
from delta_ops.maintenance.checksum.base import (
    DEFAULT_POLICY,
    ChecksumPolicy,
    _clean_add,
    _domain_dict,
    _engine,
    _ict,
    _limited,
    _sorted_txns,
    _txn_dict,
    _txn_retention_configured,
    action_dict,
)
from delta_ops.protocol.crc import (
    DELETED_RECORD_COUNT_BIN_STARTS,
    DeletedRecordCountsHistogram,
    FileSizeHistogram,
    VersionChecksum,
)
from delta_ops.storage import Storage

# ---- full computation ---------------------------------------------------------------------


def checksum_from_snapshot(
    snapshot: Snapshot,
    *,
    engine: Engine | None = None,
    commit_info: Mapping[str, Any] | None = None,
    policy: ChecksumPolicy = DEFAULT_POLICY,
) -> VersionChecksum:
    """The checksum of a snapshot's version, aggregated from its full state.

    Args:
        snapshot: the reconstructed version.
        engine: aggregates the file size histogram (LocalEngine when None).
        commit_info: the version's commitInfo (for txnId and the in-commit timestamp); read
            from the snapshot or the commit file when None.
        policy: optional content.
    """
    version = snapshot.version
    if commit_info is None:
        commit_info = _commit_info_of(snapshot)
    files = snapshot.files
    protocol = action_dict(snapshot.protocol)
    metadata = action_dict(snapshot.metadata.raw)
    config = snapshot.table_configuration
    dv_readable = config.deletion_vectors_readable
    boundaries = list(policy.boundaries)
    try:
        agg = _totals(files, engine, boundaries, dv_readable)
    except CorruptLogError as exc:
        if exc.table is not None:
            raise
        named = _sizeless(files) if _NO_SIZE in exc.reason else None
        raise CorruptLogError(named or exc.reason, table=snapshot.table, version=version,
                              file=exc.file) from None
    num_files, table_size = agg.num_files, agg.table_size
    counts, totals = agg.counts, agg.totals
    num_dv, num_deleted, dv_counts = agg.num_dv, agg.num_deleted, agg.dv_counts
    histogram = FileSizeHistogram(tuple(boundaries), tuple(counts), tuple(totals))
    drc = None
    if dv_readable:
        drc = DeletedRecordCountsHistogram(tuple(dv_counts))
    else:
        num_dv = num_deleted = None

    if _txn_retention_configured(metadata):
        txns = None
    else:
        txns = _limited(
            _sorted_txns({k: _txn_dict(t.to_dict()) for k, t in snapshot.txns.items()}),
            policy.max_set_transactions,
        )
    domains = _limited(
        tuple(_domain_dict(snapshot.domains[k].to_dict()) for k in sorted(snapshot.domains)),
        policy.max_domain_metadata,
    )
    all_files = None
    if policy.include_all_files(num_files):
        all_files = tuple(_clean_add(a) for part in _file_parts(files) for a in part.to_pylist())
    return VersionChecksum(
        table_size_bytes=table_size,
        num_files=num_files,
        txn_id=(commit_info or {}).get("txnId"),
        in_commit_timestamp=_ict(config, version, commit_info),
        set_transactions=txns,
        domain_metadata=domains,
        metadata=metadata,
        protocol=protocol,
        file_size_histogram=histogram,
        num_deleted_records=num_deleted,
        num_deletion_vectors=num_dv,
        deleted_record_counts_histogram=drc,
        all_files=all_files,
        histogram_field=policy.histogram_field,
    )


@dataclass(frozen=True)
class _Totals:
    """Partial aggregates of some live files: what a worker sends back for a row group."""

    num_files: int
    table_size: int
    counts: list[int]
    totals: list[int]
    num_dv: int
    num_deleted: int
    dv_counts: list[int]

    @classmethod
    def empty(cls, bins: int) -> _Totals:
        return cls(0, 0, [0] * bins, [0] * bins, 0, 0, [0] * len(DELETED_RECORD_COUNT_BIN_STARTS))

    def plus(self, other: _Totals) -> _Totals:
        def add(a: list[int], b: list[int]) -> list[int]:
            return [x + y for x, y in zip(a, b, strict=True)]

        return _Totals(
            self.num_files + other.num_files,
            self.table_size + other.table_size,
            add(self.counts, other.counts),
            add(self.totals, other.totals),
            self.num_dv + other.num_dv,
            self.num_deleted + other.num_deleted,
            add(self.dv_counts, other.dv_counts),
        )


def _totals(
    files: pa.Table | StreamedActions, engine: Engine | None, boundaries: list[int], dv: bool
) -> _Totals:
    """The aggregates of the live files: one pass, a bounded table at a time (the whole
    table when it is loaded; a row group at a time when the snapshot is streamed), partial
    aggregates added up, so memory does not grow with the table. A streamed state on a
    distributed engine is read on its workers, which send back one `_Totals` per row group.

    Raises:
        CorruptLogError: a live file has no size (without table or version).
    """
    if isinstance(files, StreamedActions) and _engine(engine).distributed:
        return _distributed_totals(files, _engine(engine), boundaries, dv)
    agg = _Totals.empty(len(boundaries))
    for part in _file_parts(files, ["size", "deletionVector"]):
        sizes = _require_sizes(_contiguous(part.column("size")))
        c, t = _engine(engine).size_histogram(sizes, boundaries)
        agg = agg.plus(_part_totals(part, c, t, dv))
    return agg


_NO_SIZE = ("has no size, which every add action must have (spec \"Add File and Remove "
            "File\"), so the table's size is not known and no checksum is written")


def _require_sizes(sizes: pa.Array) -> pa.Array:
    if sizes.null_count:
        raise CorruptLogError(f"a live file {_NO_SIZE}")
    return sizes


def _sizeless(files: pa.Table | StreamedActions) -> str | None:
    """The message naming the first live file without a size (None: none found)."""
    for part in _file_parts(files, ["path", "size"]):
        missing = pc.is_null(part.column("size"))
        if pc.any(missing).as_py():
            at = pc.index(missing, True).as_py()
            return f"the live file {part.column('path')[at].as_py()!r} {_NO_SIZE}"
    return None


def _part_totals(part: pa.Table, counts: list[int], totals: list[int], dv: bool) -> _Totals:
    """The aggregates of `part`, its size histogram (`counts`, `totals`) given.

    Raises:
        CorruptLogError: a live file of `part` has no size.
    """
    sizes = _require_sizes(_contiguous(part.column("size")))
    num_dv = num_deleted = 0
    dv_counts = [0] * len(DELETED_RECORD_COUNT_BIN_STARTS)
    if dv:
        num_dv, num_deleted, hist = _dv_metrics(part)
        dv_counts = list(hist.deleted_record_counts)
    return _Totals(
        part.num_rows,
        int(pc.sum(sizes).as_py() or 0),
        list(counts),
        list(totals),
        num_dv,
        num_deleted,
        dv_counts,
    )


def _read_item_totals(
    spec: dict[str, Any],
    boundaries: list[int],
    dv: bool,
    storage: Storage,
    item: tuple[str, str, int],
) -> _Totals:
    """On a worker: the aggregates of one row group of the checkpoint's live files (the
    superseded keys, a small set, travel in `spec`)."""
    from delta_ops.engine.local import histogram

    agg = _Totals.empty(len(boundaries))
    for part in StreamedActions.from_portable(storage, spec).read_item(item):
        c, t = histogram(_contiguous(part.column("size")), boundaries)
        agg = agg.plus(_part_totals(part, c, t, dv))
    return agg


def _distributed_totals(
    files: StreamedActions, engine: Engine, boundaries: list[int], dv: bool
) -> _Totals:
    """The aggregates of a streamed state's live files, the checkpoint's row groups read on
    the engine's workers (one task per row group), the commits' winners here."""
    from delta_ops.engine.local import histogram

    task = functools.partial(_read_item_totals, files.portable(), boundaries, dv)
    agg = _Totals.empty(len(boundaries))
    for partial in engine.map_tasks(files.storage, task, files.read_items()):
        agg = agg.plus(partial)
    held = files.held()
    for start in range(0, held.num_rows, BATCH_ROWS):
        part = held.slice(start, BATCH_ROWS)
        c, t = histogram(_contiguous(part.column("size")), boundaries)
        agg = agg.plus(_part_totals(part, c, t, dv))
    return agg


def _file_parts(
    files: pa.Table | StreamedActions, columns: list[str] | None = None
) -> Iterator[pa.Table]:
    """The live files: a loaded table as it is, a streamed one a row group at a time (only
    `columns` read from the checkpoint when given)."""
    if isinstance(files, StreamedActions):
        yield from files.tables(columns)
    else:
        yield files  # even empty: the engine aggregates the (empty) histogram, as always


def _contiguous(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return col


def _dv_metrics(files: pa.Table) -> tuple[int, int, DeletedRecordCountsHistogram]:
    """(number of DVs, deleted rows, deleted-record-counts histogram) of live files."""
    n = files.num_rows
    if not n:
        return 0, 0, DeletedRecordCountsHistogram.empty()
    dv = files.column("deletionVector").combine_chunks()
    has_dv = pc.and_(pc.is_valid(dv), pc.is_valid(dv.field("storageType")))
    has_dv = pc.fill_null(has_dv, False)
    card = pc.if_else(has_dv, pc.fill_null(dv.field("cardinality"), 0), 0)
    cards = np.asarray(card.to_numpy(zero_copy_only=False), dtype=np.int64)
    bins = np.searchsorted(np.asarray(DELETED_RECORD_COUNT_BIN_STARTS, np.int64), cards, "right")
    counts = np.bincount(bins - 1, minlength=len(DELETED_RECORD_COUNT_BIN_STARTS))
    return (
        int(pc.sum(pc.cast(has_dv, pa.int64())).as_py() or 0),
        int(cards.sum()),
        DeletedRecordCountsHistogram(tuple(int(c) for c in counts)),
    )


def _commit_info_of(snapshot: Snapshot) -> dict | None:
    """The version's commitInfo: from the replay, else read from its commit up to the line
    that holds it (a checkpoint at the version: the commit's file actions, maybe millions,
    are not parsed)."""
    ci = snapshot.commit_infos.get(snapshot.version)
    if ci is not None:
        return dict(ci.raw)
    try:
        return read_commit_info(snapshot.storage, snapshot.version)
    except VersionNotFoundError:
        return None  # the commit was cleaned up; the checkpoint alone makes this version

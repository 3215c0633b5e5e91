"""Full computation of a version checksum: aggregate the snapshot of version N (checkpoint
plus commits); the file size histogram is aggregated by the Engine, so on Spark it runs
where the files are.

Spec section: "Version Checksum File" (every field, from the reconstructed state).
"""

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.engine.base import Engine
from delta_ops.errors import (
    VersionNotFoundError,
)
from delta_ops.log.replay import read_commit
from delta_ops.log.snapshot import Snapshot
from delta_ops.log.stream import StreamedActions
from delta_ops.maintenance.checksum.base import (
    DEFAULT_POLICY,
    ChecksumPolicy,
    _clean_add,
    _domain_dict,
    _dv_readable,
    _engine,
    _first_commit_info,
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
    dv_readable = _dv_readable(protocol, metadata)
    # One pass over the live files, a bounded table at a time (the whole table when it is
    # loaded; a row group at a time when the snapshot is streamed): partial aggregates
    # added up, so memory does not grow with the table.
    boundaries = policy.boundaries
    counts = [0] * len(boundaries)
    totals = [0] * len(boundaries)
    table_size = num_files = 0
    num_dv = num_deleted = 0
    dv_counts = [0] * len(DELETED_RECORD_COUNT_BIN_STARTS)
    for part in _file_parts(files, ["size", "deletionVector"]):
        num_files += part.num_rows
        sizes = _contiguous(part.column("size"))
        c, t = _engine(engine).size_histogram(sizes, boundaries)
        counts = [a + b for a, b in zip(counts, c, strict=True)]
        totals = [a + b for a, b in zip(totals, t, strict=True)]
        table_size += int(pc.sum(sizes).as_py() or 0)
        if dv_readable:
            n_dv, n_del, hist = _dv_metrics(part)
            num_dv += n_dv
            num_deleted += n_del
            dv_counts = [
                a + b for a, b in zip(dv_counts, hist.deleted_record_counts, strict=True)
            ]
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
        in_commit_timestamp=_ict(metadata, version, commit_info),
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


def _file_parts(
    files: pa.Table | StreamedActions, columns: list[str] | None = None
) -> Iterator[pa.Table]:
    """The live files: a loaded table as it is, a streamed one a row group at a time (only
    `columns` read from the checkpoint when given)."""
    if isinstance(files, StreamedActions):
        yield from files.tables(columns)
    elif files.num_rows:
        yield files


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
    ci = snapshot.commit_infos.get(snapshot.version)
    if ci is not None:
        return dict(ci.raw)
    try:
        return _first_commit_info(read_commit(snapshot.storage, snapshot.version))
    except VersionNotFoundError:
        return None  # the commit was cleaned up; the checkpoint alone makes this version

"""Full computation of a version checksum: aggregate the snapshot of version N (checkpoint
plus commits); the file size histogram is aggregated by the Engine, so on Spark it runs
where the files are.

Spec section: "Version Checksum File" (every field, from the reconstructed state).
"""

from collections.abc import Mapping
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
    sizes = files.column("size") if files.num_rows else pa.array([], pa.int64())
    sizes_arr = sizes.combine_chunks() if isinstance(sizes, pa.ChunkedArray) else sizes
    counts, totals = _engine(engine).size_histogram(sizes_arr, policy.boundaries)
    histogram = FileSizeHistogram(tuple(policy.boundaries), tuple(counts), tuple(totals))
    table_size = int(pc.sum(sizes_arr).as_py() or 0) if len(sizes_arr) else 0

    num_dv = num_deleted = drc = None
    if _dv_readable(protocol, metadata):
        num_dv, num_deleted, drc = _dv_metrics(files)

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
    if policy.include_all_files(files.num_rows):
        all_files = tuple(_clean_add(a) for a in files.to_pylist())
    return VersionChecksum(
        table_size_bytes=table_size,
        num_files=files.num_rows,
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

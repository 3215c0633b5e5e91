"""Incremental computation of a version checksum (pure): `N-1.crc` plus commit N alone, as
Spark's `incrementallyDeriveChecksum` does, only when sound (see `derive_checksum` for when
it declines and the full computation runs instead).

Spec section: "Version Checksum File".
"""

from collections.abc import Mapping, Sequence
from typing import Any

from delta_ops.maintenance.checksum.base import (
    _READD_OPERATIONS,
    DEFAULT_POLICY,
    ChecksumPolicy,
    _cardinality,
    _clean_add,
    _domain_dict,
    _first_commit_info,
    _ict,
    _limited,
    _sorted_txns,
    _txn_dict,
    _txn_retention_configured,
)
from delta_ops.protocol.actions import Metadata, file_key
from delta_ops.protocol.crc import (
    DeletedRecordCountsHistogram,
    FileSizeHistogram,
    VersionChecksum,
)
from delta_ops.protocol.table_configuration import TableConfiguration

# ---- incremental computation (pure) --------------------------------------------------------


def derive_checksum(
    previous: VersionChecksum,
    actions: Sequence[Mapping[str, Any]],
    *,
    version: int,
    table: str,
    policy: ChecksumPolicy = DEFAULT_POLICY,
) -> tuple[VersionChecksum | None, str | None]:
    """Version `version`'s checksum from version `version - 1`'s and commit `version` alone.

    Pure. Returns (checksum, None), or (None, reason) when the derivation would not be
    sound and a full computation is needed.

    Args:
        previous: the checksum of `version - 1`.
        actions: the actions of commit `version`.
        version: the version to compute.
        table: the table root URI (canonicalizes absolute paths in file keys).
        policy: optional content (must match what a full computation would use).
    """
    if previous.metadata is None or previous.protocol is None:
        return None, "the previous checksum has no metadata or protocol"
    commit_info = _first_commit_info(actions)
    operation = str((commit_info or {}).get("operation") or "").upper()
    if operation in _READD_OPERATIONS:
        return None, f"operation {operation!r} re-adds or tombstones files already in the state"

    protocol, metadata = previous.protocol, previous.metadata
    adds: list[Mapping[str, Any]] = []
    removes: list[Mapping[str, Any]] = []
    txns: list[Mapping[str, Any]] = []
    domains: list[Mapping[str, Any]] = []
    keys: set[str] = set()
    for action in actions:
        if (a := action.get("add")) is not None:
            bucket = adds
        elif (a := action.get("remove")) is not None:
            bucket = removes
            if a.get("size") is None:
                return None, f"a remove action has no size: {a.get('path')}"
        else:
            if (p := action.get("protocol")) is not None:
                protocol = p
            elif (m := action.get("metaData")) is not None:
                metadata = m
            elif (t := action.get("txn")) is not None:
                txns.append(t)
            elif (d := action.get("domainMetadata")) is not None:
                domains.append(d)
            continue
        path = a.get("path")
        if not isinstance(path, str) or (bucket is adds and a.get("size") is None):
            return None, f"a file action lacks its path or size: {path}"
        key = file_key(path, a.get("deletionVector"), table)
        if key in keys:
            return None, f"the commit touches the file key of {path} twice"
        keys.add(key)
        bucket.append(a)
    if adds and not removes and all(a.get("dataChange") is False for a in adds):
        return None, "the commit only re-adds files (dataChange false, no removes)"

    config = TableConfiguration(protocol, Metadata(metadata), version, table)
    dv_metrics = config.deletion_vectors_readable
    live: dict[str, Mapping[str, Any]] | None = None
    if previous.all_files is not None:
        live = {
            file_key(f["path"], f.get("deletionVector"), table): f for f in previous.all_files
        }
        if len(live) != previous.num_files:
            live = None  # inconsistent list: do not trust it, use the counters
    hist = previous.file_size_histogram
    if live is None:
        if hist is None:
            return None, "the previous checksum has no file size histogram (and no allFiles)"
        if hist.sorted_bin_boundaries != tuple(policy.boundaries):
            return None, "the previous checksum uses other histogram bin boundaries"
        if dv_metrics and not (
            previous.has_dv_metrics and previous.deleted_record_counts_histogram is not None
        ):
            return None, "the previous checksum has no deletion vector metrics"

    if live is not None:
        # Exact: reconcile the commit against the previous version's file list.
        for r in removes:
            live.pop(file_key(r["path"], r.get("deletionVector"), table), None)
        for a in adds:
            live[file_key(a["path"], a.get("deletionVector"), table)] = a
        files = [_clean_add(f) for f in live.values()]
        sizes = [int(f["size"]) for f in files]
        num_files, table_size = len(files), sum(sizes)
        histogram = FileSizeHistogram.from_sizes(sizes, policy.boundaries)
        num_dv = num_deleted = drc = None
        if dv_metrics:
            pairs = [_cardinality(f) for f in files]
            num_dv = sum(p[0] for p in pairs)
            num_deleted = sum(p[1] for p in pairs)
            drc = DeletedRecordCountsHistogram.empty().updated(added=[p[1] for p in pairs])
    else:
        assert hist is not None
        files = None
        add_sizes = [int(a["size"]) for a in adds]
        rm_sizes = [int(r["size"]) for r in removes]
        num_files = previous.num_files + len(adds) - len(removes)
        table_size = previous.table_size_bytes + sum(add_sizes) - sum(rm_sizes)
        histogram = hist.updated(added=add_sizes, removed=rm_sizes)
        num_dv = num_deleted = drc = None
        if dv_metrics:
            add_c = [_cardinality(a) for a in adds]
            rm_c = [_cardinality(r) for r in removes]
            num_dv = previous.num_deletion_vectors + sum(c[0] for c in add_c) - sum(
                c[0] for c in rm_c
            )
            num_deleted = previous.num_deleted_records + sum(c[1] for c in add_c) - sum(
                c[1] for c in rm_c
            )
            assert previous.deleted_record_counts_histogram is not None
            drc = previous.deleted_record_counts_histogram.updated(
                added=[c[1] for c in add_c], removed=[c[1] for c in rm_c]
            )
    if (
        num_files < 0
        or table_size < 0
        or not histogram.is_valid
        or sum(histogram.file_counts) != num_files
        or (num_dv is not None and (num_dv < 0 or num_deleted < 0))
        or (drc is not None and not drc.is_valid)
    ):
        return None, "the incremental result has negative counts (a remove of a file not live)"

    new_txns: tuple[dict, ...] | None
    if _txn_retention_configured(metadata):
        new_txns = None
    elif previous.set_transactions is None:
        return None, "the previous checksum has no setTransactions"
    else:
        merged = {t["appId"]: _txn_dict(t) for t in previous.set_transactions}
        for t in txns:
            merged[t["appId"]] = _txn_dict(t)
        new_txns = _limited(_sorted_txns(merged), policy.max_set_transactions)
    if previous.domain_metadata is None:
        return None, "the previous checksum has no domainMetadata"
    live_domains = {d["domain"]: _domain_dict(d) for d in previous.domain_metadata}
    for d in domains:
        if d.get("removed"):
            live_domains.pop(d["domain"], None)
        else:
            live_domains[d["domain"]] = _domain_dict(d)
    new_domains = _limited(
        tuple(live_domains[k] for k in sorted(live_domains)), policy.max_domain_metadata
    )

    all_files = None
    if policy.include_all_files(num_files):
        if files is None:
            return None, "the previous checksum has no allFiles to derive them from"
        all_files = tuple(files)

    return (
        VersionChecksum(
            table_size_bytes=table_size,
            num_files=num_files,
            txn_id=(commit_info or {}).get("txnId"),
            in_commit_timestamp=_ict(config, version, commit_info),
            set_transactions=new_txns,
            domain_metadata=new_domains,
            metadata=dict(metadata),
            protocol=dict(protocol),
            file_size_histogram=histogram,
            num_deleted_records=num_deleted,
            num_deletion_vectors=num_dv,
            deleted_record_counts_histogram=drc,
            all_files=all_files,
            histogram_field=policy.histogram_field,
        ),
        None,
    )

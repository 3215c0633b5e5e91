"""Version checksums (`N.crc`): compute, write, backfill and verify.

Spec section: "Version Checksum File" (fields; writers write `N.crc` only after commit N and
never overwrite one; readers may validate a version against it). The object model, bin
boundaries and comparison live in `delta_ops.protocol.crc`; this module gets the state.

Two ways to compute version N's checksum:

* **full**: reconstruct the snapshot of N (checkpoint + commits) and aggregate it; the file
  size histogram is aggregated by the Engine, so on Spark it runs where the files are.
* **incremental**: `N-1.crc` plus commit N alone, as Spark's `incrementallyDeriveChecksum`
  does; the cost grows with the commit, not the table. It is used only when sound; otherwise
  (previous checksum missing, unreadable or incomplete, a remove without its size, a file
  key touched twice in the commit, an operation that re-adds live files such as COMPUTE
  STATS or a row-tracking backfill, or a result with a negative count) the full path runs.
  When `N-1.crc` lists `allFiles`, the new state is reconciled exactly from that list, so
  small tables need no trust in the commit at all.

Writing cross-checks before publishing: the bytes of a `.crc` are parsed again and compared
with the independent replay of the version (previous checkpoint + commits, never compaction
files) when the computation read compaction files, else with the state they were computed
from, which then is that replay or `N-1.crc` plus commit N; a difference raises
CrossCheckError and no file is written (`_cross_check`).

Computing and verifying only read the log (they work on tables with features delta_ops
does not know, such as variantType or collations, whose checksums Spark wrote); writing a
`.crc` passes the "checksum" feature gate first.

Incremental and full computation give the same checksum (a property test checks it on
random histories with deletion vectors, transactions, domain tombstones and in-commit
timestamps).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.engine.base import Engine
from delta_ops.errors import (
    ChecksumMismatchError,
    CrossCheckError,
    IncrementalChecksumUnavailableError,
    StorageError,
    VersionNotFoundError,
)
from delta_ops.log.replay import read_commit
from delta_ops.log.segment import build_log_segment, list_log
from delta_ops.log.snapshot import Snapshot, load_snapshot
from delta_ops.log.timestamps import IctEnablement
from delta_ops.maintenance.crosscheck import cross_check_snapshot
from delta_ops.protocol import features
from delta_ops.protocol.actions import ADD_TYPE, Metadata, file_key
from delta_ops.protocol.crc import (
    DELETED_RECORD_COUNT_BIN_STARTS,
    FILE_SIZE_BIN_BOUNDARIES,
    LEGACY_HISTOGRAM_FIELD,
    DeletedRecordCountsHistogram,
    FileSizeHistogram,
    InvalidChecksumError,
    VersionChecksum,
    compare_checksums,
    parse_checksum,
)
from delta_ops.protocol.filenames import LOG_DIR, LogFileKind, checksum_name, commit_name
from delta_ops.storage import Storage

Method = Literal["auto", "full", "incremental"]

#: Spark's default threshold (allFilesInCrc.thresholdNumFiles): list live files up to this.
DEFAULT_ALL_FILES_THRESHOLD = 50

# Operations whose add actions re-add files that are already live (Spark's
# operationNamesWhereAddFilesIgnoredForIncrementalCrc) or whose removes are not of live data
# files (DV tombstones), and manual updates: the incremental path falls back for them.
_READD_OPERATIONS = frozenset(
    {
        "COMPUTE STATS",
        "ROW TRACKING BACKFILL",
        "ROW TRACKING UNBACKFILL",
        "DROP FEATURE",
        "MANUAL UPDATE",
        "DELTA DELETION VECTOR TOMBSTONES",
        "ADD DELETION VECTOR TOMBSTONES",
    }
)
_ADD_FIELDS = tuple(f.name for f in ADD_TYPE)


@dataclass(frozen=True)
class ChecksumPolicy:
    """What optional content a computed checksum carries.

    Attributes:
        all_files_threshold: list `allFiles` when the table has at most this many files
            (None: never).
        max_set_transactions: omit `setTransactions` above this many (None: no limit). It
            is always omitted when `delta.setTransactionRetentionDuration` is set, since
            which transactions are live then depends on the clock.
        max_domain_metadata: omit `domainMetadata` above this many (None: no limit).
        histogram_field: the name the file size histogram is written under: `histogramOpt`
            (what Spark writes by default) or `fileSizeHistogram` (the spec's name).
        boundaries: file size histogram bin boundaries (Spark's by default).
    """

    all_files_threshold: int | None = DEFAULT_ALL_FILES_THRESHOLD
    max_set_transactions: int | None = None
    max_domain_metadata: int | None = None
    histogram_field: str = LEGACY_HISTOGRAM_FIELD
    boundaries: tuple[int, ...] = FILE_SIZE_BIN_BOUNDARIES

    def include_all_files(self, num_files: int) -> bool:
        return self.all_files_threshold is not None and num_files <= self.all_files_threshold


@dataclass(frozen=True)
class ComputedChecksum:
    """A checksum and how it was obtained ("incremental" or "full", and why not incremental)."""

    version: int
    checksum: VersionChecksum
    method: str
    fallback_reason: str | None = None


@dataclass(frozen=True)
class ChecksumWriteResult:
    """Outcome of writing one `N.crc` (an existing file is a normal outcome, not an error).

    `cross_check` says what the bytes were checked against before they got their name (see
    `_cross_check`); None when nothing was written by this call.
    """

    table: str
    version: int
    file: str
    written: bool
    already_existed: bool
    method: str | None = None
    fallback_reason: str | None = None
    cross_check: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "version": self.version,
            "file": self.file,
            "written": self.written,
            "already_existed": self.already_existed,
            "method": self.method,
            "fallback_reason": self.fallback_reason,
            "cross_check": self.cross_check,
        }


@dataclass(frozen=True)
class ChecksumBackfillResult:
    """Outcome of writing the missing checksums of a range of versions."""

    table: str
    start: int
    end: int
    written: tuple[int, ...]
    already_existed: tuple[int, ...]
    full_computations: int
    incremental_computations: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "start": self.start,
            "end": self.end,
            "written": list(self.written),
            "already_existed": list(self.already_existed),
            "full_computations": self.full_computations,
            "incremental_computations": self.incremental_computations,
        }


@dataclass(frozen=True)
class ChecksumMismatch:
    """A field of `version`'s checksum that does not match the recomputed state."""

    version: int
    field: str
    recorded: Any
    computed: Any

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "field": self.field,
            "recorded": self.recorded,
            "computed": self.computed,
        }


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of verifying one or more `.crc` files.

    Attributes:
        ok: no mismatch in any verified version.
        versions: the versions whose `.crc` was checked.
        mismatches: every mismatching field, all versions together.
    """

    table: str
    ok: bool
    versions: tuple[int, ...]
    mismatches: tuple[ChecksumMismatch, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "ok": self.ok,
            "versions": list(self.versions),
            "mismatches": [m.to_dict() for m in self.mismatches],
        }

    def raise_for_mismatch(self) -> None:
        """Raise ChecksumMismatchError naming the first mismatching version and fields."""
        if self.ok:
            return
        first = self.mismatches[0].version
        fields = sorted({m.field for m in self.mismatches if m.version == first})
        raise ChecksumMismatchError(
            f"the version checksum does not match the table state in {', '.join(fields)}",
            table=self.table,
            version=first,
            file=f"{LOG_DIR}/{checksum_name(first)}",
        )


# ---- helpers ------------------------------------------------------------------------------


def _engine(engine: Engine | None) -> Engine:
    if engine is not None:
        return engine
    from delta_ops.engine.local import LocalEngine

    return LocalEngine()


def checksum_path(version: int) -> str:
    """Table-relative path of version `version`'s checksum file."""
    return f"{LOG_DIR}/{checksum_name(version)}"


def _commit_path(version: int) -> str:
    return f"{LOG_DIR}/{commit_name(version)}"


def read_checksum(storage: Storage, version: int) -> VersionChecksum | None:
    """The parsed `version.crc`, or None when there is none.

    Raises:
        InvalidChecksumError: the file exists but is not a valid checksum (names the file).
    """
    path = checksum_path(version)
    try:
        data = storage.read(path)
    except StorageError:
        if not storage.exists(path):
            return None
        raise
    try:
        return parse_checksum(data)
    except InvalidChecksumError as exc:
        raise InvalidChecksumError(
            exc.reason, table=storage.root, version=version, file=path
        ) from exc


def _first_commit_info(actions: Sequence[Mapping[str, Any]]) -> dict | None:
    for a in actions:
        ci = a.get("commitInfo")
        if isinstance(ci, dict):
            return ci
    return None


def _ict(metadata: Mapping[str, Any], version: int, commit_info: Mapping | None) -> int | None:
    """inCommitTimestampOpt: the commit's inCommitTimestamp iff ICT is enabled at `version`."""
    if not IctEnablement.from_metadata(Metadata(metadata)).applies_to(version):
        return None
    if commit_info is None:
        return None
    value = commit_info.get("inCommitTimestamp")
    return int(value) if value is not None else None


def _dv_readable(protocol: Mapping[str, Any], metadata: Mapping[str, Any]) -> bool:
    """Deletion vectors may be present: the feature is supported and the format is Parquet.

    DV metrics are written exactly then (Spark writes them when DVs are *writable*, a subset;
    it keeps them once present while they stay readable).
    """
    provider = (metadata.get("format") or {}).get("provider", "parquet")
    return provider == "parquet" and features.is_feature_supported(protocol, "deletionVectors")


def action_dict(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A metaData or protocol action as JSON writes it: None fields dropped, and maps read
    from a Parquet checkpoint (lists of key/value pairs) turned back into objects."""
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if value is None:
            continue
        if key == "configuration" and isinstance(value, list):
            value = dict(value)
        elif key == "format" and isinstance(value, Mapping):
            value = {k: v for k, v in value.items() if v is not None}
            if isinstance(value.get("options"), list):
                value["options"] = dict(value["options"])
            value.setdefault("options", {})
        out[key] = value
    return out


def _txn_retention_configured(metadata: Mapping[str, Any]) -> bool:
    cfg = metadata.get("configuration") or {}
    return cfg.get("delta.setTransactionRetentionDuration") is not None


def _clean_add(add: Mapping[str, Any]) -> dict:
    """An add as listed in `allFiles`: known fields only, None dropped, dataChange false."""
    out: dict[str, Any] = {}
    for name in _ADD_FIELDS:
        value = add.get(name)
        if name == "dataChange":
            value = False
        if value is None:
            continue
        if name in ("partitionValues", "tags") and isinstance(value, list):
            value = dict(value)  # Arrow map -> list of pairs
        elif name == "deletionVector" and isinstance(value, dict):
            if value.get("storageType") is None:
                continue
            value = {k: v for k, v in value.items() if v is not None}
        out[name] = value
    return out


def _cardinality(action: Mapping[str, Any]) -> tuple[int, int]:
    """(1, cardinality) for a file action with a deletion vector, else (0, 0)."""
    dv = action.get("deletionVector")
    if not dv or dv.get("storageType") is None:
        return 0, 0
    return 1, int(dv.get("cardinality") or 0)


def _sorted_txns(txns: Mapping[str, Mapping[str, Any]]) -> tuple[dict, ...]:
    return tuple(dict(txns[k]) for k in sorted(txns))


def _txn_dict(t: Mapping[str, Any]) -> dict:
    out = {"appId": t["appId"], "version": int(t["version"])}
    if t.get("lastUpdated") is not None:
        out["lastUpdated"] = int(t["lastUpdated"])
    return out


def _domain_dict(d: Mapping[str, Any]) -> dict:
    return {
        "domain": d["domain"],
        "configuration": d.get("configuration") or "",
        "removed": False,
    }


def _limited(items: tuple[dict, ...], limit: int | None) -> tuple[dict, ...] | None:
    return None if limit is not None and len(items) > limit else items


# ---- full computation ---------------------------------------------------------------------


def checksum_from_snapshot(
    snapshot: Snapshot,
    *,
    engine: Engine | None = None,
    commit_info: Mapping[str, Any] | None = None,
    policy: ChecksumPolicy = ChecksumPolicy(),
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


# ---- incremental computation (pure) --------------------------------------------------------


def derive_checksum(
    previous: VersionChecksum,
    actions: Sequence[Mapping[str, Any]],
    *,
    version: int,
    table: str,
    policy: ChecksumPolicy = ChecksumPolicy(),
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

    dv_metrics = _dv_readable(protocol, metadata)
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
            in_commit_timestamp=_ict(metadata, version, commit_info),
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


# ---- the operations -----------------------------------------------------------------------


def _latest_version(storage: Storage) -> int:
    return build_log_segment(storage).version


def compute_version_checksum(
    table_or_storage: Any,
    *,
    version: int | None = None,
    engine: Engine | None = None,
    method: Method = "auto",
    policy: ChecksumPolicy = ChecksumPolicy(),
    storage_options: Mapping[str, Any] | None = None,
) -> ComputedChecksum:
    """Compute version `version`'s checksum (latest when None).

    Args:
        table_or_storage: a DeltaTable, Storage or table URI.
        version: the version; None for the latest.
        engine: for the full computation (LocalEngine when None).
        method: "auto" (incremental when `version-1.crc` allows it, else full), "full" or
            "incremental" (raise IncrementalChecksumUnavailableError when not possible).
        policy: optional content.
        storage_options: Used when `table_or_storage` is a URI (see `Storage.for_uri`).

    Raises:
        VersionNotFoundError, CorruptLogError, NotATableError: the version cannot be read.
        UnsupportedFeatureError: the table cannot be read by delta_ops.
        IncrementalChecksumUnavailableError: method="incremental" and it is not sound.
    """
    storage = Storage.of(table_or_storage, storage_options)
    computed, _ = _compute(storage, version, engine, method, policy)
    return computed


def _compute(
    storage: Storage,
    version: int | None,
    engine: Engine | None,
    method: Method,
    policy: ChecksumPolicy,
) -> tuple[ComputedChecksum, Snapshot | None]:
    """`compute_version_checksum`, also returning the snapshot of a full computation."""
    if method not in ("auto", "full", "incremental"):
        raise ValueError(f"method must be auto, full or incremental, not {method!r}")
    if version is None:
        version = _latest_version(storage)
    reason = "method full was asked for"
    if method != "full":
        reason = "version 0 has no previous version"
        if version > 0:
            try:
                previous = read_checksum(storage, version - 1)
            except InvalidChecksumError as exc:
                previous, reason = None, f"the previous checksum is invalid: {exc.reason}"
            else:
                if previous is None:
                    reason = f"version {version - 1} has no checksum file"
            if previous is not None:
                actions = read_commit(storage, version)
                checksum, reason = derive_checksum(
                    previous, actions, version=version, table=storage.root, policy=policy
                )
                if checksum is not None:
                    return ComputedChecksum(version, checksum, "incremental"), None
        if method == "incremental":
            raise IncrementalChecksumUnavailableError(
                f"cannot derive the checksum incrementally: {reason}",
                table=storage.root, version=version,
            )
    snapshot = load_snapshot(storage, version)
    checksum = checksum_from_snapshot(snapshot, engine=engine, policy=policy)
    return ComputedChecksum(version, checksum, "full", reason), snapshot


def compute_checksum(
    table_or_storage: Any,
    *,
    version: int | None = None,
    engine: Engine | None = None,
    method: Method = "auto",
    policy: ChecksumPolicy = ChecksumPolicy(),
    storage_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The checksum object `write_checksum` would write for `version` (latest when None).

    See `compute_version_checksum` for the arguments and errors.
    """
    return compute_version_checksum(
        table_or_storage, version=version, engine=engine, method=method, policy=policy,
        storage_options=storage_options,
    ).checksum.to_dict()


def write_checksum(
    table_or_storage: Any,
    *,
    version: int | None = None,
    engine: Engine | None = None,
    method: Method = "auto",
    policy: ChecksumPolicy = ChecksumPolicy(),
    storage_options: Mapping[str, Any] | None = None,
) -> ChecksumWriteResult:
    """Write `version.crc` (latest version when None) unless it exists.

    The file is created with an atomic put-if-absent, only after commit `version` exists,
    and never overwrites an existing checksum: that is an `already_existed` result.
    `table_or_storage` is a DeltaTable, Storage or table URI (opened with
    `storage_options`); the other arguments are those of `compute_version_checksum`.

    Raises:
        VersionNotFoundError: commit `version` does not exist.
        UnsupportedFeatureError: the table's protocol does not allow delta_ops to write.
        CrossCheckError: the checksum differs from the independent replay (nothing written).
        See also `compute_version_checksum`.
    """
    storage = Storage.of(table_or_storage, storage_options)
    if version is None:
        version = _latest_version(storage)
    path = checksum_path(version)
    if storage.exists(path):
        return ChecksumWriteResult(storage.root, version, path, False, True)
    if not storage.exists(_commit_path(version)):
        raise VersionNotFoundError(
            "the commit does not exist; a checksum is written only after its commit",
            table=storage.root, version=version, file=_commit_path(version),
        )
    computed, snapshot = _compute(storage, version, engine, method, policy)
    return _put(storage, computed, snapshot=snapshot, engine=engine, policy=policy)


def _put(
    storage: Storage,
    computed: ComputedChecksum,
    *,
    snapshot: Snapshot | None,
    engine: Engine | None,
    policy: ChecksumPolicy,
) -> ChecksumWriteResult:
    version = computed.version
    assert computed.checksum.protocol is not None
    features.ensure_supported(
        computed.checksum.protocol, "checksum", table=storage.root, version=version
    )
    path = checksum_path(version)
    data = computed.checksum.to_json()
    note = _cross_check(storage, computed, data, snapshot, engine=engine, policy=policy)
    written = storage.put_if_absent(path, data)
    return ChecksumWriteResult(
        storage.root, version, path, written, not written, computed.method,
        computed.fallback_reason, note,
    )


def _cross_check(
    storage: Storage,
    computed: ComputedChecksum,
    data: bytes,
    snapshot: Snapshot | None,
    *,
    engine: Engine | None,
    policy: ChecksumPolicy,
) -> str:
    """Check the bytes of a `.crc` before they get their name; returns what was checked.

    The bytes are parsed again and compared field by field (`compare_checksums`: numFiles,
    tableSizeBytes, numMetadata, numProtocol, the histograms, DV counts, txns, domains,
    metadata, protocol, allFiles) with a reference: the checksum of the independent replay
    (previous checkpoint + commits) when the snapshot was read through compaction files,
    after the two states were compared file by file; else the state the checksum was
    computed from, which then is itself the commits-only replay (full computation) or
    `N-1.crc` plus commit N (incremental: no compaction file is read).

    Raises:
        CrossCheckError: the bytes or the state differ from the reference; nothing written.
    """
    version = computed.version
    reference = computed.checksum
    if snapshot is None:
        note = (
            f"derived from {checksum_name(version - 1)} and commit {version} (no compaction "
            "file read); the bytes to publish were read back and compared with it"
        )
    else:
        path = cross_check_snapshot(snapshot, operation="crc write")
        note = path.note
        if path.replayed:
            assert path.snapshot is not None
            reference = checksum_from_snapshot(path.snapshot, engine=engine, policy=policy)
    try:
        decoded = parse_checksum(data)
    except InvalidChecksumError as exc:
        raise CrossCheckError(
            f"crc write refused: the checksum to publish cannot be read back: {exc.reason}",
            table=storage.root, version=version, file=checksum_path(version),
        ) from exc
    mismatches = compare_checksums(decoded, reference)
    if mismatches:
        fields = ", ".join(
            f"{m.field} {str(m.recorded)[:80]} against {str(m.computed)[:80]}"
            for m in mismatches
        )
        raise CrossCheckError(
            f"crc write refused: the checksum to publish (numFiles {decoded.num_files}) "
            f"differs from the independent reference (numFiles {reference.num_files}) in "
            f"{fields}; nothing was published",
            table=storage.root, version=version, file=checksum_path(version),
            published_count=decoded.num_files, independent_count=reference.num_files,
        )
    return note


def write_checksums(
    table_or_storage: Any,
    *,
    start: int,
    end: int,
    engine: Engine | None = None,
    policy: ChecksumPolicy = ChecksumPolicy(),
    storage_options: Mapping[str, Any] | None = None,
) -> ChecksumBackfillResult:
    """Write the missing `.crc` files of versions `start`..`end` (inclusive), cheaply.

    One full computation at most per unsound step: each version's checksum is derived from
    the previous one (written or existing) and its commit alone. `table_or_storage` is a
    DeltaTable, Storage or table URI (opened with `storage_options`).

    Raises:
        ValueError: start > end or start < 0.
        VersionNotFoundError: a commit in the range does not exist.
    """
    if start < 0 or start > end:
        raise ValueError(f"invalid version range {start}..{end}")
    storage = Storage.of(table_or_storage, storage_options)
    previous: VersionChecksum | None = None
    if start > 0:
        try:
            previous = read_checksum(storage, start - 1)
        except InvalidChecksumError:
            previous = None
    written: list[int] = []
    existed: list[int] = []
    full = incremental = 0
    for version in range(start, end + 1):
        try:
            existing = read_checksum(storage, version)
        except InvalidChecksumError:
            existing = None
            existed.append(version)  # present but invalid: never overwritten
            previous = None
            continue
        if existing is not None:
            existed.append(version)
            previous = existing
            continue
        actions = read_commit(storage, version)
        checksum = None
        reason = "no previous checksum"
        if previous is not None:
            checksum, reason = derive_checksum(
                previous, actions, version=version, table=storage.root, policy=policy
            )
        snapshot = None
        if checksum is not None:
            computed = ComputedChecksum(version, checksum, "incremental")
            incremental += 1
        else:
            snapshot = load_snapshot(storage, version)
            checksum = checksum_from_snapshot(
                snapshot, engine=engine, commit_info=_first_commit_info(actions), policy=policy
            )
            computed = ComputedChecksum(version, checksum, "full", reason)
            full += 1
        result = _put(
            storage,
            computed,
            snapshot=snapshot if computed.method == "full" else None,
            engine=engine,
            policy=policy,
        )
        (written if result.written else existed).append(version)
        previous = checksum
    return ChecksumBackfillResult(
        storage.root, start, end, tuple(written), tuple(existed), full, incremental
    )


def checksum_versions(storage: Storage) -> list[int]:
    """Versions that have a `.crc` file, ascending."""
    return [lf.version for lf, _ in list_log(storage) if lf.kind == LogFileKind.CHECKSUM]


def verify_checksum(
    table_or_storage: Any,
    *,
    version: int | None = None,
    all_versions: bool = False,
    engine: Engine | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> VerifyResult:
    """Recompute the state of versions with a `.crc` and compare it field by field.

    Every field present in both the recorded and the recomputed checksum is compared (old
    files without metadata, protocol or histograms are verified on what they have); the
    histogram is recomputed with the recorded bin boundaries; `allFiles` is compared when
    recorded.

    Args:
        table_or_storage: a DeltaTable, Storage or table URI.
        version: the version to verify (latest when None and not `all_versions`).
        all_versions: verify every `.crc` in the log.
        engine: for the recomputation.
        storage_options: Used when `table_or_storage` is a URI (see `Storage.for_uri`).

    Raises:
        VersionNotFoundError: `version` has no `.crc` file.
    """
    storage = Storage.of(table_or_storage, storage_options)
    if all_versions:
        if version is not None:
            raise ValueError("give either a version or all_versions, not both")
        versions = checksum_versions(storage)
    else:
        if version is None:
            version = _latest_version(storage)
        if not storage.exists(checksum_path(version)):
            raise VersionNotFoundError(
                "there is no version checksum file to verify",
                table=storage.root, version=version, file=checksum_path(version),
            )
        versions = [version]
    mismatches: list[ChecksumMismatch] = []
    for v in versions:
        mismatches.extend(_verify_one(storage, v, engine))
    return VerifyResult(storage.root, not mismatches, tuple(versions), tuple(mismatches))


def _verify_one(storage: Storage, version: int, engine: Engine | None) -> list[ChecksumMismatch]:
    try:
        recorded = read_checksum(storage, version)
    except InvalidChecksumError as exc:
        return [ChecksumMismatch(version, "file", exc.reason, None)]
    if recorded is None:  # deleted since listed
        return []
    try:
        snapshot = load_snapshot(storage, version)
    except VersionNotFoundError as exc:
        return [ChecksumMismatch(version, "version", "checksum file present", exc.reason)]
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
        computed = _with_all_txns(computed, snapshot)
    return [
        ChecksumMismatch(version, m.field, m.recorded, m.computed)
        for m in compare_checksums(recorded, computed)
    ]


def _with_all_txns(computed: VersionChecksum, snapshot: Snapshot) -> VersionChecksum:
    txns = _sorted_txns({k: _txn_dict(t.to_dict()) for k, t in snapshot.txns.items()})
    return replace(computed, set_transactions=txns)


__all__ = [
    "ChecksumBackfillResult",
    "ChecksumMismatch",
    "ChecksumPolicy",
    "ChecksumWriteResult",
    "ComputedChecksum",
    "IncrementalChecksumUnavailableError",
    "VerifyResult",
    "checksum_from_snapshot",
    "checksum_path",
    "checksum_versions",
    "compute_checksum",
    "compute_version_checksum",
    "derive_checksum",
    "read_checksum",
    "read_commit",
    "verify_checksum",
    "write_checksum",
    "write_checksums",
]

"""The version checksum (`N.crc`) object model: fields, histograms, parsing, comparison.

The histograms (bins, `FileSizeHistogram`, `DeletedRecordCountsHistogram`) live in
`delta_ops.protocol.histograms` and are importable from here as before.

Spec section: "Version Checksum File" (the checksum fields, `FileSizeHistogram`,
`DeletedRecordCountsHistogram`, and how readers validate a version against its checksum).

Where the spec's prose and what Spark writes differ, this module follows Spark:

* Spark writes the file size histogram under `histogramOpt` (its legacy name; the spec calls
  it `fileSizeHistogram`); both are read, and `histogramOpt` is the default name written.
* Spark's default bin boundaries (`FileSizeHistogram.DEFAULT_BINS`) are
  `FILE_SIZE_BIN_BOUNDARIES`, so histograms compare across engines.
* Old Spark and Databricks writers wrote `numTransactions` (a count) instead of
  `setTransactions`, and files without `metadata`/`protocol`; they parse, and verification
  compares what is there.
* Spark compares metadata and protocol as values: `None` fields are absent, feature lists are
  sets.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from delta_ops.errors import InvalidChecksumError
from delta_ops.protocol.histograms import (
    DELETED_RECORD_COUNT_BIN_STARTS,
    FILE_SIZE_BIN_BOUNDARIES,
    GB,
    HISTOGRAM_FIELD,
    INT_MAX,
    KB,
    LEGACY_HISTOGRAM_FIELD,
    MB,
    NUM_DELETED_RECORD_BINS,
    DeletedRecordCountsHistogram,
    FileSizeHistogram,
    deleted_records_bin,
    file_size_bin,
)
from delta_ops.protocol.path_identity import canonical_path

# Field order of Spark's VersionChecksum (Jackson writes case-class fields in order).
_FIELD_ORDER = (
    "txnId",
    "tableSizeBytes",
    "numFiles",
    "numDeletedRecordsOpt",
    "numDeletionVectorsOpt",
    "numMetadata",
    "numProtocol",
    "inCommitTimestampOpt",
    "setTransactions",
    "domainMetadata",
    "metadata",
    "protocol",
    "<histogram>",
    "deletedRecordCountsHistogramOpt",
    "allFiles",
)
_KNOWN = frozenset(_FIELD_ORDER) - {"<histogram>"} | {
    HISTOGRAM_FIELD, LEGACY_HISTOGRAM_FIELD, "numTransactions",
}


@dataclass(frozen=True)
class VersionChecksum:
    """The content of one `N.crc` file.

    Optional fields are None when absent. `set_transactions`, `domain_metadata` and
    `all_files` are tuples of action dicts as in the log (`txn`, live `domainMetadata`,
    `add` with `dataChange: false`). `num_transactions` is the legacy count some old writers
    wrote instead of `setTransactions`. `extra` keeps fields this model does not know (e.g.
    Databricks' `lastManifestCommit`) so a parsed file round-trips. `histogram_field` is the
    name the histogram was read under (or is to be written under).
    """

    table_size_bytes: int
    num_files: int
    num_metadata: int = 1
    num_protocol: int = 1
    txn_id: str | None = None
    in_commit_timestamp: int | None = None
    set_transactions: tuple[dict, ...] | None = None
    domain_metadata: tuple[dict, ...] | None = None
    metadata: dict | None = None
    protocol: dict | None = None
    file_size_histogram: FileSizeHistogram | None = None
    num_deleted_records: int | None = None
    num_deletion_vectors: int | None = None
    deleted_record_counts_histogram: DeletedRecordCountsHistogram | None = None
    all_files: tuple[dict, ...] | None = None
    num_transactions: int | None = None
    extra: dict = field(default_factory=dict)
    histogram_field: str = LEGACY_HISTOGRAM_FIELD

    @property
    def has_dv_metrics(self) -> bool:
        return self.num_deleted_records is not None and self.num_deletion_vectors is not None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object, in Spark's field order, absent optional fields left out."""
        values: dict[str, Any] = {
            "txnId": self.txn_id,
            "tableSizeBytes": self.table_size_bytes,
            "numFiles": self.num_files,
            "numDeletedRecordsOpt": self.num_deleted_records,
            "numDeletionVectorsOpt": self.num_deletion_vectors,
            "numMetadata": self.num_metadata,
            "numProtocol": self.num_protocol,
            "inCommitTimestampOpt": self.in_commit_timestamp,
            "setTransactions": _list(self.set_transactions),
            "domainMetadata": _list(self.domain_metadata),
            "metadata": self.metadata,
            "protocol": self.protocol,
            "<histogram>": self.file_size_histogram.to_dict() if self.file_size_histogram else None,
            "deletedRecordCountsHistogramOpt": (
                self.deleted_record_counts_histogram.to_dict()
                if self.deleted_record_counts_histogram
                else None
            ),
            "allFiles": _list(self.all_files),
        }
        out: dict[str, Any] = {}
        for name in _FIELD_ORDER:
            value = values[name]
            if value is None:
                continue
            out[self.histogram_field if name == "<histogram>" else name] = value
        if self.num_transactions is not None and self.set_transactions is None:
            out["numTransactions"] = self.num_transactions
        for k, v in self.extra.items():
            out.setdefault(k, v)
        return out

    def to_json(self) -> bytes:
        """The file content: one JSON object and a newline, as Spark writes it."""
        return orjson.dumps(self.to_dict()) + b"\n"


def _list(items: tuple[dict, ...] | None) -> list[dict] | None:
    return None if items is None else [dict(i) for i in items]


def _opt_int(obj: Mapping[str, Any], key: str) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidChecksumError(f"{key} must be an integer, got {value!r:.100}")
    return value


def _opt_dicts(obj: Mapping[str, Any], key: str) -> tuple[dict, ...] | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise InvalidChecksumError(f"{key} must be a list of objects, got {value!r:.100}")
    return tuple(value)


def _opt_dict(obj: Mapping[str, Any], key: str) -> dict | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidChecksumError(f"{key} must be an object, got {value!r:.100}")
    return value


def checksum_from_dict(obj: Mapping[str, Any]) -> VersionChecksum:
    """Build a VersionChecksum from a parsed `.crc` JSON object (legacy names accepted).

    Raises:
        InvalidChecksumError: a required field is missing or a field has the wrong type.
    """
    if not isinstance(obj, Mapping):
        raise InvalidChecksumError("a version checksum must be a JSON object")
    for key in ("tableSizeBytes", "numFiles"):
        if _opt_int(obj, key) is None:
            raise InvalidChecksumError(f"the required field {key} is missing")
    if HISTOGRAM_FIELD in obj and obj[HISTOGRAM_FIELD] is not None:
        hist_name, hist = HISTOGRAM_FIELD, obj[HISTOGRAM_FIELD]
    else:
        hist_name, hist = LEGACY_HISTOGRAM_FIELD, obj.get(LEGACY_HISTOGRAM_FIELD)
    drc = obj.get("deletedRecordCountsHistogramOpt")
    txn_id = obj.get("txnId")
    if txn_id is not None and not isinstance(txn_id, str):
        raise InvalidChecksumError(f"txnId must be a string, got {txn_id!r:.100}")
    return VersionChecksum(
        table_size_bytes=obj["tableSizeBytes"],
        num_files=obj["numFiles"],
        num_metadata=_opt_int(obj, "numMetadata") if obj.get("numMetadata") is not None else 1,
        num_protocol=_opt_int(obj, "numProtocol") if obj.get("numProtocol") is not None else 1,
        txn_id=txn_id,
        in_commit_timestamp=_opt_int(obj, "inCommitTimestampOpt"),
        set_transactions=_opt_dicts(obj, "setTransactions"),
        domain_metadata=_opt_dicts(obj, "domainMetadata"),
        metadata=_opt_dict(obj, "metadata"),
        protocol=_opt_dict(obj, "protocol"),
        file_size_histogram=FileSizeHistogram.from_dict(hist) if hist is not None else None,
        num_deleted_records=_opt_int(obj, "numDeletedRecordsOpt"),
        num_deletion_vectors=_opt_int(obj, "numDeletionVectorsOpt"),
        deleted_record_counts_histogram=(
            DeletedRecordCountsHistogram.from_dict(drc) if drc is not None else None
        ),
        all_files=_opt_dicts(obj, "allFiles"),
        num_transactions=_opt_int(obj, "numTransactions"),
        extra={k: v for k, v in obj.items() if k not in _KNOWN},
        histogram_field=hist_name,
    )


def parse_checksum(data: bytes | str) -> VersionChecksum:
    """Parse the content of a `.crc` file (one JSON object; Spark adds a newline).

    Raises:
        InvalidChecksumError: empty, not JSON, or not a valid checksum object.
    """
    text = data.strip() if isinstance(data, (bytes, str)) else data
    if not text:
        raise InvalidChecksumError("the checksum file is empty")
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError:
        # Some writers may append further lines; Spark reads only the first.
        first = text.splitlines()[0]
        try:
            obj = orjson.loads(first)
        except orjson.JSONDecodeError as exc:
            raise InvalidChecksumError(f"the checksum file is not valid JSON: {exc}") from exc
    return checksum_from_dict(obj)


# ---- comparison ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldMismatch:
    """One field whose recorded value differs from the recomputed one."""

    field: str
    recorded: Any
    computed: Any

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "recorded": self.recorded, "computed": self.computed}


def normalize_metadata(m: Mapping[str, Any]) -> dict[str, Any]:
    """Metadata as a value: None fields dropped, defaults filled (format, lists, maps)."""
    out = {k: v for k, v in m.items() if v is not None}
    fmt = dict(out.get("format") or {})
    fmt.setdefault("provider", "parquet")
    fmt["options"] = {k: v for k, v in (fmt.get("options") or {}).items()}
    out["format"] = fmt
    out["partitionColumns"] = list(out.get("partitionColumns") or [])
    out["configuration"] = dict(out.get("configuration") or {})
    return out


def normalize_protocol(p: Mapping[str, Any]) -> dict[str, Any]:
    """Protocol as a value: versions, and feature lists as sorted sets (absent = empty)."""
    out = {k: v for k, v in p.items() if v is not None}
    for key in ("readerFeatures", "writerFeatures"):
        out[key] = sorted(set(out.get(key) or []))
    return out


def _txn_key(t: Mapping[str, Any]) -> tuple:
    return (t.get("appId"), t.get("version"), t.get("lastUpdated"))


def _domain_key(d: Mapping[str, Any]) -> tuple:
    return (d.get("domain"), d.get("configuration") or "")


def stats_meaning(stats: Any) -> Any:
    """What a file's statistics say, comparable whatever form they were written in.

    `stats` is the JSON string of an add (or the object it holds, or typed statistics as
    Python values, e.g. a checkpoint's `stats_parsed` read as they are). The result is the
    object with every null value (and so every absent column) dropped, so `{"a": null}`
    and `{}` mean the same; numbers compare as numbers (1 and 1.0 are equal, as in JSON),
    booleans stay apart from numbers and NaN equals NaN. None when there are no statistics
    (None or an empty string); a string that is not JSON stays as it is (equal only to
    itself).
    """
    if stats is None or stats == "":
        return None
    if isinstance(stats, (str, bytes)):
        try:
            stats = orjson.loads(stats)
        except orjson.JSONDecodeError:
            return stats
    return _canonical(stats)


def _canonical(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _canonical(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, float) and value != value:
        return ("NaN",)
    return value


def _file_identity(a: Mapping[str, Any], root: str | None) -> tuple:
    """The file an add names: its path (canonical when the table root is known, so a
    percent-encoded and a plain spelling are one file) and its deletion vector's id."""
    path = a.get("path")
    if root is not None and isinstance(path, str):
        path = canonical_path(path, root)
    dv = a.get("deletionVector") or None
    dv_id = None
    if isinstance(dv, Mapping) and dv.get("storageType") is not None:
        dv_id = (dv.get("storageType"), dv.get("pathOrInlineDv"), dv.get("offset"))
    return (path, dv_id)


def _file_value(a: Mapping[str, Any]) -> tuple:
    """Everything compared of an add but its statistics: partition values, size, time, the
    deletion vector, row tracking's `baseRowId` and `defaultRowCommitVersion`, `tags` (none
    and empty alike) and `clusteringProvider`."""
    dv = a.get("deletionVector") or None
    dv_v = None
    if dv:
        dv_v = tuple(sorted((k, v) for k, v in dv.items() if v is not None))
    pv = a.get("partitionValues") or {}
    tags = a.get("tags") or {}
    return (
        tuple(sorted(pv.items())),
        a.get("size"),
        a.get("modificationTime"),
        dv_v,
        a.get("baseRowId"),
        a.get("defaultRowCommitVersion"),
        tuple(sorted(tags.items())) if isinstance(tags, Mapping) else tags,
        a.get("clusteringProvider"),
    )


def _same_file(r: Mapping[str, Any], c: Mapping[str, Any]) -> bool:
    """Same values, and the same statistics by meaning when both sides have some (they
    are optional: a checkpoint may keep none, `delta.checkpoint.writeStatsAsJson` off)."""
    if _file_value(r) != _file_value(c):
        return False
    rs, cs = stats_meaning(r.get("stats")), stats_meaning(c.get("stats"))
    return rs is None or cs is None or rs == cs


def _compare_files(
    recorded: Sequence[Mapping], computed: Sequence[Mapping], root: str | None = None
) -> tuple[list, list]:
    """Recorded and computed add actions that do not match: the lists are compared as sets
    keyed by file (path and deletion vector, `_file_identity`), in whatever order either
    lists them, then file by file (`_same_file`)."""
    rec = {_file_identity(a, root): a for a in recorded}
    com = {_file_identity(a, root): a for a in computed}
    only_rec = [rec[k] for k in rec if k not in com or not _same_file(rec[k], com[k])]
    only_com = [com[k] for k in com if k not in rec or not _same_file(rec[k], com[k])]
    if len(rec) != len(recorded) and not only_rec:
        only_rec = [dict(a) for a in recorded]  # duplicates in the recorded list
    return only_rec, only_com


def compare_checksums(
    recorded: VersionChecksum, computed: VersionChecksum, *, root: str | None = None
) -> list[FieldMismatch]:
    """Every field present in both whose values differ (Spark's `checkMismatch`, extended).

    `root`: the table root, so `allFiles` paths are keyed by their canonical form.

    Fields are named as in the recorded file (e.g. `histogramOpt` when it used that name).
    Counts are compared always; optional fields only when both sides have them; metadata
    and protocol as values; transactions, domains and files as sets (files keyed by path and
    deletion vector, their statistics compared by meaning, `stats_meaning`, when both sides
    have them); the histogram must have been computed with the recorded boundaries to compare equal.
    """
    out: list[FieldMismatch] = []

    def add(name: str, r: Any, c: Any) -> None:
        out.append(FieldMismatch(name, r, c))

    if recorded.txn_id is not None and computed.txn_id is not None:
        if recorded.txn_id != computed.txn_id:
            add("txnId", recorded.txn_id, computed.txn_id)
    for name, r, c in (
        ("tableSizeBytes", recorded.table_size_bytes, computed.table_size_bytes),
        ("numFiles", recorded.num_files, computed.num_files),
        ("numMetadata", recorded.num_metadata, computed.num_metadata),
        ("numProtocol", recorded.num_protocol, computed.num_protocol),
    ):
        if r != c:
            add(name, r, c)
    # Spec: inCommitTimestampOpt is "present if and only if In-Commit Timestamps are
    # enabled"; the computed side has it exactly then.
    if (recorded.in_commit_timestamp is None) != (computed.in_commit_timestamp is None):
        add("inCommitTimestampOpt", recorded.in_commit_timestamp, computed.in_commit_timestamp)
    for name, r, c in (
        ("inCommitTimestampOpt", recorded.in_commit_timestamp, computed.in_commit_timestamp),
        ("numDeletedRecordsOpt", recorded.num_deleted_records, computed.num_deleted_records),
        ("numDeletionVectorsOpt", recorded.num_deletion_vectors, computed.num_deletion_vectors),
    ):
        if r is not None and c is not None and r != c:
            add(name, r, c)
    if recorded.set_transactions is not None and computed.set_transactions is not None:
        r_set = sorted(map(_txn_key, recorded.set_transactions), key=repr)
        c_set = sorted(map(_txn_key, computed.set_transactions), key=repr)
        if r_set != c_set or len(set(r_set)) != len(r_set):
            add("setTransactions", list(recorded.set_transactions), list(computed.set_transactions))
    if recorded.num_transactions is not None:
        count = (
            len(computed.set_transactions)
            if computed.set_transactions is not None
            else computed.num_transactions
        )
        if count is not None and count != recorded.num_transactions:
            add("numTransactions", recorded.num_transactions, count)
    if recorded.domain_metadata is not None and computed.domain_metadata is not None:
        r_dom = sorted(
            (_domain_key(d) for d in recorded.domain_metadata if not d.get("removed")), key=repr
        )
        c_dom = sorted(
            (_domain_key(d) for d in computed.domain_metadata if not d.get("removed")), key=repr
        )
        if r_dom != c_dom or any(d.get("removed") for d in recorded.domain_metadata):
            add("domainMetadata", list(recorded.domain_metadata), list(computed.domain_metadata))
    if recorded.metadata is not None and computed.metadata is not None:
        if normalize_metadata(recorded.metadata) != normalize_metadata(computed.metadata):
            add("metadata", recorded.metadata, computed.metadata)
    if recorded.protocol is not None and computed.protocol is not None:
        if normalize_protocol(recorded.protocol) != normalize_protocol(computed.protocol):
            add("protocol", recorded.protocol, computed.protocol)
    if recorded.file_size_histogram is not None and computed.file_size_histogram is not None:
        if recorded.file_size_histogram != computed.file_size_histogram:
            add(
                recorded.histogram_field,
                recorded.file_size_histogram.to_dict(),
                computed.file_size_histogram.to_dict(),
            )
    r_drc = recorded.deleted_record_counts_histogram
    c_drc = computed.deleted_record_counts_histogram
    if r_drc is not None and c_drc is not None and r_drc != c_drc:
        add("deletedRecordCountsHistogramOpt", r_drc.to_dict(), c_drc.to_dict())
    if recorded.all_files is not None and computed.all_files is not None:
        only_rec, only_com = _compare_files(recorded.all_files, computed.all_files, root)
        if only_rec or only_com:
            add("allFiles", only_rec, only_com)
    return out


__all__ = [
    "checksum_from_dict",
    "compare_checksums",
    "DELETED_RECORD_COUNT_BIN_STARTS",
    "deleted_records_bin",
    "DeletedRecordCountsHistogram",
    "FieldMismatch",
    "file_size_bin",
    "FILE_SIZE_BIN_BOUNDARIES",
    "FileSizeHistogram",
    "GB",
    "HISTOGRAM_FIELD",
    "INT_MAX",
    "InvalidChecksumError",
    "KB",
    "LEGACY_HISTOGRAM_FIELD",
    "MB",
    "normalize_metadata",
    "normalize_protocol",
    "NUM_DELETED_RECORD_BINS",
    "parse_checksum",
    "stats_meaning",
    "VersionChecksum",
]

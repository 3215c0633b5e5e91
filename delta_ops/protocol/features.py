"""Table features as data, and the one gate every operation passes: `ensure_supported`.

Spec sections: "Protocol Evolution" (reader/writer versions, readerFeatures/writerFeatures),
"Table Features" (supported vs. active features), "Table Features for New and Existing
Tables" (legacy versions imply features when upgrading), "Writer Version Requirements",
"Reader Version Requirements" and the appendix "Valid Feature Names in Table Features", plus
each feature's own section for the table property that activates it.

Each feature is one `Feature` row in `FEATURES`: its name, whether readers must understand
it, the legacy protocol versions that implied it (if any), the table property that activates
it, and which of our operations can run on a table that has it. The table holds every feature
of the spec's "Valid Feature Names in Table Features" table, the features the current protocol
(`PROTOCOL-current.md`) defines in their own sections (catalogManaged, variantType,
variantShredding, typeWidening), the preview spellings Spark wrote before those were final,
and two Spark features the spec does not define but real tables carry (checkpointProtection,
collations). `FeatureName` names them all: a misspelt name is an error, not a silent "no".
Names in no row are unknown: every operation refuses a table listing them, while inspection
can still name them with `unsupported_features`.

What each operation does with the newer features:

* catalogManaged: reads, checkpoints, log compaction and version checksums work on the
  versions published in `_delta_log` (reads never use `_staged_commits`, so only published
  versions are seen); metadata cleanup and VACUUM are refused unless the caller says the
  managing catalog permits them (`permitted=`; spec "Maintenance Operations on
  Catalog-managed Tables"), and VACUUM then also keeps every file any staged commit names
  (`log.replay.staged_commits`); commits (the row-tracking backfill) are refused, since writers
  must commit through the catalog.
* variantType, variantShredding, typeWidening (and their `-preview` spellings): every
  operation. They change data files and schemas, not the log's mechanics; the checkpoint
  writer follows the schema's current (widened) types and the variant statistics rules.
* checkpointProtection (Spark): reads and every operation that only adds or leaves log files
  (checkpoint, checksum, compaction) and VACUUM (data files only); metadata cleanup and
  commits are refused, since the rules for them are Spark's and not in the spec.
* collations (Spark): reads only; every write is refused, naming the feature.

Rules (from the spec): readerFeatures are explicit only at reader version 3, writerFeatures
only at writer version 7; lower versions imply a fixed feature set. Reading needs every reader
feature; writing (and every operation here that writes or deletes files) needs every reader
and every writer feature, because "writers have to read the table before write".

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from delta_ops.errors import CorruptLogError, UnsupportedFeatureError

# The feature table (data) lives in `feature_table`; these names are part of this module's
# interface too.
from delta_ops.protocol.feature_table import (
    ALL_OPERATIONS,
    FEATURE_ALIASES,
    FEATURES,
    FEATURES_BY_NAME,
    TABLE_FEATURES_READER_VERSION,
    TABLE_FEATURES_WRITER_VERSION,
    Feature,
    FeatureKind,
    FeatureName,
    Operation,
    _known,
    feature,
)
from delta_ops.protocol.feature_table import (
    _constant_name as _constant_name,
)

MAX_READER_VERSION = 3
MAX_WRITER_VERSION = 7


def _operation(operation: str | Operation) -> Operation:
    try:
        return Operation(operation)
    except ValueError:
        known = ", ".join(op.value for op in Operation)
        raise ValueError(f"unknown operation {operation!r} (one of {known})") from None


def _versions(protocol: Mapping[str, Any]) -> tuple[int, int]:
    if not isinstance(protocol, Mapping):
        raise CorruptLogError(f"protocol action is not an object: {protocol!r:.200}")
    reader = protocol.get("minReaderVersion")
    writer = protocol.get("minWriterVersion")
    for label, value in (("minReaderVersion", reader), ("minWriterVersion", writer)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise CorruptLogError(f"protocol {label} must be a positive integer, got {value!r}")
    return reader, writer  # type: ignore[return-value]


def _names(protocol: Mapping[str, Any], key: str) -> frozenset[str]:
    value = protocol.get(key)
    if value is None:
        return frozenset()
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise CorruptLogError(f"protocol {key} must be a list of names, got {value!r:.200}")
    names = list(value)
    if not all(isinstance(n, str) for n in names):
        raise CorruptLogError(f"protocol {key} must be a list of names, got {value!r:.200}")
    return frozenset(names)


def _implied_reader(min_reader: int) -> frozenset[str]:
    return frozenset(
        f.name
        for f in FEATURES
        if f.legacy_reader_version is not None and f.legacy_reader_version <= min_reader
    )


def _implied_writer(min_writer: int) -> frozenset[str]:
    return frozenset(
        f.name
        for f in FEATURES
        if f.legacy_writer_version is not None and f.legacy_writer_version <= min_writer
    )


def implied_features(min_reader: int, min_writer: int) -> frozenset[str]:
    """Every feature legacy protocol versions imply (for upgrading to table features).

    Reader version 2 implies columnMapping; writer version 2 appendOnly and invariants, 3 adds
    checkConstraints, 4 changeDataFeed and generatedColumns, 5 columnMapping, 6
    identityColumns. Versions 3 (reader) and 7 (writer) list their features explicitly and
    imply nothing themselves; a writer version 7 with a legacy reader version still gets the
    reader's implied features, as in the spec's example `(2, 7, writerFeatures=[...])`.
    """
    implied: set[str] = set()
    if min_reader < TABLE_FEATURES_READER_VERSION:
        implied |= _implied_reader(min_reader)
    if min_writer < TABLE_FEATURES_WRITER_VERSION:
        implied |= _implied_writer(min_writer)
    return frozenset(implied)


def reader_features(protocol: Mapping[str, Any]) -> frozenset[str]:
    """Features a reader must understand: the explicit readerFeatures at reader version 3,
    else those the legacy reader version implies (columnMapping at version 2).

    Raises:
        CorruptLogError: The protocol lacks valid versions or has a malformed feature list.
    """
    reader, _ = _versions(protocol)
    if reader >= TABLE_FEATURES_READER_VERSION:
        return _names(protocol, "readerFeatures")
    return _implied_reader(reader)


def writer_features(protocol: Mapping[str, Any]) -> frozenset[str]:
    """Features a writer must understand: the explicit writerFeatures at writer version 7,
    else those the legacy writer version implies.

    Raises:
        CorruptLogError: The protocol lacks valid versions or has a malformed feature list.
    """
    _, writer = _versions(protocol)
    if writer >= TABLE_FEATURES_WRITER_VERSION:
        return _names(protocol, "writerFeatures")
    return _implied_writer(writer)


def _supported_by_us(name: str, operation: Operation) -> bool:
    record = feature(name)
    return record is not None and operation in record.operations


def unsupported_features(
    protocol: Mapping[str, Any], operation: str | Operation = "read"
) -> dict[str, list[str]]:
    """The table's features `operation` cannot handle, for inspection and error messages.

    Returns:
        {"read": sorted reader features we cannot read, "write": sorted writer features we
        cannot write}. Both lists are computed whatever the operation; `ensure_supported`
        decides which of them matter.
    """
    op = _operation(operation)
    return {
        "read": sorted(n for n in reader_features(protocol) if not _supported_by_us(n, op)),
        "write": sorted(n for n in writer_features(protocol) if not _supported_by_us(n, op)),
    }


def ensure_supported(
    protocol: Mapping[str, Any] | None,
    operation: str | Operation,
    *,
    table: str | None = None,
    version: int | None = None,
    permitted: frozenset[str] = frozenset(),
) -> None:
    """The gate: raise unless `operation` may run on a table with this protocol.

    "read" checks the reader version and reader features; every other operation writes or
    deletes files and also checks the writer version and writer features (the spec's
    vacuumProtocolCheck asks exactly this of VACUUM).

    `permitted` names features the caller has been explicitly allowed to act on although
    the operation is not listed for them (e.g. `catalogManaged` for cleanup and VACUUM,
    which the spec allows only when the managing catalog permits it).

    Raises:
        CorruptLogError: No protocol action, or a malformed one.
        UnsupportedFeatureError: A version above what we implement (reader 3, writer 7), or
            features we do not support; `features` names them.
        ValueError: Unknown operation.
    """
    op = _operation(operation)
    if protocol is None:
        raise CorruptLogError(
            "the table has no protocol action; it cannot be read safely",
            table=table,
            version=version,
        )
    try:
        reader, writer = _versions(protocol)
    except CorruptLogError as exc:
        raise CorruptLogError(exc.reason, table=table, version=version) from None
    if reader > MAX_READER_VERSION:
        raise UnsupportedFeatureError(
            f"cannot {op.verb}: the table needs reader version {reader}, delta_ops implements "
            f"up to {MAX_READER_VERSION}; use a newer Delta client",
            features=[f"minReaderVersion={reader}"],
            table=table,
            version=version,
        )
    if op.writes and writer > MAX_WRITER_VERSION:
        raise UnsupportedFeatureError(
            f"cannot {op.verb}: the table needs writer version {writer}, delta_ops implements "
            f"up to {MAX_WRITER_VERSION}; use a newer Delta client",
            features=[f"minWriterVersion={writer}"],
            table=table,
            version=version,
        )
    missing = unsupported_features(protocol, op)
    names = set(missing["read"])
    if op.writes:
        names |= set(missing["write"])
    names -= permitted
    if names:
        unknown = sorted(n for n in names if feature(n) is None)
        parts = []
        if unknown:
            parts.append(
                "the table uses table features delta_ops does not support: " + ", ".join(unknown)
            )
        for name in sorted(names - set(unknown)):
            parts.append(f"the table uses {name}, and {_known(name).why}")
        raise UnsupportedFeatureError(
            f"cannot {op.verb}: " + "; ".join(parts),
            features=sorted(names),
            table=table,
            version=version,
        )


def refused_operations(protocol: Mapping[str, Any]) -> dict[str, list[str]]:
    """For inspection (`delta-ops snapshot`): each operation delta_ops refuses on this table,
    with the features that make it refuse ({"vacuum": ["catalogManaged"], ...}); operations
    it runs are absent. Versions beyond what delta_ops implements are not features and are
    not listed here (`ensure_supported` refuses them)."""
    out: dict[str, list[str]] = {}
    for op in Operation:
        missing = unsupported_features(protocol, op)
        names = set(missing["read"]) | (set(missing["write"]) if op.writes else set())
        if names:
            out[op.value] = sorted(names)
    return out


def is_feature_supported(protocol: Mapping[str, Any], name: str) -> bool:
    """Whether the protocol supports feature `name` ("supported" in the spec's sense).

    A writer feature needs the name among the writer features (explicit or implied); a
    reader-writer feature among both the reader and the writer features (so columnMapping is
    supported on (2, 5) but not on (1, 5), where readers ignore the mapping mode). Aliases of
    a name count as the name.

    Raises:
        ValueError: `name` is not a feature delta_ops knows (a misspelling); to ask whether a
            table lists an arbitrary name, use `reader_features` / `writer_features`.
    """
    _known(name)  # a misspelling is refused before the protocol is read
    return _supported_in(name, reader_features(protocol), writer_features(protocol))


def _supported_in(name: str, reader: frozenset[str], writer: frozenset[str]) -> bool:
    """`is_feature_supported` given the protocol's reader and writer features."""
    record = _known(name)
    spellings = {record.name} | {
        a for a, target in FEATURE_ALIASES.items() if target == record.name
    }
    in_writer = bool(spellings & writer)
    if not record.is_reader_feature:
        return in_writer
    return in_writer and bool(spellings & reader)


def is_feature_enabled(
    protocol: Mapping[str, Any],
    metadata_configuration: Mapping[str, str] | None,
    name: str,
) -> bool:
    """Whether feature `name` is active: supported and its table property set.

    Features without an activating property (invariants, generatedColumns, v2Checkpoint,
    domainMetadata, ...) are active whenever supported. columnMapping is active when
    `delta.columnMapping.mode` is id or name; the others when their property is "true".

    Raises:
        ValueError: `name` is not a feature delta_ops knows (a misspelling).
    """
    record = _known(name)
    if not is_feature_supported(protocol, name):
        return False
    if record.enabling_property is None:
        return True
    value = (metadata_configuration or {}).get(record.enabling_property)
    return isinstance(value, str) and value.strip().lower() in record.enabled_values


__all__ = [
    "ALL_OPERATIONS",
    "FEATURES",
    "FEATURES_BY_NAME",
    "FEATURE_ALIASES",
    "Feature",
    "FeatureKind",
    "FeatureName",
    "MAX_READER_VERSION",
    "MAX_WRITER_VERSION",
    "Operation",
    "ensure_supported",
    "feature",
    "implied_features",
    "is_feature_enabled",
    "is_feature_supported",
    "reader_features",
    "refused_operations",
    "unsupported_features",
    "writer_features",
]

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
  versions published in `_delta_log` (we never read `_staged_commits`, so only published
  versions are seen); metadata cleanup and VACUUM are refused unless the caller says the
  managing catalog permits them (`permitted=`; spec "Maintenance Operations on
  Catalog-managed Tables"); commits (the row-tracking backfill) are refused, since writers
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

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from delta_ops.errors import CorruptLogError, UnsupportedFeatureError

MAX_READER_VERSION = 3
MAX_WRITER_VERSION = 7
TABLE_FEATURES_READER_VERSION = 3
TABLE_FEATURES_WRITER_VERSION = 7


class Operation(str, enum.Enum):
    """What delta_ops does to a table. Every operation but READ writes or deletes files."""

    READ = "read"
    CHECKPOINT = "checkpoint"
    CLEANUP = "cleanup"
    VACUUM = "vacuum"
    CHECKSUM = "checksum"
    COMPACTION = "compaction"
    COMMIT = "commit"
    ROW_TRACKING_BACKFILL = "row_tracking_backfill"

    def __str__(self) -> str:
        return self.value

    @property
    def writes(self) -> bool:
        """Whether the operation writes or deletes files (and so needs writer features too)."""
        return self is not Operation.READ

    @property
    def verb(self) -> str:
        """The operation as a verb phrase, for messages ("cannot write a checkpoint")."""
        return _VERBS[self]


ALL_OPERATIONS: frozenset[Operation] = frozenset(Operation)


class FeatureKind(str, enum.Enum):
    """Whether readers must understand a feature ("reader-writer") or only writers."""

    READER_WRITER = "reader-writer"
    WRITER = "writer"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Feature:
    """One table feature as the spec defines it.

    Attributes:
        name: The feature name as listed in readerFeatures/writerFeatures.
        kind: reader-writer or writer.
        title: The spec's section title.
        legacy_reader_version: The legacy reader version (< 3) implying the feature, or None.
        legacy_writer_version: The legacy writer version (< 7) implying the feature, or None
            when only writer version 7 with the name listed supports it.
        min_reader_version: Lowest reader version of a table that may support the feature.
        min_writer_version: Lowest writer version of a table that may support the feature.
        enabling_property: Table property that activates the feature, or None when supported means
            active (e.g. invariants, generated columns, v2Checkpoint).
        enabled_values: Values of `enabling_property` (lower-cased) that activate the feature.
        requires: Features that must be supported too.
        operations: Our operations that can run on a table supporting the feature.
        in_spec: Whether the Delta protocol defines the feature (False: a Spark feature
            real tables carry, handled conservatively).
        why: Why the operations missing from `operations` are refused (for the message).
    """

    name: str
    kind: FeatureKind
    title: str
    legacy_reader_version: int | None = None
    legacy_writer_version: int | None = None
    enabling_property: str | None = None
    enabled_values: frozenset[str] = frozenset({"true"})
    requires: frozenset[str] = frozenset()
    operations: frozenset[Operation] = ALL_OPERATIONS
    in_spec: bool = True
    why: str = ""

    @property
    def is_reader_feature(self) -> bool:
        return self.kind is FeatureKind.READER_WRITER

    @property
    def min_reader_version(self) -> int:
        if not self.is_reader_feature:
            return 1
        return self.legacy_reader_version or TABLE_FEATURES_READER_VERSION

    @property
    def min_writer_version(self) -> int:
        return self.legacy_writer_version or TABLE_FEATURES_WRITER_VERSION


_RW = FeatureKind.READER_WRITER
_W = FeatureKind.WRITER

#: Spec "Maintenance Operations on Catalog-managed Tables": checkpoints, log compaction and
#: version checksums are allowed (for published versions); cleanup and VACUUM only when the
#: catalog permits them (`ensure_supported(permitted=...)`); commits go through the catalog.
_CATALOG_MANAGED_OPERATIONS = frozenset(
    {Operation.READ, Operation.CHECKPOINT, Operation.COMPACTION, Operation.CHECKSUM}
)
_SPARK_RULES = "its rules for writers are Spark's and not part of the Delta protocol"

# Every feature of the spec's "Valid Feature Names in Table Features" table, plus
# inCommitTimestamp, which the spec's In-Commit Timestamps section defines (the section
# spells it `inCommitTimestamps`; Delta writes `inCommitTimestamp`, as do the corpus tables
# kernel-benchmarks__basic_catalog_managed and kernel-defaults__catalog-owned-preview, so both
# spellings are understood).
#
# All our operations handle all of them: they act on the log and on whole files and never
# write rows, so the row-level rules of invariants, CHECK constraints, generated, default and
# identity columns do not apply; deletion vectors, row tracking, domain metadata, clustering,
# in-commit timestamps, v2 checkpoints and column mapping are implemented at the log level.
FEATURES: tuple[Feature, ...] = (
    Feature(
        "appendOnly",
        _W,
        "Append-only Tables",
        legacy_writer_version=2,
        enabling_property="delta.appendOnly",
    ),
    Feature("invariants", _W, "Column Invariants", legacy_writer_version=2),
    Feature("checkConstraints", _W, "CHECK Constraints", legacy_writer_version=3),
    Feature(
        "changeDataFeed",
        _W,
        "Change Data Feed",
        legacy_writer_version=4,
        enabling_property="delta.enableChangeDataFeed",
    ),
    Feature("generatedColumns", _W, "Generated Columns", legacy_writer_version=4),
    Feature("allowColumnDefaults", _W, "Default Columns"),
    Feature(
        "columnMapping",
        _RW,
        "Column Mapping",
        legacy_reader_version=2,
        legacy_writer_version=5,
        enabling_property="delta.columnMapping.mode",
        enabled_values=frozenset({"id", "name"}),
    ),
    Feature("identityColumns", _W, "Identity Columns", legacy_writer_version=6),
    Feature(
        "deletionVectors",
        _RW,
        "Deletion Vectors",
        enabling_property="delta.enableDeletionVectors",
    ),
    Feature(
        "rowTracking",
        _W,
        "Row Tracking",
        enabling_property="delta.enableRowTracking",
        requires=frozenset({"domainMetadata"}),
    ),
    Feature("timestampNtz", _RW, "Timestamp without timezone (TimestampNtz)"),
    Feature("domainMetadata", _W, "Domain Metadata"),
    Feature("v2Checkpoint", _RW, "V2 Checkpoint Table Feature"),
    Feature(
        "icebergCompatV1",
        _W,
        "Iceberg Compatibility V1",
        enabling_property="delta.enableIcebergCompatV1",
        requires=frozenset({"columnMapping"}),
    ),
    Feature(
        "icebergCompatV2",
        _W,
        "Iceberg Compatibility V2",
        enabling_property="delta.enableIcebergCompatV2",
        requires=frozenset({"columnMapping"}),
    ),
    Feature(
        "clustering",
        _W,
        "Clustered Table",
        requires=frozenset({"domainMetadata"}),
    ),
    Feature("vacuumProtocolCheck", _RW, "VACUUM Protocol Check"),
    Feature(
        "inCommitTimestamp",
        _W,
        "In-Commit Timestamps",
        enabling_property="delta.enableInCommitTimestamps",
    ),
    Feature(
        "catalogManaged",
        _RW,
        "Catalog-managed tables",
        requires=frozenset({"inCommitTimestamp"}),
        operations=_CATALOG_MANAGED_OPERATIONS,
        why=(
            "the protocol allows metadata cleanup and VACUUM on a catalog-managed table only "
            "when the managing catalog permits them (opt in with --allow-catalog-managed or "
            "the policy's allow_catalog_managed), and writers must commit through the catalog"
        ),
    ),
    Feature("variantType", _RW, "Variant Data Type"),
    Feature("variantType-preview", _RW, "Variant Data Type (Spark preview name)"),
    Feature(
        "variantShredding",
        _RW,
        "Variant Shredding",
        enabling_property="delta.enableVariantShredding",
        requires=frozenset({"variantType"}),
    ),
    Feature(
        "variantShredding-preview",
        _RW,
        "Variant Shredding (Spark preview name)",
        enabling_property="delta.enableVariantShredding",
    ),
    Feature("typeWidening", _RW, "Type Widening", enabling_property="delta.enableTypeWidening"),
    Feature(
        "typeWidening-preview",
        _RW,
        "Type Widening (Spark preview name)",
        enabling_property="delta.enableTypeWidening",
    ),
    Feature(
        "checkpointProtection",
        _W,
        "Checkpoint protection (Spark; not in the spec)",
        operations=frozenset(
            {
                Operation.READ,
                Operation.CHECKPOINT,
                Operation.CHECKSUM,
                Operation.COMPACTION,
                Operation.VACUUM,
            }
        ),
        in_spec=False,
        why=(
            "its rules for removing log files and for writers are Spark's and not part of the "
            "Delta protocol"
        ),
    ),
    Feature(
        "collations",
        _W,
        "Collations (Spark; not in the spec)",
        operations=frozenset({Operation.READ}),
        in_spec=False,
        why=_SPARK_RULES,
    ),
    Feature(
        "collations-preview",
        _W,
        "Collations (Spark preview name; not in the spec)",
        operations=frozenset({Operation.READ}),
        in_spec=False,
        why=_SPARK_RULES,
    ),
)
FEATURES_BY_NAME: dict[str, Feature] = {f.name: f for f in FEATURES}
# The spelling used by the spec's In-Commit Timestamps section.
FEATURE_ALIASES: dict[str, str] = {"inCommitTimestamps": "inCommitTimestamp"}


def _constant_name(name: str) -> str:
    """`rowTracking` -> `ROW_TRACKING`, `variantType-preview` -> `VARIANT_TYPE_PREVIEW`."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).replace("-", "_").upper()


#: Every feature name delta_ops knows, as constants (`FeatureName.ROW_TRACKING` is
#: "rowTracking"; the members are strings).
FeatureName = enum.Enum(  # type: ignore[misc]
    "FeatureName", {_constant_name(f.name): f.name for f in FEATURES}, type=str
)


def feature(name: str) -> Feature | None:
    """The record for a feature name (aliases resolved), or None for unknown names."""
    name = name.value if isinstance(name, FeatureName) else name
    return FEATURES_BY_NAME.get(FEATURE_ALIASES.get(name, name))


def _known(name: str) -> Feature:
    """The record for a name the caller means as a known feature; a misspelt one is an error."""
    record = feature(name)
    if record is None:
        raise ValueError(
            f"unknown table feature name {name!r}; known names: "
            + ", ".join(sorted(FEATURES_BY_NAME))
        )
    return record


_VERBS = {
    Operation.READ: "read",
    Operation.CHECKPOINT: "write a checkpoint",
    Operation.CLEANUP: "clean up the log",
    Operation.VACUUM: "vacuum",
    Operation.CHECKSUM: "write version checksums",
    Operation.COMPACTION: "compact the log",
    Operation.COMMIT: "commit",
    Operation.ROW_TRACKING_BACKFILL: "backfill row tracking",
}


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
    record = _known(name)
    spellings = {record.name} | {
        a for a, target in FEATURE_ALIASES.items() if target == record.name
    }
    in_writer = bool(spellings & writer_features(protocol))
    if not record.is_reader_feature:
        return in_writer
    return in_writer and bool(spellings & reader_features(protocol))


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

"""The table features delta_ops knows, as data: one row per feature.

Spec sections: "Table Features", "Valid Feature Names in Table Features", and each
feature's own section (for the property that activates it and what it asks of readers and
writers). `delta_ops.protocol.features` holds the gate and the questions asked of a
protocol; this module holds what they consult: the operations (`Operation`), the rows
(`FEATURES`, `Feature`), the names as constants (`FeatureName`) and the preview spellings
(`FEATURE_ALIASES`). See `delta_ops.protocol.features` for what each operation does with
the newer features.

Pure: no I/O.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

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


__all__ = [
    "ALL_OPERATIONS",
    "FEATURES",
    "FEATURES_BY_NAME",
    "FEATURE_ALIASES",
    "Feature",
    "FeatureKind",
    "FeatureName",
    "Operation",
    "feature",
]

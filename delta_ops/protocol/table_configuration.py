"""A table's configuration at one version: its protocol and metadata, asked questions once.

Spec sections: "Protocol Evolution" and "Table Features" (what the protocol supports),
"Change Metadata" (schema, partition columns, `configuration`), the table properties each
feature defines (`delta_ops.protocol.properties`), "Column Mapping", "In-Commit Timestamps"
(enablement version and timestamp), "Writer Version Requirements" and "Reader Version
Requirements".

The shape of delta-kernel-rs's `TableConfiguration`: one value holds the `protocol` and
`metaData` actions in force at a version, and every question about them is a method or a
property here: the reader and writer features, whether a feature is supported or enabled,
the gate an operation passes (`ensure_supported`), the typed table properties, the schema,
the column mapping mode, in-commit-timestamp enablement and the checkpoint kind the table
asks for. Snapshots and the log's light replay carry one (`Snapshot.table_configuration`,
`log.segment.protocol_metadata.read_protocol_metadata`), so callers ask it instead of parsing the
raw actions again.

Building one reads nothing and raises nothing. Each part is parsed on the first question
that needs it and kept (`functools.cached_property`), and an invalid table property raises
only when it is read: a table whose `delta.logRetentionDuration` is invalid can still be
read and checkpointed, and metadata cleanup, which needs the property, fails naming the
table, the version, the key and the value. `validate()` parses every part at once.

The feature rules themselves are `delta_ops.protocol.features` (over a protocol alone: they
also serve protocols being built, `protocol.upgrade`) and the property table is
`delta_ops.protocol.properties`. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from delta_ops.errors import CorruptLogError
from delta_ops.protocol import features
from delta_ops.protocol.actions import Metadata
from delta_ops.protocol.checkpoint_kind import CheckpointKind
from delta_ops.protocol.feature_table import Operation
from delta_ops.protocol.properties import TableProperties, parse_property

if TYPE_CHECKING:
    from delta_ops.protocol.schema import StructType

__all__ = ["IctEnablement", "TableConfiguration"]

#: The table properties of in-commit timestamps (spec "In-Commit Timestamps").
ICT_ENABLE = "delta.enableInCommitTimestamps"
ICT_VERSION = "delta.inCommitTimestampEnablementVersion"
ICT_TIMESTAMP = "delta.inCommitTimestampEnablementTimestamp"
COLUMN_MAPPING_MODE = "delta.columnMapping.mode"


@dataclass(frozen=True)
class IctEnablement:
    """Whether and since when in-commit timestamps are enabled.

    Attributes:
        enabled: `delta.enableInCommitTimestamps` is true.
        version: the first version with in-commit timestamps
            (`delta.inCommitTimestampEnablementVersion`; 0 when enabled without it, i.e. at
            the table's creation), None when not enabled.
        timestamp: the `inCommitTimestamp` (ms) of that version
            (`delta.inCommitTimestampEnablementTimestamp`), None when not recorded.
    """

    enabled: bool
    version: int | None = None
    timestamp: int | None = None

    def applies_to(self, version: int) -> bool:
        """Whether commit `version` carries an in-commit timestamp."""
        return self.enabled and version >= (self.version or 0)


def _is_true(value: object) -> bool:
    return isinstance(value, str) and value.strip().lower() == "true"


@dataclass(frozen=True)
class TableConfiguration:
    """The protocol and metadata in force at `version` of `table`, and what they say.

    Attributes:
        protocol: the `protocol` action, as the JSON log writes it.
        metadata: the `metaData` action.
        version: the table version they describe (None for a configuration not yet
            committed, e.g. the one a transaction is about to write).
        table: the table root, named in errors (not part of equality).
    """

    protocol: Mapping[str, Any]
    metadata: Metadata
    version: int | None = None
    table: str | None = field(default=None, compare=False)

    # ---- building ------------------------------------------------------------------------

    @classmethod
    def of(
        cls,
        protocol: Mapping[str, Any] | None,
        metadata: Metadata | Mapping[str, Any] | None,
        *,
        table: str | None = None,
        version: int | None = None,
    ) -> TableConfiguration:
        """The configuration of a reconstructed state, refusing one without either action
        (a `metaData` given as a raw dict is wrapped).

        Raises:
            CorruptLogError: no protocol or no metaData action (names table and version).
        """
        for name, value in (("protocol", protocol), ("metaData", metadata)):
            if value is None:
                raise CorruptLogError(
                    f"no {name} action found while reconstructing the table state",
                    table=table, version=version,
                )
        if not isinstance(metadata, Metadata):
            metadata = Metadata(metadata)  # type: ignore[arg-type]
        return cls(protocol, metadata, version, table)  # type: ignore[arg-type]

    def validate(self) -> TableConfiguration:
        """Parse every part now (protocol versions and features, table properties,
        in-commit-timestamp enablement, column mapping mode, schema); returns self.

        Raises:
            CorruptLogError: a malformed protocol (versions or feature lists).
            InvalidTablePropertyError: a known table property with an invalid value.
            UnsupportedTypeError / ValueError: a schemaString that does not parse.
        """
        _ = (self.reader_features, self.writer_features, self.properties.ensure_valid(),
             self.ict, self.column_mapping_mode, self.schema)
        return self

    # ---- the protocol ----------------------------------------------------------------------

    @cached_property
    def _versions(self) -> tuple[int, int]:
        try:
            return features._versions(self.protocol)
        except CorruptLogError as exc:
            raise CorruptLogError(exc.reason, table=self.table, version=self.version) from None

    @property
    def min_reader_version(self) -> int:
        """`protocol.minReaderVersion` (CorruptLogError when not a positive integer)."""
        return self._versions[0]

    @property
    def min_writer_version(self) -> int:
        """`protocol.minWriterVersion` (CorruptLogError when not a positive integer)."""
        return self._versions[1]

    @cached_property
    def reader_features(self) -> frozenset[str]:
        """Features a reader must understand (explicit at reader version 3, else implied).

        Raises:
            CorruptLogError: a malformed protocol (names table and version).
        """
        self._versions  # noqa: B018 - the versions' error names the table and version
        try:
            return features.reader_features(self.protocol)
        except CorruptLogError as exc:
            raise CorruptLogError(exc.reason, table=self.table, version=self.version) from None

    @cached_property
    def writer_features(self) -> frozenset[str]:
        """Features a writer must understand (explicit at writer version 7, else implied).

        Raises:
            CorruptLogError: a malformed protocol (names table and version).
        """
        self._versions  # noqa: B018 - the versions' error names the table and version
        try:
            return features.writer_features(self.protocol)
        except CorruptLogError as exc:
            raise CorruptLogError(exc.reason, table=self.table, version=self.version) from None

    def is_feature_supported(self, name: str) -> bool:
        """Whether the protocol supports feature `name` (`features.is_feature_supported`).

        Raises:
            ValueError: `name` is not a feature delta_ops knows (a misspelling).
            CorruptLogError: a malformed protocol.
        """
        return features._supported_in(name, self.reader_features, self.writer_features)

    def is_feature_enabled(self, name: str) -> bool:
        """Whether feature `name` is active: supported and its table property set
        (`features.is_feature_enabled`).

        Raises:
            ValueError: `name` is not a feature delta_ops knows (a misspelling).
            CorruptLogError: a malformed protocol.
        """
        self.reader_features, self.writer_features  # noqa: B018 - errors name the table
        return features.is_feature_enabled(self.protocol, self.configuration, name)

    def unsupported_features(self, operation: str | Operation = "read") -> dict[str, list[str]]:
        """{"read": [...], "write": [...]}: the table's features `operation` cannot handle
        (`features.unsupported_features`)."""
        self.reader_features, self.writer_features  # noqa: B018 - errors name the table
        return features.unsupported_features(self.protocol, operation)

    def ensure_supported(
        self, operation: str | Operation, *, permitted: frozenset[str] = frozenset()
    ) -> None:
        """The gate: raise unless `operation` may run on this table (`features.ensure_supported`;
        `permitted` names features the caller was explicitly allowed to act on).

        Raises:
            CorruptLogError: a malformed protocol.
            UnsupportedFeatureError: a version or feature delta_ops does not support for
                `operation`; names the table, the version and the features.
            ValueError: an unknown operation.
        """
        self.reader_features, self.writer_features  # noqa: B018 - errors name the table
        features.ensure_supported(
            self.protocol, operation, table=self.table, version=self.version,
            permitted=permitted,
        )

    def refused_operations(self) -> dict[str, list[str]]:
        """Each operation delta_ops refuses on this table, with the features that make it
        refuse (`features.refused_operations`)."""
        self.reader_features, self.writer_features  # noqa: B018 - errors name the table
        return features.refused_operations(self.protocol)

    # ---- the metadata ----------------------------------------------------------------------

    @property
    def configuration(self) -> dict[str, str]:
        """The raw `metaData.configuration` map."""
        return self.metadata.configuration

    @property
    def schema(self) -> StructType | None:
        """The Delta schema (None without a schemaString); parsed once, by the metadata."""
        return self.metadata.schema

    @property
    def partition_columns(self) -> list[str]:
        return self.metadata.partition_columns

    @cached_property
    def properties(self) -> TableProperties:
        """The typed table properties, with the protocol's defaults. A property whose
        value is invalid raises its `InvalidTablePropertyError` (naming the key, the value,
        the table and the version) when it is read: an operation that does not need it
        runs.
        """
        return TableProperties.from_configuration(
            self.configuration, table=self.table, version=self.version, strict=False
        )

    @cached_property
    def column_mapping_mode(self) -> str:
        """`delta.columnMapping.mode`: 'none' (also when absent), 'id' or 'name'.

        Only this property is parsed (an invalid unrelated property does not stop a reader).

        Raises:
            InvalidTablePropertyError: any other value.
        """
        value = self.configuration.get(COLUMN_MAPPING_MODE)
        if value is None:
            return "none"
        return parse_property(COLUMN_MAPPING_MODE, value, table=self.table, version=self.version)

    @cached_property
    def ict(self) -> IctEnablement:
        """In-commit-timestamp enablement, as readers of commit timestamps use it: enabled
        when `delta.enableInCommitTimestamps` is true (readers trust the property, whether
        or not the protocol lists the feature; a writer asks
        `is_feature_enabled("inCommitTimestamp")`), from
        `delta.inCommitTimestampEnablementVersion` on (0 when absent).

        Raises:
            InvalidTablePropertyError: an enablement version or timestamp that is not an
                integer (names the table and version).
        """
        cfg = self.configuration
        if not _is_true(cfg.get(ICT_ENABLE)):
            return IctEnablement(False)
        context = {"table": self.table, "version": self.version}
        v = cfg.get(ICT_VERSION)
        ts = cfg.get(ICT_TIMESTAMP)
        return IctEnablement(
            True,
            0 if v is None else parse_property(ICT_VERSION, v, **context),
            None if ts is None else parse_property(ICT_TIMESTAMP, ts, **context),
        )

    @property
    def is_append_only(self) -> bool:
        """The appendOnly feature is active (supported and `delta.appendOnly` true)."""
        return self.is_feature_enabled("appendOnly")

    @property
    def is_row_tracking_enabled(self) -> bool:
        """The rowTracking feature is active (supported and `delta.enableRowTracking` true)."""
        return self.is_feature_enabled("rowTracking")

    @property
    def deletion_vectors_readable(self) -> bool:
        """Files may have deletion vectors: the feature is supported and the data files are
        Parquet (what a `.crc`'s deletion-vector metrics depend on)."""
        provider = (self.metadata.raw.get("format") or {}).get("provider", "parquet")
        return provider == "parquet" and self.is_feature_supported("deletionVectors")

    def default_checkpoint_kind(self) -> CheckpointKind:
        """The checkpoint the table asks for: UUID-named V2 when `delta.checkpointPolicy` is
        v2 and the protocol supports v2Checkpoint, else classic.

        Raises:
            InvalidTablePropertyError: an invalid table property.
        """
        if self.is_feature_supported("v2Checkpoint") and self.properties.checkpoint_v2:
            return CheckpointKind.V2_UUID
        return CheckpointKind.CLASSIC

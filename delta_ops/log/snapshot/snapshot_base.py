"""What every snapshot of a version knows besides its file actions, in plain Python.

Spec sections: "Delta Table Specification" (protocol, metadata, transactions and domain
metadata of a version), "In-Commit Timestamps", "Requirements for Readers".

`log.snapshot.loaded_snapshot.Snapshot` (file actions in Arrow) and
`log.snapshot.small_snapshot.SmallSnapshot` (a small log reconciled in Python, keeping what a
summary prints of each file) share these properties and the one check that a reconstructed state is
readable, so both give the same answers.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from delta_ops.log.segment.timestamps import read_in_commit_timestamp
from delta_ops.protocol.feature_table import Operation
from delta_ops.protocol.table_configuration import IctEnablement, TableConfiguration

if TYPE_CHECKING:
    from delta_ops.log.segment.log_segment import LogSegment
    from delta_ops.protocol.actions import CommitInfo, DomainMetadata, Metadata, Txn
    from delta_ops.protocol.properties import TableProperties
    from delta_ops.storage import Storage


class SnapshotBase:
    """The non-file part of a snapshot. Subclasses are frozen dataclasses with at least
    the fields `storage`, `segment`, `protocol`, `metadata`, `txns`, `all_domains` and
    `commit_infos`."""

    storage: Storage
    segment: LogSegment
    protocol: dict
    metadata: Metadata
    txns: dict[str, Txn]
    all_domains: dict[str, DomainMetadata]
    commit_infos: dict[int, CommitInfo]

    @property
    def table(self) -> str:
        return self.storage.root

    @property
    def version(self) -> int:
        return self.segment.version

    @property
    def checkpoint_version(self) -> int | None:
        return self.segment.checkpoint_version

    @property
    def schema(self):
        """The Delta schema (protocol.schema.StructType), None without a schemaString."""
        return self.metadata.schema

    @property
    def partition_columns(self) -> list[str]:
        return self.metadata.partition_columns

    @property
    def domains(self) -> dict[str, DomainMetadata]:
        """Live domain metadata (removed ones excluded)."""
        return {k: v for k, v in self.all_domains.items() if not v.removed}

    @cached_property
    def table_configuration(self) -> TableConfiguration:
        """The protocol and metadata of this version, asked questions once."""
        return TableConfiguration(self.protocol, self.metadata, self.version, self.table)

    @property
    def properties(self) -> TableProperties:
        return self.table_configuration.properties

    @property
    def reader_features(self) -> frozenset[str]:
        return self.table_configuration.reader_features

    @property
    def writer_features(self) -> frozenset[str]:
        return self.table_configuration.writer_features

    def unsupported_features(self, operation: str = "read") -> dict[str, list[str]]:
        return self.table_configuration.unsupported_features(operation)

    def ensure_supported(self, operation: str) -> None:
        """Raise UnsupportedFeatureError when this table's protocol forbids `operation`."""
        self.table_configuration.ensure_supported(operation)

    @property
    def ict(self) -> IctEnablement:
        return self.table_configuration.ict

    @cached_property
    def timestamp(self) -> int:
        """The commit timestamp of this version in milliseconds (in-commit when enabled)."""
        v = self.version
        if self.ict.applies_to(v):
            ci = self.commit_infos.get(v)
            if ci is not None and ci.in_commit_timestamp is not None:
                return int(ci.in_commit_timestamp)
            return read_in_commit_timestamp(self.storage, v)
        return self.file_timestamp

    @property
    def file_timestamp(self) -> int:
        """Modification time of this version's commit file (or of what stands for it)."""
        v = self.version
        for info in reversed(self.segment.commits):
            if info.path.endswith(f"{v:020d}.json"):
                return info.modification_time
        if self.segment.deltas:
            return self.segment.deltas[-1].file.modification_time
        assert self.segment.checkpoint is not None
        return self.segment.checkpoint.files[0].modification_time

    def commit_info(self, version: int | None = None) -> CommitInfo | None:
        return self.commit_infos.get(self.version if version is None else version)


def check_readable(
    table: str, version: int, protocol: dict | None, metadata: Metadata | None
) -> None:
    """The checks every reconstructed state passes before it is a snapshot.

    Raises:
        CorruptLogError: the state has no protocol or no metadata.
        UnsupportedFeatureError: the table cannot be read: a reader version beyond what
            delta_ops implements or a reader feature it does not know (the writer side is
            checked by the operations that write).
    """
    # The one gate (`TableConfiguration.ensure_supported`): reading needs the reader version
    # and the reader features; writer requirements are checked by the operations that write.
    config = TableConfiguration.of(protocol, metadata, table=table, version=version)
    config.ensure_supported(Operation.READ)

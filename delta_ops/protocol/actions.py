"""Delta actions: small records for the non-file actions; file actions are Arrow.

Spec sections: "Actions" (Change Metadata, Format, Protocol Evolution, Commit Provenance
Information, Add File and Remove File, Add CDC File, Transaction Identifiers, Domain
Metadata, Sidecar File Information, Checkpoint Metadata), "Action Reconciliation".

File actions (`add`, `remove`) live in Arrow so a table with millions of files is never a
list of Python objects: their types and vectorized helpers are in
`delta_ops.protocol.file_actions`, re-exported here and imported on first use, so that
reading a small log action by action never loads pyarrow. The other actions are few per
table and are plain records. Unknown fields are kept in `raw` and unknown actions are
ignored by readers, as the spec requires. The path identity (`canonical_path`,
`file_key`, `dv_unique_id`, ...) is `delta_ops.protocol.path_identity`, re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from delta_ops.protocol.path_identity import (
    CANONICAL_PATTERN,
    READER_PATTERN,
    canonical_path,
    dv_unique_id,
    file_key,
    is_absolute,
    normalize_relative,
    reader_keys,
    relative_key,
)

if TYPE_CHECKING:
    from delta_ops.protocol.file_actions import (
        ADD_SCHEMA,
        ADD_TYPE,
        DELETION_VECTOR_TYPE,
        REMOVE_SCHEMA,
        REMOVE_TYPE,
        STRING_MAP,
        canonical_paths,
        conform,
        file_keys,
        read_otherwise,
        reader_key_array,
    )

#: The names `delta_ops.protocol.file_actions` defines, resolved from there on first use.
_ARROW_NAMES = frozenset({
    "STRING_MAP", "DELETION_VECTOR_TYPE", "ADD_TYPE", "REMOVE_TYPE", "ADD_SCHEMA",
    "REMOVE_SCHEMA", "canonical_paths", "reader_key_array", "file_keys", "conform",
    "read_otherwise",
})


def __getattr__(name: str) -> Any:
    if name in _ARROW_NAMES:
        from delta_ops.protocol import file_actions

        return getattr(file_actions, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class Metadata:
    """A `metaData` action. Only `id` is assumed present; everything else may be missing."""

    raw: Mapping[str, Any]

    @property
    def id(self) -> str | None:
        return self.raw.get("id")

    @property
    def name(self) -> str | None:
        return self.raw.get("name")

    @property
    def description(self) -> str | None:
        return self.raw.get("description")

    @property
    def schema_string(self) -> str | None:
        return self.raw.get("schemaString")

    @property
    def partition_columns(self) -> list[str]:
        return list(self.raw.get("partitionColumns") or [])

    @property
    def configuration(self) -> dict[str, str]:
        return dict(self.raw.get("configuration") or {})

    @property
    def created_time(self) -> int | None:
        return self.raw.get("createdTime")

    @property
    def format(self) -> dict:
        return dict(self.raw.get("format") or {"provider": "parquet", "options": {}})

    @cached_property
    def schema(self):
        """The parsed Delta schema (protocol.schema.StructType); None without a schemaString."""
        from delta_ops.protocol.schema import parse_schema

        return parse_schema(self.schema_string) if self.schema_string else None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.raw)


@dataclass(frozen=True)
class Txn:
    """A `txn` (set transaction) action."""

    app_id: str
    version: int
    last_updated: int | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Txn:
        return cls(d["appId"], int(d["version"]), d.get("lastUpdated"))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"appId": self.app_id, "version": self.version}
        if self.last_updated is not None:
            out["lastUpdated"] = self.last_updated
        return out


@dataclass(frozen=True)
class DomainMetadata:
    """A `domainMetadata` action (removed=True is a tombstone)."""

    domain: str
    configuration: str
    removed: bool = False

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DomainMetadata:
        return cls(d["domain"], d.get("configuration") or "", bool(d.get("removed", False)))

    def to_dict(self) -> dict[str, Any]:
        return {"domain": self.domain, "configuration": self.configuration, "removed": self.removed}


@dataclass(frozen=True)
class CommitInfo:
    """A `commitInfo` action; free-form, so only the fields delta_ops reads are typed."""

    raw: Mapping[str, Any] = field(default_factory=dict)

    @property
    def timestamp(self) -> int | None:
        return self.raw.get("timestamp")

    @property
    def in_commit_timestamp(self) -> int | None:
        return self.raw.get("inCommitTimestamp")

    @property
    def txn_id(self) -> str | None:
        return self.raw.get("txnId")

    @property
    def operation(self) -> str | None:
        return self.raw.get("operation")


__all__ = [
    "ADD_SCHEMA",
    "ADD_TYPE",
    "CANONICAL_PATTERN",
    "DELETION_VECTOR_TYPE",
    "READER_PATTERN",
    "REMOVE_SCHEMA",
    "REMOVE_TYPE",
    "STRING_MAP",
    "CommitInfo",
    "DomainMetadata",
    "Metadata",
    "Txn",
    "canonical_path",
    "canonical_paths",
    "conform",
    "dv_unique_id",
    "file_key",
    "file_keys",
    "is_absolute",
    "normalize_relative",
    "read_otherwise",
    "reader_key_array",
    "reader_keys",
    "relative_key",
]

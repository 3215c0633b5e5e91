"""Delta actions: Arrow types for file actions, small records for the rest.

Spec sections: "Actions" (Change Metadata, Format, Protocol Evolution, Commit Provenance
Information, Add File and Remove File, Add CDC File, Transaction Identifiers, Domain
Metadata, Sidecar File Information, Checkpoint Metadata), "Action Reconciliation".

File actions (`add`, `remove`) live in Arrow so a table with millions of files is never a
list of Python objects. The other actions are few per table and are plain records. Unknown
fields are kept in `raw` and unknown actions are ignored by readers, as the spec requires.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.protocol.arrays import constant_string, string_array

STRING_MAP = pa.map_(pa.string(), pa.string())

DELETION_VECTOR_TYPE = pa.struct(
    [
        pa.field("storageType", pa.string()),
        pa.field("pathOrInlineDv", pa.string()),
        pa.field("offset", pa.int32()),
        pa.field("sizeInBytes", pa.int32()),
        pa.field("cardinality", pa.int64()),
    ]
)

ADD_TYPE = pa.struct(
    [
        pa.field("path", pa.string()),
        pa.field("partitionValues", STRING_MAP),
        pa.field("size", pa.int64()),
        pa.field("modificationTime", pa.int64()),
        pa.field("dataChange", pa.bool_()),
        pa.field("stats", pa.string()),
        pa.field("tags", STRING_MAP),
        pa.field("deletionVector", DELETION_VECTOR_TYPE),
        pa.field("baseRowId", pa.int64()),
        pa.field("defaultRowCommitVersion", pa.int64()),
        pa.field("clusteringProvider", pa.string()),
    ]
)

REMOVE_TYPE = pa.struct(
    [
        pa.field("path", pa.string()),
        pa.field("deletionTimestamp", pa.int64()),
        pa.field("dataChange", pa.bool_()),
        pa.field("extendedFileMetadata", pa.bool_()),
        pa.field("partitionValues", STRING_MAP),
        pa.field("size", pa.int64()),
        pa.field("stats", pa.string()),
        pa.field("tags", STRING_MAP),
        pa.field("deletionVector", DELETION_VECTOR_TYPE),
        pa.field("baseRowId", pa.int64()),
        pa.field("defaultRowCommitVersion", pa.int64()),
    ]
)

ADD_SCHEMA = pa.schema(list(ADD_TYPE))
REMOVE_SCHEMA = pa.schema(list(REMOVE_TYPE))

FILE_ACTIONS = ("add", "remove")
NON_FILE_ACTIONS = ("metaData", "protocol", "txn", "domainMetadata", "commitInfo")


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


def dv_unique_id(dv: Mapping[str, Any] | None) -> str | None:
    """The deletion vector's unique id (spec "Derived Fields"), None without a DV."""
    if not dv:
        return None
    uid = f"{dv['storageType']}{dv['pathOrInlineDv']}"
    offset = dv.get("offset")
    return uid if offset is None else f"{uid}@{offset}"


def _needs_canonicalization(path: str) -> bool:
    return "%" in path or ":" in path or path.startswith("/")


def canonical_path(path: str, root: str) -> str:
    """Canonical identity of a file path from the log (spec: paths are RFC 2396 URIs).

    Relative paths are percent-decoded; absolute ones (`/a/b`, `file:/a/b`, `file:///a/b`,
    `s3://bucket/a/b`) are decoded and, when they point inside the table root, made
    relative to it, so that the same file written both ways has one key.

    Args:
        path: the path as written in the action.
        root: the table root URI (`file:///abs/dir`, `s3://bucket/prefix`).
    """
    if not _needs_canonicalization(path):
        return path
    absolute = _absolute_form(path)
    if absolute is None:
        return unquote(path)
    root_abs = _absolute_form(root) or root
    prefix = root_abs.rstrip("/") + "/"
    if absolute.startswith(prefix):
        return absolute[len(prefix) :]
    return absolute


def _absolute_form(path: str) -> str | None:
    """`scheme:/decoded/path` for absolute paths and URIs, None for relative ones."""
    scheme, sep, rest = path.partition(":")
    if sep and scheme and scheme[0].isalpha() and "/" not in scheme:
        scheme = scheme.lower()
        if scheme in ("s3a", "s3n"):
            scheme = "s3"
        if scheme == "file":
            rest = "/" + unquote(rest).lstrip("/")
            return f"file:{rest}"
        if rest.startswith("//"):
            return f"{scheme}://{unquote(rest[2:])}"
        return f"{scheme}:{unquote(rest)}"
    if path.startswith("/"):
        return "file:/" + unquote(path).lstrip("/")
    return None


def file_key(path: str, dv: Mapping[str, Any] | None, root: str) -> str:
    """Reconciliation key of a file action: canonical path plus DV unique id."""
    uid = dv_unique_id(dv)
    cp = canonical_path(path, root)
    return cp if uid is None else f"{cp}\x00{uid}"


def file_keys(actions: pa.StructArray | pa.ChunkedArray, root: str) -> pa.Array | pa.ChunkedArray:
    """Vectorized `file_key` over an Arrow array of add or remove structs (no nulls)."""
    if isinstance(actions, pa.ChunkedArray):
        return pa.chunked_array([file_keys(c, root) for c in actions.chunks], type=pa.string())
    paths = actions.field("path")
    if _may_need_canonicalization(paths) and pc.any(
        needs := pc.match_substring_regex(paths, r"[%:]|^/")
    ).as_py():
        fixed = [
            canonical_path(p, root) if n else p
            for p, n in zip(paths.to_pylist(), needs.to_pylist(), strict=True)
        ]
        paths = string_array(fixed)
    if actions.type.get_field_index("deletionVector") < 0:
        return paths
    dv = actions.field("deletionVector")
    if dv.null_count == len(dv):
        return paths
    st = dv.field("storageType")
    pid = dv.field("pathOrInlineDv")
    off = pc.cast(dv.field("offset"), pa.string())
    n = len(paths)
    uid = pc.binary_join_element_wise(st, pid, constant_string("", n))
    uid_off = pc.binary_join_element_wise(uid, off, constant_string("@", n))
    uid = pc.if_else(pc.is_null(off), uid, uid_off)
    keyed = pc.binary_join_element_wise(paths, uid, constant_string("\x00", n))
    # A DV struct can be present with null children (some writers fill every column).
    has_dv = pc.and_(pc.is_valid(dv), pc.is_valid(st))
    return pc.if_else(has_dv, keyed, paths)


def _may_need_canonicalization(paths: pa.Array) -> bool:
    """False when no path can need `canonical_path` (none holds `%` or `:` or starts
    with `/`), decided on the raw string buffers: a memchr over the characters instead of
    a regex per row."""
    n = len(paths)
    if not pa.types.is_string(paths.type) or n == 0:
        return n > 0
    bufs = paths.buffers()
    if bufs[2] is None:
        return False
    offsets = np.frombuffer(bufs[1], dtype=np.int32, count=n + 1, offset=paths.offset * 4)
    lo, hi = int(offsets[0]), int(offsets[-1])
    data = bufs[2].slice(lo, hi - lo).to_pybytes()
    if b"%" in data or b":" in data:
        return True
    starts = offsets[:-1] - lo
    starts = starts[offsets[1:] > offsets[:-1]]  # non-empty strings
    return bool(len(starts)) and bool(
        (np.frombuffer(data, dtype=np.uint8)[starts] == ord("/")).any()
    )


def conform(array: pa.Array | pa.ChunkedArray, target: pa.DataType) -> pa.Array:
    """Make a struct array from some writer's schema fit `target`: missing fields become
    nulls, extra fields are dropped, types are cast (recursively for structs)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    if array.type == target:
        return array
    if pa.types.is_struct(target) and pa.types.is_struct(array.type):
        children = []
        for f in target:
            idx = array.type.get_field_index(f.name)
            if idx < 0:
                children.append(pa.nulls(len(array), f.type))
            else:
                child = array.field(idx)
                children.append(conform(child, f.type))
        mask = array.is_null() if array.null_count else None
        return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)
    if pa.types.is_null(array.type):
        return pa.nulls(len(array), target)
    return array.cast(target)

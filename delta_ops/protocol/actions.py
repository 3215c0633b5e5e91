"""Delta actions: Arrow types for file actions, small records for the rest.

Spec sections: "Actions" (Change Metadata, Format, Protocol Evolution, Commit Provenance
Information, Add File and Remove File, Add CDC File, Transaction Identifiers, Domain
Metadata, Sidecar File Information, Checkpoint Metadata), "Action Reconciliation".

File actions (`add`, `remove`) live in Arrow so a table with millions of files is never a
list of Python objects. The other actions are few per table and are plain records. Unknown
fields are kept in `raw` and unknown actions are ignored by readers, as the spec requires.
"""

from __future__ import annotations

import re
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


# --------------------------------------------------------------------------------------
# Path identity. One decision (`_classify`) says whether a path written in an action is
# relative or absolute; `canonical_path` (the reconciliation key), `reader_keys` (every
# file a reader may open for it, in the listing's form) and their vectorized forms all
# build on it.
# --------------------------------------------------------------------------------------

# RFC 3986: scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ), then ":". A one-letter
# scheme is read as a relative path, as deltalake (and Storage.for_uri, a drive letter)
# does: `C:d.parquet` is the file `C:d.parquet` in the table root.
_URI_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]+):")
_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3"}
#: Paths matching this may have a canonical form other than themselves.
CANONICAL_PATTERN = r"[%:]|^/"
#: Paths matching this may be read as another file than themselves (percent escapes,
#: URIs, absolute paths, empty or dot segments).
READER_PATTERN = r"[%:]|^/|//|(^|/)\.\.?(/|$)|/$"


def _classify(path: str) -> tuple[str | None, str]:
    """(scheme, rest) of an absolute path or URI; (None, path) for a relative one.

    A path starting with `/` is an absolute path of the `file` scheme. A URI needs a scheme
    of at least two characters per RFC 3986: `time=1971-07-22T03:06:40Z/x.parquet`,
    `ts=2024-01-01 10:00:00/a.parquet` and `C:d.parquet` are relative.
    """
    if path.startswith("/"):
        return "file", path
    match = _URI_SCHEME.match(path)
    if match is None:
        return None, path
    scheme = match.group(1).lower()
    return _SCHEME_ALIASES.get(scheme, scheme), path[match.end() :]


def is_absolute(path: str) -> bool:
    """Whether a path from the log is absolute: `/a/b`, or a URI with a scheme (RFC 3986,
    as `_classify` decides); otherwise it is relative to the directory the spec names."""
    return _classify(path)[0] is not None


def normalize_relative(path: str) -> str | None:
    """A decoded relative path in the listing's form: empty and `.` segments dropped, `..`
    resolved; None when it is empty or climbs above the root."""
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                return None
            parts.pop()
            continue
        parts.append(part)
    return "/".join(parts) or None


def _normalize_absolute(path: str) -> str:
    """An absolute, decoded path with empty and dot segments resolved (`..` stops at /)."""
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    return "/" + "/".join(parts)


def _location(scheme: str, rest: str, *, decode: bool) -> tuple[str, str] | None:
    """(scheme or `scheme://authority`, normalized absolute path) of an absolute path or
    URI; None for a local URI naming another host, or one without an absolute path."""
    text = unquote(rest) if decode else rest
    if scheme == "file":
        if rest.startswith("//"):
            authority, slash, tail = rest[2:].partition("/")
            if unquote(authority).lower() not in ("", "localhost"):
                return None
            text = unquote(slash + tail) if decode else slash + tail
        if not text.startswith("/"):
            return None
        return "file", _normalize_absolute(text)
    if rest.startswith("//"):
        authority, _, tail = rest[2:].partition("/")
        tail = unquote(tail) if decode else tail
        return f"{scheme}://{authority.lower()}", _normalize_absolute("/" + tail)
    return None  # an opaque URI (`ab:c`): no path, nothing inside a table root


def _root_location(root: str) -> tuple[str, str] | None:
    """The table root as `_location` gives it; the root is taken literally (a Storage root
    is never percent-encoded: its directory names are the listing's)."""
    scheme, rest = _classify(root)
    if scheme is None:
        return None
    return _location(scheme, rest, decode=False)


def _inside(loc: tuple[str, str] | None, root: str) -> str | None:
    """The listing key of an absolute location inside `root`, None when outside."""
    root_loc = _root_location(root)
    if loc is None or root_loc is None or loc[0] != root_loc[0]:
        return None
    base = root_loc[1].rstrip("/") + "/"
    if not loc[1].startswith(base):
        return None
    return normalize_relative(loc[1][len(base) :])


def _absolute_key(loc: tuple[str, str] | None, scheme: str, rest: str) -> str:
    if loc is None:
        return f"{scheme}:{unquote(rest)}"
    kind, path = loc
    return f"file:{path}" if kind == "file" else f"{kind}{path}"


def canonical_path(path: str, root: str) -> str:
    """Canonical identity of a file path from the log (spec: paths are RFC 2396 URIs).

    Relative paths are percent-decoded once. Absolute ones (`/a/b`, `file:/a/b`,
    `file:///a/b`, `file://localhost/a/b`, `s3://bucket/a/b`, `s3a://...`) are decoded
    once, their empty and dot segments resolved, and, when they point inside the table
    root, made relative to it, so that the same file written both ways has one key. The
    root is taken literally (a Storage root is the listing's form, never encoded).
    Whether a path is a URI follows RFC 3986 (see `_classify`).

    Args:
        path: the path as written in the action.
        root: the table root URI (`file:///abs/dir`, `s3://bucket/prefix`).
    """
    return _canonical(path, root)[0]


def _canonical(path: str, root: str) -> tuple[str, bool]:
    """(`canonical_path`, whether it is relative to the root)."""
    scheme, rest = _classify(path)
    if scheme is None:
        return (unquote(path) if "%" in path else path), True
    loc = _location(scheme, rest, decode=True)
    inside = _inside(loc, root)
    if inside is not None:
        return inside, True
    return _absolute_key(loc, scheme, rest), False


def reader_keys(path: str, root: str) -> tuple[str, ...]:
    """Every file inside `root` a reader may open for `path`, as listing keys (relative,
    decoded, no empty or dot segments); the (normalized) canonical key first when it is
    inside the root. Empty when no reading points inside the root.

    Readers disagree on some shapes, so all their readings are returned:

    * the spec's (and Spark's): a relative path decoded once; an absolute path or URI
      pointing inside the root, made relative;
    * deltalake's (1.x): every path joined to the root as a relative one, `file:///t/a`
      and `/t/a` included (it opens `<root>/file:/t/a`, `<root>/t/a`), decoded once,
      empty segments dropped;
    * a writer that did not encode: the path taken literally (an absolute one too,
      when it then points inside the root).
    """
    literal = None
    scheme, rest = _classify(path)
    if scheme is not None and "%" in rest:
        literal = _inside(_location(scheme, rest, decode=False), root)
    out: list[str] = []
    for candidate in (
        relative_key(path, root),
        literal,
        normalize_relative(unquote(path)),
        normalize_relative(path),
    ):
        if candidate is not None and candidate not in out:
            out.append(candidate)
    return tuple(out)


def relative_key(path: str, root: str) -> str | None:
    """The listing key of the file the spec's reading of `path` names (`canonical_path`
    with empty and dot segments resolved), None when that file is not inside `root`."""
    key, relative = _canonical(path, root)
    return normalize_relative(key) if relative else None


def file_key(path: str, dv: Mapping[str, Any] | None, root: str) -> str:
    """Reconciliation key of a file action: canonical path plus DV unique id."""
    uid = dv_unique_id(dv)
    cp = canonical_path(path, root)
    return cp if uid is None else f"{cp}\x00{uid}"


def canonical_paths(paths: pa.Array, root: str) -> pa.Array:
    """`canonical_path` of each string (nulls stay null); only paths matching
    `CANONICAL_PATTERN` go through Python."""
    paths = paths.cast(pa.string())
    if not len(paths) or not _may_need_canonicalization(paths):
        return paths
    needs = pc.match_substring_regex(paths, CANONICAL_PATTERN)  # null for a null path
    if not pc.any(needs).as_py():
        return paths
    fixed = [
        canonical_path(p, root) if n else p
        for p, n in zip(paths.to_pylist(), needs.to_pylist(), strict=True)
    ]
    return string_array(fixed)


def reader_key_array(paths: pa.Array, root: str) -> pa.Array:
    """`reader_keys` of every string, flattened (nulls dropped); paths that cannot be read
    as another file than themselves (no `READER_PATTERN` match) pass through as they are."""
    paths = paths.cast(pa.string()).drop_null()
    if not len(paths):
        return paths
    odd = pc.match_substring_regex(paths, READER_PATTERN)
    if not pc.any(odd).as_py():
        return paths
    extra = [k for p in paths.filter(odd).to_pylist() for k in reader_keys(p, root)]
    return pa.concat_arrays([paths.filter(pc.invert(odd)), string_array(extra)])


def file_keys(actions: pa.StructArray | pa.ChunkedArray, root: str) -> pa.Array | pa.ChunkedArray:
    """Vectorized `file_key` over an Arrow array of add or remove structs (no nulls)."""
    if isinstance(actions, pa.ChunkedArray):
        return pa.chunked_array([file_keys(c, root) for c in actions.chunks], type=pa.string())
    paths = canonical_paths(actions.field("path"), root)
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

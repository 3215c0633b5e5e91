"""The `_last_checkpoint` file and its checksum.

Spec section: "Last Checkpoint File" (fields, and "JSON checksum" with the canonical-JSON
rules). The checksum is the MD5 of the canonical form of every field except `checksum`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import orjson


def _canonical_string(value: str) -> str:
    # URL-encoding as Java's URLEncoder does it is what Spark writes; the spec's example
    # ("'v 0'" -> "%27v%200%27") shows spaces as %20, so encode everything but unreserved.
    return '"' + quote(value, safe="-_.*") + '"'


def _canonical_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return _canonical_string(value)
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer():
            return str(int(value))
        return repr(value)
    return str(value)


def _flatten(prefix: list[str], value: Any, out: list[tuple[str, str]]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flatten([*prefix, _canonical_string(str(k))], v, out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _flatten([*prefix, str(i)], v, out)
    else:
        out.append(("+".join(prefix), _canonical_scalar(value)))


def canonicalize(obj: Mapping[str, Any]) -> str:
    """Canonical JSON form for the `_last_checkpoint` checksum (top-level `checksum` ignored)."""
    pairs: list[tuple[str, str]] = []
    for k, v in obj.items():
        if k == "checksum":
            continue
        _flatten([_canonical_string(str(k))], v, pairs)
    pairs.sort(key=lambda p: p[0].encode("utf-8"))
    return ",".join(f"{p}={v}" for p, v in pairs)


def compute_checksum(obj: Mapping[str, Any]) -> str:
    """MD5 hex digest of the canonical form of `obj`."""
    import hashlib  # here: loading OpenSSL is a cost only writers and verifiers pay

    return hashlib.md5(canonicalize(obj).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class LastCheckpoint:
    """Parsed `_last_checkpoint` content.

    Attributes:
        version: checkpoint version.
        size: number of actions in the checkpoint.
        parts: number of parts for a multi-part checkpoint.
        size_in_bytes: total size of the checkpoint files.
        num_of_add_files: number of add actions.
        checkpoint_schema: the checkpoint's Parquet schema, as Spark writes it.
        checksum: the recorded checksum, if any.
        v2_checkpoint: the `v2Checkpoint` object for V2 checkpoints (path, sizeInBytes, ...).
        raw: every field as read (unknown ones included).
    """

    version: int
    size: int | None = None
    parts: int | None = None
    size_in_bytes: int | None = None
    num_of_add_files: int | None = None
    checkpoint_schema: dict | None = None
    checksum: str | None = None
    v2_checkpoint: dict | None = None
    raw: dict = field(default_factory=dict)

    @property
    def checksum_valid(self) -> bool | None:
        """True or False when a checksum is recorded, None when there is none to check."""
        if self.checksum is None:
            return None
        return compute_checksum(self.raw) == self.checksum

    def to_json_bytes(self) -> bytes:
        return orjson.dumps(self.raw)


#: The largest version a writer can produce (a Java long), as in `filenames.MAX_VERSION`.
_MAX_VERSION = 2**63 - 1


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def last_checkpoint_problem(obj: Any) -> str | None:
    """Why parsed `_last_checkpoint` JSON cannot serve as a hint, or None when it can.

    The spec's fields: `version` (required, a table version: an integer from 0 to 2^63-1),
    `size` (number of actions, >= 0), `parts` (number of parts, >= 1), `sizeInBytes` and
    `numOfAddFiles` (>= 0), `checkpointSchema` and `v2Checkpoint` (objects), `checksum`
    (a string). Optional fields may be absent or null; unknown fields are allowed.
    """
    if not isinstance(obj, dict):
        return f"it is a JSON {type(obj).__name__}, not an object"
    version = obj.get("version")
    if not _is_int(version):
        return f"'version' is {_kind(version)}, not an integer"
    if not 0 <= version <= _MAX_VERSION:
        return f"'version' {version} is not a table version (0 to {_MAX_VERSION})"
    for name, low in (("size", 0), ("parts", 1), ("sizeInBytes", 0), ("numOfAddFiles", 0)):
        value = obj.get(name)
        if value is None:
            continue
        if not _is_int(value):
            return f"{name!r} is {_kind(value)}, not an integer"
        if not low <= value <= _MAX_VERSION:
            return f"{name!r} is {value}, out of range (at least {low})"
    for name, kind in (("checkpointSchema", dict), ("v2Checkpoint", dict), ("checksum", str)):
        value = obj.get(name)
        if value is not None and not isinstance(value, kind):
            return f"{name!r} is {_kind(value)}, not {'an object' if kind is dict else 'a string'}"
    return None


def _kind(value: Any) -> str:
    if value is None:
        return "missing"
    if isinstance(value, bool):
        return "a boolean"
    return {
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "an object",
    }.get(type(value), type(value).__name__)


def parse_last_checkpoint(data: bytes) -> LastCheckpoint:
    """Parse `_last_checkpoint` bytes.

    Raises:
        ValueError: not JSON, or content that cannot be a hint (see
            `last_checkpoint_problem`): a negative or non-integer version, a negative size,
            zero parts, a field of the wrong type...
    """
    obj = orjson.loads(data)
    problem = last_checkpoint_problem(obj)
    if problem is not None:
        raise ValueError(f"_last_checkpoint is unusable: {problem}")
    return LastCheckpoint(
        version=obj["version"],
        size=obj.get("size"),
        parts=obj.get("parts"),
        size_in_bytes=obj.get("sizeInBytes"),
        num_of_add_files=obj.get("numOfAddFiles"),
        checkpoint_schema=obj.get("checkpointSchema"),
        checksum=obj.get("checksum"),
        v2_checkpoint=obj.get("v2Checkpoint"),
        raw=obj,
    )


def build_last_checkpoint(
    *,
    version: int,
    size: int,
    size_in_bytes: int,
    num_of_add_files: int,
    parts: int | None = None,
    checkpoint_schema: dict | None = None,
    v2_checkpoint: dict | None = None,
) -> LastCheckpoint:
    """Build a `_last_checkpoint` with its checksum, field order as Spark writes it."""
    raw: dict[str, Any] = {"version": version, "size": size}
    if parts is not None:
        raw["parts"] = parts
    raw["sizeInBytes"] = size_in_bytes
    raw["numOfAddFiles"] = num_of_add_files
    if v2_checkpoint is not None:
        raw["v2Checkpoint"] = v2_checkpoint
    if checkpoint_schema is not None:
        raw["checkpointSchema"] = checkpoint_schema
    raw["checksum"] = compute_checksum(raw)
    return parse_last_checkpoint(orjson.dumps(raw))

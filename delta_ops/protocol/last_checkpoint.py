"""The `_last_checkpoint` file and its checksum.

Spec section: "Last Checkpoint File" (fields, and "JSON checksum" with the canonical-JSON
rules). The checksum is the MD5 of the canonical form of every field except `checksum`.
"""

from __future__ import annotations

import hashlib
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


def parse_last_checkpoint(data: bytes) -> LastCheckpoint:
    """Parse `_last_checkpoint` bytes; ValueError when it is not a JSON object with a version."""
    obj = orjson.loads(data)
    if not isinstance(obj, dict) or not isinstance(obj.get("version"), int):
        raise ValueError("_last_checkpoint is not a JSON object with an integer 'version'")
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

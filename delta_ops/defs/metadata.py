"""Maintenance Results as Dagster metadata: numbers stay numbers (the UI plots them over
time), lists of paths become markdown lists (at most `MAX_LISTED` shown), dicts and nested
dataclasses become JSON, file sizes a markdown histogram over Delta's checksum bins.

Spec section: "Version Checksum File" (the file-size histogram bins).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields, is_dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from dagster import MetadataValue, TableColumn, TableColumnConstraints, TableSchema

from delta_ops.protocol.crc import FILE_SIZE_BIN_BOUNDARIES

if TYPE_CHECKING:
    import pyarrow as pa

#: Most list entries shown in a markdown metadata value.
MAX_LISTED = 25


def markdown_list(items: Sequence[Any]) -> MetadataValue:
    shown = [f"- `{item}`" for item in list(items)[:MAX_LISTED]]
    if len(items) > MAX_LISTED:
        shown.append(f"- ... and {len(items) - MAX_LISTED} more")
    return MetadataValue.md("\n".join(shown) if shown else "(none)")


def metadata_value(value: Any) -> Any:
    if isinstance(value, MetadataValue):
        return value
    if value is None:
        return MetadataValue.null()
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return MetadataValue.json(value)
    if isinstance(value, (tuple, list, frozenset, set)):
        items = sorted(value) if isinstance(value, (set, frozenset)) else list(value)
        if all(isinstance(i, (int, float)) for i in items):
            return MetadataValue.json(items)
        if all(isinstance(i, str) for i in items):
            return markdown_list(items)
        return MetadataValue.json([_plain(i) for i in items])
    if is_dataclass(value):
        return MetadataValue.json(_plain(value))
    return str(value)


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    return value


def result_metadata(result: Any, *, duration_s: float | None = None, **extra: Any) -> dict:
    """Dagster metadata from a maintenance Result dataclass (and `extra` entries).

    Numbers and booleans stay numbers (plotted by the UI), lists of paths become markdown
    lists (at most MAX_LISTED shown), dicts become JSON; the Result's `table` (a URI) is
    shown as `uri`.
    """
    out: dict[str, Any] = {}
    if result is not None:
        for f in fields(result):
            key = "uri" if f.name == "table" else f.name
            out[key] = metadata_value(getattr(result, f.name))
    for key, value in extra.items():
        out[key] = metadata_value(value)
    if duration_s is not None:
        out["duration_s"] = MetadataValue.float(round(duration_s, 3))
    return out


def size_histogram(
    sizes: pa.Array | pa.ChunkedArray | Sequence[int],
    boundaries: Sequence[int] = FILE_SIZE_BIN_BOUNDARIES,
) -> MetadataValue:
    """File sizes as a markdown table of the non-empty bins (Delta's checksum bins)."""
    import numpy as np  # here: the definitions load without numpy and Arrow
    import pyarrow as pa

    arr = np.asarray(
        sizes.to_numpy() if isinstance(sizes, (pa.Array, pa.ChunkedArray)) else list(sizes),
        dtype=np.int64,
    )
    bounds = np.asarray(boundaries, dtype=np.int64)
    counts = np.zeros(len(bounds), dtype=np.int64)
    totals = np.zeros(len(bounds), dtype=np.int64)
    if arr.size:
        idx = np.searchsorted(bounds, arr, side="right") - 1
        np.add.at(counts, idx, 1)
        np.add.at(totals, idx, arr)
    return histogram_markdown(list(bounds), list(counts), list(totals))


def histogram_markdown(
    bounds: Sequence[int], counts: Sequence[int], totals: Sequence[int]
) -> MetadataValue:
    """A markdown table of the non-empty bins (bin i is [bounds[i], bounds[i + 1]))."""
    rows = ["| file size | files | bytes |", "| --- | ---: | ---: |"]
    for i, (count, total) in enumerate(zip(counts, totals, strict=True)):
        if not count:
            continue
        lo = _human(int(bounds[i]))
        hi = _human(int(bounds[i + 1])) if i + 1 < len(bounds) else "..."
        rows.append(f"| {lo} - {hi} | {int(count)} | {int(total)} |")
    if len(rows) == 2:
        rows.append("| (no files) | 0 | 0 |")
    return MetadataValue.md("\n".join(rows))


def type_text(delta_type: Any) -> str:
    """A Delta schema type as text: primitives as named (`long`, `decimal(10,2)`), nested
    types with their element types (`array<string>`, `map<string, long>`,
    `struct<id: long, tags: array<string>>`). Spec section: "Schema Serialization Format"."""
    if isinstance(delta_type, str):
        return delta_type
    if not isinstance(delta_type, dict):
        return str(delta_type)
    kind = delta_type.get("type")
    if kind == "struct":
        fields_ = ", ".join(
            f"{f.get('name')}: {type_text(f.get('type'))}" for f in delta_type.get("fields", [])
        )
        return f"struct<{fields_}>"
    if kind == "array":
        return f"array<{type_text(delta_type.get('elementType'))}>"
    if kind == "map":
        return (f"map<{type_text(delta_type.get('keyType'))}, "
                f"{type_text(delta_type.get('valueType'))}>")
    return str(kind)


def column_schema(schema: dict) -> TableSchema:
    """`dagster/column_schema` from a Delta schema (the parsed `schemaString`): one column per
    top-level field with its type as `type_text` gives it (nested types spelled out), its
    nullability and its `comment` as the description."""
    columns = []
    for f in schema.get("fields", []):
        comment = (f.get("metadata") or {}).get("comment")
        columns.append(TableColumn(
            name=f["name"],
            type=type_text(f.get("type")),
            description=comment if isinstance(comment, str) else None,
            constraints=TableColumnConstraints(nullable=bool(f.get("nullable", True))),
        ))
    return TableSchema(columns=columns)


def _human(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.4g} {unit}"



__all__ = [
    "MAX_LISTED",
    "column_schema",
    "type_text",
    "histogram_markdown",
    "markdown_list",
    "metadata_value",
    "result_metadata",
    "size_histogram",
]

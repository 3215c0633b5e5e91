"""Whether a data file's columns read by name give what the spec's reader reads.

Spec section: "Column Mapping" ("Reader Requirements": in `id` mode "readers must resolve
columns by using the `field_id` in the parquet metadata for each file", and return nulls
for ids a file lacks; every column, "nested or leaf", has a physical name and an id).

The rewriters (OPTIMIZE, purge) and the statistics writer match top-level columns by field
id in `id` mode, and read nested fields by name (Arrow's cast and struct access do). That
is the spec's reading only while the file's nested names are the table's physical names
wherever the ids agree. Files that break this exist: written before a rename by a tool
that kept ids, converted from Iceberg, or with names that differ from the table's only in
case (Spark matches those, deltalake does not). `mismatch` finds them, so that such a file
is refused, naming the column, instead of rewritten with nulls where values were.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["file_mismatch", "mismatch"]

_FIELD_ID = b"PARQUET:field_id"


def _id(f: pa.Field) -> int | None:
    raw = (f.metadata or {}).get(_FIELD_ID)
    return int(raw) if raw is not None else None


def _children(t: pa.DataType) -> list[pa.Field]:
    if pa.types.is_struct(t):
        return [t.field(i) for i in range(t.num_fields)]
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [t.value_field]
    if pa.types.is_map(t):
        return [t.key_field, t.item_field]
    return []


def mismatch(source: pa.Field, target: pa.Field, mode: str, where: str = "") -> str | None:
    """Why reading the file's field `source` by name as the table's `target` would differ
    from the spec's reading, None when it would not. Children are compared by position
    for lists and maps, by id (in `id` mode) or name for structs; `where` is the path so
    far, for the message."""
    path = f"{where}.{target.name}" if where else target.name
    sources, targets = _children(source.type), _children(target.type)
    if not targets or not sources:
        return None
    if not pa.types.is_struct(target.type):
        for s, t in zip(sources, targets, strict=False):
            found = mismatch(s, t, mode, path)
            if found:
                return found
        return None
    return _fields_mismatch(sources, targets, mode, path)


def file_mismatch(file_schema: pa.Schema, target: pa.Schema, mode: str) -> str | None:
    """Why the columns of a file (its Arrow schema) read as the rewriters read them (top
    level by id in `id` mode, else by name; nested by name) would differ from the spec's
    reading of `target` (the new files' schema: physical names, field ids), None when they
    would not."""
    if mode == "id" and all(_id(f) is None for f in file_schema):
        first = next((t for t in target if _id(t) is not None), None)
        if first is not None:
            return (f"column {first.name} (id {_id(first)}): the file has no field ids, "
                    "which column mapping's id mode needs to resolve its columns")
    return _fields_mismatch(list(file_schema), list(target), mode, "")


def _fields_mismatch(
    sources: list[pa.Field], targets: list[pa.Field], mode: str, path: str
) -> str | None:
    """The struct rule: at the top level (`path` empty) a column is found by id in `id`
    mode whatever its name; a nested field is read by name, so its id must sit under it."""
    what = "nested field" if path else "column"
    by_name = {s.name: s for s in sources}
    by_id = {i: s for s in sources if (i := _id(s)) is not None}
    folded = {s.name.casefold(): s for s in sources}
    for t in targets:
        name = f"{path}.{t.name}" if path else t.name
        tid = _id(t) if mode == "id" else None
        source = by_name.get(t.name)
        if tid is not None:
            match = by_id.get(tid)
            if match is None and source is not None:
                return (f"{what} {name} has no field id {tid} in the file, where a {what} "
                        "of that name holds other values")
            if match is not None and match.name != t.name and path:
                return f"{what} {name} (id {tid}) is named {match.name!r} in the file"
            source = match
        elif source is None:
            other = folded.get(t.name.casefold())
            if other is not None:
                return (f"{what} {name} is {other.name!r} in the file (a name that differs "
                        "only in case: readers disagree on it)")
        if source is not None:
            found = mismatch(source, t, mode, path)
            if found:
                return found
    return None

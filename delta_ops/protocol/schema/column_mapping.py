"""Column mapping: each column's physical name under a table's mode (the mode itself is
`TableConfiguration.column_mapping_mode`).

Spec section: "Column Mapping" (physical names and field ids at every nesting level).
Pure: no I/O.
"""

from __future__ import annotations

from delta_ops.protocol.schema.datatypes import StructField, StructType

# --------------------------------------------------------------------------------------------
# Column mapping


def physical_name(f: StructField, mode: str) -> str:
    """The name of `f` in data files, partition values and statistics under `mode`.

    In 'none' mode the display name; in 'id' and 'name' modes the
    `delta.columnMapping.physicalName` metadata (falling back to the display name when a field
    has none, as Delta Kernel does).
    """
    if mode == "none":
        return f.name
    if mode not in ("id", "name"):
        raise ValueError(f"unknown column mapping mode {mode!r} (expected none, id or name)")
    return f.physical_name


def _quote(name: str) -> str:
    return f"`{name.replace('`', '``')}`" if ("." in name or "`" in name) else name


def logical_to_physical(schema: StructType, mode: str) -> dict[str, str]:
    """Map every column path (top-level and nested in structs) to its physical path.

    Paths join names with "."; a name containing "." or "`" is back-quoted (Spark style), e.g.
    {"a": "col-1", "a.b": "col-1.col-2", "`x.y`": "col-3"}. Arrays and maps are leaves.
    """
    out: dict[str, str] = {}

    def walk(struct: StructType, logical: str, physical: str) -> None:
        for f in struct.fields:
            lpath = f"{logical}.{_quote(f.name)}" if logical else _quote(f.name)
            ppath = (
                f"{physical}.{_quote(physical_name(f, mode))}"
                if physical
                else _quote(physical_name(f, mode))
            )
            out[lpath] = ppath
            if isinstance(f.type, StructType):
                walk(f.type, lpath, ppath)

    walk(schema, "", "")
    return out

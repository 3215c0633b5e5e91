"""Delta schemas to and from Arrow (`to_arrow`, `from_arrow`, `data_type_to_arrow`), with
logical or physical (column-mapped) names and Parquet field ids.

Spec sections: "Schema Serialization Format", "Column Mapping" (field ids), "Variant Data
Type" (`variant` is the struct Spark stores in Parquet, `struct<value: binary not null,
metadata: binary not null>`). A type the spec does not define is refused with
`UnsupportedTypeError`. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from delta_ops.errors import UnsupportedTypeError
from delta_ops.protocol.schema.datatypes import (
    _ARROW_PRIMITIVES,
    MAX_DECIMAL_PRECISION,
    NESTED_IDS_KEYS,
    PARQUET_FIELD_ID,
    VARIANT_MARKER_KEY,
    VARIANT_MARKER_VALUE,
    ArrayType,
    DataType,
    MapType,
    PrimitiveType,
    StructField,
    StructType,
)

# --------------------------------------------------------------------------------------------
# Arrow


def _variant_arrow_type() -> pa.StructType:
    return pa.struct(
        [
            pa.field("value", pa.binary(), nullable=False),
            pa.field("metadata", pa.binary(), nullable=False),
        ]
    )


def _primitive_to_arrow(t: PrimitiveType) -> pa.DataType:
    if t.raw is None:
        arrow = _ARROW_PRIMITIVES.get(t.name)
        if arrow is not None:
            return arrow
        if t.name == "variant":
            return _variant_arrow_type()
        if t.is_decimal:
            precision, scale = t.precision_scale
            if not 1 <= precision <= MAX_DECIMAL_PRECISION or scale > precision:
                raise UnsupportedTypeError(
                    f"invalid decimal type {t.name!r} (precision 1..38, scale <= precision)",
                    features=[t.name],
                )
            return pa.decimal128(precision, scale)
    raise UnsupportedTypeError(
        f"Delta type {t.name!r} is not defined by the Delta protocol and has no Arrow mapping",
        features=[t.name],
    )


class _ArrowConverter:
    def __init__(self, physical: bool, mode: str | None) -> None:
        self.physical = physical
        self.use_physical_names = physical and mode != "none"

    def name(self, f: StructField) -> str:
        return f.physical_name if self.use_physical_names else f.name

    def field(self, f: StructField) -> pa.Field:
        nested_ids = self._nested_ids(f) if self.physical else {}
        prefixes = [self.name(f), f.name] if self.physical else []
        arrow_type = self.type(f.type, nested_ids, prefixes)
        metadata: dict[bytes, bytes] = {}
        if self.physical and f.field_id is not None:
            metadata[PARQUET_FIELD_ID] = str(f.field_id).encode()
        if f.type == PrimitiveType("variant"):
            metadata[VARIANT_MARKER_KEY] = VARIANT_MARKER_VALUE
        return pa.field(self.name(f), arrow_type, nullable=f.nullable, metadata=metadata or None)

    @staticmethod
    def _nested_ids(f: StructField) -> Mapping[str, Any]:
        for key in NESTED_IDS_KEYS:
            value = f.metadata.get(key)
            if isinstance(value, Mapping):
                return value
        return {}

    def _child(
        self,
        name: str,
        t: DataType,
        nullable: bool,
        nested_ids: Mapping[str, Any],
        prefixes: list[str],
    ) -> pa.Field:
        child_prefixes = [f"{p}.{name}" for p in prefixes]
        metadata: dict[bytes, bytes] = {}
        for p in child_prefixes:
            nested_id = nested_ids.get(p)
            if isinstance(nested_id, int) and not isinstance(nested_id, bool):
                metadata[PARQUET_FIELD_ID] = str(nested_id).encode()
                break
        if t == PrimitiveType("variant"):
            metadata[VARIANT_MARKER_KEY] = VARIANT_MARKER_VALUE
        arrow_type = self.type(t, nested_ids, child_prefixes)
        return pa.field(name, arrow_type, nullable=nullable, metadata=metadata or None)

    def type(self, t: DataType, nested_ids: Mapping[str, Any], prefixes: list[str]) -> pa.DataType:
        if isinstance(t, PrimitiveType):
            return _primitive_to_arrow(t)
        if isinstance(t, StructType):
            return pa.struct([self.field(f) for f in t.fields])
        if isinstance(t, ArrayType):
            element = self._child("element", t.element_type, t.contains_null, nested_ids, prefixes)
            return pa.list_(element)
        if isinstance(t, MapType):
            key = self._child("key", t.key_type, False, nested_ids, prefixes)
            value = self._child("value", t.value_type, t.value_contains_null, nested_ids, prefixes)
            return pa.map_(key, value)
        raise TypeError(f"not a Delta data type: {t!r}")


def to_arrow(schema: StructType, *, physical: bool = False, mode: str | None = None) -> pa.Schema:
    """The Arrow schema of a Delta schema.

    Args:
        schema: The Delta schema.
        physical: Name columns as data files do: `delta.columnMapping.physicalName` at every
            nesting level, and the column id (`delta.columnMapping.id`, plus IcebergCompatV2
            nested ids of array elements and map keys/values) as Arrow field metadata
            `PARQUET:field_id`, which pyarrow writes as the Parquet field_id.
        mode: The table's column mapping mode. With 'none', physical=True keeps display names
            (stale physical-name metadata is ignored) but still carries field ids; None uses
            physical names wherever the metadata has them.

    Returns:
        The Arrow schema (string -> string, long -> int64, timestamp -> timestamp[us, UTC],
        timestamp_ntz -> timestamp[us], decimal(p,s) -> decimal128(p,s), variant ->
        struct<value: binary, metadata: binary>, ...).

    Raises:
        UnsupportedTypeError: The schema holds a type the spec does not define.
    """
    converter = _ArrowConverter(physical, mode)
    return pa.schema([converter.field(f) for f in schema.fields])


def data_type_to_arrow(data_type: DataType) -> pa.DataType:
    """The Arrow type of one Delta type (logical names, no field ids)."""
    return _ArrowConverter(False, None).type(data_type, {}, [])


def _is_variant_field(f: pa.Field) -> bool:
    md = f.metadata or {}
    return md.get(VARIANT_MARKER_KEY) == VARIANT_MARKER_VALUE


def _type_from_arrow(t: pa.DataType, where: str) -> DataType:
    if isinstance(t, pa.ExtensionType):
        return _type_from_arrow(t.storage_type, where)
    if pa.types.is_dictionary(t):
        return _type_from_arrow(t.value_type, where)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return PrimitiveType("string")
    simple = {
        pa.int64(): "long",
        pa.int32(): "integer",
        pa.int16(): "short",
        pa.int8(): "byte",
        pa.float32(): "float",
        pa.float64(): "double",
        pa.bool_(): "boolean",
        pa.date32(): "date",
        pa.date64(): "date",
        pa.null(): "void",
    }
    if t in simple:
        return PrimitiveType(simple[t])
    if (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_binary_view(t)
    ):
        return PrimitiveType("binary")
    if pa.types.is_timestamp(t):
        return PrimitiveType("timestamp" if t.tz is not None else "timestamp_ntz")
    if pa.types.is_decimal(t):
        if t.precision > MAX_DECIMAL_PRECISION:
            raise UnsupportedTypeError(
                f"Arrow {t} at {where} exceeds Delta's decimal precision 38", features=[str(t)]
            )
        return PrimitiveType(f"decimal({t.precision},{t.scale})")
    if (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or pa.types.is_list_view(t)
        or pa.types.is_large_list_view(t)
    ):
        vf = t.value_field
        element = (
            PrimitiveType("variant")
            if _is_variant_field(vf)
            else _type_from_arrow(vf.type, f"{where}.element")
        )
        return ArrayType(element, vf.nullable)
    if pa.types.is_map(t):
        kf, vf = t.key_field, t.item_field
        key = (
            PrimitiveType("variant")
            if _is_variant_field(kf)
            else _type_from_arrow(kf.type, f"{where}.key")
        )
        value = (
            PrimitiveType("variant")
            if _is_variant_field(vf)
            else _type_from_arrow(vf.type, f"{where}.value")
        )
        return MapType(key, value, vf.nullable)
    if pa.types.is_struct(t):
        return StructType(tuple(_field_from_arrow(t.field(i), where) for i in range(t.num_fields)))
    raise UnsupportedTypeError(
        f"Arrow type {t} at {where} has no Delta equivalent", features=[str(t)]
    )


def _field_from_arrow(f: pa.Field, parent: str) -> StructField:
    where = f.name if parent == "<root>" else f"{parent}.{f.name}"
    data_type = (
        PrimitiveType("variant") if _is_variant_field(f) else _type_from_arrow(f.type, where)
    )
    return StructField(f.name, data_type, f.nullable, {})


def from_arrow(schema: pa.Schema) -> StructType:
    """The Delta schema of an Arrow schema (inverse of `to_arrow` with logical names).

    Field metadata is not carried over (the result has empty column metadata); a struct field
    marked as variant by `to_arrow` becomes `variant`. large/view string and binary types,
    date64, any timestamp unit, dictionary and extension types map to their Delta
    equivalents.

    Raises:
        UnsupportedTypeError: An Arrow type with no Delta equivalent (unsigned integers,
            float16, durations, unions, ...).
    """
    return StructType(tuple(_field_from_arrow(f, "<root>") for f in schema))

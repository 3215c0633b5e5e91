"""Delta data types and their JSON form: `PrimitiveType`, `ArrayType`, `MapType`,
`StructField`, `StructType`; `parse_schema` / `schema_to_dict`.

Spec sections: "Schema Serialization Format" (primitive, struct, array, map and variant
types, column metadata carried verbatim), "Timestamp without timezone (TimestampNtz)",
"Variant Data Type". Types the spec does not define parse without error and are kept as
`PrimitiveType(name)`. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Union

import orjson
import pyarrow as pa

from delta_ops.errors import CorruptLogError

PHYSICAL_NAME_KEY = "delta.columnMapping.physicalName"
COLUMN_ID_KEY = "delta.columnMapping.id"
# Ids of array elements and map keys/values (IcebergCompatV2). The spec names the key
# `parquet.field.nested.ids`; Delta Spark writes `delta.columnMapping.nested.ids` (corpus
# table golden__table-with-icebegCompatV2Enabled). Both are honoured.
NESTED_IDS_KEYS = ("delta.columnMapping.nested.ids", "parquet.field.nested.ids")
PARQUET_FIELD_ID = b"PARQUET:field_id"
# Arrow field metadata marking the struct that stores a variant (Arrow has no variant type in
# the pyarrow versions we support); `from_arrow` turns a marked struct back into `variant`.
VARIANT_MARKER_KEY = b"delta_ops.type"
VARIANT_MARKER_VALUE = b"variant"

# Primitive type names the spec defines, plus `void` (legacy, "behaviour is undefined") and
# `variant`; `decimal(p,s)` is handled separately.
_ARROW_PRIMITIVES: dict[str, pa.DataType] = {
    "string": pa.string(),
    "long": pa.int64(),
    "integer": pa.int32(),
    "short": pa.int16(),
    "byte": pa.int8(),
    "float": pa.float32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
    "void": pa.null(),
}
KNOWN_PRIMITIVES = frozenset(_ARROW_PRIMITIVES) | {"variant"}

_DECIMAL_RE = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
MAX_DECIMAL_PRECISION = 38

# Types Delta collects min/max statistics for (Delta Spark's "skipping eligible" types):
# boolean, binary, variant and void columns only get a null count. Corpus tables confirm it:
# DAT all_primitive_types has nullCount for `bool`/`binary` but no min/max for them.
_MIN_MAX_TYPES = frozenset(
    {
        "string",
        "long",
        "integer",
        "short",
        "byte",
        "float",
        "double",
        "date",
        "timestamp",
        "timestamp_ntz",
    }
)


@dataclass(frozen=True)
class PrimitiveType:
    """A primitive type by its Delta name: `long`, `decimal(10,2)`, `timestamp_ntz`, ...

    Unknown names are kept as they are. `raw` holds the JSON object of an unknown non-primitive
    type (e.g. a Spark UDT) so that it round-trips; it is None for every spec type.
    """

    name: str
    raw: Mapping[str, Any] | None = field(default=None, compare=True, repr=False)

    @property
    def is_decimal(self) -> bool:
        return self.name == "decimal" or _DECIMAL_RE.match(self.name) is not None

    @property
    def precision_scale(self) -> tuple[int, int]:
        """(precision, scale) of a decimal; bare `decimal` is Spark's `decimal(10,0)`."""
        if self.name == "decimal":
            return (10, 0)
        match = _DECIMAL_RE.match(self.name)
        if match is None:
            raise ValueError(f"{self.name!r} is not a decimal type")
        return int(match.group(1)), int(match.group(2))

    @property
    def is_known(self) -> bool:
        """Whether the spec (or the variant type) defines this type."""
        return self.raw is None and (self.name in KNOWN_PRIMITIVES or self.is_decimal)


@dataclass(frozen=True)
class ArrayType:
    """`{"type": "array", "elementType": ..., "containsNull": ...}`."""

    element_type: DataType
    contains_null: bool = True


@dataclass(frozen=True)
class MapType:
    """`{"type": "map", "keyType": ..., "valueType": ..., "valueContainsNull": ...}`."""

    key_type: DataType
    value_type: DataType
    value_contains_null: bool = True


@dataclass(frozen=True)
class StructField:
    """One (possibly nested) column: name, type, nullability and column metadata."""

    name: str
    type: DataType
    nullable: bool = True
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def physical_name(self) -> str:
        """`delta.columnMapping.physicalName` when present, else the display name."""
        value = self.metadata.get(PHYSICAL_NAME_KEY)
        return value if isinstance(value, str) and value else self.name

    @property
    def field_id(self) -> int | None:
        """`delta.columnMapping.id`, or None."""
        value = self.metadata.get(COLUMN_ID_KEY)
        return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class StructType:
    """A struct type; the top-level table schema is one."""

    fields: tuple[StructField, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.fields, tuple):
            object.__setattr__(self, "fields", tuple(self.fields))

    def __iter__(self) -> Iterator[StructField]:
        return iter(self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def field(self, name: str) -> StructField:
        """The field called `name` (exact match); KeyError when absent."""
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        """The schema as JSON-ready dicts, in Spark's key order."""
        return schema_to_dict(self)

    def to_json(self) -> str:
        """Compact JSON, as written into `metaData.schemaString`."""
        return orjson.dumps(schema_to_dict(self)).decode("utf-8")


DataType = Union[PrimitiveType, ArrayType, MapType, StructType]  # noqa: UP007 (runtime alias)


# --------------------------------------------------------------------------------------------
# JSON


def parse_schema(schema_string: str | bytes) -> StructType:
    """Parse a `schemaString` into a `StructType`.

    Args:
        schema_string: The JSON text of `metaData.schemaString`.

    Returns:
        The schema. Missing `nullable` defaults to true and missing `metadata` to `{}`.

    Raises:
        CorruptLogError: The text is not JSON, or not a struct schema.
    """
    try:
        obj = orjson.loads(schema_string)
    except orjson.JSONDecodeError as exc:
        raise CorruptLogError(f"schemaString is not valid JSON: {exc}") from exc
    result = schema_from_dict(obj)
    return result


def schema_from_dict(obj: Any) -> StructType:
    """Build a `StructType` from the parsed JSON of a schema.

    Raises:
        CorruptLogError: `obj` is not a struct type in the spec's JSON format.
    """
    parsed = _parse_type(obj, "<root>")
    if not isinstance(parsed, StructType):
        raise CorruptLogError(f"schemaString must describe a struct, got {obj!r:.200}")
    return parsed


def _parse_type(obj: Any, where: str) -> DataType:
    if isinstance(obj, str):
        name = obj.strip()
        match = _DECIMAL_RE.match(name)
        if match is not None:
            name = f"decimal({int(match.group(1))},{int(match.group(2))})"
        return PrimitiveType(name)
    if not isinstance(obj, Mapping):
        raise CorruptLogError(f"invalid type at {where}: {obj!r:.200}")
    kind = obj.get("type")
    try:
        if kind == "struct":
            fields = obj["fields"]
            if not isinstance(fields, list):
                raise CorruptLogError(f"struct at {where} has no list of fields")
            return StructType(tuple(_parse_field(f, where) for f in fields))
        if kind == "array":
            return ArrayType(
                _parse_type(obj["elementType"], f"{where}.element"),
                _parse_bool(obj.get("containsNull", True), f"{where}.containsNull"),
            )
        if kind == "map":
            return MapType(
                _parse_type(obj["keyType"], f"{where}.key"),
                _parse_type(obj["valueType"], f"{where}.value"),
                _parse_bool(obj.get("valueContainsNull", True), f"{where}.valueContainsNull"),
            )
    except KeyError as exc:
        raise CorruptLogError(f"{kind} type at {where} lacks {exc.args[0]!r}") from exc
    if kind == "variant" and set(obj) == {"type"}:
        # The spec's "Variant Type" section writes a variant as `{"type": "variant"}` (its
        # example schema does so for an array element); Spark writes the string "variant".
        return PrimitiveType("variant")
    if isinstance(kind, str):
        # An object type the spec does not define (e.g. a Spark UDT): keep it verbatim.
        return PrimitiveType(kind, raw=dict(obj))
    raise CorruptLogError(f"invalid type at {where}: {obj!r:.200}")


def _parse_field(obj: Any, parent: str) -> StructField:
    if not isinstance(obj, Mapping) or not isinstance(obj.get("name"), str) or "type" not in obj:
        raise CorruptLogError(f"invalid struct field under {parent}: {obj!r:.200}")
    name = obj["name"]
    where = name if parent == "<root>" else f"{parent}.{name}"
    metadata = obj.get("metadata", {})
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, Mapping):
        raise CorruptLogError(f"metadata of field {where} is not an object")
    return StructField(
        name=name,
        type=_parse_type(obj["type"], where),
        nullable=_parse_bool(obj.get("nullable", True), f"{where}.nullable"),
        metadata=dict(metadata),
    )


def _parse_bool(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    raise CorruptLogError(f"{where} must be a boolean, got {value!r}")


def schema_to_dict(schema: DataType) -> Any:
    """The JSON form (dicts, lists, strings) of a schema or any data type, in Spark's key order."""
    if isinstance(schema, PrimitiveType):
        return dict(schema.raw) if schema.raw is not None else schema.name
    if isinstance(schema, ArrayType):
        return {
            "type": "array",
            "elementType": schema_to_dict(schema.element_type),
            "containsNull": schema.contains_null,
        }
    if isinstance(schema, MapType):
        return {
            "type": "map",
            "keyType": schema_to_dict(schema.key_type),
            "valueType": schema_to_dict(schema.value_type),
            "valueContainsNull": schema.value_contains_null,
        }
    if isinstance(schema, StructType):
        return {
            "type": "struct",
            "fields": [
                {
                    "name": f.name,
                    "type": schema_to_dict(f.type),
                    "nullable": f.nullable,
                    "metadata": dict(f.metadata),
                }
                for f in schema.fields
            ],
        }
    raise TypeError(f"not a Delta data type: {schema!r}")


def iter_types(data_type: DataType) -> Iterator[DataType]:
    """Every type nested in `data_type`, itself included (depth first)."""
    yield data_type
    if isinstance(data_type, StructType):
        for f in data_type.fields:
            yield from iter_types(f.type)
    elif isinstance(data_type, ArrayType):
        yield from iter_types(data_type.element_type)
    elif isinstance(data_type, MapType):
        yield from iter_types(data_type.key_type)
        yield from iter_types(data_type.value_type)


def unknown_types(schema: DataType) -> list[str]:
    """Sorted names of the types in `schema` the spec does not define (no Arrow mapping)."""
    return sorted(
        {t.name for t in iter_types(schema) if isinstance(t, PrimitiveType) and not t.is_known}
    )

"""Delta table schemas: parse `schemaString`, convert to and from Arrow, name columns physically.

Spec sections: "Schema Serialization Format" (primitive, struct, array, map and variant types,
column metadata), "Column Mapping" (physical names and field ids at every nesting level),
"Timestamp without timezone (TimestampNtz)", "Type Widening" (type change metadata, the
allowed widenings), "Variant Data Type", "Partition Value Serialization", "Per-file
Statistics" and "Statistics for Variant Columns" (the typed `stats_parsed` struct) and
"Checkpoints" (the typed `partitionValues_parsed` struct).

Column metadata is carried verbatim. Type-widening metadata (`delta.typeChanges`) is also
read by `type_changes` / `validate_type_changes` (which refuses a change the spec does not
allow); collation metadata (`__COLLATIONS`) is never interpreted.

Types the spec does not define (`interval`, `char(10)`, ...) parse without error and are kept
as `PrimitiveType(name)`, so inspecting any table works; `to_arrow` refuses them with
`UnsupportedTypeError`. `variant` (written "variant" by Spark, `{"type": "variant"}` in the
spec's example) maps to the struct Spark stores in Parquet,
`struct<value: binary not null, metadata: binary not null>`.

Pure: no I/O.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Context, Decimal, InvalidOperation
from typing import Any, Union

import orjson
import pyarrow as pa

from delta_ops.errors import CorruptLogError, UnsupportedTypeError
from delta_ops.protocol.properties import column_mapping_mode as _column_mapping_mode

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


# --------------------------------------------------------------------------------------------
# Type widening


TYPE_CHANGES_KEY = "delta.typeChanges"

_INTEGER_RANK = {"byte": 0, "short": 1, "integer": 2, "long": 3}
# Digits before the decimal point a decimal needs to hold every value of an integer type
# (the spec's `Decimal(10 + k1, k2)` for byte/short/int and `Decimal(20 + k1, k2)` for long).
_INTEGER_DECIMAL_DIGITS = {"byte": 10, "short": 10, "integer": 10, "long": 20}


@dataclass(frozen=True)
class TypeChange:
    """One entry of a field's `delta.typeChanges` metadata.

    Attributes:
        column: Dotted path of the struct field holding the metadata (names back-quoted as in
            `logical_to_physical` when they contain "." or "`").
        field_path: `fieldPath`: the array element / map key / map value below that field
            that changed ("element", "key", "value", "element.value", ...), or None when the
            field itself changed.
        from_type: The type before the change.
        to_type: The type after the change.
    """

    column: str
    field_path: str | None
    from_type: DataType
    to_type: DataType

    @property
    def where(self) -> str:
        return f"{self.column}.{self.field_path}" if self.field_path else self.column


def is_supported_widening(from_type: DataType, to_type: DataType) -> bool:
    """Whether the spec's "Type Widening" section allows changing `from_type` to `to_type`.

    Allowed: byte -> short -> integer -> long (any step forward), float -> double,
    byte/short/integer -> double, date -> timestamp_ntz, decimal(p, s) -> decimal(p + k1,
    s + k2), byte/short/integer -> decimal(10 + k1, k2) and long -> decimal(20 + k1, k2)
    (k1 >= k2 >= 0). A `void` column may change to any type (spec "Void Type").
    """
    if not isinstance(from_type, PrimitiveType) or not isinstance(to_type, PrimitiveType):
        return False
    if not (from_type.is_known and to_type.is_known):
        return False
    src, dst = from_type.name, to_type.name
    if src == "void":
        return True
    if src in _INTEGER_RANK and dst in _INTEGER_RANK:
        return _INTEGER_RANK[src] < _INTEGER_RANK[dst]
    if dst == "double":
        return src == "float" or (src in _INTEGER_RANK and src != "long")
    if src == "date":
        return dst == "timestamp_ntz"
    if not to_type.is_decimal:
        return False
    precision, scale = to_type.precision_scale
    if precision > MAX_DECIMAL_PRECISION:
        return False
    if from_type.is_decimal:
        p, s = from_type.precision_scale
        k1, k2 = precision - p, scale - s
    elif src in _INTEGER_DECIMAL_DIGITS:
        k1, k2 = precision - _INTEGER_DECIMAL_DIGITS[src], scale
    else:
        return False
    return k1 >= k2 >= 0


def _type_at(data_type: DataType, field_path: str, where: str) -> DataType:
    current = data_type
    for step in field_path.split("."):
        if step == "element" and isinstance(current, ArrayType):
            current = current.element_type
        elif step == "key" and isinstance(current, MapType):
            current = current.key_type
        elif step == "value" and isinstance(current, MapType):
            current = current.value_type
        else:
            raise CorruptLogError(
                f"delta.typeChanges of column {where} has fieldPath {field_path!r}, which "
                "does not lead to an array element or map key/value of its type"
            )
    return current


def _parse_type_changes(value: Any, where: str, data_type: DataType) -> list[TypeChange]:
    if isinstance(value, str):
        # The spec's "Column Metadata" table calls the value a JSON string; Spark writes a
        # JSON list (corpus golden__type-widening). Both are read.
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise CorruptLogError(f"delta.typeChanges of column {where} is not JSON") from exc
    if not isinstance(value, list):
        raise CorruptLogError(f"delta.typeChanges of column {where} is not a list: {value!r:.200}")
    out = []
    for entry in value:
        if not isinstance(entry, Mapping) or "fromType" not in entry or "toType" not in entry:
            raise CorruptLogError(
                f"delta.typeChanges of column {where} has an entry without fromType and "
                f"toType: {entry!r:.200}"
            )
        field_path = entry.get("fieldPath")
        if field_path is not None:
            if not isinstance(field_path, str) or not field_path:
                raise CorruptLogError(
                    f"delta.typeChanges of column {where} has an invalid fieldPath {field_path!r}"
                )
            _type_at(data_type, field_path, where)
        out.append(
            TypeChange(
                column=where,
                field_path=field_path,
                from_type=_parse_type(entry["fromType"], f"{where}.fromType"),
                to_type=_parse_type(entry["toType"], f"{where}.toType"),
            )
        )
    return out


def type_changes(schema: DataType) -> list[TypeChange]:
    """Every type change recorded in `schema` (spec "Type Change Metadata"), depth first.

    `delta.typeChanges` sits in the metadata of the nearest struct field above the changed
    type; entries may carry keys the spec does not list (Spark writes `tableVersion`), which
    are ignored.

    Raises:
        CorruptLogError: A `delta.typeChanges` value is not a list of objects with `fromType`
            and `toType`, or a `fieldPath` does not lead to an element, key or value.
    """
    out: list[TypeChange] = []

    def walk(t: DataType, prefix: str) -> None:
        if isinstance(t, StructType):
            for f in t.fields:
                where = f"{prefix}.{_quote(f.name)}" if prefix else _quote(f.name)
                if TYPE_CHANGES_KEY in f.metadata:
                    out.extend(_parse_type_changes(f.metadata[TYPE_CHANGES_KEY], where, f.type))
                walk(f.type, where)
        elif isinstance(t, ArrayType):
            walk(t.element_type, f"{prefix}.element")
        elif isinstance(t, MapType):
            walk(t.key_type, f"{prefix}.key")
            walk(t.value_type, f"{prefix}.value")

    walk(schema, "")
    return out


def validate_type_changes(schema: DataType) -> list[TypeChange]:
    """The type changes of `schema`, refusing any the spec does not allow (the reader
    requirement of "Type Widening": fail on an unsupported type change).

    Raises:
        UnsupportedTypeError: A recorded change is not a supported widening; the message
            names the column and both types.
        CorruptLogError: As `type_changes`.
    """
    changes = type_changes(schema)
    for change in changes:
        if not is_supported_widening(change.from_type, change.to_type):
            src = schema_to_dict(change.from_type)
            dst = schema_to_dict(change.to_type)
            raise UnsupportedTypeError(
                f"column {change.where} records a type change from {src} to {dst}, which is "
                "not a type widening the Delta protocol allows",
                features=["typeWidening"],
            )
    return changes


# --------------------------------------------------------------------------------------------
# Column mapping


def column_mapping_mode(configuration: Mapping[str, str] | None) -> str:
    """`delta.columnMapping.mode` of a table: 'none' (default), 'id' or 'name'.

    Raises:
        delta_ops.protocol.properties.InvalidTablePropertyError: Any other value.
    """
    return _column_mapping_mode(configuration or {})


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


# --------------------------------------------------------------------------------------------
# Partition values


_DATE_RE = re.compile(r"^\s*([+-]?\d{4,})-(\d{1,2})-(\d{1,2})\s*$")
_TIMESTAMP_RE = re.compile(
    r"^\s*(?P<date>[+-]?\d{4,}-\d{1,2}-\d{1,2})"
    r"(?:[ T](?P<h>\d{1,2}):(?P<m>\d{2})(?::(?P<s>\d{2})(?:\.(?P<frac>\d{1,9}))?)?)?"
    r"\s*(?P<tz>Z|z|UTC|[+-]\d{2}(?::?\d{2})?)?\s*$"
)
_DECIMAL_CONTEXT = Context(prec=2 * MAX_DECIMAL_PRECISION)
_INT_RANGES = {
    "byte": (-(2**7), 2**7 - 1),
    "short": (-(2**15), 2**15 - 1),
    "integer": (-(2**31), 2**31 - 1),
    "long": (-(2**63), 2**63 - 1),
}


def _bad_partition_value(value: str, type_name: str, why: str = "") -> CorruptLogError:
    suffix = f": {why}" if why else ""
    return CorruptLogError(f"partition value {value!r} is not a valid {type_name}{suffix}")


def _parse_date(value: str, type_name: str) -> dt.date:
    match = _DATE_RE.match(value)
    if match is None:
        raise _bad_partition_value(value, type_name)
    try:
        return dt.date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
    except ValueError as exc:
        raise _bad_partition_value(value, type_name, str(exc)) from exc


def _parse_timestamp(value: str, type_name: str) -> dt.datetime:
    match = _TIMESTAMP_RE.match(value)
    if match is None:
        raise _bad_partition_value(value, type_name)
    day = _parse_date(match.group("date"), type_name)
    frac = match.group("frac") or ""
    micros = int((frac + "000000")[:6]) if frac else 0
    try:
        naive = dt.datetime(
            day.year,
            day.month,
            day.day,
            int(match.group("h") or 0),
            int(match.group("m") or 0),
            int(match.group("s") or 0),
            micros,
        )
    except ValueError as exc:
        raise _bad_partition_value(value, type_name, str(exc)) from exc
    tz = match.group("tz")
    if type_name == "timestamp_ntz":
        if tz is not None:
            raise _bad_partition_value(value, type_name, "a timestamp_ntz carries no time zone")
        return naive
    offset = dt.timedelta(0)
    if tz is not None and tz.upper() not in ("Z", "UTC"):
        sign = -1 if tz[0] == "-" else 1
        digits = tz[1:].replace(":", "")
        offset = sign * dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:4] or 0))
    try:
        return (naive - offset).replace(tzinfo=dt.timezone.utc)
    except OverflowError as exc:
        raise _bad_partition_value(value, type_name, str(exc)) from exc


def partition_value_to_arrow(value: str | None, delta_type: DataType | str) -> Any:
    """Parse a serialized partition value into a Python value for `pa.scalar`.

    Per "Partition Value Serialization": null and the empty string are null for every type;
    numbers are their string form (float/double also accept NaN and +/-Infinity); booleans
    "true"/"false"; dates `YYYY-MM-DD`; binary is the string of escaped bytes (encoded back as
    UTF-8, as Spark writes it). Timestamps accept `YYYY-MM-DD HH:MM:SS[.ffffff]` and the ISO
    8601 forms with `T` and `Z` or an offset (corpus table
    golden__kernel-timestamp-partition-col-ISO8601 writes `2024-01-01T10:00:00.000000Z`). A
    `timestamp` without a zone is interpreted as UTC (the spec's "time zone of the writer" is
    not recorded anywhere; Delta Kernel and delta-rs assume UTC too) and returned as an aware
    UTC datetime; `timestamp_ntz` is returned naive and refuses a zone.

    Args:
        value: The string from `partitionValues`, or None.
        delta_type: The column's Delta type, or its type name (e.g. "decimal(10,2)").

    Returns:
        None, str, bytes, bool, int, float, Decimal, datetime.date or datetime.datetime.

    Raises:
        CorruptLogError: The value is not valid for the type.
        UnsupportedTypeError: Partition columns of this type are not supported.
    """
    t = _parse_type(delta_type, "<partition>") if isinstance(delta_type, str) else delta_type
    if value is None or value == "":
        return None
    if not isinstance(t, PrimitiveType) or not t.is_known or t.name in ("variant", "void"):
        name = t.name if isinstance(t, PrimitiveType) else type(t).__name__
        raise UnsupportedTypeError(
            f"partition values of type {name!r} are not supported", features=[name]
        )
    name = t.name
    if name == "string":
        return value
    if name == "binary":
        return value.encode("utf-8")
    if name == "boolean":
        lowered = value.strip().lower()
        if lowered not in ("true", "false"):
            raise _bad_partition_value(value, name)
        return lowered == "true"
    if name in _INT_RANGES:
        try:
            number = int(value.strip())
        except ValueError as exc:
            raise _bad_partition_value(value, name) from exc
        low, high = _INT_RANGES[name]
        if not low <= number <= high:
            raise _bad_partition_value(value, name, "out of range")
        return number
    if name in ("float", "double"):
        try:
            return float(value.strip())
        except ValueError as exc:
            raise _bad_partition_value(value, name) from exc
    if t.is_decimal:
        precision, scale = t.precision_scale
        try:
            number = Decimal(value.strip())
            if not number.is_finite():
                raise InvalidOperation
            quantized = number.quantize(Decimal(1).scaleb(-scale), context=_DECIMAL_CONTEXT)
        except InvalidOperation as exc:
            raise _bad_partition_value(value, name) from exc
        too_wide = quantized != 0 and quantized.adjusted() + 1 > precision - scale
        if quantized != number or too_wide:
            raise _bad_partition_value(value, name, f"does not fit decimal({precision},{scale})")
        return quantized
    if name == "date":
        return _parse_date(value, name)
    if name in ("timestamp", "timestamp_ntz"):
        return _parse_timestamp(value, name)
    raise UnsupportedTypeError(  # pragma: no cover - every known type is handled above
        f"partition values of type {name!r} are not supported", features=[name]
    )


# --------------------------------------------------------------------------------------------
# Typed statistics and partition values (checkpoint `stats_parsed`, `partitionValues_parsed`)


def _name_of(f: StructField, physical: bool) -> str:
    return f.physical_name if physical else f.name


def variant_stats_field(name: str) -> pa.Field:
    """The field of a variant column in `minValues`/`maxValues` of typed statistics: a Parquet
    variant (struct of the `value` and `metadata` binaries), marked as variant."""
    return pa.field(
        name, _variant_arrow_type(), metadata={VARIANT_MARKER_KEY: VARIANT_MARKER_VALUE}
    )


def is_variant_field(f: pa.Field) -> bool:
    """Whether an Arrow field is marked as holding a variant (see `VARIANT_MARKER_KEY`)."""
    return _is_variant_field(f)


def _min_max_fields(
    fields: Sequence[StructField], physical: bool, variant: bool
) -> list[pa.Field]:
    out = []
    for f in fields:
        name = _name_of(f, physical)
        if variant and f.type == PrimitiveType("variant"):
            out.append(variant_stats_field(name))
        elif (child := _min_max_type(f.type, physical, variant)) is not None:
            out.append(pa.field(name, child))
    return out


def _min_max_type(t: DataType, physical: bool, variant: bool = False) -> pa.DataType | None:
    if isinstance(t, StructType):
        children = _min_max_fields(t.fields, physical, variant)
        return pa.struct(children) if children else None
    if isinstance(t, PrimitiveType) and t.raw is None:
        if t.name in _MIN_MAX_TYPES:
            return _ARROW_PRIMITIVES[t.name]
        if t.is_decimal:
            return _primitive_to_arrow(t)
    return None


def _null_count_type(t: DataType, physical: bool) -> pa.DataType | None:
    if isinstance(t, StructType):
        children = [
            pa.field(_name_of(f, physical), child)
            for f in t.fields
            if (child := _null_count_type(f.type, physical)) is not None
        ]
        return pa.struct(children) if children else None
    return pa.int64()


def _leaf_count(t: DataType) -> int:
    if isinstance(t, StructType):
        return sum(_leaf_count(f.type) for f in t.fields)
    return 1


def _first_leaves(fields: Sequence[StructField], limit: int) -> list[StructField]:
    """Keep the first `limit` leaf columns of `fields` (dataSkippingNumIndexedCols)."""
    kept: list[StructField] = []
    remaining = limit
    for f in fields:
        if remaining <= 0:
            break
        if isinstance(f.type, StructType):
            children = _first_leaves(f.type.fields, remaining)
            remaining -= sum(_leaf_count(c.type) for c in children)
            if children:
                kept.append(
                    StructField(f.name, StructType(tuple(children)), f.nullable, f.metadata)
                )
        else:
            kept.append(f)
            remaining -= 1
    return kept


def _data_fields(
    schema: StructType, partition_columns: Sequence[str], num_indexed_cols: int | None
) -> list[StructField]:
    partitions = set(partition_columns)
    fields = [f for f in schema.fields if f.name not in partitions]
    if num_indexed_cols is not None and num_indexed_cols >= 0:
        fields = _first_leaves(fields, num_indexed_cols)
    return fields


def stats_schema(
    schema: StructType,
    partition_columns: Sequence[str] = (),
    *,
    physical: bool = False,
    num_indexed_cols: int | None = None,
    tight_bounds: bool = True,
    variant_min_max: bool = False,
) -> pa.StructType:
    """The Arrow type of typed statistics (`add.stats_parsed` in checkpoints).

    Layout as Delta Spark writes it (corpus table spark__transaction_log_schema_evolvability):
    `numRecords: int64, minValues: struct, maxValues: struct, nullCount: struct`, then
    `tightBounds: bool`. minValues/maxValues mirror the non-partition columns, nested structs
    kept, holding only types Delta collects min/max for (numbers, decimals, string, date,
    timestamps; not boolean, binary, arrays or maps; variant only with `variant_min_max`);
    nullCount holds an int64 for every non-struct column, arrays, maps and variants included.
    Structs left empty are dropped. (The spec's appendix example says `nullCounts`; the
    statistic, and every corpus table, is `nullCount`.)

    The types are the schema's current ones: after a type widening, the statistics of files
    written before the change are read into the wider type (as Delta Spark's checkpoints do;
    the spec's reader requirement: "convert such values to the current, wider type").

    Variant columns (spec "Statistics for Variant Columns"): `nullCount` always; `minValues`
    and `maxValues` only where they can exist, on tables supporting variant shredding
    (`variant_min_max`), as a Parquet variant (`variant_stats_field`). Writers of tables
    without shredding record only the null count (corpus: kernel-defaults__spark-variant-
    checkpoint), those with it a Z85 variant per column (spark__variant-stats-*).

    Args:
        schema: The table schema.
        partition_columns: Partition column (display) names; they have no statistics.
        physical: Use column-mapping physical names.
        num_indexed_cols: Keep only the first N leaf columns (`delta.dataSkippingNumIndexedCols`);
            None or negative keeps all.
        tight_bounds: Include the `tightBounds` field.
        variant_min_max: Give variant columns min/max statistics (variant shredding).
    """
    fields = _data_fields(schema, partition_columns, num_indexed_cols)
    min_max = _min_max_type(StructType(tuple(fields)), physical, variant_min_max)
    null_count = _null_count_type(StructType(tuple(fields)), physical)
    out = [pa.field("numRecords", pa.int64())]
    if min_max is not None:
        out.append(pa.field("minValues", min_max))
        out.append(pa.field("maxValues", min_max))
    if null_count is not None:
        out.append(pa.field("nullCount", null_count))
    if tight_bounds:
        out.append(pa.field("tightBounds", pa.bool_()))
    return pa.struct(out)


def partition_values_parsed_schema(
    schema: StructType, partition_columns: Sequence[str], physical: bool = False
) -> pa.StructType:
    """The Arrow type of `add.partitionValues_parsed`: partition columns with their types.

    Args:
        schema: The table schema.
        partition_columns: `metaData.partitionColumns` (display names), in that order.
        physical: Use column-mapping physical names (as checkpoints of mapped tables do).

    Raises:
        CorruptLogError: A partition column is not a top-level column of the schema.
        UnsupportedTypeError: A partition column has a type without Arrow mapping.
    """
    by_name = {f.name: f for f in schema.fields}
    out = []
    for name in partition_columns:
        f = by_name.get(name)
        if f is None:
            raise CorruptLogError(f"partition column {name!r} is not a column of the schema")
        out.append(pa.field(_name_of(f, physical), data_type_to_arrow(f.type)))
    return pa.struct(out)


__all__ = [
    "ArrayType",
    "COLUMN_ID_KEY",
    "DataType",
    "MapType",
    "PHYSICAL_NAME_KEY",
    "PrimitiveType",
    "StructField",
    "StructType",
    "TYPE_CHANGES_KEY",
    "TypeChange",
    "UnsupportedTypeError",
    "column_mapping_mode",
    "data_type_to_arrow",
    "from_arrow",
    "is_supported_widening",
    "is_variant_field",
    "iter_types",
    "logical_to_physical",
    "parse_schema",
    "partition_value_to_arrow",
    "partition_values_parsed_schema",
    "physical_name",
    "schema_from_dict",
    "schema_to_dict",
    "stats_schema",
    "to_arrow",
    "type_changes",
    "unknown_types",
    "validate_type_changes",
    "variant_stats_field",
]

"""Type widening: the `delta.typeChanges` field metadata, read and checked against the
widenings the spec allows (`type_changes`, `validate_type_changes`, `is_supported_widening`).

Spec section: "Type Widening". Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from delta_ops.errors import CorruptLogError, UnsupportedTypeError
from delta_ops.protocol.schema.column_mapping import _quote
from delta_ops.protocol.schema.datatypes import (
    MAX_DECIMAL_PRECISION,
    ArrayType,
    DataType,
    MapType,
    PrimitiveType,
    StructType,
    _parse_type,
    schema_to_dict,
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

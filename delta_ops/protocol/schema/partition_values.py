"""Partition values: the strings of `partitionValues` parsed into typed Arrow values.

Spec section: "Partition Value Serialization". A value that does not parse as its column's
type is a `CorruptLogError` naming the value and the type. Pure: no I/O.
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import Context, Decimal, InvalidOperation
from typing import Any

from delta_ops.errors import CorruptLogError, UnsupportedTypeError
from delta_ops.protocol.schema.datatypes import (
    MAX_DECIMAL_PRECISION,
    DataType,
    PrimitiveType,
    _parse_type,
)

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

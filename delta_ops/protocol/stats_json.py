"""Typed file statistics (`add.stats_parsed`) written back as the JSON `stats` string.

Spec sections: "Checkpoint Schema" (`stats_parsed` holds the statistics typed by the
table's schema; `delta.checkpoint.writeStatsAsJson` asks for the JSON form) and "Per-file
Statistics" (`numRecords`, `minValues`, `maxValues`, `nullCount`, `tightBounds`).

A checkpoint that keeps only typed statistics (written with `writeStatsAsJson` off) still
describes its files; a checkpoint written after it with `writeStatsAsJson` on carries them
as JSON, converted the way Delta Spark converts `stats_parsed` back (`to_json`), so the
text matches what Spark writes in its own statistics:

* top-level keys in Spark's order (`numRecords`, `minValues`, `maxValues`, `nullCount`,
  `tightBounds`, then any other), null values and null structs left out;
* integers and decimals as JSON numbers (decimals at their scale, `-4.50`); floats as
  numbers with a fraction (`1.0`), NaN and infinities as the strings Jackson writes;
  booleans as `true`/`false`;
* dates `YYYY-MM-DD`; timestamps `YYYY-MM-DDTHH:MM:SS.sss` with `Z` when they carry a time
  zone (UTC) and nothing for timestamp_ntz, as Spark's statistics are written; a value
  with a sub-millisecond part keeps its microseconds (`.ssssss`), so no bound is lost;
* strings JSON-escaped; variant bounds as their Z85 text ("Statistics for Variant
  Columns"); binary values (which statistics never bound) left out.

Pure: Arrow kernels over whole columns, no I/O.
"""

from __future__ import annotations

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.protocol.schema import is_variant_field
from delta_ops.protocol.variant import encode_variant_stat

#: The order of the top-level statistics keys in Spark's JSON.
SPARK_KEY_ORDER = ("numRecords", "minValues", "maxValues", "nullCount", "tightBounds")

_CONTROL = r"[\x00-\x1f]"


def _join(*parts: pa.Array | str) -> pa.Array:
    """Element-wise concatenation (null where any part is null); literal parts repeated
    (Arrow's join does not broadcast a leading scalar)."""
    n = next(len(p) for p in parts if not isinstance(p, str))
    arrays = [pa.repeat(pa.scalar(p), n) if isinstance(p, str) else p for p in parts]
    return pc.binary_join_element_wise(*arrays, "")


def _quoted(text: pa.Array) -> pa.Array:
    return _join('"', text, '"')


def _escaped_strings(arr: pa.Array) -> pa.Array:
    """JSON string literals (quoted and escaped) of a string array; null stays null."""
    arr = arr.cast(pa.string())
    text = pc.replace_substring(arr, "\\", "\\\\")
    text = pc.replace_substring(text, '"', '\\"')
    control = pc.match_substring_regex(arr, _CONTROL)
    if pc.any(control).as_py():
        # Rare: control characters get orjson's escapes, one value at a time.
        values = arr.to_pylist()
        mask = control.to_pylist()
        done = [
            orjson.dumps(v).decode() if m else None for v, m in zip(values, mask, strict=True)
        ]
        return pc.if_else(control, pa.array(done, pa.string()), _quoted(text))
    return _quoted(text)


def _floats(arr: pa.Array) -> pa.Array:
    text = pc.cast(arr, pa.string())
    integral = pc.match_substring_regex(text, r"^-?[0-9]+$")
    text = pc.if_else(integral, _join(text, ".0"), text)
    special = pc.or_(pc.is_nan(arr), pc.is_inf(arr))
    if not pc.any(special).as_py():
        return text
    text = pc.replace_substring_regex(text, "^nan$", '"NaN"')
    text = pc.replace_substring_regex(text, "^inf$", '"Infinity"')
    return pc.replace_substring_regex(text, "^-inf$", '"-Infinity"')


def _timestamps(arr: pa.Array) -> pa.Array:
    unit_type = pa.timestamp("us", tz=arr.type.tz)
    micros = pc.cast(pc.cast(arr, unit_type, safe=False), pa.int64())
    us = micros.fill_null(0).to_numpy(zero_copy_only=False)
    seconds = us // 1_000_000
    fraction = us % 1_000_000
    # "YYYY-MM-DD HH:MM:SS" (Arrow's cast, much faster than strftime), then the "T".
    base = pc.cast(pa.array(seconds.astype("datetime64[s]")), pa.string())
    base = pc.utf8_replace_slice(base, 10, 11, "T")
    millis = pc.utf8_lpad(pa.array(fraction // 1000).cast(pa.string()), 3, "0")
    full = pc.utf8_lpad(pa.array(fraction).cast(pa.string()), 6, "0")
    frac = pc.if_else(pa.array(fraction % 1000 == 0), millis, full)
    suffix = "Z" if arr.type.tz is not None else ""
    text = _join(base, ".", frac, suffix)
    text = pc.if_else(pc.is_null(arr), pa.scalar(None, pa.string()), text)
    return _quoted(text)


def _variants(arr: pa.StructArray) -> pa.Array:
    metadata = pc.struct_field(arr, "metadata").to_pylist()
    value = pc.struct_field(arr, "value").to_pylist()
    valid = pc.is_valid(arr).to_pylist()
    out = [
        orjson.dumps(encode_variant_stat(m, v)).decode() if ok and m is not None else None
        for m, v, ok in zip(metadata, value, valid, strict=True)
    ]
    return pa.array(out, pa.string())


def _value(arr: pa.Array, field: pa.Field) -> pa.Array | None:
    """The JSON text of each value of `arr` (null where null); None for a type statistics
    do not carry in JSON (binary)."""
    t = arr.type
    if is_variant_field(field) and pa.types.is_struct(t):
        return _variants(arr)
    if pa.types.is_struct(t):
        return _object(arr)
    if pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_decimal(t):
        return pc.cast(arr, pa.string())
    if pa.types.is_floating(t):
        return _floats(arr)
    if pa.types.is_date(t):
        return _quoted(pc.cast(pc.cast(arr, pa.date32()), pa.string()))
    if pa.types.is_timestamp(t):
        return _timestamps(arr)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _escaped_strings(arr)
    return None


def _object(arr: pa.StructArray, order: tuple[str, ...] = ()) -> pa.Array:
    """JSON objects of a struct array: null members left out, a null struct null."""
    fields = list(arr.type)
    rank = {name: i for i, name in enumerate(order)}
    indices = sorted(range(len(fields)), key=lambda i: (rank.get(fields[i].name, len(rank)), i))
    children = arr.flatten()
    members = []
    for i in indices:
        value = _value(children[i], fields[i])
        if value is None:
            continue
        key = "," + orjson.dumps(fields[i].name).decode() + ":"
        members.append(_join(key, value).fill_null(""))
    n = len(arr)
    if members:
        # Each present member is ",key:value", an absent one empty; the first comma goes.
        body = pc.replace_substring_regex(_join(*members), "^,", "", max_replacements=1)
    else:
        body = pa.repeat(pa.scalar(""), n)
    text = _join("{", body, "}")
    if arr.null_count:
        text = pc.if_else(pc.is_valid(arr), text, pa.scalar(None, pa.string()))
    return text


def stats_json(parsed: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The JSON `stats` string of each row of typed statistics (`stats_parsed`); null where
    the row has none."""
    if isinstance(parsed, pa.ChunkedArray):
        parsed = parsed.combine_chunks() if parsed.num_chunks != 1 else parsed.chunk(0)
    if not len(parsed):
        return pa.array([], pa.string())
    return _object(parsed, SPARK_KEY_ORDER)


__all__ = ["SPARK_KEY_ORDER", "stats_json"]

"""Small Arrow <-> NumPy conversions that go through buffers.

pyarrow imports pandas (a third of a second and tens of MB in a cold process) the first
time it converts Python objects or NumPy arrays (`pa.array(...)`, `pa.scalar(...)`,
`Array.to_numpy()`, `Schema.empty_table()`, a Python value passed to a compute function).
The snapshot path builds its arrays from buffers instead, so loading a table never pays
for pandas.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_NUMPY_TO_ARROW = {
    np.dtype(np.int64): pa.int64(),
    np.dtype(np.int32): pa.int32(),
    np.dtype(np.uint64): pa.uint64(),
    np.dtype(np.uint32): pa.uint32(),
}


def from_numpy(values: np.ndarray) -> pa.Array:
    """A non-null Arrow array over a 1-D NumPy array of integers or booleans."""
    if values.dtype == np.bool_:
        bits = np.packbits(values, bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(
        _NUMPY_TO_ARROW[values.dtype], len(values), [None, pa.py_buffer(values)]
    )


def to_numpy(array: pa.Array) -> np.ndarray:
    """The values of a null-free integer or boolean Arrow array as NumPy (a view for
    integers, unpacked bits for booleans)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    if array.null_count:
        raise ValueError("to_numpy needs an array without nulls")
    n, off = len(array), array.offset
    buf = array.buffers()[1]
    if pa.types.is_boolean(array.type):
        if n == 0:
            return np.zeros(0, dtype=bool)
        bits = np.unpackbits(np.frombuffer(buf, dtype=np.uint8), bitorder="little")
        return bits[off : off + n].astype(bool)
    dtype = _numpy_dtype(array.type)
    return np.frombuffer(buf, dtype=dtype, count=n, offset=off * dtype.itemsize)


def _numpy_dtype(typ: pa.DataType) -> np.dtype:
    """NumPy's dtype for an Arrow integer type without `to_pandas_dtype()`, which imports
    pandas before pyarrow 26 (other fixed-width types go through it)."""
    if pa.types.is_integer(typ):
        kind = "i" if pa.types.is_signed_integer(typ) else "u"
        return np.dtype(f"{kind}{typ.bit_width // 8}")
    return np.dtype(typ.to_pandas_dtype())


def int_values(array: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """The values of an integer array as NumPy and where they are valid (the values at
    null slots are unspecified)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    n, off = len(array), array.offset
    dtype = _numpy_dtype(array.type)
    if n == 0:
        return np.zeros(0, dtype=dtype), np.zeros(0, dtype=bool)
    values = np.frombuffer(array.buffers()[1], dtype=dtype, count=n, offset=off * dtype.itemsize)
    validity = array.buffers()[0]
    if validity is None or not array.null_count:
        return values, np.ones(n, dtype=bool)
    bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
    return values, bits[off : off + n].astype(bool)


def string_array(values: Sequence[str | None]) -> pa.Array:
    """A string array from Python strings (None for null)."""
    data = [b"" if v is None else v.encode("utf-8") for v in values]
    offsets = np.zeros(len(data) + 1, dtype=np.int64)
    if data:
        np.cumsum([len(b) for b in data], out=offsets[1:])
    validity = None
    if any(v is None for v in values):
        validity = pa.py_buffer(np.packbits([v is not None for v in values], bitorder="little"))
    arr = pa.Array.from_buffers(
        pa.large_string(), len(data),
        [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))],
    )
    return arr.cast(pa.string())


def sorted_strings(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """`values` as one string array in ascending byte order (S3's listing order, and the
    code point order of `str`); `values` itself when it is one already (checked in one
    pass, so that a caller that sorted them once spares the next its sort)."""
    if values.type != pa.string():
        values = values.cast(pa.string())
    if isinstance(values, pa.ChunkedArray):
        # (`combine_chunks` of no chunks would import pandas.)
        values = values.combine_chunks() if values.num_chunks else string_array([])
    if len(values) < 2 or pc.all(pc.less_equal(values[:-1], values[1:])).as_py():
        return values
    return values.take(pc.array_sort_indices(values))


def sorted_unique(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The distinct strings of `values` (nulls left out) in ascending byte order (S3's
    listing order, and the code point order of `str`), as one array; `values` itself
    when it is already that.

    One sort and a comparison of neighbours: the same set as `pc.unique`, whose hash
    table copies every value and takes about three times the values' size while it
    works (a third of that here). A caller that needs them sorted gets that for free.
    """
    if values.null_count:
        values = values.drop_null()
    values = sorted_strings(values)
    if len(values) < 2:
        return values
    differs = pc.not_equal(values[1:], values[:-1])
    if pc.all(differs).as_py():
        return values
    # The first of each run of equal values: the first value, and each that differs
    # from the one before it.
    return values.filter(pa.concat_arrays([from_numpy(np.ones(1, dtype=bool)), differs]))


def not_in(values: pa.Array, other: pa.Array) -> pa.Array:
    """`values` without those `other` holds, in their order. The hash set is built over
    the smaller side: a few expired paths against every kept one hash only the few."""
    if not len(values) or not len(other):
        return values
    if len(other) > len(values):
        other = other.filter(pc.is_in(other, value_set=values))
        if not len(other):
            return values
    return values.filter(pc.invert(pc.is_in(values, value_set=other)))


def empty_table(schema: pa.Schema) -> pa.Table:
    """A table with no rows (one empty chunk per column: `combine_chunks` on a column
    without chunks would import pandas)."""
    return pa.Table.from_arrays([pa.nulls(0, f.type) for f in schema], schema=schema)


def constant_string(value: str, n: int) -> pa.Array:
    """`n` times the same string (e.g. a separator for `binary_join_element_wise`, which
    would otherwise turn a Python string into a scalar)."""
    data = value.encode("utf-8")
    offsets = np.arange(n + 1, dtype=np.int64) * len(data)
    arr = pa.Array.from_buffers(
        pa.large_string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data * n)]
    )
    return arr.cast(pa.string())


_INT_DTYPES = {
    pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32, pa.int64(): np.int64,
    pa.float32(): np.float32, pa.float64(): np.float64,
}


def from_pylist(values: Sequence[Any], typ: pa.DataType) -> pa.Array:
    """`pa.array(values, typ)` for the types actions use (structs, string maps, lists,
    strings, integers, floats, booleans), built from buffers. Struct values are
    mappings (missing keys are null), map values mappings or pairs.

    Raises:
        TypeError: Another type.
    """
    n = len(values)
    valid = np.fromiter((v is not None for v in values), dtype=bool, count=n)
    all_valid = bool(valid.all())
    validity = None if all_valid else pa.py_buffer(np.packbits(valid, bitorder="little"))
    mask = None if all_valid else from_numpy(~valid)
    if pa.types.is_struct(typ):
        children = [
            from_pylist([None if v is None else v.get(f.name) for v in values], f.type)
            for f in typ
        ]
        return pa.StructArray.from_arrays(children, fields=list(typ), mask=mask)
    if pa.types.is_map(typ) or pa.types.is_list(typ):
        offsets = np.zeros(n + 1, dtype=np.int32)
        keys: list[Any] = []
        items: list[Any] = []
        for i, v in enumerate(values):
            if v is not None:
                if pa.types.is_list(typ):
                    items.extend(v)
                else:
                    for k, x in v.items() if isinstance(v, Mapping) else v:
                        keys.append(k)
                        items.append(x)
            offsets[i + 1] = len(items)
        off = from_numpy(offsets)
        if pa.types.is_list(typ):
            return pa.ListArray.from_arrays(
                off, from_pylist(items, typ.value_type), type=typ, mask=mask
            )
        return pa.MapArray.from_arrays(
            off, from_pylist(keys, typ.key_type), from_pylist(items, typ.item_type),
            type=typ, mask=mask,
        )
    if pa.types.is_string(typ):
        return string_array(values)
    if pa.types.is_null(typ):
        return pa.nulls(n)
    if pa.types.is_boolean(typ):
        flags = np.fromiter((bool(v) for v in values), dtype=bool, count=n)
        bits = np.packbits(flags, bitorder="little")
        return pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(bits)])
    dtype = _INT_DTYPES.get(typ)
    if dtype is None:
        raise TypeError(f"from_pylist does not build {typ}")
    data = np.array([0 if v is None else v for v in values], dtype=dtype)
    return pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(data)])

"""Small Arrow <-> NumPy conversions that go through buffers.

pyarrow imports pandas (a third of a second and tens of MB in a cold process) the first
time it converts Python objects or NumPy arrays (`pa.array(...)`, `pa.scalar(...)`,
`Array.to_numpy()`, `Schema.empty_table()`, a Python value passed to a compute function).
The snapshot path builds its arrays from buffers instead, so loading a table never pays
for pandas.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

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
    dtype = np.dtype(array.type.to_pandas_dtype())
    return np.frombuffer(buf, dtype=dtype, count=n, offset=off * dtype.itemsize)


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


def empty_table(schema: pa.Schema) -> pa.Table:
    """A table with no rows."""
    return pa.Table.from_batches([], schema=schema)

"""The 64-bit RoaringBitmap of deletion vectors: `RoaringBitmap64` (an immutable set of row
indexes), its serialization with the magic number prefix, and a bounds-checked reader that
refuses malformed bytes with `DeletionVectorError`.

Spec section: "Deletion Vector Format" with its "64-bit RoaringBitmap" serialization
("portable" format, magic number prefix). Pure: no I/O.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterable, Iterator

import pyroaring

from delta_ops.errors import DeletionVectorError

__all__ = ["MAGIC_NUMBER", "RoaringBitmap64", "deserialize_bitmap", "serialize_bitmap"]

#: Little-endian int32 that starts every serialized Delta bitmap ("Deletion Vector Format").
MAGIC_NUMBER = 1681511377
_MAGIC_BYTES = struct.pack("<i", MAGIC_NUMBER)
# Delta-Spark's non-portable RoaringBitmapArray format; not in the protocol, named in errors.
_NATIVE_MAGIC_NUMBER = 1681511376


#: Row indexes are non-negative and bucket keys must have a 0 most significant bit.
_MAX_ROW_INDEX_EXCLUSIVE = 1 << 63


# --------------------------------------------------------------------------------------
# 64-bit RoaringBitmap
# --------------------------------------------------------------------------------------


class RoaringBitmap64:
    """An immutable set of row indexes (0 <= index < 2**63).

    Backed by `pyroaring.FrozenBitMap64`, whose serialization is the RoaringBitmap
    "portable" 64-bit format the spec uses (`numBuckets` u64, then per bucket a u32 key
    and a 32-bit portable bitmap, little endian). `serialize_bitmap` and
    `deserialize_bitmap` add and check Delta's magic number.
    """

    __slots__ = ("_bitmap",)

    def __init__(self, bitmap: pyroaring.AbstractBitMap64 | None = None) -> None:
        """Wrap a pyroaring bitmap as is (empty when None); `from_ints` validates."""
        if bitmap is None:
            bitmap = pyroaring.FrozenBitMap64()
        elif not isinstance(bitmap, pyroaring.FrozenBitMap64):
            bitmap = pyroaring.FrozenBitMap64(bitmap)
        self._bitmap = bitmap

    @classmethod
    def from_ints(cls, values: Iterable[int]) -> RoaringBitmap64:
        """Build from row indexes (any order, duplicates allowed).

        Raises:
            DeletionVectorError: a value is negative or not below 2**63.
        """
        if isinstance(values, RoaringBitmap64):
            return values
        try:
            bitmap = pyroaring.FrozenBitMap64(values)
        except (OverflowError, TypeError) as exc:
            raise DeletionVectorError(
                f"row indexes must be integers in [0, 2**63): {exc}"
            ) from None
        if bitmap and bitmap.max() >= _MAX_ROW_INDEX_EXCLUSIVE:
            raise DeletionVectorError(f"row index {bitmap.max()} is not below 2**63")
        return cls(bitmap)

    def __contains__(self, row: object) -> bool:
        return (
            isinstance(row, int) and 0 <= row < _MAX_ROW_INDEX_EXCLUSIVE and row in self._bitmap
        )

    def __len__(self) -> int:
        return len(self._bitmap)

    def __bool__(self) -> bool:
        return bool(self._bitmap)

    def __iter__(self) -> Iterator[int]:
        return iter(self._bitmap)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RoaringBitmap64):
            return self._bitmap == other._bitmap
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._bitmap)

    def __repr__(self) -> str:
        if len(self) <= 10:
            return f"RoaringBitmap64({self.to_list()})"
        return f"RoaringBitmap64(<{len(self)} rows, {self.min()}..{self.max()}>)"

    def min(self) -> int:
        """Smallest row index (ValueError when empty)."""
        return self._bitmap.min()

    def max(self) -> int:
        """Largest row index (ValueError when empty)."""
        return self._bitmap.max()

    def to_list(self) -> list[int]:
        """Row indexes, ascending."""
        return list(self._bitmap)

    def to_array(self) -> array:
        """Row indexes, ascending, as `array.array('Q')` (exposes the buffer protocol)."""
        return self._bitmap.to_array()

    @property
    def bitmap(self) -> pyroaring.FrozenBitMap64:
        """The underlying pyroaring bitmap (for set algebra)."""
        return self._bitmap

    def serialize(self) -> bytes:
        """Same as `serialize_bitmap(self)`."""
        return serialize_bitmap(self)


_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_SERIAL_COOKIE_NO_RUNCONTAINER = 12346
_SERIAL_COOKIE = 12347
_NO_OFFSET_THRESHOLD = 4
_ARRAY_CONTAINER_MAX = 4096
_BITSET_CONTAINER_BYTES = 8192


def _need(buf: memoryview, pos: int, n: int, what: str) -> None:
    if pos + n > len(buf):
        raise DeletionVectorError(
            f"truncated bitmap: {what} needs {n} bytes at byte {pos}, only "
            f"{max(len(buf) - pos, 0)} left"
        )


def _end_of_roaring32(buf: memoryview, pos: int) -> int:
    """Byte just past the 32-bit portable RoaringBitmap starting at `pos`.

    Walks only the header (container keys, cardinalities, run flags), so the 64-bit
    layout can be checked without decoding containers.
    """
    _need(buf, pos, 4, "32-bit bitmap cookie")
    cookie = _U32.unpack_from(buf, pos)[0]
    if cookie & 0xFFFF == _SERIAL_COOKIE:
        n = (cookie >> 16) + 1
        pos += 4
        flags_len = (n + 7) // 8
        _need(buf, pos, flags_len, "run-container flags")
        run_flags = bytes(buf[pos : pos + flags_len])
        pos += flags_len
        has_offsets = n >= _NO_OFFSET_THRESHOLD
    elif cookie == _SERIAL_COOKIE_NO_RUNCONTAINER:
        _need(buf, pos + 4, 4, "container count")
        n = _U32.unpack_from(buf, pos + 4)[0]
        if n > 1 << 16:
            raise DeletionVectorError(f"32-bit bitmap claims {n} containers (max 65536)")
        pos += 8
        run_flags = b""
        has_offsets = True
    else:
        raise DeletionVectorError(f"unknown 32-bit RoaringBitmap cookie {cookie}")
    _need(buf, pos, 4 * n, "container headers")
    key_cards = struct.unpack_from(f"<{2 * n}H", buf, pos)
    pos += 4 * n
    if has_offsets:
        _need(buf, pos, 4 * n, "container offsets")
        pos += 4 * n
    for i in range(n):
        if run_flags and run_flags[i >> 3] & (1 << (i & 7)):
            _need(buf, pos, 2, "run count")
            pos += 2 + 4 * _U16.unpack_from(buf, pos)[0]
        else:
            card = key_cards[2 * i + 1] + 1
            pos += 2 * card if card <= _ARRAY_CONTAINER_MAX else _BITSET_CONTAINER_BYTES
    _need(buf, pos, 0, "container data")
    return pos


def deserialize_bitmap(data: bytes) -> RoaringBitmap64:
    """Decode a Delta-serialized 64-bit bitmap (spec "Deletion Vector Format").

    Args:
        data: magic number 1681511377 (little-endian int32) followed by a 64-bit portable
            RoaringBitmap, and nothing else.

    Returns:
        The row indexes.

    Raises:
        DeletionVectorError: bad magic number, truncated or trailing bytes, bucket keys
            not ascending or with their most significant bit set, or corrupt containers.
    """
    buf = memoryview(data).cast("B")
    if len(buf) < 12:
        raise DeletionVectorError(
            f"serialized deletion vector is {len(buf)} bytes, shorter than the 12-byte "
            "header (magic number and bucket count)"
        )
    magic = bytes(buf[:4])
    if magic != _MAGIC_BYTES:
        found = struct.unpack("<i", magic)[0]
        hint = ""
        if _NATIVE_MAGIC_NUMBER in (found, struct.unpack(">i", magic)[0]):
            hint = (
                f"; {_NATIVE_MAGIC_NUMBER} is Delta's legacy 'native' RoaringBitmapArray "
                "format, which the protocol does not allow"
            )
        raise DeletionVectorError(
            f"bad deletion vector magic number {found} (expected {MAGIC_NUMBER}){hint}"
        )
    num_buckets = _U64.unpack_from(buf, 4)[0]
    if num_buckets > (len(buf) - 12) // 12:  # every bucket takes at least 12 bytes
        raise DeletionVectorError(
            f"bitmap claims {num_buckets} buckets in {len(buf)} bytes"
        )
    pos = 12
    previous_key = -1
    for _ in range(num_buckets):
        _need(buf, pos, 4, "bucket key")
        key = _U32.unpack_from(buf, pos)[0]
        if key >= 1 << 31:
            raise DeletionVectorError(
                f"bitmap bucket key {key:#x} has its most significant bit set"
            )
        if key <= previous_key:
            raise DeletionVectorError(
                f"bitmap bucket keys not strictly ascending ({previous_key} then {key})"
            )
        previous_key = key
        pos = _end_of_roaring32(buf, pos + 4)
    if pos != len(buf):
        raise DeletionVectorError(
            f"serialized deletion vector has {len(buf) - pos} trailing bytes after "
            f"{num_buckets} buckets"
        )
    try:
        bitmap = pyroaring.FrozenBitMap64.deserialize(bytes(buf[4:]))
    except ValueError as exc:
        raise DeletionVectorError(f"corrupt 64-bit RoaringBitmap: {exc}") from None
    return RoaringBitmap64(bitmap)


def serialize_bitmap(rows: Iterable[int]) -> bytes:
    """Serialize row indexes in Delta's format: magic number + 64-bit portable bitmap.

    Args:
        rows: row indexes in [0, 2**63), or a `RoaringBitmap64`.

    Raises:
        DeletionVectorError: a row index out of range.
    """
    bitmap = pyroaring.BitMap64(RoaringBitmap64.from_ints(rows).bitmap)
    bitmap.run_optimize()
    return _MAGIC_BYTES + bitmap.serialize()

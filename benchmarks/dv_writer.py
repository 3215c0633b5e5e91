"""Deletion-vector writers the tests and benchmarks use to build tables (the product only
reads DVs). It lives here, outside the test package, so a benchmark may use it; the tests
import it through `delta_ops_tests.support.dv_writer`.

Spec sections (PROTOCOL.md): "Deletion Vector Descriptor Schema", "Deletion Vector Format"
and "Deletion Vector File Storage Format"; the readers they invert live in
`delta_ops.protocol.deletion_vectors` (`decode_uuid_path`, `read_dv_from_file_bytes`,
`inline_dv_bitmap`).
"""

from __future__ import annotations

import struct
import uuid
import zlib
from collections.abc import Iterable, Sequence

from delta_ops.errors import DeletionVectorError
from delta_ops.protocol.deletion_vectors import (
    DV_FILE_FORMAT_VERSION,
    MAGIC_NUMBER,
    DeletionVectorDescriptor,
    RoaringBitmap64,
    serialize_bitmap,
    z85_encode,
)

__all__ = ["encode_uuid_path", "inline_descriptor", "write_dv_file"]

_MAGIC_BYTES = struct.pack("<i", MAGIC_NUMBER)
_BE_U32 = struct.Struct(">I")


def encode_uuid_path(u: uuid.UUID, prefix: str = "") -> str:
    """Inverse of `decode_uuid_path`: `prefix + Z85(u.bytes)`."""
    return prefix + z85_encode(u.bytes)


def write_dv_file(
    bitmaps: Sequence[bytes | RoaringBitmap64],
) -> tuple[bytes, list[tuple[int, int]]]:
    """Build a DV file holding the given bitmaps, in order.

    Args:
        bitmaps: serialized bitmaps (as from `serialize_bitmap`, magic included) or
            `RoaringBitmap64` instances.

    Returns:
        `(file bytes, [(offset, size_in_bytes), ...])`, one pair per bitmap, ready for the
        descriptors (`offset` points at the entry's `dataSize`).

    Raises:
        DeletionVectorError: a serialized bitmap without the magic number.
    """
    parts = [bytes([DV_FILE_FORMAT_VERSION])]
    entries: list[tuple[int, int]] = []
    position = 1
    for item in bitmaps:
        payload = item.serialize() if isinstance(item, RoaringBitmap64) else bytes(item)
        if payload[:4] != _MAGIC_BYTES:
            raise DeletionVectorError(
                f"bitmap #{len(entries)} does not start with the deletion vector magic number"
            )
        parts += [_BE_U32.pack(len(payload)), payload, _BE_U32.pack(zlib.crc32(payload))]
        entries.append((position, len(payload)))
        position += 8 + len(payload)
    return b"".join(parts), entries


def inline_descriptor(rows: Iterable[int]) -> DeletionVectorDescriptor:
    """Build an inline DV descriptor for the given row indexes (Delta's padding rules)."""
    bitmap = RoaringBitmap64.from_ints(rows)
    payload = serialize_bitmap(bitmap)
    padded = payload + b"\x00" * (-len(payload) % 4)
    return DeletionVectorDescriptor("i", z85_encode(padded), None, len(payload), len(bitmap))

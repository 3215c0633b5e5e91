"""Deletion vectors: descriptors, Z85, the 64-bit RoaringBitmap format and DV files.

Spec sections (PROTOCOL.md): "Deletion Vectors" with "Deletion Vector Descriptor Schema"
and "Derived Fields", "Reader Requirements for Deletion Vectors", "Deletion Vector Format"
with its "64-bit RoaringBitmap" serialization (magic number prefix) and the "Deletion
Vector File Storage Format".

The bitmap itself (`RoaringBitmap64`, its serialization) lives in `delta_ops.protocol.roaring`
and is importable from here as before.

This module is pure: every function takes bytes or strings and returns values. Reading a
DV file (or the data file it applies to) is the caller's job; `absolute_path` tells the
caller which file to read and `read_dv_from_file_bytes` decodes what was read.

What real tables (the test corpus, written by Spark) show beyond the spec text:

* `offset` points at the entry's 4-byte `dataSize`, i.e. past the file's version byte:
  the first DV in a file has offset 1, the next one `1 + 4 + dataSize + 4`, and so on.
* `sizeInBytes` is `dataSize`: the serialized bitmap *including* the 4-byte magic number,
  without the size field and the checksum.
* A `u` path is an optional random prefix followed by the 20-character Z85 encoding of
  the 16 UUID bytes (most significant long first, i.e. `uuid.UUID.bytes`).

The corpus holds no inline DV. Following the spec ("sizeInBytes ... before base85
encoding, if inline") and Delta's Base85Codec, an inline DV is Z85 of the same bytes
(magic included), zero-padded to a multiple of 4; `sizeInBytes` is the unpadded length.
The spec's own inline example is in Delta-Spark's legacy "native" RoaringBitmapArray layout
(magic 1681511376, big-endian framing), which the spec text does not allow; it is refused
with an error that says so.
"""

from __future__ import annotations

import base64
import re
import struct
import uuid
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from delta_ops.errors import DeletionVectorError
from delta_ops.protocol.roaring import (
    MAGIC_NUMBER,
    RoaringBitmap64,
    deserialize_bitmap,
    serialize_bitmap,
)

__all__ = [
    "DV_FILE_FORMAT_VERSION",
    "MAGIC_NUMBER",
    "DeletionVectorDescriptor",
    "RoaringBitmap64",
    "decode_uuid_path",
    "deserialize_bitmap",
    "inline_dv_bitmap",
    "read_dv_from_file_bytes",
    "serialize_bitmap",
    "unique_id_of",
    "z85_decode",
    "z85_encode",
]

#: First byte of a DV file ("Deletion Vector File Storage Format").
DV_FILE_FORMAT_VERSION = 1

_STORAGE_TYPES = frozenset({"u", "i", "p"})
_ENCODED_UUID_LENGTH = 20

# --------------------------------------------------------------------------------------
# Z85 (https://rfc.zeromq.org/spec/32/): base 85, 4 bytes big-endian -> 5 characters.
# Python's base64.b85* use the same arithmetic with another alphabet, so we translate.
# --------------------------------------------------------------------------------------

_Z85_ALPHABET = (
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
)
_B85_ALPHABET = (
    "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"
)
_Z85_TO_B85 = str.maketrans(_Z85_ALPHABET, _B85_ALPHABET)
_B85_TO_Z85 = str.maketrans(_B85_ALPHABET, _Z85_ALPHABET)
_Z85_TEXT = re.compile(r"[0-9a-zA-Z.\-:+=^!/*?&<>()\[\]{}@%$#]*")


def z85_decode(text: str) -> bytes:
    """Decode Z85 text (spec "Deletion Vector Descriptor Schema": Base85 variant Z85).

    Args:
        text: Z85 characters; the length must be a multiple of 5.

    Returns:
        The decoded bytes, 4 per 5 characters.

    Raises:
        DeletionVectorError: the length is not a multiple of 5, a character is not in the
            Z85 alphabet, or a 5-character group encodes a value above 2**32 - 1.
    """
    if len(text) % 5:
        raise DeletionVectorError(f"Z85 text length {len(text)} is not a multiple of 5")
    if not _Z85_TEXT.fullmatch(text):
        bad = next(c for c in text if c not in _Z85_ALPHABET)
        raise DeletionVectorError(f"invalid Z85 character {bad!r} in {text[:40]!r}")
    try:
        return base64.b85decode(text.translate(_Z85_TO_B85))
    except ValueError as exc:  # a group above 2**32 - 1
        raise DeletionVectorError(f"invalid Z85 text {text[:40]!r}: {exc}") from None


def z85_encode(data: bytes) -> str:
    """Encode bytes as Z85.

    Args:
        data: bytes whose length is a multiple of 4 (pad first if needed; Delta pads
            inline DVs with zero bytes).

    Returns:
        The Z85 text, 5 characters per 4 bytes.

    Raises:
        DeletionVectorError: the length is not a multiple of 4.
    """
    if len(data) % 4:
        raise DeletionVectorError(f"Z85 input length {len(data)} is not a multiple of 4")
    return base64.b85encode(bytes(data)).decode("ascii").translate(_B85_TO_Z85)


def decode_uuid_path(encoded: str) -> tuple[str, uuid.UUID]:
    """Split a `u` descriptor's `pathOrInlineDv` into its random prefix and UUID.

    Args:
        encoded: `<random prefix><20 Z85 characters of the 16 UUID bytes>`.

    Returns:
        `(prefix, uuid)`; the prefix is `""` when there is none.

    Raises:
        DeletionVectorError: shorter than 20 characters or not valid Z85.
    """
    if len(encoded) < _ENCODED_UUID_LENGTH:
        raise DeletionVectorError(
            f"'u' deletion vector path {encoded!r} is shorter than the "
            f"{_ENCODED_UUID_LENGTH} characters of an encoded UUID"
        )
    split = len(encoded) - _ENCODED_UUID_LENGTH
    return encoded[:split], uuid.UUID(bytes=z85_decode(encoded[split:]))


# --------------------------------------------------------------------------------------
# Descriptor
# --------------------------------------------------------------------------------------


def _required(d: Mapping[str, Any], key: str) -> Any:
    value = d.get(key)
    if value is None:
        raise DeletionVectorError(f"deletion vector descriptor has no {key!r}: {dict(d)!r}")
    return value


def _int_field(d: Mapping[str, Any], key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise DeletionVectorError(
            f"deletion vector descriptor field {key!r} must be a non-negative integer, "
            f"got {value!r}: {dict(d)!r}"
        )
    return value


@dataclass(frozen=True, slots=True)
class DeletionVectorDescriptor:
    """A `deletionVector` struct of an `add` or `remove` action.

    Attributes:
        storage_type: `'u'` (relative path from a UUID), `'i'` (inline), `'p'` (absolute
            path).
        path_or_inline_dv: encoded UUID with optional prefix, Z85 bitmap, or absolute URI.
        offset: where the DV's entry starts in its file (None for inline DVs).
        size_in_bytes: size of the serialized bitmap (magic included), before Z85.
        cardinality: number of rows the DV removes.
    """

    storage_type: str
    path_or_inline_dv: str
    offset: int | None
    size_in_bytes: int
    cardinality: int

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DeletionVectorDescriptor:
        """Build from a descriptor as found in the log (JSON object or checkpoint struct).

        Args:
            d: mapping with `storageType`, `pathOrInlineDv`, `sizeInBytes`,
                `cardinality` and, except for inline DVs, optionally `offset`. Unknown keys
                (e.g. Spark's `maxRowIndex`) are ignored.

        Raises:
            DeletionVectorError: unknown storage type, a missing or ill-typed field, an
                `offset` on an inline DV, or a `u` path that is not a valid encoded UUID.
        """
        storage_type = _required(d, "storageType")
        if storage_type not in _STORAGE_TYPES:
            raise DeletionVectorError(
                f"unknown deletion vector storageType {storage_type!r} "
                f"(expected one of 'u', 'i', 'p')"
            )
        path = _required(d, "pathOrInlineDv")
        if not isinstance(path, str) or not path:
            raise DeletionVectorError(
                f"deletion vector pathOrInlineDv must be a non-empty string, got {path!r}"
            )
        offset = d.get("offset")
        if offset is not None:
            offset = _int_field(d, "offset", offset)
            if storage_type == "i":
                raise DeletionVectorError(
                    f"inline deletion vector has an offset ({offset}); the spec requires "
                    "none"
                )
        size = _int_field(d, "sizeInBytes", _required(d, "sizeInBytes"))
        cardinality = _int_field(d, "cardinality", _required(d, "cardinality"))
        if storage_type == "u":
            decode_uuid_path(path)  # validates the encoding early
        return cls(storage_type, path, offset, size, cardinality)

    def to_dict(self) -> dict[str, Any]:
        """The descriptor as a log JSON object (`offset` omitted when None)."""
        out: dict[str, Any] = {
            "storageType": self.storage_type,
            "pathOrInlineDv": self.path_or_inline_dv,
        }
        if self.offset is not None:
            out["offset"] = self.offset
        out["sizeInBytes"] = self.size_in_bytes
        out["cardinality"] = self.cardinality
        return out

    @property
    def unique_id(self) -> str:
        """Spec "Derived Fields": `<storageType><pathOrInlineDv>[@<offset>]`."""
        uid = self.storage_type + self.path_or_inline_dv
        return uid if self.offset is None else f"{uid}@{self.offset}"

    @property
    def is_inline(self) -> bool:
        """True for `storageType = 'i'`."""
        return self.storage_type == "i"

    def file_uuid(self) -> uuid.UUID | None:
        """The UUID of a `u` DV's file, None for other storage types."""
        if self.storage_type != "u":
            return None
        return decode_uuid_path(self.path_or_inline_dv)[1]

    def relative_path(self) -> str | None:
        """Path of a `u` DV's file relative to the table root, None for `p` and `i`.

        Returns:
            `<prefix>/deletion_vector_<uuid>.bin`, or `deletion_vector_<uuid>.bin` when the
            descriptor has no random prefix.
        """
        if self.storage_type != "u":
            return None
        prefix, u = decode_uuid_path(self.path_or_inline_dv)
        name = f"deletion_vector_{u}.bin"
        return f"{prefix}/{name}" if prefix else name

    def absolute_path(self, table_root: str) -> str | None:
        """Spec "Derived Fields" `absolutePath`.

        Args:
            table_root: the table's root path or URI (a trailing `/` is tolerated).

        Returns:
            For `u`, `table_root/` + `relative_path()`; for `p`, the stored path as is
            (a URI, possibly percent-encoded); for `i`, None.
        """
        if self.storage_type == "p":
            return self.path_or_inline_dv
        relative = self.relative_path()
        if relative is None:
            return None
        return f"{table_root.rstrip('/')}/{relative}"


def unique_id_of(d: Mapping[str, Any] | None) -> str | None:
    """Unique id of a raw descriptor mapping, or None when there is no DV.

    A null descriptor, or one whose `storageType` is null (a checkpoint struct whose
    fields are all null), means "no DV".

    Raises:
        DeletionVectorError: a descriptor with a storage type but no `pathOrInlineDv`.
    """
    if d is None:
        return None
    storage_type = d.get("storageType")
    if storage_type is None:
        return None
    path = d.get("pathOrInlineDv")
    if path is None:
        raise DeletionVectorError(f"deletion vector descriptor has no 'pathOrInlineDv': {d!r}")
    offset = d.get("offset")
    return f"{storage_type}{path}" if offset is None else f"{storage_type}{path}@{offset}"


# --------------------------------------------------------------------------------------
# DV files and inline DVs
# --------------------------------------------------------------------------------------

_BE_U32 = struct.Struct(">I")


def read_dv_from_file_bytes(
    data: bytes,
    offset: int | None,
    size_in_bytes: int,
    *,
    expected_cardinality: int | None = None,
    file: str | None = None,
) -> RoaringBitmap64:
    """Decode one DV from the bytes of a DV file ("Deletion Vector File Storage Format").

    The file is a version byte (1) followed by entries `dataSize` (u32 BE), the bitmap
    (`dataSize` bytes) and a CRC-32 of the bitmap (u32 BE). A descriptor's `offset` points
    at its entry's `dataSize` (1 for the first entry); `sizeInBytes` equals `dataSize`.

    Args:
        data: the whole DV file (or at least its first `offset + 8 + size_in_bytes` bytes).
        offset: the descriptor's `offset`.
        size_in_bytes: the descriptor's `sizeInBytes`.
        expected_cardinality: when given, the decoded bitmap must hold this many rows.
        file: the DV file's path, only used in error messages.

    Raises:
        DeletionVectorError: wrong version byte, offset or size out of the file, the
            stored `dataSize` differing from `size_in_bytes`, a CRC mismatch, a bad bitmap
            or a cardinality mismatch.
    """
    buf = memoryview(data).cast("B")
    if len(buf) < 1:
        raise DeletionVectorError("deletion vector file is empty", file=file)
    if buf[0] != DV_FILE_FORMAT_VERSION:
        raise DeletionVectorError(
            f"unsupported deletion vector file format version {buf[0]} "
            f"(expected {DV_FILE_FORMAT_VERSION})",
            file=file,
        )
    if offset is None:
        raise DeletionVectorError(
            "on-disk deletion vector descriptor has no offset (Delta writers always set it)",
            file=file,
        )
    if offset < 1:
        raise DeletionVectorError(
            f"deletion vector offset {offset} overlaps the file's version byte", file=file
        )
    end = offset + 4 + size_in_bytes + 4
    if end > len(buf):
        raise DeletionVectorError(
            f"deletion vector at offset {offset} with sizeInBytes {size_in_bytes} ends at "
            f"byte {end}, past the end of the {len(buf)}-byte file",
            file=file,
        )
    stored_size = _BE_U32.unpack_from(buf, offset)[0]
    if stored_size != size_in_bytes:
        raise DeletionVectorError(
            f"deletion vector at offset {offset}: file says dataSize {stored_size}, "
            f"descriptor says sizeInBytes {size_in_bytes}",
            file=file,
        )
    payload = buf[offset + 4 : offset + 4 + size_in_bytes]
    stored_crc = _BE_U32.unpack_from(buf, offset + 4 + size_in_bytes)[0]
    actual_crc = zlib.crc32(payload)
    if stored_crc != actual_crc:
        raise DeletionVectorError(
            f"deletion vector at offset {offset}: CRC-32 mismatch (stored "
            f"{stored_crc:#010x}, computed {actual_crc:#010x})",
            file=file,
        )
    try:
        bitmap = deserialize_bitmap(payload)
    except DeletionVectorError as exc:
        raise DeletionVectorError(
            f"deletion vector at offset {offset}: {exc.reason}", file=file
        ) from None
    if expected_cardinality is not None and len(bitmap) != expected_cardinality:
        raise DeletionVectorError(
            f"deletion vector at offset {offset} holds {len(bitmap)} rows, descriptor "
            f"cardinality is {expected_cardinality}",
            file=file,
        )
    return bitmap


def _as_descriptor(
    descriptor: DeletionVectorDescriptor | Mapping[str, Any],
) -> DeletionVectorDescriptor:
    if isinstance(descriptor, DeletionVectorDescriptor):
        return descriptor
    return DeletionVectorDescriptor.from_dict(descriptor)


def inline_dv_bitmap(
    descriptor: DeletionVectorDescriptor | Mapping[str, Any], *, check_cardinality: bool = True
) -> RoaringBitmap64:
    """Decode an inline (`storageType = 'i'`) DV.

    `pathOrInlineDv` is Z85 of the serialized bitmap *with* the magic number, zero-padded
    to a multiple of 4 bytes; the first `sizeInBytes` decoded bytes are the bitmap.

    Raises:
        DeletionVectorError: not an inline DV, the decoded length does not fit
            `sizeInBytes`, a bad bitmap, or (with `check_cardinality`) a cardinality
            mismatch.
    """
    d = _as_descriptor(descriptor)
    if d.storage_type != "i":
        raise DeletionVectorError(
            f"deletion vector with storageType {d.storage_type!r} is not inline"
        )
    raw = z85_decode(d.path_or_inline_dv)
    if not d.size_in_bytes <= len(raw) < d.size_in_bytes + 4:
        raise DeletionVectorError(
            f"inline deletion vector decodes to {len(raw)} bytes, which does not match "
            f"sizeInBytes {d.size_in_bytes} (plus at most 3 padding bytes)"
        )
    bitmap = deserialize_bitmap(raw[: d.size_in_bytes])
    if check_cardinality and len(bitmap) != d.cardinality:
        raise DeletionVectorError(
            f"inline deletion vector holds {len(bitmap)} rows, descriptor cardinality is "
            f"{d.cardinality}"
        )
    return bitmap

"""Variant values as statistics carry them: sizes of the binary encoding, and the Z85 form.

Spec sections: "Variant Data Type" (a variant is two binary values, `metadata` and `value`,
in the Parquet Variant binary encoding) and "Statistics for Variant Columns" (in JSON
statistics, `minValues`/`maxValues` of a variant column are the Z85 text of the metadata
bytes followed by the value bytes; in Parquet, e.g. a checkpoint's `stats_parsed`, they are
Parquet variant columns: a struct of the two binaries).

The Z85 text encodes whole 4-byte groups, so the decoded bytes may end in zero padding; like
Delta Spark (which reads the metadata size from its header and the value size from the
value's own header), `split_variant` cuts exactly the two encoded values and ignores what
follows. Sizes follow the Parquet Variant encoding specification:

* metadata: a header byte (version in the low 4 bits, must be 1; offset size - 1 in the top
  2 bits), the dictionary size, `dictionary size + 1` offsets, then the string bytes; its
  length is known from the last offset.
* value: a header byte whose low 2 bits are the basic type (primitive, short string, object,
  array) and whose upper 6 bits describe it; primitives have fixed sizes except binary and
  string (a 4-byte length follows), objects and arrays carry their element count, ids and
  offsets, the last offset giving the size of their data.

Pure: no I/O.
"""

from __future__ import annotations

from delta_ops.errors import InvalidVariantError
from delta_ops.protocol.deletion_vectors import DeletionVectorError, z85_decode, z85_encode

VARIANT_ENCODING_VERSION = 1

# Sizes (header byte included) of the primitive types with a fixed width, by type id.
_PRIMITIVE_SIZES = {
    0: 1,  # null
    1: 1,  # true
    2: 1,  # false
    3: 2,  # int8
    4: 3,  # int16
    5: 5,  # int32
    6: 9,  # int64
    7: 9,  # double
    8: 6,  # decimal4: scale byte + 4 bytes
    9: 10,  # decimal8
    10: 18,  # decimal16
    11: 5,  # date
    12: 9,  # timestamp (micros, UTC)
    13: 9,  # timestamp without time zone (micros)
    14: 5,  # float
    17: 9,  # time without time zone
    18: 9,  # timestamp (nanos, UTC)
    19: 9,  # timestamp without time zone (nanos)
    20: 17,  # uuid
}
_LENGTH_PREFIXED = (15, 16)  # binary, string: 4-byte little-endian length follows the header


def _uint(data: bytes, pos: int, width: int, what: str) -> int:
    if pos + width > len(data):
        raise InvalidVariantError(f"variant {what} runs past the end ({len(data)} bytes)")
    return int.from_bytes(data[pos : pos + width], "little")


def metadata_size(data: bytes) -> int:
    """Length of the variant metadata at the start of `data`.

    Raises:
        InvalidVariantError: an unknown encoding version, or the metadata is cut short.
    """
    if not data:
        raise InvalidVariantError("empty variant metadata")
    header = data[0]
    version = header & 0x0F
    if version != VARIANT_ENCODING_VERSION:
        raise InvalidVariantError(f"variant metadata version {version} is not 1")
    offset_size = ((header >> 6) & 0x03) + 1
    dictionary_size = _uint(data, 1, offset_size, "dictionary size")
    offsets_start = 1 + offset_size
    last = _uint(data, offsets_start + dictionary_size * offset_size, offset_size, "offsets")
    size = offsets_start + (dictionary_size + 1) * offset_size + last
    if size > len(data):
        raise InvalidVariantError(f"variant metadata of {size} bytes runs past the end")
    return size


def value_size(data: bytes, pos: int = 0) -> int:
    """Length of the variant value starting at `data[pos]`.

    Raises:
        InvalidVariantError: an unknown primitive type, or the value is cut short.
    """
    header = _uint(data, pos, 1, "value header")
    basic_type = header & 0x03
    info = header >> 2
    if basic_type == 0:  # primitive
        if info in _PRIMITIVE_SIZES:
            size = _PRIMITIVE_SIZES[info]
        elif info in _LENGTH_PREFIXED:
            size = 5 + _uint(data, pos + 1, 4, "length")
        else:
            raise InvalidVariantError(f"unknown variant primitive type id {info}")
    elif basic_type == 1:  # short string: the length is in the header
        size = 1 + info
    elif basic_type == 2:  # object
        offset_size = (info & 0x03) + 1
        id_size = ((info >> 2) & 0x03) + 1
        count_size = 4 if (info >> 4) & 0x01 else 1
        n = _uint(data, pos + 1, count_size, "element count")
        offsets_start = pos + 1 + count_size + n * id_size
        last = _uint(data, offsets_start + n * offset_size, offset_size, "offsets")
        size = 1 + count_size + n * id_size + (n + 1) * offset_size + last
    else:  # array
        offset_size = (info & 0x03) + 1
        count_size = 4 if (info >> 2) & 0x01 else 1
        n = _uint(data, pos + 1, count_size, "element count")
        last = _uint(data, pos + 1 + count_size + n * offset_size, offset_size, "offsets")
        size = 1 + count_size + (n + 1) * offset_size + last
    if pos + size > len(data):
        raise InvalidVariantError(f"variant value of {size} bytes runs past the end")
    return size


def split_variant(data: bytes) -> tuple[bytes, bytes]:
    """(metadata, value) of `metadata || value [|| padding]`.

    Raises:
        InvalidVariantError: `data` does not start with a variant metadata and value.
    """
    m = metadata_size(data)
    v = value_size(data, m)
    return bytes(data[:m]), bytes(data[m : m + v])


def decode_variant_stat(text: str) -> tuple[bytes, bytes]:
    """(metadata, value) of a variant min/max statistic as JSON statistics hold it (Z85).

    Raises:
        InvalidVariantError: not Z85, or not an encoded variant.
    """
    try:
        data = z85_decode(text)
    except DeletionVectorError as exc:
        raise InvalidVariantError(f"a variant statistic is not Z85: {exc}") from None
    return split_variant(data)


def encode_variant_stat(metadata: bytes, value: bytes) -> str:
    """The Z85 text of a variant statistic: metadata then value, zero-padded to 4 bytes."""
    data = bytes(metadata) + bytes(value)
    return z85_encode(data + b"\0" * (-len(data) % 4))


__all__ = [
    "InvalidVariantError",
    "decode_variant_stat",
    "encode_variant_stat",
    "metadata_size",
    "split_variant",
    "value_size",
]

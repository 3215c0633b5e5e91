"""The Parquet schema of checkpoints, and the hash partitioning of multi-part checkpoints.

Spec sections: "Checkpoint Schema" (appendix: one struct column per action; `add` with
`stats` when `delta.checkpoint.writeStatsAsJson`, `partitionValues_parsed` and `stats_parsed`
when `delta.checkpoint.writeStatsAsStruct`, physical names under column mapping; `remove`
without `stats` and `tags`; `readerFeatures`/`writerFeatures`), "Checkpoints" (V1 and V2
specs, sidecar files: `add` and `remove` columns only), "Checkpoint Metadata", "Sidecar File
Information", "Last Checkpoint File" (`checkpointSchema`), and the multi-part rule "MUST be
clustered by spark-style hash partitioning".

Where the prose and Spark differ, this writes what Spark writes:

- Column order is Spark's: txn, add, remove, metaData, protocol, domainMetadata (then
  checkpointMetadata, sidecar in a V2 top-level file); every field nullable (Spark writes
  `schema.asNullable`). readerFeatures/writerFeatures columns are always present; their
  *values* follow the spec (non-null at reader 3 / writer 7, null otherwise).
- Multi-part parts: Spark runs `repartition(numParts, coalesce(add.path, remove.path))`,
  i.e. part = pmod(Murmur3_x86_32(utf8(path), seed 42), numParts), non-file actions hashing
  as null (= the seed, 42). Spark keys by the path alone even on tables with deletion
  vectors (the prose names `(path, dvId)` there); we follow Spark so that racing Delta
  writers produce identical parts. `spark_hash` reproduces Spark's `hash()` exactly,
  including its non-standard handling of the 1-3 trailing bytes (each is mixed as a
  sign-extended int, as `Murmur3_x86_32.hashUnsafeBytes` does).

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from delta_ops.protocol import features
from delta_ops.protocol.actions import ADD_TYPE, REMOVE_TYPE, STRING_MAP

if TYPE_CHECKING:
    from delta_ops.protocol.table_configuration import TableConfiguration

# ---- action types as Spark writes them in checkpoints ------------------------------------

TXN_TYPE = pa.struct(
    [
        pa.field("appId", pa.string()),
        pa.field("version", pa.int64()),
        pa.field("lastUpdated", pa.int64()),
    ]
)

#: `remove` in checkpoints: no `stats`, no `tags` (spec "Checkpoint Schema").
CHECKPOINT_REMOVE_TYPE = pa.struct([f for f in REMOVE_TYPE if f.name not in ("stats", "tags")])

FORMAT_TYPE = pa.struct([pa.field("provider", pa.string()), pa.field("options", STRING_MAP)])

METADATA_TYPE = pa.struct(
    [
        pa.field("id", pa.string()),
        pa.field("name", pa.string()),
        pa.field("description", pa.string()),
        pa.field("format", FORMAT_TYPE),
        pa.field("schemaString", pa.string()),
        pa.field("partitionColumns", pa.list_(pa.string())),
        pa.field("configuration", STRING_MAP),
        pa.field("createdTime", pa.int64()),
    ]
)

PROTOCOL_TYPE = pa.struct(
    [
        pa.field("minReaderVersion", pa.int32()),
        pa.field("minWriterVersion", pa.int32()),
        pa.field("readerFeatures", pa.list_(pa.string())),
        pa.field("writerFeatures", pa.list_(pa.string())),
    ]
)

DOMAIN_METADATA_TYPE = pa.struct(
    [
        pa.field("domain", pa.string()),
        pa.field("configuration", pa.string()),
        pa.field("removed", pa.bool_()),
    ]
)

CHECKPOINT_METADATA_TYPE = pa.struct(
    [pa.field("version", pa.int64()), pa.field("tags", STRING_MAP)]
)

SIDECAR_TYPE = pa.struct(
    [
        pa.field("path", pa.string()),
        pa.field("sizeInBytes", pa.int64()),
        pa.field("modificationTime", pa.int64()),
        pa.field("tags", STRING_MAP),
    ]
)

#: The `add` fields every checkpoint carries, in order; `stats` is dropped when
#: `delta.checkpoint.writeStatsAsJson` is false.
ADD_BASE_FIELDS: tuple[pa.Field, ...] = tuple(ADD_TYPE)

PARTITION_VALUES_PARSED = "partitionValues_parsed"
STATS_PARSED = "stats_parsed"

#: Spark's default `spark.databricks.delta.checkpoint.schemaWriteThresholdLength`: a
#: checkpointSchema longer than this (as JSON) is left out of `_last_checkpoint`.
CHECKPOINT_SCHEMA_THRESHOLD = 20_000


def add_type(
    *,
    stats_as_json: bool = True,
    partition_values_parsed: pa.StructType | None = None,
    stats_parsed: pa.StructType | None = None,
) -> pa.StructType:
    """The `add` column type of a checkpoint.

    Args:
        stats_as_json: keep the `stats` JSON string (`delta.checkpoint.writeStatsAsJson`).
        partition_values_parsed: the typed partition values struct, or None to omit it.
        stats_parsed: the typed statistics struct, or None to omit it.
    """
    fields = [f for f in ADD_BASE_FIELDS if stats_as_json or f.name != "stats"]
    if partition_values_parsed is not None:
        fields.append(pa.field(PARTITION_VALUES_PARSED, partition_values_parsed))
    if stats_parsed is not None:
        fields.append(pa.field(STATS_PARSED, stats_parsed))
    return pa.struct(fields)


def classic_schema(add: pa.StructType) -> pa.Schema:
    """Schema of a V1 checkpoint (classic or one part of a multi-part checkpoint)."""
    return pa.schema(
        [
            pa.field("txn", TXN_TYPE),
            pa.field("add", add),
            pa.field("remove", CHECKPOINT_REMOVE_TYPE),
            pa.field("metaData", METADATA_TYPE),
            pa.field("protocol", PROTOCOL_TYPE),
            pa.field("domainMetadata", DOMAIN_METADATA_TYPE),
        ]
    )


def v2_schema(add: pa.StructType) -> pa.Schema:
    """Schema of a V2 spec checkpoint's Parquet top-level file (classic- or UUID-named)."""
    return pa.schema(
        [
            *classic_schema(add),
            pa.field("checkpointMetadata", CHECKPOINT_METADATA_TYPE),
            pa.field("sidecar", SIDECAR_TYPE),
        ]
    )


def sidecar_schema(add: pa.StructType) -> pa.Schema:
    """Schema of a V2 sidecar file: file actions only."""
    return pa.schema([pa.field("add", add), pa.field("remove", CHECKPOINT_REMOVE_TYPE)])


# ---- the parts of the table configuration that shape the schema -------------------------


@dataclass(frozen=True)
class CheckpointLayout:
    """How a table's checkpoints look, from its protocol and metadata.

    Attributes:
        stats_as_json: write `add.stats`.
        stats_as_struct: `delta.checkpoint.writeStatsAsStruct`.
        partition_values_parsed: type of `add.partitionValues_parsed` (None: omitted).
        partition_keys: for each partition column, the key of `partitionValues` holding it
            (the physical name under column mapping), in the struct's field order.
        partition_types: the Delta type name of each partition column.
        stats_parsed: type of `add.stats_parsed` (None: omitted).
        add: the resulting `add` column type.
        reader_features_required: readerFeatures must be non-null (reader version 3).
        writer_features_required: writerFeatures must be non-null (writer version 7).
    """

    stats_as_json: bool
    stats_as_struct: bool
    partition_values_parsed: pa.StructType | None
    partition_keys: tuple[str, ...]
    partition_types: tuple[Any, ...]
    stats_parsed: pa.StructType | None
    add: pa.StructType
    reader_features_required: bool
    writer_features_required: bool


#: The spellings of the variant shredding feature (Spark 4.0 wrote the preview name).
VARIANT_SHREDDING_FEATURES = ("variantShredding", "variantShredding-preview")


def supports_variant_stats(config: TableConfiguration) -> bool:
    """Whether variant columns may have min/max statistics: the spec's "Compatibility with
    other Delta Features" allows them only when the table supports variant shredding."""
    return any(config.is_feature_supported(n) for n in VARIANT_SHREDDING_FEATURES)


def checkpoint_layout(config: TableConfiguration) -> CheckpointLayout:
    """The checkpoint layout of a table.

    Args:
        config: the table's configuration at the version checkpointed.

    Raises:
        delta_ops.protocol.properties.InvalidTablePropertyError: a checkpoint property has
            an invalid value.
        delta_ops.errors.CorruptLogError: a partition column is missing from the schema.
        delta_ops.protocol.schema.UnsupportedTypeError: a typed column has no Arrow type,
            or (with typed statistics) the schema records a type change the spec does not
            allow.
    """
    from delta_ops.protocol.schema import (
        partition_values_parsed_schema,
        stats_schema,
        validate_type_changes,
    )

    metadata = config.metadata
    props = config.properties
    reader, writer = config.min_reader_version, config.min_writer_version
    pv_type: pa.StructType | None = None
    stats_type: pa.StructType | None = None
    keys: tuple[str, ...] = ()
    types: tuple[Any, ...] = ()
    struct = props.checkpoint_write_stats_as_struct
    schema = metadata.schema
    if struct and schema is not None:
        # Typed columns hold old files' values in the current, widened types: only the
        # widenings the spec allows have a defined conversion.
        validate_type_changes(schema)
        mode = config.column_mapping_mode
        physical = mode != "none"
        partitions = metadata.partition_columns
        if partitions:
            pv_type = partition_values_parsed_schema(schema, partitions, physical=physical)
            by_name = {f.name: f for f in schema.fields}
            keys = tuple(f.name for f in pv_type)
            types = tuple(by_name[p].type for p in partitions)
        tight = config.is_feature_supported("deletionVectors")
        num_indexed = props.data_skipping_num_indexed_cols
        stats_type = stats_schema(
            schema,
            partitions,
            physical=physical,
            num_indexed_cols=None if props.data_skipping_stats_columns else num_indexed,
            tight_bounds=tight,
            variant_min_max=supports_variant_stats(config),
        )
    add = add_type(
        stats_as_json=props.checkpoint_write_stats_as_json,
        partition_values_parsed=pv_type,
        stats_parsed=stats_type,
    )
    return CheckpointLayout(
        stats_as_json=props.checkpoint_write_stats_as_json,
        stats_as_struct=struct,
        partition_values_parsed=pv_type,
        partition_keys=keys,
        partition_types=types,
        stats_parsed=stats_type,
        add=add,
        reader_features_required=reader >= features.TABLE_FEATURES_READER_VERSION,
        writer_features_required=writer >= features.TABLE_FEATURES_WRITER_VERSION,
    )


# ---- Spark's schema JSON (for `_last_checkpoint.checkpointSchema`) -----------------------

_SPARK_PRIMITIVES: dict[pa.DataType, str] = {
    pa.string(): "string",
    pa.large_string(): "string",
    pa.int64(): "long",
    pa.int32(): "integer",
    pa.int16(): "short",
    pa.int8(): "byte",
    pa.float32(): "float",
    pa.float64(): "double",
    pa.bool_(): "boolean",
    pa.binary(): "binary",
    pa.large_binary(): "binary",
    pa.date32(): "date",
}


def _spark_type(t: pa.DataType) -> Any:
    if pa.types.is_struct(t):
        return {"type": "struct", "fields": [_spark_field(f) for f in t]}
    if pa.types.is_map(t):
        return {
            "type": "map",
            "keyType": _spark_type(t.key_type),
            "valueType": _spark_type(t.item_type),
            "valueContainsNull": True,
        }
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return {"type": "array", "elementType": _spark_type(t.value_type), "containsNull": True}
    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    name = _SPARK_PRIMITIVES.get(t)
    if name is None:
        raise TypeError(f"no Spark type for Arrow type {t}")
    return name


def _spark_field(f: pa.Field) -> dict[str, Any]:
    from delta_ops.protocol.schema import is_variant_field

    # A variant statistic is a Parquet variant: Spark's schema names it `variant`.
    data_type = "variant" if is_variant_field(f) else _spark_type(f.type)
    return {"name": f.name, "type": data_type, "nullable": True, "metadata": {}}


def spark_schema_json(schema: pa.Schema) -> dict[str, Any]:
    """The Spark StructType JSON of a checkpoint schema, every field nullable (as Spark
    writes `checkpointSchema` into `_last_checkpoint`)."""
    return {"type": "struct", "fields": [_spark_field(f) for f in schema]}


# ---- Spark-style hash partitioning (multi-part checkpoints) -----------------------------

SPARK_HASH_SEED = 42

_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)
_M5 = np.uint32(5)
_N1 = np.uint32(0xE6546B64)
_F1 = np.uint32(0x85EBCA6B)
_F2 = np.uint32(0xC2B2AE35)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _mix_k1(k1: np.ndarray) -> np.ndarray:
    k1 = k1 * _C1
    k1 = _rotl(k1, 15)
    return k1 * _C2


def _mix_h1(h1: np.ndarray, k1: np.ndarray) -> np.ndarray:
    h1 = h1 ^ k1
    h1 = _rotl(h1, 13)
    return h1 * _M5 + _N1


def _fmix(h1: np.ndarray, length: np.ndarray) -> np.ndarray:
    h1 = h1 ^ length
    h1 = h1 ^ (h1 >> np.uint32(16))
    h1 = h1 * _F1
    h1 = h1 ^ (h1 >> np.uint32(13))
    h1 = h1 * _F2
    return h1 ^ (h1 >> np.uint32(16))


def spark_hash(
    values: pa.Array | pa.ChunkedArray | list[str | None], seed: int = SPARK_HASH_SEED
) -> np.ndarray:
    """Spark's `hash(col)` of a string column: Murmur3_x86_32 of the UTF-8 bytes (Spark's
    `hashUnsafeBytes`), seed 42; a null hashes to the seed. Vectorized with numpy.

    Returns:
        An int32 array, one hash per value, equal to `pyspark.sql.functions.hash`.
    """
    if isinstance(values, list):
        values = pa.array(values, pa.string())
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    if not pa.types.is_large_string(values.type):
        values = values.cast(pa.large_string())
    n = len(values)
    out = np.full(n, np.uint32(seed & 0xFFFFFFFF), dtype=np.uint32)
    if n == 0:
        return out.view(np.int32)
    valid = (
        np.ones(n, dtype=bool)
        if values.null_count == 0
        else np.asarray(values.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    )
    bufs = values.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int64, count=n + 1, offset=values.offset * 8)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    starts = offsets[:-1]
    lengths = (offsets[1:] - starts).astype(np.int64)
    lengths[~valid] = 0
    h = out.copy()
    aligned = lengths - lengths % 4
    max_words = int(aligned.max() // 4) if n else 0
    # Pad so that 4-byte gathers never run past the data buffer.
    padded = np.concatenate([data, np.zeros(4, np.uint8)])
    for w in range(max_words):
        rows = np.flatnonzero(aligned >= 4 * (w + 1))
        pos = starts[rows] + 4 * w
        word = (
            padded[pos].astype(np.uint32)
            | (padded[pos + 1].astype(np.uint32) << np.uint32(8))
            | (padded[pos + 2].astype(np.uint32) << np.uint32(16))
            | (padded[pos + 3].astype(np.uint32) << np.uint32(24))
        )
        h[rows] = _mix_h1(h[rows], _mix_k1(word))
    for t in range(3):
        rows = np.flatnonzero(lengths - aligned > t)
        if not len(rows):
            break
        byte = padded[starts[rows] + aligned[rows] + t].astype(np.int8).astype(np.int32)
        h[rows] = _mix_h1(h[rows], _mix_k1(byte.view(np.uint32)))
    done = np.flatnonzero(valid)
    h[done] = _fmix(h[done], lengths[done].astype(np.uint32))
    h[~valid] = np.uint32(seed & 0xFFFFFFFF)
    return h.view(np.int32)


def hash_partition(keys: pa.Array | pa.ChunkedArray, num_parts: int) -> np.ndarray:
    """0-based part of each key: `pmod(hash(key), num_parts)` as Spark's HashPartitioning."""
    if num_parts < 1:
        raise ValueError(f"number of parts must be positive, got {num_parts}")
    h = spark_hash(keys).astype(np.int64)
    return np.mod(h, num_parts).astype(np.int64)


def null_key_partition(num_parts: int) -> int:
    """The part of actions whose key is null (every non-file action)."""
    return SPARK_HASH_SEED % num_parts


__all__ = [
    "ADD_BASE_FIELDS",
    "CHECKPOINT_METADATA_TYPE",
    "CHECKPOINT_REMOVE_TYPE",
    "CHECKPOINT_SCHEMA_THRESHOLD",
    "CheckpointLayout",
    "DOMAIN_METADATA_TYPE",
    "FORMAT_TYPE",
    "METADATA_TYPE",
    "PARTITION_VALUES_PARSED",
    "PROTOCOL_TYPE",
    "SIDECAR_TYPE",
    "SPARK_HASH_SEED",
    "STATS_PARSED",
    "TXN_TYPE",
    "add_type",
    "checkpoint_layout",
    "classic_schema",
    "hash_partition",
    "null_key_partition",
    "sidecar_schema",
    "spark_hash",
    "spark_schema_json",
    "v2_schema",
]

"""Typed statistics and partition values of checkpoints: the Arrow schemas of
`stats_parsed` and `partitionValues_parsed`.

Spec sections: "Per-file Statistics", "Statistics for Variant Columns", "Checkpoints"
(`partitionValues_parsed`, `stats_parsed`). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from delta_ops.errors import CorruptLogError
from delta_ops.protocol.schema.arrow import (
    _is_variant_field,
    _primitive_to_arrow,
    _variant_arrow_type,
    data_type_to_arrow,
)
from delta_ops.protocol.schema.datatypes import (
    _ARROW_PRIMITIVES,
    _MIN_MAX_TYPES,
    VARIANT_MARKER_KEY,
    VARIANT_MARKER_VALUE,
    DataType,
    PrimitiveType,
    StructField,
    StructType,
)

# --------------------------------------------------------------------------------------------
# Typed statistics and partition values (checkpoint `stats_parsed`, `partitionValues_parsed`)


def _name_of(f: StructField, physical: bool) -> str:
    return f.physical_name if physical else f.name


def variant_stats_field(name: str) -> pa.Field:
    """The field of a variant column in `minValues`/`maxValues` of typed statistics: a Parquet
    variant (struct of the `value` and `metadata` binaries), marked as variant."""
    return pa.field(
        name, _variant_arrow_type(), metadata={VARIANT_MARKER_KEY: VARIANT_MARKER_VALUE}
    )


def is_variant_field(f: pa.Field) -> bool:
    """Whether an Arrow field is marked as holding a variant (see `VARIANT_MARKER_KEY`)."""
    return _is_variant_field(f)


def _min_max_fields(
    fields: Sequence[StructField], physical: bool, variant: bool
) -> list[pa.Field]:
    out = []
    for f in fields:
        name = _name_of(f, physical)
        if variant and f.type == PrimitiveType("variant"):
            out.append(variant_stats_field(name))
        elif (child := _min_max_type(f.type, physical, variant)) is not None:
            out.append(pa.field(name, child))
    return out


def _min_max_type(t: DataType, physical: bool, variant: bool = False) -> pa.DataType | None:
    if isinstance(t, StructType):
        children = _min_max_fields(t.fields, physical, variant)
        return pa.struct(children) if children else None
    if isinstance(t, PrimitiveType) and t.raw is None:
        if t.name in _MIN_MAX_TYPES:
            return _ARROW_PRIMITIVES[t.name]
        if t.is_decimal:
            return _primitive_to_arrow(t)
    return None


def _null_count_type(t: DataType, physical: bool) -> pa.DataType | None:
    if isinstance(t, StructType):
        children = [
            pa.field(_name_of(f, physical), child)
            for f in t.fields
            if (child := _null_count_type(f.type, physical)) is not None
        ]
        return pa.struct(children) if children else None
    return pa.int64()


def _leaf_count(t: DataType) -> int:
    if isinstance(t, StructType):
        return sum(_leaf_count(f.type) for f in t.fields)
    return 1


def _first_leaves(fields: Sequence[StructField], limit: int) -> list[StructField]:
    """Keep the first `limit` leaf columns of `fields` (dataSkippingNumIndexedCols)."""
    kept: list[StructField] = []
    remaining = limit
    for f in fields:
        if remaining <= 0:
            break
        if isinstance(f.type, StructType):
            children = _first_leaves(f.type.fields, remaining)
            remaining -= sum(_leaf_count(c.type) for c in children)
            if children:
                kept.append(
                    StructField(f.name, StructType(tuple(children)), f.nullable, f.metadata)
                )
        else:
            kept.append(f)
            remaining -= 1
    return kept


def _data_fields(
    schema: StructType, partition_columns: Sequence[str], num_indexed_cols: int | None
) -> list[StructField]:
    partitions = set(partition_columns)
    fields = [f for f in schema.fields if f.name not in partitions]
    if num_indexed_cols is not None and num_indexed_cols >= 0:
        fields = _first_leaves(fields, num_indexed_cols)
    return fields


def stats_schema(
    schema: StructType,
    partition_columns: Sequence[str] = (),
    *,
    physical: bool = False,
    num_indexed_cols: int | None = None,
    tight_bounds: bool = True,
    variant_min_max: bool = False,
) -> pa.StructType:
    """The Arrow type of typed statistics (`add.stats_parsed` in checkpoints).

    Layout as Delta Spark writes it (corpus table spark__transaction_log_schema_evolvability):
    `numRecords: int64, minValues: struct, maxValues: struct, nullCount: struct`, then
    `tightBounds: bool`. minValues/maxValues mirror the non-partition columns, nested structs
    kept, holding only types Delta collects min/max for (numbers, decimals, string, date,
    timestamps; not boolean, binary, arrays or maps; variant only with `variant_min_max`);
    nullCount holds an int64 for every non-struct column, arrays, maps and variants included.
    Structs left empty are dropped. (The spec's appendix example says `nullCounts`; the
    statistic, and every corpus table, is `nullCount`.)

    The types are the schema's current ones: after a type widening, the statistics of files
    written before the change are read into the wider type (as Delta Spark's checkpoints do;
    the spec's reader requirement: "convert such values to the current, wider type").

    Variant columns (spec "Statistics for Variant Columns"): `nullCount` always; `minValues`
    and `maxValues` only where they can exist, on tables supporting variant shredding
    (`variant_min_max`), as a Parquet variant (`variant_stats_field`). Writers of tables
    without shredding record only the null count (corpus: kernel-defaults__spark-variant-
    checkpoint), those with it a Z85 variant per column (spark__variant-stats-*).

    Args:
        schema: The table schema.
        partition_columns: Partition column (display) names; they have no statistics.
        physical: Use column-mapping physical names.
        num_indexed_cols: Keep only the first N leaf columns (`delta.dataSkippingNumIndexedCols`);
            None or negative keeps all.
        tight_bounds: Include the `tightBounds` field.
        variant_min_max: Give variant columns min/max statistics (variant shredding).
    """
    fields = _data_fields(schema, partition_columns, num_indexed_cols)
    min_max = _min_max_type(StructType(tuple(fields)), physical, variant_min_max)
    null_count = _null_count_type(StructType(tuple(fields)), physical)
    out = [pa.field("numRecords", pa.int64())]
    if min_max is not None:
        out.append(pa.field("minValues", min_max))
        out.append(pa.field("maxValues", min_max))
    if null_count is not None:
        out.append(pa.field("nullCount", null_count))
    if tight_bounds:
        out.append(pa.field("tightBounds", pa.bool_()))
    return pa.struct(out)


def partition_values_parsed_schema(
    schema: StructType, partition_columns: Sequence[str], physical: bool = False
) -> pa.StructType:
    """The Arrow type of `add.partitionValues_parsed`: partition columns with their types.

    Args:
        schema: The table schema.
        partition_columns: `metaData.partitionColumns` (display names), in that order.
        physical: Use column-mapping physical names (as checkpoints of mapped tables do).

    Raises:
        CorruptLogError: A partition column is not a top-level column of the schema.
        UnsupportedTypeError: A partition column has a type without Arrow mapping.
    """
    by_name = {f.name: f for f in schema.fields}
    out = []
    for name in partition_columns:
        f = by_name.get(name)
        if f is None:
            raise CorruptLogError(f"partition column {name!r} is not a column of the schema")
        out.append(pa.field(_name_of(f, physical), data_type_to_arrow(f.type)))
    return pa.struct(out)

"""Delta table schemas: parse `schemaString`, convert to and from Arrow, name columns physically.

Spec sections: "Schema Serialization Format" (primitive, struct, array, map and variant types,
column metadata), "Column Mapping" (physical names and field ids at every nesting level),
"Timestamp without timezone (TimestampNtz)", "Type Widening" (type change metadata, the
allowed widenings), "Variant Data Type", "Partition Value Serialization", "Per-file
Statistics" and "Statistics for Variant Columns" (the typed `stats_parsed` struct) and
"Checkpoints" (the typed `partitionValues_parsed` struct).

Column metadata is carried verbatim. Type-widening metadata (`delta.typeChanges`) is also
read by `type_changes` / `validate_type_changes` (which refuses a change the spec does not
allow); collation metadata (`__COLLATIONS`) is never interpreted.

Types the spec does not define (`interval`, `char(10)`, ...) parse without error and are kept
as `PrimitiveType(name)`, so inspecting any table works; `to_arrow` refuses them with
`UnsupportedTypeError`. `variant` (written "variant" by Spark, `{"type": "variant"}` in the
spec's example) maps to the struct Spark stores in Parquet,
`struct<value: binary not null, metadata: binary not null>`.

Pure: no I/O.

Modules: `datatypes` (types and their JSON), `widening`, `column_mapping`, `arrow`,
`partition_values`, `stats` (the typed checkpoint columns). Every name is importable from
`delta_ops.protocol.schema` as before.
"""

from __future__ import annotations

from delta_ops.errors import UnsupportedTypeError
from delta_ops.protocol.schema.arrow import (
    data_type_to_arrow,
    from_arrow,
    to_arrow,
)
from delta_ops.protocol.schema.column_mapping import (
    logical_to_physical,
    physical_name,
)
from delta_ops.protocol.schema.datatypes import (
    COLUMN_ID_KEY,
    KNOWN_PRIMITIVES,
    MAX_DECIMAL_PRECISION,
    NESTED_IDS_KEYS,
    PARQUET_FIELD_ID,
    PHYSICAL_NAME_KEY,
    VARIANT_MARKER_KEY,
    VARIANT_MARKER_VALUE,
    ArrayType,
    DataType,
    MapType,
    PrimitiveType,
    StructField,
    StructType,
    iter_types,
    parse_schema,
    schema_from_dict,
    schema_to_dict,
    unknown_types,
)
from delta_ops.protocol.schema.partition_values import (
    partition_value_to_arrow,
)
from delta_ops.protocol.schema.stats import (
    is_variant_field,
    partition_values_parsed_schema,
    stats_schema,
    variant_stats_field,
)
from delta_ops.protocol.schema.widening import (
    TYPE_CHANGES_KEY,
    TypeChange,
    is_supported_widening,
    type_changes,
    validate_type_changes,
)

__all__ = [
    "ArrayType",
    "COLUMN_ID_KEY",
    "data_type_to_arrow",
    "DataType",
    "from_arrow",
    "is_supported_widening",
    "is_variant_field",
    "iter_types",
    "KNOWN_PRIMITIVES",
    "logical_to_physical",
    "MapType",
    "MAX_DECIMAL_PRECISION",
    "NESTED_IDS_KEYS",
    "PARQUET_FIELD_ID",
    "parse_schema",
    "partition_value_to_arrow",
    "partition_values_parsed_schema",
    "physical_name",
    "PHYSICAL_NAME_KEY",
    "PrimitiveType",
    "schema_from_dict",
    "schema_to_dict",
    "stats_schema",
    "StructField",
    "StructType",
    "to_arrow",
    "type_changes",
    "TYPE_CHANGES_KEY",
    "TypeChange",
    "unknown_types",
    "UnsupportedTypeError",
    "validate_type_changes",
    "VARIANT_MARKER_KEY",
    "VARIANT_MARKER_VALUE",
    "variant_stats_field",
]

"""File statistics computed from data, as Delta Spark writes them in an `add` action's `stats`.

Spec sections: "Per-file Statistics" (`numRecords`, `minValues`, `maxValues`, `nullCount`,
`tightBounds`; strings cut to a prefix, timestamps truncated to milliseconds), "Column
Mapping" (statistics are keyed by physical names), "Deletion Vectors" (tight and wide
bounds) and "Statistics for Variant Columns" (a variant gets a null count only).

The rules are Delta Spark's (`StatisticsCollection`, `DeltaStatsColumnSpec`):

* Which columns: `delta.dataSkippingStatsColumns` when set (names matched case-insensitively,
  in schema order; naming a struct takes all its leaves), else the first
  `delta.dataSkippingNumIndexedCols` (default 32, -1 for all) leaf columns of the data
  schema in schema order, nested struct leaves counted one by one. Partition columns are
  never counted (their values are in `partitionValues`).
* Keys are physical names when the table maps columns (`name` or `id`), nested structs as
  nested objects.
* `nullCount` for every stats column that is not a struct: arrays, maps, binary, booleans
  and variants included (the nulls of the column itself). A nested leaf is null where its
  parent struct is.
* `minValues`/`maxValues` only for Spark's skipping-eligible types: byte, short, integer,
  long, float, double, decimal, date, timestamp, timestamp_ntz and string (never boolean,
  binary, arrays, maps or variants). A struct with no eligible leaf is left out.
* Strings: min is the minimum cut to its first 32 UTF-16 units (33 rather than split a
  surrogate pair: `truncateMinStringAgg`); max is the maximum cut the same way and ended
  with U+007F when the next character is below it, else with U+10FFFF (skipping any
  U+10FFFF that follows the cut; `truncateMaxStringAgg`), so every value of the column
  stays <= max in UTF-8 byte order, the order readers compare strings in. (delta-spark's
  earlier rule ended the max with U+FFFD, which a character beyond U+FFFF, or a cut
  through a surrogate pair, can exceed.)
* Floats: NaN is the largest value (max is NaN when any value is; min is NaN only when all
  are); between 0.0 and -0.0 the first seen wins (Spark's `Least`/`Greatest` keep the
  current value on a tie).
* Timestamps are truncated down to milliseconds (min and max alike, as Spark's JSON
  format `yyyy-MM-dd'T'HH:mm:ss.SSSXXX` does), written in UTC with `Z`; timestamp_ntz
  without a zone. Spark writes the instant in the writer's session time zone (`-08:00`);
  `Z` is the same instant.
* A file of zero rows: `{"numRecords":0,"minValues":{},"maxValues":{},"nullCount":{}}`
  (Spark's aggregates over no rows are null and its JSON leaves nulls out).
* `tightBounds` is written only on tables that support deletion vectors (as Spark does):
  true when the statistics describe exactly the valid rows (a file without a deletion
  vector, or one whose deleted rows `update(valid=...)` left out), false when the caller
  says they may cover deleted rows too (`tight_bounds=False`: wide bounds). `numRecords`
  is always the physical row count.

Bounds from a footer: a collector made with `footer_bounds=True` leaves the min/max of
integers, dates, timestamps and strings to `add_footer_bounds`, which folds the Parquet
footer of the file the batches were written to (pyarrow's writer computes those bounds
anyway, in the same order: integers and dates as numbers, timestamps as microseconds,
strings by their UTF-8 bytes, Parquet's unsigned order and Spark's `UTF8String` order).
A chunk whose footer has no bound while it holds a value (pyarrow leaves out a bound
longer than 4 KiB) is read back and computed from its data. Floats and decimals are
always computed from the data: a footer skips NaN and writes a zero bound as -0.0 / +0.0,
where Spark keeps NaN as the largest value and the first zero seen.

The JSON text is written by `delta_ops.protocol.stats_json` from the typed statistics
(`delta_ops.protocol.schema.stats_schema`), so it matches what Spark writes byte for byte
wherever Spark's values are the same. Pure: Arrow kernels over each batch and the footer; a
chunk read back is read by the caller's function.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.protocol.schema import (
    DataType,
    PrimitiveType,
    StructField,
    StructType,
    data_type_to_arrow,
    stats_schema,
)
from delta_ops.protocol.stats_json import stats_json
from delta_ops.protocol.table_configuration import TableConfiguration

if TYPE_CHECKING:
    import pyarrow.parquet as pq

__all__ = [
    "STRING_PREFIX_LENGTH",
    "StatsCollector",
    "parse_stats_columns",
    "stats_fields",
    "truncate_max_string",
    "truncate_min_string",
]

#: Spark's `spark.databricks.delta.stats.skipping.string.prefixLength` default.
STRING_PREFIX_LENGTH = 32

#: The bounds a truncated max ends with: U+007F when the character cut off is below it, else
#: the largest code point (its UTF-8 bytes are the largest), as current delta-spark writes.
_ASCII_MAX = "\x7f"
_UTF8_MAX = "\U0010ffff"
_MIN_MAX_NAMES = frozenset(
    {"string", "long", "integer", "short", "byte", "float", "double", "date", "timestamp",
     "timestamp_ntz"}
)
#: The types whose bounds `add_footer_bounds` takes from a Parquet footer (module docstring).
_FOOTER_TYPES = frozenset(
    {"long", "integer", "short", "byte", "date", "string", "timestamp", "timestamp_ntz"}
)


# ---- strings ------------------------------------------------------------------------------


def _units(ch: str) -> int:
    """UTF-16 units of one character (Java's `String.length` counts these)."""
    return 2 if ord(ch) > 0xFFFF else 1


def truncate_min_string(value: str, prefix: int = STRING_PREFIX_LENGTH) -> str:
    """The min statistic of a string column whose minimum is `value` (Spark's
    `truncateMinStringAgg`): its first `prefix` UTF-16 units, one more when the cut would
    split a surrogate pair (a character beyond U+FFFF is kept whole)."""
    units = 0
    for i, ch in enumerate(value):
        if units >= prefix:
            return value[:i]
        units += _units(ch)
    return value


def truncate_max_string(value: str, prefix: int = STRING_PREFIX_LENGTH) -> str | None:
    """The max statistic of a string column whose maximum is `value` (Spark's
    `truncateMaxStringAgg`), >= every value of the column in UTF-8 byte order (the order
    readers compare in): unchanged when at most `prefix` UTF-16 units long; else
    `truncate_min_string`'s prefix, extended over any U+10FFFF that follows, then U+007F
    when the next character is below it, else U+10FFFF. None (no max) when no such bound
    fits in twice `prefix` units."""
    low = truncate_min_string(value, prefix)  # the whole value when it fits
    i, units = len(low), sum(_units(ch) for ch in low)
    while units <= 2 * prefix:
        if i >= len(value):
            return value
        if value[i] == _UTF8_MAX:
            i += 1
            units += 2
        elif value[i] < _ASCII_MAX:
            return value[:i] + _ASCII_MAX
        else:
            return value[:i] + _UTF8_MAX
    return None


# ---- which columns --------------------------------------------------------------------------


def parse_stats_columns(names: Sequence[str]) -> list[tuple[str, ...]]:
    """`delta.dataSkippingStatsColumns` entries as lower-case name paths: dots separate
    parts, backquotes quote a part (a doubled backquote is one)."""
    paths: list[tuple[str, ...]] = []
    for name in names:
        parts: list[str] = []
        buf: list[str] = []
        quoted = False
        i = 0
        while i < len(name):
            ch = name[i]
            if quoted:
                if ch == "`" and i + 1 < len(name) and name[i + 1] == "`":
                    buf.append("`")
                    i += 1
                elif ch == "`":
                    quoted = False
                else:
                    buf.append(ch)
            elif ch == "`":
                quoted = True
            elif ch == ".":
                parts.append("".join(buf).strip())
                buf = []
            else:
                buf.append(ch)
            i += 1
        parts.append("".join(buf).strip())
        paths.append(tuple(p.lower() for p in parts))
    return paths


def _leaf_count(t: DataType) -> int:
    if isinstance(t, StructType):
        return sum(_leaf_count(f.type) for f in t.fields)
    return 1


def _truncate(fields: Sequence[StructField], limit: int) -> tuple[list[StructField], int]:
    """Spark's `truncateSchema`: fields up to `limit` leaves, counting nested leaves."""
    kept: list[StructField] = []
    count = 0
    for f in fields:
        if count >= limit:
            break
        if isinstance(f.type, StructType):
            children, n = _truncate(f.type.fields, limit - count)
            count += n
            kept.append(StructField(f.name, StructType(tuple(children)), f.nullable, f.metadata))
        else:
            count += 1
            kept.append(f)
    return kept, count


def _filter(fields: Sequence[StructField], paths: Sequence[tuple[str, ...]]) -> list[StructField]:
    """Spark's `filterSchema`: the fields the stats-column paths name, in schema order."""
    by_head: dict[str, list[tuple[str, ...]]] = {}
    for p in paths:
        by_head.setdefault(p[0], []).append(p[1:])
    kept: list[StructField] = []
    for f in fields:
        rests = by_head.get(f.name.lower())
        if rests is None:
            continue
        if all(not r for r in rests):
            kept.append(f)
        elif isinstance(f.type, StructType):
            children = _filter(f.type.fields, [r for r in rests if r])
            kept.append(StructField(f.name, StructType(tuple(children)), f.nullable, f.metadata))
    return kept


def stats_fields(config: TableConfiguration) -> StructType:
    """The (logical) schema of the columns statistics are collected for, in schema order."""
    schema = config.schema or StructType(())
    partitions = {c.lower() for c in config.partition_columns}
    props = config.properties
    if props.data_skipping_stats_columns is not None:
        paths = [p for p in parse_stats_columns(props.data_skipping_stats_columns) if p[0]]
        return StructType(tuple(_filter(schema.fields, paths)))
    data = [f for f in schema.fields if f.name.lower() not in partitions]
    limit = props.data_skipping_num_indexed_cols
    if limit < 0:
        return StructType(tuple(data))
    return StructType(tuple(_truncate(data, limit)[0]))


# ---- collecting ------------------------------------------------------------------------------


def _eligible(t: DataType) -> bool:
    return isinstance(t, PrimitiveType) and t.raw is None and (
        t.name in _MIN_MAX_NAMES or t.is_decimal
    )


@dataclass
class _Leaf:
    """One stats column: where it is in a batch and what has been seen so far."""

    path: tuple[str, ...]  # physical names, outermost first
    type: DataType
    min_max: bool
    footer: bool = False  # bounds from the written file's footer (`add_footer_bounds`)
    nulls: int = 0
    low: Any = None
    high: Any = None
    nan_seen: bool = False
    all_nan: bool = True  # every non-null value seen so far is NaN


def _column(batch: pa.RecordBatch | pa.Table, path: tuple[str, ...]) -> pa.Array | None:
    names = batch.schema.names
    if path[0] not in names:
        return None
    col = batch.column(names.index(path[0]))
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else (
            col.chunk(0) if col.num_chunks else pa.array([], col.type)
        )
    for name in path[1:]:
        if not pa.types.is_struct(col.type) or col.type.get_field_index(name) < 0:
            return None
        col = pc.struct_field(col, name)  # null where the parent struct is null
    return col


def _is_float(t: DataType) -> bool:
    return isinstance(t, PrimitiveType) and t.name in ("float", "double")


def _is_timestamp(t: DataType) -> bool:
    return isinstance(t, PrimitiveType) and t.name in ("timestamp", "timestamp_ntz")


def _millis_floor(micros: int) -> int:
    return micros // 1000 * 1000


class StatsCollector:
    """Per-file statistics accumulated batch by batch (one row group or batch at a time).

    Args:
        config: the table's configuration (schema, partition columns, column mapping, the
            data-skipping properties, whether deletion vectors are supported).
        tight_bounds: whether the statistics describe every valid row (True: a freshly
            written file, or a file without a deletion vector) or may cover deleted rows too
            (False: a deletion vector applies to the file). Written only on tables that
            support deletion vectors, as Spark does.
        string_prefix: the string prefix length (Spark's default 32).
        footer_bounds: leave the min/max of integers, dates, timestamps and strings to
            `add_footer_bounds` (for a file this process writes: module docstring).

    `update(batch)` takes the file's data columns by physical name (no partition columns);
    a stats column the batch lacks (added to the schema after the file was written) counts
    as all null, as Spark reads it. Values are cast to the table's current type (type
    widening). `to_dict()` / `to_json()` give the statistics.
    """

    def __init__(
        self,
        config: TableConfiguration,
        *,
        tight_bounds: bool = True,
        string_prefix: int = STRING_PREFIX_LENGTH,
        footer_bounds: bool = False,
    ) -> None:
        self.config = config
        self.tight_bounds = tight_bounds
        self.string_prefix = string_prefix
        self.num_records = 0
        self._physical = config.column_mapping_mode != "none"
        self._footer_bounds = footer_bounds
        self._fields = stats_fields(config)
        self._leaves: list[_Leaf] = []
        self._walk(self._fields.fields, ())
        self._write_tight_bounds = config.is_feature_supported("deletionVectors")

    def _name(self, f: StructField) -> str:
        return f.physical_name if self._physical else f.name

    def _walk(self, fields: Sequence[StructField], parent: tuple[str, ...]) -> None:
        for f in fields:
            path = (*parent, self._name(f))
            if isinstance(f.type, StructType):
                self._walk(f.type.fields, path)
            else:
                min_max = _eligible(f.type)
                footer = (self._footer_bounds and min_max
                          and isinstance(f.type, PrimitiveType) and f.type.name in _FOOTER_TYPES)
                self._leaves.append(_Leaf(path, f.type, min_max, footer))

    @property
    def columns(self) -> list[tuple[str, ...]]:
        """The physical paths of the stats columns, in schema order."""
        return [leaf.path for leaf in self._leaves]

    @property
    def column_types(self) -> dict[tuple[str, ...], DataType]:
        """The Delta type of each stats column, by physical path."""
        return {leaf.path: leaf.type for leaf in self._leaves}

    # ---- update ------------------------------------------------------------------------

    def update(
        self, batch: pa.RecordBatch | pa.Table, *, valid: pa.Array | None = None
    ) -> StatsCollector:
        """Add the rows of `batch` (data columns by physical name); returns self.

        `valid` (a boolean mask, optional) marks the rows a deletion vector keeps: every row
        counts in `numRecords` (the physical count), only valid rows in the column
        statistics."""
        self.num_records += batch.num_rows
        if valid is not None:
            batch = batch.filter(valid)
        n = batch.num_rows
        if not n:
            return self
        for leaf in self._leaves:
            col = _column(batch, leaf.path)
            if col is None:
                leaf.nulls += n
                continue
            leaf.nulls += col.null_count
            if leaf.min_max and not leaf.footer and col.null_count < n:
                self._min_max(leaf, col)
        return self

    def _min_max(self, leaf: _Leaf, col: pa.Array) -> None:
        target = data_type_to_arrow(leaf.type)
        if col.type != target:
            col = col.cast(target, safe=False) if _is_timestamp(leaf.type) else col.cast(target)
        if _is_float(leaf.type):
            self._float_min_max(leaf, col)
            return
        mm = pc.min_max(col)
        low, high = mm["min"].as_py(), mm["max"].as_py()
        if _is_timestamp(leaf.type):
            low, high = (pc.cast(mm[k], pa.int64()).as_py() for k in ("min", "max"))
        if leaf.low is None or low < leaf.low:
            leaf.low = low
        if leaf.high is None or high > leaf.high:
            leaf.high = high

    @staticmethod
    def _float_min_max(leaf: _Leaf, col: pa.Array) -> None:
        nan = pc.is_nan(col)
        if pc.any(nan).as_py():
            leaf.nan_seen = True
        if pc.all(nan).as_py():
            return  # only NaN (and nulls): no finite bound here
        leaf.all_nan = False
        mm = pc.min_max(col)  # Arrow skips NaN
        low, high = mm["min"].as_py(), mm["max"].as_py()
        if low == 0.0:
            low = col[pc.index(col, 0.0).as_py()].as_py()  # the first zero seen: +0.0 or -0.0
        if high == 0.0:
            high = col[pc.index(col, 0.0).as_py()].as_py()
        if leaf.low is None or low < leaf.low:
            leaf.low = low
        if leaf.high is None or high > leaf.high:
            leaf.high = high

    def add_footer_bounds(
        self, metadata: pq.FileMetaData, schema: pa.Schema,
        read: Callable[[int, str], pa.Table],
    ) -> None:
        """Fold the bounds `update` left to the footer (`footer_bounds=True`).

        Args:
            metadata: the footer of the file every `update` batch was written to, in order.
            schema: the file's Arrow schema (what the writer was given).
            read: `read(row_group, column)` gives that top-level column of one row group of
                the file, for a chunk whose footer holds no bound though it holds a value.
        """
        leaves = [leaf for leaf in self._leaves if leaf.footer]
        if not leaves:
            return
        index = _leaf_columns(schema)
        for leaf in leaves:
            if leaf.path[0] not in schema.names:
                continue  # not in the file: `update` counted it all null
            column = _footer_column(metadata, schema, index, leaf)
            for rg in range(metadata.num_row_groups):
                group = metadata.row_group(rg)
                bounds = None if column is None else _chunk_bounds(
                    group.column(column).statistics, group.num_rows, leaf.type)
                if bounds is None:  # no usable footer bound: the data decides
                    col = _column(read(rg, leaf.path[0]), leaf.path)
                    if col is not None and col.null_count < len(col):
                        self._min_max(leaf, col)
                elif bounds is not _ALL_NULL:
                    low, high = bounds
                    if leaf.low is None or low < leaf.low:
                        leaf.low = low
                    if leaf.high is None or high > leaf.high:
                        leaf.high = high

    # ---- results -------------------------------------------------------------------------

    def _bounds(self, leaf: _Leaf) -> tuple[Any, Any]:
        low, high = leaf.low, leaf.high
        if _is_float(leaf.type):
            if leaf.nan_seen and leaf.all_nan:
                return math.nan, math.nan
            if leaf.nan_seen:
                high = math.nan
            return low, high
        if _is_timestamp(leaf.type) and low is not None:
            return _millis_floor(low), _millis_floor(high)
        if isinstance(low, str):
            return (truncate_min_string(low, self.string_prefix),
                    truncate_max_string(high, self.string_prefix))
        return low, high

    def _typed(self) -> pa.StructArray:
        """The statistics as one row of typed statistics (`stats_parsed`)."""
        arrow_type = stats_schema(
            self._fields, physical=self._physical, tight_bounds=self._write_tight_bounds
        )
        empty = self.num_records == 0  # Spark's sums over no rows are null
        low: dict[str, Any] = {}
        high: dict[str, Any] = {}
        nulls: dict[str, Any] = {}
        for leaf in self._leaves:
            _put(nulls, leaf.path, None if empty else leaf.nulls)
            if leaf.min_max:
                lo, hi = self._bounds(leaf)
                _put(low, leaf.path, lo)
                _put(high, leaf.path, hi)
        row: dict[str, Any] = {
            "numRecords": self.num_records,
            "minValues": low,
            "maxValues": high,
            "nullCount": nulls,
        }
        if self._write_tight_bounds:
            row["tightBounds"] = self.tight_bounds
        names = {f.name for f in arrow_type}
        row = {k: v for k, v in row.items() if k in names}
        return pa.array([row], arrow_type)

    def to_dict(self) -> dict[str, Any]:
        """The statistics as the parsed JSON object (what `json.loads(to_json())` gives)."""
        import orjson

        return orjson.loads(self.to_json())

    def to_json(self) -> str:
        """The `stats` string of the file's `add` action."""
        text = stats_json(self._typed())[0].as_py()
        assert text is not None
        return text


# ---- bounds from a Parquet footer ------------------------------------------------------------

_ALL_NULL = object()  # a chunk with no value: nothing to fold


def _leaf_columns(schema: pa.Schema) -> dict[tuple[str, ...], int]:
    """The Parquet column index of every leaf reached through structs only (Parquet numbers
    the leaves depth first; a list or map takes as many columns as its own leaves)."""
    index: dict[tuple[str, ...], int] = {}
    count = 0

    def walk(t: pa.DataType, path: tuple[str, ...] | None) -> None:
        nonlocal count
        if pa.types.is_struct(t):
            for i in range(t.num_fields):
                walk(t.field(i).type, None if path is None else (*path, t.field(i).name))
        elif t.num_fields:  # list, map and the like: columns, but no stats leaf in them
            for i in range(t.num_fields):
                walk(t.field(i).type, None)
        else:
            if path is not None:
                index[path] = count
            count += 1

    for f in schema:
        walk(f.type, (f.name,))
    return index


def _footer_column(metadata: pq.FileMetaData, schema: pa.Schema,
                   index: dict[tuple[str, ...], int], leaf: _Leaf) -> int | None:
    """The leaf's column in the footer, or None when the footer cannot be trusted for it
    (a type other than the table's, or a column that is not the one expected)."""
    i = index.get(leaf.path)
    if i is None or i >= metadata.num_columns:
        return None
    t: pa.DataType = schema.field(leaf.path[0]).type
    for name in leaf.path[1:]:
        t = t.field(name).type
    column = metadata.schema.column(i)
    if (t != data_type_to_arrow(leaf.type) or column.max_repetition_level != 0
            or column.path != ".".join(leaf.path)):
        return None
    return i


def _chunk_bounds(st: Any, rows: int, t: DataType) -> tuple[Any, Any] | object | None:
    """(min, max) of one column chunk from its footer statistics, as `_min_max` keeps them;
    `_ALL_NULL` for a chunk without a value; None when the footer does not say."""
    if st is None or not st.has_null_count:
        return None
    if st.null_count >= rows:
        return _ALL_NULL
    if not st.has_min_max:
        return None  # a bound longer than the writer's statistics limit
    name = t.name if isinstance(t, PrimitiveType) else ""
    logical = st.logical_type.type
    if name == "string":
        ok = st.physical_type == "BYTE_ARRAY" and logical == "STRING"
        low, high = (st.min, st.max) if ok else (None, None)
        return (low, high) if isinstance(low, str) and isinstance(high, str) else None
    if name == "date":
        ok = st.physical_type == "INT32" and logical == "DATE"
        return (st.min, st.max) if ok else None
    if name in ("timestamp", "timestamp_ntz"):
        unit = json.loads(st.logical_type.to_json()).get("timeUnit")
        ok = st.physical_type == "INT64" and logical == "TIMESTAMP" and unit == "microseconds"
        return (st.min_raw, st.max_raw) if ok else None
    if name in ("byte", "short", "integer", "long"):
        ok = st.physical_type in ("INT32", "INT64") and logical in ("INT", "NONE")
        return (st.min_raw, st.max_raw) if ok else None
    return None


def _put(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for name in path[:-1]:
        tree = tree.setdefault(name, {})
    tree[path[-1]] = value


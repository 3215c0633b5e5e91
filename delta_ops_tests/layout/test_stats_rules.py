"""The rules of `delta_ops.layout.statistics`, one by one (Delta Spark's `StatisticsCollection`):
which columns, physical names, nested fields, string truncation, floats, timestamps, empty
files, deletion vectors and `tightBounds`."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from delta_ops.layout.file_stats import file_stats
from delta_ops.layout.statistics import (
    StatsCollector,
    parse_stats_columns,
    stats_fields,
    truncate_max_string,
    truncate_min_string,
)
from delta_ops.storage import Storage
from delta_ops_tests.support.stats_compare import DV_PROTOCOL, configuration, field, struct

WITH_DV = DV_PROTOCOL


def stats(cfg, *batches, **kwargs) -> dict:
    c = StatsCollector(cfg, **kwargs)
    for b in batches:
        c.update(b)
    return json.loads(c.to_json(), parse_float=Decimal)


# ---- strings ------------------------------------------------------------------------------------


def test_min_is_cut_to_32_utf16_units_never_inside_a_surrogate_pair():
    assert truncate_min_string("a" * 40) == "a" * 32
    # An emoji is two UTF-16 units: 16 fit in 32.
    assert truncate_min_string("\U0001F600" * 40) == "\U0001F600" * 16
    # A cut through a pair keeps the pair (33 units).
    assert truncate_min_string("a" * 31 + "\U0001F600" * 2) == "a" * 31 + "\U0001F600"
    assert truncate_min_string("short") == "short"


def test_max_is_cut_like_the_min_and_ends_with_a_bound_above_what_was_cut():
    """delta-spark's current `truncateMaxStringAgg`: U+007F after the prefix when the next
    character is below it, else U+10FFFF. Its earlier rule (32 units, then U+FFFD) made a
    max below the value for a character beyond U+FFFF after the cut, and for a cut through
    a surrogate pair (then written as `?`): readers skipped the file (found by comparing
    a query's rows through deltalake before and after `stats`)."""
    assert truncate_max_string("a" * 32) == "a" * 32
    assert truncate_max_string("a" * 33) == "a" * 32 + "\x7f"
    assert truncate_max_string("a" * 32 + "\x7f") == "a" * 32 + "\U0010ffff"
    assert truncate_max_string("a" * 32 + "\U0001F600") == "a" * 32 + "\U0010ffff"
    assert truncate_max_string("a" * 31 + "\U0001F600" * 2) == (
        "a" * 31 + "\U0001F600\U0010ffff")
    assert truncate_max_string("0" * 27 + "\U00010000" * 3) == "0" * 27 + "\U00010000" * 3
    # U+10FFFF after the cut is skipped: nothing is above it.
    assert truncate_max_string("a" * 32 + "\U0010ffff" * 2 + "b") == (
        "a" * 32 + "\U0010ffff" * 2 + "\x7f")
    # No bound within 64 units: no max at all (the reader cannot skip the file).
    assert truncate_max_string("a" * 32 + "\U0010ffff" * 17) is None


@given(st.text(max_size=80))
def test_truncated_bounds_bound_the_value_in_utf8_order(text):
    """min <= value <= max in UTF-8 byte order (code point order), over all of Unicode."""
    low, high = truncate_min_string(text), truncate_max_string(text)
    assert low.encode() <= text.encode()
    assert high is None or text.encode() <= high.encode()
    assert text.startswith(low)


def test_string_bounds_in_the_collected_statistics():
    cfg = configuration([field("s", "string")])
    got = stats(cfg, pa.table({"s": ["b" * 40, "a" * 50, None, "c" * 10]}))
    assert got["minValues"] == {"s": "a" * 32}
    assert got["maxValues"] == {"s": "c" * 10}
    got = stats(cfg, pa.table({"s": ["z" * 35]}))
    assert got["maxValues"] == {"s": "z" * 32 + "\x7f"}
    assert got["nullCount"] == {"s": 0}


# ---- which columns -------------------------------------------------------------------------------

NESTED = [
    field("a", "integer"),
    field("s", struct(field("x", "integer"),
                        field("y", struct(field("z", "string"))),
                        field("w", "long"))),
    field("b", "string"),
]


def _leaves(cfg) -> list[tuple[str, ...]]:
    return StatsCollector(cfg).columns


def test_num_indexed_cols_counts_nested_leaves_in_schema_order():
    cfg = configuration(NESTED, conf={"delta.dataSkippingNumIndexedCols": "3"})
    assert _leaves(cfg) == [("a",), ("s", "x"), ("s", "y", "z")]
    assert _leaves(configuration(NESTED)) == [
        ("a",), ("s", "x"), ("s", "y", "z"), ("s", "w"), ("b",)]
    all_cols = configuration(NESTED, conf={"delta.dataSkippingNumIndexedCols": "-1"})
    assert len(_leaves(all_cols)) == 5


def test_num_indexed_cols_zero_collects_only_the_record_count():
    cfg = configuration(NESTED, conf={"delta.dataSkippingNumIndexedCols": "0"})
    batch = pa.table({"a": [1, 2]})
    assert stats(cfg, batch) == {"numRecords": 2}


def test_default_is_32_leaves():
    fields = [field(f"c{i}", "integer") for i in range(40)]
    assert len(_leaves(configuration(fields))) == 32


def test_partition_columns_are_not_counted():
    fields = [field("p", "string"), field("a", "integer"), field("b", "integer")]
    cfg = configuration(fields, partitions=["p"], conf={"delta.dataSkippingNumIndexedCols": "1"})
    assert _leaves(cfg) == [("a",)]


def test_stats_columns_win_over_the_count_and_match_case_insensitively():
    cfg = configuration(NESTED, conf={"delta.dataSkippingStatsColumns": "B, s.Y",
                               "delta.dataSkippingNumIndexedCols": "1"})
    assert _leaves(cfg) == [("s", "y", "z"), ("b",)]  # schema order, not the list's
    cfg = configuration(NESTED, conf={"delta.dataSkippingStatsColumns": "`s`.x,a"})
    assert _leaves(cfg) == [("a",), ("s", "x")]
    assert [f.name for f in stats_fields(cfg).fields] == ["a", "s"]


def test_stats_column_names_parse_like_spark_identifiers():
    assert parse_stats_columns(["a.b", "`c.d`", " E ", "`x``y`.z"]) == [
        ("a", "b"), ("c.d",), ("e",), ("x`y", "z")]


# ---- column mapping and nesting ----------------------------------------------------------------


def test_keys_are_physical_names_with_column_mapping_nested_included():
    fields = [
        field("id", "long", physical="col-1", field_id=1),
        field("s", struct(field("n", "string", physical="col-3", field_id=3)),
               physical="col-2", field_id=2),
    ]
    cfg = configuration(fields, conf={"delta.columnMapping.mode": "name"})
    batch = pa.table({"col-1": [3, 1], "col-2": [{"col-3": "q"}, None]})
    got = stats(cfg, batch)
    assert got == {
        "numRecords": 2,
        "minValues": {"col-1": 1, "col-2": {"col-3": "q"}},
        "maxValues": {"col-1": 3, "col-2": {"col-3": "q"}},
        "nullCount": {"col-1": 0, "col-2": {"col-3": 1}},  # null parent: null leaf
    }
    # Without the mode, the logical names (a physicalName left in metadata is not used).
    assert stats(configuration(fields), pa.table({"id": [5]}))["minValues"]["id"] == 5


def test_id_mode_finds_a_renamed_column_by_its_parquet_field_id(tmp_path):
    fields = [field("id", "long", physical="col-1", field_id=7)]
    cfg = configuration(fields, conf={"delta.columnMapping.mode": "id"})
    schema = pa.schema([pa.field("other", pa.int64(), metadata={b"PARQUET:field_id": b"7"})])
    pq.write_table(pa.table({"other": [4, 9]}, schema=schema), tmp_path / "f.parquet")
    got = json.loads(file_stats(Storage.for_uri(str(tmp_path)), cfg, {"path": "f.parquet"}))
    assert got["minValues"] == {"col-1": 4} and got["maxValues"] == {"col-1": 9}


def test_arrays_maps_booleans_binary_and_variants_get_null_counts_only():
    fields = [
        field("arr", {"type": "array", "elementType": "integer", "containsNull": True}),
        field("m", {"type": "map", "keyType": "string", "valueType": "integer",
                     "valueContainsNull": True}),
        field("flag", "boolean"), field("bin", "binary"), field("d", "decimal(5,2)"),
    ]
    batch = pa.table({
        "arr": pa.array([[1], None, []]),
        "m": pa.array([[("k", 1)], None, None], pa.map_(pa.string(), pa.int32())),
        "flag": [True, None, False], "bin": [b"x", b"y", None],
        "d": pa.array([Decimal("1.50"), Decimal("-4.50"), None], pa.decimal128(5, 2)),
    })
    got = stats(configuration(fields), batch)
    assert got["minValues"] == {"d": Decimal("-4.50")}
    assert got["maxValues"] == {"d": Decimal("1.50")}
    assert got["nullCount"] == {"arr": 1, "m": 2, "flag": 1, "bin": 1, "d": 1}


def test_a_column_the_file_lacks_counts_as_all_null_and_values_widen():
    fields = [field("a", "long"), field("added", "string")]
    got = stats(configuration(fields), pa.table({"a": pa.array([1, 2], pa.int32())}))
    assert got["nullCount"] == {"a": 0, "added": 2}
    assert got["minValues"] == {"a": 1}


# ---- floats, timestamps, empty -----------------------------------------------------------------


def test_nan_is_the_largest_value():
    cfg = configuration([field("f", "double")])
    got = stats(cfg, pa.table({"f": [1.0, float("nan"), -2.0]}))
    assert got["minValues"] == {"f": Decimal("-2.0")} and got["maxValues"] == {"f": "NaN"}
    got = stats(cfg, pa.table({"f": [float("nan"), None]}))
    assert got["minValues"] == {"f": "NaN"} and got["maxValues"] == {"f": "NaN"}
    # NaN in a later batch still wins the max; finite values later still set the min.
    got = stats(cfg, pa.table({"f": [float("nan")]}), pa.table({"f": [3.0]}))
    assert got["minValues"] == {"f": Decimal("3.0")} and got["maxValues"] == {"f": "NaN"}


def test_between_zero_and_minus_zero_the_first_seen_wins():
    cfg = configuration([field("f", "double")])
    got = stats(cfg, pa.table({"f": [-0.0, 0.0]}))
    assert str(got["minValues"]["f"]) == "-0.0" and str(got["maxValues"]["f"]) == "-0.0"
    got = stats(cfg, pa.table({"f": [0.0]}), pa.table({"f": [-0.0]}))
    assert str(got["minValues"]["f"]) == "0.0" and str(got["maxValues"]["f"]) == "0.0"


def test_timestamps_are_truncated_down_to_milliseconds():
    cfg = configuration([field("t", "timestamp"), field("n", "timestamp_ntz")])
    utc = dt.timezone.utc
    t = [dt.datetime(2021, 1, 1, 0, 0, 1, 999999, tzinfo=utc),
         dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=utc)]
    n = [dt.datetime(2021, 1, 1, 0, 0, 0, 1500), dt.datetime(2020, 5, 5)]
    batch = pa.table({"t": pa.array(t, pa.timestamp("us", "UTC")),
                      "n": pa.array(n, pa.timestamp("us"))})
    got = stats(cfg, batch)
    assert got["minValues"] == {"t": "1969-12-31T23:59:59.999Z", "n": "2020-05-05T00:00:00.000"}
    assert got["maxValues"] == {"t": "2021-01-01T00:00:01.999Z", "n": "2021-01-01T00:00:00.001"}
    # Nanoseconds (INT96 files) and milliseconds read into the same rule.
    ns = pa.table({"t": pa.array([1_000_000_000_123_456_789], pa.timestamp("ns", "UTC"))})
    assert stats(configuration([field("t", "timestamp")]), ns)["minValues"] == {
        "t": "2001-09-09T01:46:40.123Z"}


def test_a_file_without_rows():
    """Spark's aggregates over no rows are null (sums too) and its JSON leaves nulls out; a
    struct of them stays an object."""
    flat = configuration([field("a", "integer"), field("b", "string")])
    assert stats(flat) == {"numRecords": 0, "minValues": {}, "maxValues": {}, "nullCount": {}}
    nested = stats(configuration(NESTED), pa.table({"a": pa.array([], pa.int32())}))
    empty = {"s": {"y": {}}}
    assert nested == {"numRecords": 0, "minValues": empty, "maxValues": empty,
                      "nullCount": empty}


def test_an_all_null_column_has_no_bounds_and_nested_structs_stay_as_objects():
    got = stats(configuration(NESTED), pa.table({"a": pa.array([None, None], pa.int32())}))
    # Spark's `struct(...)` of null bounds is an object with no members, not a null.
    assert got["minValues"] == {"s": {"y": {}}} and got["maxValues"] == {"s": {"y": {}}}
    assert got["nullCount"] == {"a": 2, "s": {"x": 2, "y": {"z": 2}, "w": 2}, "b": 2}


# ---- tightBounds and deletion vectors ---------------------------------------------------------


def test_tight_bounds_only_on_tables_supporting_deletion_vectors():
    fields = [field("a", "integer")]
    batch = pa.table({"a": [1, 2, 3]})
    assert "tightBounds" not in stats(configuration(fields), batch)
    assert stats(configuration(fields, protocol=WITH_DV), batch)["tightBounds"] is True
    assert stats(configuration(fields, protocol=WITH_DV), batch, tight_bounds=False)[
        "tightBounds"] is False


def test_valid_rows_mask_keeps_the_physical_count():
    cfg = configuration([field("a", "integer")], protocol=WITH_DV)
    c = StatsCollector(cfg)
    c.update(pa.table({"a": [1, None, 9, 5]}), valid=pa.array([False, False, True, True]))
    assert c.to_dict() == {"numRecords": 4, "minValues": {"a": 5}, "maxValues": {"a": 9},
                           "nullCount": {"a": 0}, "tightBounds": True}
    c.update(pa.table({"a": [7]}), valid=pa.array([False]))
    assert c.to_dict()["numRecords"] == 5


@pytest.mark.parametrize("mode", ["name", "id"])
def test_physical_column_order_and_text_match_sparks(mode):
    """Byte for byte: key order as the schema, top-level keys in Spark's order."""
    fields = [field("b", "integer", physical="pb", field_id=1),
              field("a", "string", physical="pa", field_id=2)]
    cfg = configuration(fields, conf={"delta.columnMapping.mode": mode}, protocol=WITH_DV)
    c = StatsCollector(cfg).update(pa.table({"pa": ["x"], "pb": [1]}))
    assert c.to_json() == (
        '{"numRecords":1,"minValues":{"pb":1,"pa":"x"},"maxValues":{"pb":1,"pa":"x"},'
        '"nullCount":{"pb":0,"pa":0},"tightBounds":true}'
    )

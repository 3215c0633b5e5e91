"""Tests of delta_ops.protocol.schema against every schema in the corpus and random schemas."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal
from functools import cache
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delta_ops.errors import CorruptLogError
from delta_ops.protocol import schema as S
from delta_ops.protocol.actions import Metadata
from delta_ops.protocol.properties import InvalidTablePropertyError
from delta_ops.protocol.table_configuration import TableConfiguration
from delta_ops_tests.support.corpus import CORPUS, all_corpus_tables, corpus_path


def _mode(configuration):
    """`TableConfiguration.column_mapping_mode` of a metaData with this configuration."""
    metadata = Metadata({"configuration": configuration or {}})
    config = TableConfiguration({"minReaderVersion": 1, "minWriterVersion": 2}, metadata)
    return config.column_mapping_mode

COMMIT_RE = re.compile(r"^\d{20}\.json$")


def _rel(path: Path) -> str:
    return path.relative_to(CORPUS).as_posix()


@cache
def _log_json_files() -> tuple[Path, ...]:
    """Every JSON file in every table's _delta_log (commits, staged commits, compactions, V2
    checkpoints)."""
    files: list[Path] = []
    for name in all_corpus_tables():
        files.extend(sorted((corpus_path(name) / "_delta_log").rglob("*.json")))
    return tuple(files)


@cache
def _actions(path: Path) -> tuple[dict, ...]:
    return tuple(orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip())


@cache
def _corpus_schema_strings() -> tuple[tuple[str, str], ...]:
    """(id, schemaString) of every metaData action in the corpus."""
    out = []
    for path in _log_json_files():
        for i, action in enumerate(_actions(path)):
            meta = action.get("metaData")
            if meta and isinstance(meta.get("schemaString"), str):
                out.append((f"{_rel(path)}:{i}", meta["schemaString"]))
    return tuple(out)


def _commits(table: str) -> list[Path]:
    log = corpus_path(table) / "_delta_log"
    return sorted(p for p in log.iterdir() if COMMIT_RE.match(p.name))


def _latest_metadata(table: str) -> dict:
    meta = None
    for path in _commits(table):
        for action in _actions(path):
            meta = action.get("metaData", meta)
    assert meta is not None, table
    return meta


def _active_data_files(table: str) -> list[Path]:
    active: dict[str, None] = {}
    for path in _commits(table):
        for action in _actions(path):
            if "add" in action:
                active[action["add"]["path"]] = None
            elif "remove" in action:
                active.pop(action["remove"]["path"], None)
    root = corpus_path(table)
    return [root / p for p in active if (root / p).exists()]


SCHEMAS = _corpus_schema_strings()


def test_corpus_has_many_schemas():
    # Guards the parametrization below against silently walking an empty corpus.
    assert len(SCHEMAS) > 150


@pytest.mark.parametrize("schema_string", [s for _, s in SCHEMAS], ids=[i for i, _ in SCHEMAS])
def test_every_corpus_schema_parses_and_round_trips(schema_string):
    parsed = S.parse_schema(schema_string)
    assert orjson.loads(parsed.to_json()) == orjson.loads(schema_string)
    assert S.parse_schema(parsed.to_json()) == parsed
    unknown = S.unknown_types(parsed)
    if unknown:
        with pytest.raises(S.UnsupportedTypeError, match=re.escape(unknown[0])):
            S.to_arrow(parsed)
    else:
        logical = S.to_arrow(parsed)
        physical = S.to_arrow(parsed, physical=True)
        assert logical.names == parsed.names
        assert physical.names == [f.physical_name for f in parsed.fields]
        assert [f.nullable for f in logical] == [f.nullable for f in parsed.fields]


def test_corpus_types_are_all_known():
    """Every type name in the corpus has an Arrow mapping (variant included)."""
    seen: set[str] = set()
    for _, text in SCHEMAS:
        for t in S.iter_types(S.parse_schema(text)):
            if isinstance(t, S.PrimitiveType):
                seen.add(re.sub(r"\(.*", "", t.name))
    assert {"variant", "timestamp_ntz", "decimal", "byte", "short"} <= seen
    assert all(
        S.PrimitiveType(name if name != "decimal" else "decimal(1,0)").is_known for name in seen
    )


def test_unknown_type_is_kept_and_refused_by_to_arrow():
    text = (
        '{"type":"struct","fields":[{"name":"i","type":"interval","nullable":true,"metadata":{}},'
        '{"name":"u","type":{"type":"udt","class":"x.Y","sqlType":"long"},"nullable":true,'
        '"metadata":{}}]}'
    )
    parsed = S.parse_schema(text)
    assert parsed.fields[0].type == S.PrimitiveType("interval")
    assert parsed.fields[1].type.name == "udt"
    assert orjson.loads(parsed.to_json()) == orjson.loads(text)
    assert S.unknown_types(parsed) == ["interval", "udt"]
    with pytest.raises(S.UnsupportedTypeError, match="'interval'") as info:
        S.to_arrow(parsed)
    assert info.value.features == ["interval"]


def test_collation_and_type_widening_metadata_are_carried():
    meta = _latest_metadata("golden__type-widening-nested")
    parsed = S.parse_schema(meta["schemaString"])
    changes = parsed.field("map").metadata["delta.typeChanges"]
    assert {c["fieldPath"] for c in changes} == {"key", "value"}
    assert parsed.field("map").type == S.MapType(S.PrimitiveType("long"), S.PrimitiveType("long"))
    coll = S.parse_schema(_latest_metadata("golden__collations-table")["schemaString"])
    assert coll.field("unicode_col").type == S.PrimitiveType("string")
    assert coll.field("unicode_col").metadata["__COLLATIONS"] == {"unicode_col": "icu.UNICODE"}


@pytest.mark.parametrize(
    "bad",
    [
        "not json",
        '{"type":"array","elementType":"long","containsNull":true}',
        '{"type":"struct","fields":[{"type":"long"}]}',
        '{"type":"struct","fields":[{"name":"a","type":"long","nullable":"yes"}]}',
        '{"type":"struct","fields":[{"name":"a","type":{"type":"map","keyType":"long"}}]}',
        '{"type":"struct"}',
    ],
)
def test_malformed_schemas_are_corrupt_log(bad):
    with pytest.raises(CorruptLogError):
        S.parse_schema(bad)


def test_missing_nullable_and_metadata_default():
    parsed = S.parse_schema('{"type":"struct","fields":[{"name":"a","type":"decimal(10, 2)"}]}')
    assert parsed.fields[0] == S.StructField("a", S.PrimitiveType("decimal(10,2)"), True, {})
    assert S.to_arrow(parsed).field("a").type == pa.decimal128(10, 2)


# --- to_arrow against the Arrow schema of real data files -------------------------------------


def _strip(t: pa.DataType) -> pa.DataType:
    """An Arrow type with map entry names and field metadata normalized, for comparisons."""
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _strip(f.type), f.nullable) for f in t])
    if pa.types.is_list(t):
        return pa.list_(pa.field("element", _strip(t.value_type), t.value_field.nullable))
    if pa.types.is_map(t):
        return pa.map_(
            pa.field("key", _strip(t.key_type), False),
            pa.field("value", _strip(t.item_type), t.item_field.nullable),
        )
    return t


@pytest.mark.parametrize(
    "table",
    [
        "all_primitive_types",
        "nested_types",
        "timestamp_ntz",
        "golden__parquet-all-types",
        "golden__spark-variant-checkpoint",
        "golden__data-reader-map",
        "golden__data-reader-array-complex-objects",
        "golden__decimal-various-scale-precision",
    ],
)
def test_to_arrow_matches_data_files(table):
    meta = _latest_metadata(table)
    parsed = S.parse_schema(meta["schemaString"])
    expected = S.to_arrow(parsed)
    files = _active_data_files(table)
    assert files, table
    for file in files:
        actual = pq.ParquetFile(file, coerce_int96_timestamp_unit="us").schema_arrow
        data_columns = [f for f in expected if f.name not in meta["partitionColumns"]]
        assert actual.names == [f.name for f in data_columns]
        for ours in data_columns:
            theirs = actual.field(ours.name)
            if (
                pa.types.is_timestamp(theirs.type)
                and theirs.type.tz is None
                and (ours.type == pa.timestamp("us", tz="UTC"))
            ):
                # Legacy INT96 timestamps carry no isAdjustedToUTC flag.
                continue
            assert _strip(theirs.type) == _strip(ours.type), (file.name, ours.name)


@pytest.mark.parametrize(
    "table",
    [
        "column_mapping",
        "golden__table-with-columnmapping-mode-id",
        "golden__table-with-icebegCompatV2Enabled",
        "kernel-defaults__data-reader-primitives-column-mapping-name",
    ],
)
def test_physical_to_arrow_matches_column_mapped_files(table):
    meta = _latest_metadata(table)
    parsed = S.parse_schema(meta["schemaString"])
    mode = _mode(meta["configuration"])
    assert mode in ("id", "name")
    expected = S.to_arrow(parsed, physical=True)
    files = _active_data_files(table)
    assert files
    for file in files:
        actual = pq.read_schema(file)
        data_columns = [
            f
            for f in expected
            if f.name not in {parsed.field(p).physical_name for p in meta["partitionColumns"]}
        ]
        for ours in data_columns:
            theirs = actual.field(ours.name)  # KeyError if the physical name is wrong
            their_id = (theirs.metadata or {}).get(b"PARQUET:field_id")
            # id mode needs field ids in files; older name-mode writers (Spark 3.3) omit them
            if mode == "id" or their_id is not None:
                assert their_id == ours.metadata[b"PARQUET:field_id"], (file.name, ours.name)
            assert _strip(theirs.type) == _strip(ours.type), (file.name, ours.name)


def test_physical_names_and_ids_at_every_level():
    def cm(name: str, fid: int) -> dict:
        return {"delta.columnMapping.id": fid, "delta.columnMapping.physicalName": f"col-{name}"}

    inner = S.StructType((S.StructField("d", S.PrimitiveType("integer"), False, cm("d", 5)),))
    parsed = S.StructType(
        (
            S.StructField("a", S.PrimitiveType("long"), True, cm("a", 1)),
            S.StructField("b", inner, True, cm("b", 2)),
            S.StructField(
                "e",
                S.ArrayType(inner),
                True,
                {**cm("e", 4), "delta.columnMapping.nested.ids": {"col-e.element": 100}},
            ),
            S.StructField(
                "m",
                S.MapType(S.PrimitiveType("string"), S.ArrayType(S.PrimitiveType("long"))),
                True,
                {
                    **cm("m", 6),
                    "parquet.field.nested.ids": {"m.key": 7, "m.value": 8, "m.value.element": 9},
                },
            ),
        )
    )
    arrow = S.to_arrow(parsed, physical=True)
    assert arrow.names == ["col-a", "col-b", "col-e", "col-m"]
    assert arrow.field("col-b").type.field(0).name == "col-d"
    assert arrow.field("col-b").type.field(0).metadata == {b"PARQUET:field_id": b"5"}
    element = arrow.field("col-e").type.value_field
    assert element.metadata[b"PARQUET:field_id"] == b"100"
    assert element.type.field(0).name == "col-d"
    m = arrow.field("col-m").type
    assert m.key_field.metadata[b"PARQUET:field_id"] == b"7"
    assert m.item_field.metadata[b"PARQUET:field_id"] == b"8"
    assert m.item_field.type.value_field.metadata[b"PARQUET:field_id"] == b"9"
    # mode 'none' ignores stale physical names but the logical schema is unchanged
    assert S.to_arrow(parsed, physical=True, mode="none").names == ["a", "b", "e", "m"]
    assert S.to_arrow(parsed).names == ["a", "b", "e", "m"]
    assert S.to_arrow(parsed).field("a").metadata is None

    assert S.logical_to_physical(parsed, "name") == {
        "a": "col-a",
        "b": "col-b",
        "b.d": "col-b.col-d",
        "e": "col-e",
        "m": "col-m",
    }
    assert S.logical_to_physical(parsed, "none")["b.d"] == "b.d"
    assert S.physical_name(parsed.field("a"), "id") == "col-a"
    assert S.physical_name(parsed.field("a"), "none") == "a"
    with pytest.raises(ValueError, match="bogus"):
        S.physical_name(parsed.field("a"), "bogus")


def test_logical_to_physical_on_renamed_column():
    meta = _latest_metadata("column_mapping")
    mapping = S.logical_to_physical(S.parse_schema(meta["schemaString"]), "name")
    assert mapping["new_int"] == "col-12668372-ff50-41ae-9571-41f0cb9ad88f"
    assert "int" not in mapping


def test_logical_to_physical_quotes_dotted_names():
    parsed = S.StructType(
        (S.StructField("x.y", S.StructType((S.StructField("z", S.PrimitiveType("long")),))),)
    )
    assert S.logical_to_physical(parsed, "none") == {"`x.y`": "`x.y`", "`x.y`.z": "`x.y`.z"}


def test_column_mapping_mode():
    assert _mode({}) == "none"
    assert _mode(None) == "none"
    assert _mode({"delta.columnMapping.mode": "Name"}) == "name"
    assert _mode({"delta.columnMapping.mode": "id"}) == "id"
    with pytest.raises(InvalidTablePropertyError, match="delta.columnMapping.mode"):
        _mode({"delta.columnMapping.mode": "physical"})


def test_variant_round_trips_through_arrow():
    parsed = S.parse_schema(_latest_metadata("golden__spark-variant-checkpoint")["schemaString"])
    back = S.from_arrow(S.to_arrow(parsed))
    assert back == _without_metadata(parsed)


def test_from_arrow_variants_of_types():
    arrow = pa.schema(
        [
            pa.field("s", pa.large_string()),
            pa.field("b", pa.large_binary(), nullable=False),
            pa.field("t", pa.timestamp("ns", tz="Europe/Paris")),
            pa.field("n", pa.timestamp("ms")),
            pa.field("d", pa.date64()),
            pa.field("dict", pa.dictionary(pa.int32(), pa.string())),
            pa.field("l", pa.large_list(pa.field("item", pa.int16(), nullable=False))),
            pa.field("z", pa.null()),
        ]
    )
    parsed = S.from_arrow(arrow)
    assert [str(S.schema_to_dict(f.type)) for f in parsed] == [
        "string",
        "binary",
        "timestamp",
        "timestamp_ntz",
        "date",
        "string",
        "{'type': 'array', 'elementType': 'short', 'containsNull': False}",
        "void",
    ]
    assert parsed.field("b").nullable is False
    with pytest.raises(S.UnsupportedTypeError, match="uint32"):
        S.from_arrow(pa.schema([pa.field("u", pa.uint32())]))


# --- partition values -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "type_name", "expected"),
    [
        (None, "integer", None),
        ("", "string", None),
        ("", "date", None),
        ("null", "string", "null"),
        ("abc", "string", "abc"),
        ("-128", "byte", -128),
        ("32767", "short", 32767),
        ("2147483647", "integer", 2147483647),
        ("-9223372036854775808", "long", -(2**63)),
        ("true", "boolean", True),
        ("FALSE", "boolean", False),
        ("1.5", "float", 1.5),
        ("-0.25", "double", -0.25),
        ("1.23", "decimal(5,2)", Decimal("1.23")),
        ("1", "decimal(5,2)", Decimal("1.00")),
        (
            "-12345678901234567890123456789012345678",
            "decimal(38,0)",
            Decimal(-12345678901234567890123456789012345678),
        ),
        ("2021-09-08", "date", dt.date(2021, 9, 8)),
        ("\u0001\u0002\u0003", "binary", b"\x01\x02\x03"),
        ("1970-01-01 00:00:00", "timestamp", dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)),
        (
            "2021-09-08 11:11:11.123456",
            "timestamp",
            dt.datetime(2021, 9, 8, 11, 11, 11, 123456, tzinfo=dt.timezone.utc),
        ),
        (
            "2024-01-01T10:00:00.000000Z",
            "timestamp",
            dt.datetime(2024, 1, 1, 10, tzinfo=dt.timezone.utc),
        ),
        (
            "2024-01-01T10:00:00+02:00",
            "timestamp",
            dt.datetime(2024, 1, 1, 8, tzinfo=dt.timezone.utc),
        ),
        ("2013-07-05 17:01:00.123456", "timestamp_ntz", dt.datetime(2013, 7, 5, 17, 1, 0, 123456)),
        ("2013-07-05 17:01:00", "timestamp_ntz", dt.datetime(2013, 7, 5, 17, 1)),
    ],
)
def test_partition_value_examples(value, type_name, expected):
    parsed = S.partition_value_to_arrow(value, type_name)
    assert parsed == expected
    assert type(parsed) is type(expected)
    # and the value fits the Arrow type
    arrow_type = S.data_type_to_arrow(S.PrimitiveType(type_name))
    assert pa.scalar(parsed, type=arrow_type).as_py() == expected


def test_float_special_values():
    import math

    assert math.isnan(S.partition_value_to_arrow("NaN", "double"))
    assert S.partition_value_to_arrow("Infinity", "float") == float("inf")
    assert S.partition_value_to_arrow("-Infinity", "double") == float("-inf")


@pytest.mark.parametrize(
    ("value", "type_name"),
    [
        ("128", "byte"),
        ("x", "integer"),
        ("yes", "boolean"),
        ("1.234", "decimal(5,2)"),
        ("12345", "decimal(5,2)"),
        ("2021-13-01", "date"),
        ("2021-01-01 25:00:00", "timestamp"),
        ("2021-01-01T00:00:00Z", "timestamp_ntz"),
        ("soon", "timestamp"),
        ("abc", "double"),
    ],
)
def test_bad_partition_values(value, type_name):
    with pytest.raises(CorruptLogError, match=re.escape(repr(value))):
        S.partition_value_to_arrow(value, type_name)


def test_partition_values_of_unsupported_types():
    with pytest.raises(S.UnsupportedTypeError):
        S.partition_value_to_arrow("x", "interval")
    with pytest.raises(S.UnsupportedTypeError):
        S.partition_value_to_arrow("x", S.ArrayType(S.PrimitiveType("long")))
    assert S.partition_value_to_arrow(None, "interval") is None


def _partition_value_cases() -> list[tuple[str, str, str | None, S.DataType]]:
    """(table, column, value, type) of every partition value of every add/remove in the corpus,
    typed by the metadata in effect at that commit."""
    cases = []
    for table in all_corpus_tables():
        schema = None
        by_physical: dict[str, S.StructField] = {}
        for path in _commits(table):
            for action in _actions(path):
                meta = action.get("metaData")
                if meta and "schemaString" in meta:
                    schema = S.parse_schema(meta["schemaString"])
                    mode = _mode(meta.get("configuration") or {})
                    by_physical = {S.physical_name(f, mode): f for f in schema.fields}
                for kind in ("add", "remove"):
                    values = (action.get(kind) or {}).get("partitionValues") or {}
                    for key, value in values.items():
                        if key in by_physical:
                            cases.append((table, key, value, by_physical[key].type))
    return cases


def test_every_corpus_partition_value_parses():
    cases = _partition_value_cases()
    assert len(cases) > 100
    types_seen = set()
    for table, key, value, data_type in cases:
        parsed = S.partition_value_to_arrow(value, data_type)
        arrow = S.data_type_to_arrow(data_type)
        pa.scalar(parsed, type=arrow)  # must not raise
        types_seen.add(data_type.name)
        if value not in (None, ""):
            assert parsed is not None, (table, key, value)
    assert {"timestamp", "timestamp_ntz", "date", "decimal(1,0)", "boolean", "byte"} <= types_seen


def test_iso8601_partition_table():
    values = [
        S.partition_value_to_arrow(action["add"]["partitionValues"]["ts"], "timestamp")
        for path in _commits("golden__kernel-timestamp-partition-col-ISO8601")
        for action in _actions(path)
        if "add" in action
    ]
    assert sorted(values) == [
        dt.datetime(2024, 1, 1, 10, 0, tzinfo=dt.timezone.utc),
        dt.datetime(2024, 1, 2, 12, 30, tzinfo=dt.timezone.utc),
    ]


# --- typed statistics and partition values ----------------------------------------------------


def test_stats_schema_matches_spark_checkpoint():
    table = "spark__transaction_log_schema_evolvability"
    checkpoint = corpus_path(table) / "_delta_log" / "00000000000000000002.checkpoint.parquet"
    spark = pq.read_schema(checkpoint).field("add").type.field("stats_parsed").type
    meta = None
    for path in _commits(table)[:3]:
        for action in _actions(path):
            meta = action.get("metaData", meta)
    parsed = S.parse_schema(meta["schemaString"])
    ours = S.stats_schema(parsed, meta["partitionColumns"], tight_bounds=False)
    assert ours == spark


def test_stats_schema_layout():
    parsed = S.parse_schema(_latest_metadata("nested_types")["schemaString"])
    stats = S.stats_schema(parsed, [])
    assert stats.names == ["numRecords", "minValues", "maxValues", "nullCount", "tightBounds"]
    # min/max: no boolean, no arrays or maps; nullCount: every non-struct column
    assert stats.field("minValues").type == pa.struct(
        [
            pa.field("pk", pa.int32()),
            pa.field("struct", pa.struct([pa.field("float64", pa.float64())])),
        ]
    )
    assert stats.field("nullCount").type == pa.struct(
        [
            pa.field("pk", pa.int64()),
            pa.field(
                "struct", pa.struct([pa.field("float64", pa.int64()), pa.field("bool", pa.int64())])
            ),
            pa.field("array", pa.int64()),
            pa.field("map", pa.int64()),
        ]
    )
    assert stats.field("tightBounds").type == pa.bool_()
    limited = S.stats_schema(parsed, [], num_indexed_cols=2)
    assert limited.field("nullCount").type.names == ["pk", "struct"]
    assert limited.field("nullCount").type.field("struct").type.names == ["float64"]
    assert S.stats_schema(parsed, [], num_indexed_cols=-1) == stats
    nothing = S.stats_schema(parsed, [], num_indexed_cols=0, tight_bounds=False)
    assert nothing.names == ["numRecords"]


def test_stats_schema_excludes_partitions_and_uses_physical_names():
    meta = _latest_metadata("golden__dv-with-columnmapping")
    parsed = S.parse_schema(meta["schemaString"])
    stats = S.stats_schema(parsed, meta["partitionColumns"], physical=True)
    partition_physical = parsed.field(meta["partitionColumns"][0]).physical_name
    assert partition_physical not in stats.field("nullCount").type.names
    assert all(n.startswith("col-") for n in stats.field("nullCount").type.names)


def _stats_cases():
    """(table, stats dict, stats schema) for every add with JSON stats, skipping variant tables
    (Databricks writes min/max for variant columns, which Delta's stats schema lacks)."""
    cases = []
    for table in all_corpus_tables():
        arrow = None
        for path in _commits(table):
            for action in _actions(path):
                meta = action.get("metaData")
                if meta and "schemaString" in meta:
                    parsed = S.parse_schema(meta["schemaString"])
                    mode = _mode(meta.get("configuration") or {})
                    arrow = (
                        None
                        if "variant" in {getattr(t, "name", "") for t in S.iter_types(parsed)}
                        else S.stats_schema(
                            parsed, meta.get("partitionColumns") or [], physical=mode != "none"
                        )
                    )
                add = action.get("add") or {}
                if arrow is not None and isinstance(add.get("stats"), str):
                    cases.append((table, orjson.loads(add["stats"]), arrow))
    return cases


def _keys_within(stats: object, arrow: pa.DataType, where: str) -> None:
    if not isinstance(stats, dict):
        assert not pa.types.is_struct(arrow), where
        return
    assert pa.types.is_struct(arrow), where
    for key, value in stats.items():
        assert arrow.get_field_index(key) >= 0, f"{where}.{key}"
        _keys_within(value, arrow.field(key).type, f"{where}.{key}")


def test_every_corpus_stats_fits_stats_schema():
    cases = _stats_cases()
    assert len(cases) > 100
    for table, stats, arrow in cases:
        for section in ("minValues", "maxValues", "nullCount"):
            if stats.get(section):
                _keys_within(stats[section], arrow.field(section).type, f"{table}:{section}")
        if "numRecords" in stats:
            assert arrow.get_field_index("numRecords") == 0


def test_partition_values_parsed_schema_matches_checkpoint():
    table = "golden__dv-with-columnmapping"
    checkpoint = corpus_path(table) / "_delta_log" / "00000000000000000010.checkpoint.parquet"
    spark = pq.read_schema(checkpoint).field("add").type.field("partitionValues_parsed").type
    meta = _latest_metadata(table)
    parsed = S.parse_schema(meta["schemaString"])
    assert (
        S.partition_values_parsed_schema(parsed, meta["partitionColumns"], physical=True) == spark
    )
    logical = S.partition_values_parsed_schema(parsed, meta["partitionColumns"])
    assert logical.names == meta["partitionColumns"]
    with pytest.raises(CorruptLogError, match="nope"):
        S.partition_values_parsed_schema(parsed, ["nope"])


# --- hypothesis: random schemas ---------------------------------------------------------------

_primitive_names = st.sampled_from(
    [
        "string",
        "long",
        "integer",
        "short",
        "byte",
        "float",
        "double",
        "boolean",
        "binary",
        "date",
        "timestamp",
        "timestamp_ntz",
        "variant",
    ]
)
_decimals = st.integers(1, 38).flatmap(
    lambda p: st.integers(0, p).map(lambda s: f"decimal({p},{s})")
)
_primitives = st.one_of(_primitive_names, _decimals).map(S.PrimitiveType)
_names = st.text(min_size=1, max_size=8)
_json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.text(max_size=5)
)
_metadata = st.dictionaries(
    st.text(max_size=10),
    st.one_of(
        _json_scalars,
        st.lists(_json_scalars, max_size=3),
        st.dictionaries(st.text(max_size=4), _json_scalars, max_size=2),
    ),
    max_size=3,
)


def _structs(children):
    return st.lists(
        st.builds(S.StructField, _names, children, st.booleans(), _metadata), min_size=1, max_size=4
    ).map(lambda fs: S.StructType(tuple(fs)))


_types = st.recursive(
    _primitives,
    lambda children: st.one_of(
        st.builds(S.ArrayType, children, st.booleans()),
        st.builds(S.MapType, children, children, st.booleans()),
        _structs(children),
    ),
    max_leaves=8,
)
_schemas = _structs(_types)


def _without_metadata(t):
    if isinstance(t, S.StructType):
        return S.StructType(
            tuple(
                S.StructField(f.name, _without_metadata(f.type), f.nullable, {}) for f in t.fields
            )
        )
    if isinstance(t, S.ArrayType):
        return S.ArrayType(_without_metadata(t.element_type), t.contains_null)
    if isinstance(t, S.MapType):
        return S.MapType(
            _without_metadata(t.key_type), _without_metadata(t.value_type), t.value_contains_null
        )
    return t


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_schemas)
def test_random_schemas_round_trip_through_json(schema):
    text = schema.to_json()
    assert S.parse_schema(text) == schema
    assert orjson.loads(text) == S.schema_to_dict(schema)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_schemas)
def test_random_schemas_round_trip_through_arrow(schema):
    arrow = S.to_arrow(schema)
    assert S.from_arrow(arrow) == _without_metadata(schema)
    # the Arrow schema survives Parquet's schema serialization (so it can be written)
    pa.Table.from_pylist([], schema=arrow)

"""Tests of delta_ops.protocol.properties: intervals, typed properties and defaults."""

from __future__ import annotations

import datetime as dt
from functools import cache

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delta_ops.errors import DeltaOpsError
from delta_ops.protocol import properties as P
from delta_ops.protocol.actions import Metadata
from delta_ops.protocol.table_configuration import TableConfiguration
from delta_ops_tests.support.corpus import CORPUS, all_corpus_tables, corpus_path


def _mode(configuration):
    """`TableConfiguration.column_mapping_mode` of a metaData with this configuration."""
    metadata = Metadata({"configuration": configuration or {}})
    config = TableConfiguration({"minReaderVersion": 1, "minWriterVersion": 2}, metadata)
    return config.column_mapping_mode

DAY = dt.timedelta(days=1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("interval 30 days", dt.timedelta(days=30)),
        ("interval 1 weeks", dt.timedelta(weeks=1)),
        ("interval 1 week", dt.timedelta(weeks=1)),
        ("30 days", dt.timedelta(days=30)),
        ("1 week", dt.timedelta(weeks=1)),
        ("interval 2 hours", dt.timedelta(hours=2)),
        ("interval 1 day 2 hours", dt.timedelta(days=1, hours=2)),
        ("INTERVAL 7 DAYS", dt.timedelta(days=7)),
        ("  Interval 1 Day  ", DAY),
        ("interval 90 minutes", dt.timedelta(minutes=90)),
        ("interval 1 second", dt.timedelta(seconds=1)),
        ("interval 1.5 seconds", dt.timedelta(seconds=1, milliseconds=500)),
        ("interval 250 milliseconds", dt.timedelta(milliseconds=250)),
        ("interval 7 microseconds", dt.timedelta(microseconds=7)),
        ("interval 0 seconds", dt.timedelta(0)),
        ("interval 1 day -1 hours", dt.timedelta(hours=23)),
        ("1day", DAY),
        ("interval 1 weeks 1 days 1 hours 1 minutes 1 seconds", dt.timedelta(8, 3661)),
    ],
)
def test_parse_interval_examples(text, expected):
    assert P.parse_interval(text) == expected


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("interval 1 month", "months have no fixed length"),
        ("2 years", "years have no fixed length"),
        ("interval 1 year 2 days", "years have no fixed length"),
        ("", "no value and unit"),
        ("interval", "no value and unit"),
        ("interval 30", "expected '<number> <unit>'"),
        ("days", "expected '<number> <unit>'"),
        ("interval 3 fortnights", "unknown unit"),
        ("interval 1.5 days", "only seconds may have a fraction"),
        ("interval 0.0000001 seconds", "finer than a microsecond"),
        ("intervals 3 days", "invalid interval"),
        ("30 days,", "expected '<number> <unit>'"),
    ],
)
def test_parse_interval_rejects(text, why):
    with pytest.raises(ValueError, match=why) as info:
        P.parse_interval(text)
    assert repr(text) in str(info.value)


_UNITS = {
    "microsecond": dt.timedelta(microseconds=1),
    "millisecond": dt.timedelta(milliseconds=1),
    "second": dt.timedelta(seconds=1),
    "minute": dt.timedelta(minutes=1),
    "hour": dt.timedelta(hours=1),
    "day": dt.timedelta(days=1),
    "week": dt.timedelta(weeks=1),
}


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(-10_000, 10_000), st.sampled_from(sorted(_UNITS)), st.booleans()),
        min_size=1,
        max_size=5,
    ),
    st.booleans(),
    st.sampled_from([str.lower, str.upper, str.title]),
)
def test_parse_interval_sums_units(pairs, prefix, case):
    text = " ".join(f"{n} {unit}{'s' if plural else ''}" for n, unit, plural in pairs)
    if prefix:
        text = "interval " + text
    expected = sum((n * _UNITS[unit] for n, unit, _ in pairs), dt.timedelta(0))
    assert P.parse_interval(case(text)) == expected


@settings(max_examples=300, deadline=None)
@given(st.timedeltas(min_value=-dt.timedelta(days=10**6), max_value=dt.timedelta(days=10**6)))
def test_format_interval_round_trips(delta):
    text = P.format_interval(delta)
    assert text.startswith("interval ")
    assert P.parse_interval(text) == delta


def test_format_interval_is_readable():
    assert P.format_interval(dt.timedelta(weeks=1)) == "interval 1 week"
    assert P.format_interval(dt.timedelta(weeks=3)) == "interval 3 weeks"
    assert P.format_interval(dt.timedelta(days=30)) == "interval 30 days"
    assert P.format_interval(dt.timedelta(days=1, hours=2)) == "interval 1 day 2 hours"
    assert P.format_interval(dt.timedelta(0)) == "interval 0 seconds"
    assert P.format_interval(-dt.timedelta(hours=2)) == "interval -2 hours"


# --- TableProperties --------------------------------------------------------------------------


def test_defaults():
    props = P.TableProperties.from_configuration({})
    assert props == P.TableProperties()
    assert props.checkpoint_interval == 10
    assert props.log_retention == dt.timedelta(days=30)
    assert props.deleted_file_retention == dt.timedelta(weeks=1)
    assert props.enable_expired_log_cleanup is True
    assert props.checkpoint_write_stats_as_json is True
    assert props.checkpoint_write_stats_as_struct is False
    assert props.checkpoint_policy == "classic" and not props.checkpoint_v2
    assert props.enable_in_commit_timestamps is False
    assert props.ict_enablement_version is None
    assert props.ict_enablement_timestamp is None
    assert props.column_mapping_mode == "none"
    assert props.append_only is False
    assert props.enable_row_tracking is False
    assert props.set_transaction_retention is None
    assert props.data_skipping_num_indexed_cols == 32
    assert P.TableProperties.from_configuration(None) == props


def test_typed_values():
    cfg = {
        "delta.checkpointInterval": "2",
        "delta.logRetentionDuration": "interval 2 days",
        "delta.deletedFileRetentionDuration": "interval 12 hours",
        "delta.enableExpiredLogCleanup": "False",
        "delta.checkpoint.writeStatsAsJson": "false",
        "delta.checkpoint.writeStatsAsStruct": "true",
        "delta.checkpointPolicy": "v2",
        "delta.enableDeletionVectors": "true",
        "delta.enableRowTracking": "true",
        "delta.rowTracking.materializedRowIdColumnName": "_row-id-col-1",
        "delta.rowTracking.materializedRowCommitVersionColumnName": "_row-cv-col-2",
        "delta.enableInCommitTimestamps": "true",
        "delta.inCommitTimestampEnablementVersion": "5",
        "delta.inCommitTimestampEnablementTimestamp": "1712091524504",
        "delta.columnMapping.mode": "name",
        "delta.columnMapping.maxColumnId": "3",
        "delta.appendOnly": "true",
        "delta.enableChangeDataFeed": "true",
        "delta.setTransactionRetentionDuration": "interval 3 days",
        "delta.dataSkippingNumIndexedCols": "-1",
        "delta.dataSkippingStatsColumns": "a, b.c",
        "delta.constraints.positive": "x > 0",
    }
    props = P.TableProperties.from_configuration(cfg)
    assert props.checkpoint_interval == 2
    assert props.log_retention == 2 * DAY
    assert props.deleted_file_retention == dt.timedelta(hours=12)
    assert props.enable_expired_log_cleanup is False
    assert props.checkpoint_write_stats_as_json is False
    assert props.checkpoint_write_stats_as_struct is True
    assert props.checkpoint_v2
    assert props.enable_deletion_vectors and props.enable_row_tracking
    assert props.materialized_row_id_column == "_row-id-col-1"
    assert props.materialized_row_commit_version_column == "_row-cv-col-2"
    assert props.enable_in_commit_timestamps
    assert props.ict_enablement_version == 5
    assert props.ict_enablement_timestamp == 1712091524504
    assert props.column_mapping_mode == "name"
    assert props.column_mapping_max_column_id == 3
    assert props.append_only and props.enable_change_data_feed
    assert props.set_transaction_retention == 3 * DAY
    assert props.data_skipping_num_indexed_cols == -1
    assert props.data_skipping_stats_columns == ("a", "b.c")
    assert props.configuration["delta.constraints.positive"] == "x > 0"


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        ("delta.checkpointInterval", "0", "must be >= 1"),
        ("delta.checkpointInterval", "ten", "expected an integer"),
        ("delta.logRetentionDuration", "interval 1 month", "fixed length"),
        ("delta.deletedFileRetentionDuration", "interval -1 days", "must not be negative"),
        ("delta.enableExpiredLogCleanup", "yes", "expected true or false"),
        ("delta.checkpointPolicy", "v3", "expected one of classic, v2"),
        ("delta.columnMapping.mode", "physical", "expected one of none, id, name"),
        ("delta.inCommitTimestampEnablementVersion", "-1", "must be >= 0"),
        ("delta.dataSkippingNumIndexedCols", "-2", "must be >= -1"),
    ],
)
def test_invalid_values(key, value, why):
    with pytest.raises(P.InvalidTablePropertyError, match=why) as info:
        P.TableProperties.from_configuration({key: value}, table="s3://b/t", version=7)
    err = info.value
    assert isinstance(err, DeltaOpsError) and isinstance(err, ValueError)
    assert (err.key, err.value, err.table, err.version) == (key, value, "s3://b/t", 7)
    assert key in str(err) and repr(value) in str(err) and "version 7" in str(err)


def test_as_dict_with_defaults():
    props = P.TableProperties.from_configuration(
        {"delta.checkpointInterval": "2", "delta.constraints.c": "x > 0"}
    )
    out = props.as_dict_with_defaults()
    assert out["delta.checkpointInterval"] == "2"
    assert out["delta.constraints.c"] == "x > 0"
    assert out["delta.logRetentionDuration"] == "interval 30 days"
    assert out["delta.deletedFileRetentionDuration"] == "interval 1 week"
    assert out["delta.enableExpiredLogCleanup"] == "true"
    assert out["delta.checkpoint.writeStatsAsJson"] == "true"
    assert out["delta.checkpoint.writeStatsAsStruct"] == "false"
    assert out["delta.checkpointPolicy"] == "classic"
    assert out["delta.dataSkippingNumIndexedCols"] == "32"
    assert "delta.setTransactionRetentionDuration" not in out
    with_defaults = {spec.key for spec in P.PROPERTIES if spec.default is not None}
    assert with_defaults <= set(out)
    # defaults parse back to the same typed values
    assert P.TableProperties.from_configuration(out) == props


def test_every_default_parses_to_the_dataclass_default():
    defaults = P.TableProperties()
    for spec in P.PROPERTIES:
        expected = None if spec.default is None else spec.parse(spec.default)
        assert getattr(defaults, spec.attribute) == expected, spec.key


def test_column_mapping_mode_helper():
    assert _mode({}) == "none"
    assert _mode({"delta.columnMapping.mode": "ID"}) == "id"


@cache
def _corpus_configurations() -> tuple[tuple[str, dict], ...]:
    out = []
    for table in all_corpus_tables():
        for path in sorted((corpus_path(table) / "_delta_log").rglob("*.json")):
            for line in path.read_bytes().splitlines():
                if line.strip():
                    meta = orjson.loads(line).get("metaData")
                    if meta is not None:
                        out.append(
                            (path.relative_to(CORPUS).as_posix(), meta.get("configuration") or {})
                        )
    return tuple(out)


def test_every_corpus_configuration_builds():
    configurations = _corpus_configurations()
    assert len(configurations) > 150
    seen_keys: set[str] = set()
    for where, cfg in configurations:
        props = P.TableProperties.from_configuration(cfg, table=where)
        seen_keys |= set(cfg)
        full = props.as_dict_with_defaults()
        assert set(cfg) <= set(full), where
        assert P.TableProperties.from_configuration(full) == props, where
    # the corpus exercises real values of the properties we type
    assert {
        "delta.checkpointInterval",
        "delta.checkpointPolicy",
        "delta.columnMapping.mode",
        "delta.enableInCommitTimestamps",
        "delta.checkpoint.writeStatsAsStruct",
    } <= seen_keys


def test_corpus_values():
    by_where = dict(_corpus_configurations())
    v2 = [
        P.TableProperties.from_configuration(c)
        for w, c in by_where.items()
        if c.get("delta.checkpointPolicy")
    ]
    assert v2 and all(p.checkpoint_v2 for p in v2)
    intervals = {
        P.TableProperties.from_configuration(c).checkpoint_interval for c in by_where.values()
    }
    assert {1, 2, 10, 10000} <= intervals

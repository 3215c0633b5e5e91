"""Statistics against Spark's own: every corpus table whose files carry statistics.

For each table, its statistics are stripped from a copy (every file committed again without
them), `compute_stats` computes them again from the data, and the result is compared with
what Spark, Databricks or the Delta kernels recorded, field by field (`numRecords`,
`minValues`, `maxValues`, `nullCount`, `tightBounds`; truncated strings included).

Files with a deletion vector: the recorded statistics are those of the file as written
(wide bounds once the DV came), so they are compared with the statistics of every physical
row (`file_stats(apply_dv=False)`); what `compute_stats` commits for them (valid rows only,
tight bounds) is checked against the same reader with the DV applied.

Where a table's recorded statistics differ from ours for a reason, the table is named in
`EXCEPTIONS` with that reason, and the test asserts exactly that difference.
"""

from __future__ import annotations

import pytest

from delta_ops.errors import StatsReadError, UnsupportedFeatureError
from delta_ops.layout.file_stats import file_stats
from delta_ops.layout.stats import compute_stats
from delta_ops.log import load_snapshot
from delta_ops.protocol.path_identity import dv_unique_id
from delta_ops.protocol.schema import PrimitiveType
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import all_corpus_tables, corpus_path
from delta_ops_tests.support.stats_compare import (
    MISSING,
    configurations_at_add,
    differences,
    parse,
    same_instant,
    strip_stats,
)

#: Every corpus table with at least one live file carrying statistics
#: (`test_the_list_is_every_corpus_table_with_stats` proves it is complete).
TABLES_WITH_STATS = (
    "all_primitive_types", "basic_append", "basic_partitioned", "cdf", "check_constraints",
    "column_mapping", "deletion_vectors", "generated_columns",
    "golden__basic-decimal-table", "golden__basic-decimal-table-legacy",
    "golden__basic-with-inserts-deletes-checkpoint", "golden__basic-with-inserts-merge",
    "golden__basic-with-inserts-overwrite-restore", "golden__basic-with-inserts-updates",
    "golden__basic-with-vacuum-protocol-check-feature",
    "golden__commit-info-containing-arbitrary-operationParams-types",
    "golden__corrupted-last-checkpoint-kernel", "golden__data-reader-timestamp_ntz",
    "golden__data-reader-timestamp_ntz-id-mode", "golden__data-reader-timestamp_ntz-name-mode",
    "golden__data-skipping-basic-stats-all-types",
    "golden__data-skipping-basic-stats-all-types-checkpoint",
    "golden__data-skipping-basic-stats-all-types-columnmapping-id",
    "golden__data-skipping-basic-stats-all-types-columnmapping-name",
    "golden__data-skipping-change-stats-collected-across-versions",
    "golden__data-skipping-partition-and-data-column", "golden__decimal-various-scale-precision",
    "golden__dv-partitioned-with-checkpoint", "golden__dv-with-columnmapping",
    "golden__kernel-timestamp-INT96", "golden__kernel-timestamp-PST",
    "golden__kernel-timestamp-TIMESTAMP_MICROS", "golden__kernel-timestamp-TIMESTAMP_MILLIS",
    "golden__kernel-timestamp-partition-col-ISO8601", "golden__log-replay-dv-key-cases",
    "golden__log-replay-latest-metadata-protocol", "golden__multi-part-checkpoint",
    "golden__only-checkpoint-files", "golden__parquet-all-types",
    "golden__parquet-all-types-legacy-format", "golden__parquet-decimal-dictionaries",
    "golden__parquet-decimal-dictionaries-v1", "golden__parquet-decimal-dictionaries-v2",
    "golden__parquet-decimal-type", "golden__spark-variant-checkpoint",
    "golden__table-with-columnmapping-mode-id", "golden__table-with-columnmapping-mode-name",
    "golden__table-with-icebegCompatV2Enabled", "golden__type-widening",
    "golden__type-widening-nested", "golden__v2-checkpoint-json", "golden__v2-checkpoint-parquet",
    "iceberg_compat_v1", "kernel-benchmarks__basic_append/delta",
    "kernel-benchmarks__basic_catalog_managed/delta", "kernel-defaults__basic-dv-no-checkpoint",
    "kernel-defaults__basic-dv-with-checkpoint", "kernel-defaults__basic-with-checkpoint",
    "kernel-defaults__column-mapping-id",
    "kernel-defaults__data-reader-partition-values-column-mapping-name",
    "kernel-defaults__data-reader-primitives-column-mapping-name",
    "kernel-defaults__kernel-pagination-all-jsons",
    "kernel-defaults__kernel-pagination-multi-part-checkpoints",
    "kernel-defaults__kernel-pagination-single-checkpoint",
    "kernel-defaults__kernel-pagination-v2-checkpoint-json",
    "kernel-defaults__kernel-pagination-v2-checkpoint-parquet",
    "kernel-defaults__spark-shredded-variant-preview-delta",
    "kernel-defaults__spark-variant-checkpoint",
    "kernel-defaults__spark-variant-stable-feature-checkpoint", "multi_partitioned",
    "multi_partitioned_2", "nested_types", "no_replay", "no_stats", "partitioned_with_null",
    "spark__dbr_8_0_non_generated_columns", "spark__delta-1.2.1",
    "spark__identity_test_written_by_version_5", "spark__partitioned-table-with-dv-large",
    "spark__table-with-dv-gigantic", "spark__table-with-dv-large", "spark__table-with-dv-small",
    "spark__table-with-dv-special-char", "spark__transaction_log_schema_evolvability",
    "spark__variant-stats-nested-no-checkpoint", "spark__variant-stats-no-checkpoint",
    "spark__variant-stats-state-reconstruction", "spark__variant-stats-with-struct-no-checkpoint",
    "stats_as_struct", "timestamp_ntz", "with_checkpoint", "with_schema_change",
)

# ---- the documented differences ----------------------------------------------------------------

SESSION_TIME_ZONE = (
    "Spark wrote the timestamp bounds in its session time zone (America/Los_Angeles, "
    "'-08:00'); delta_ops writes the same instant in UTC ('Z')"
)
CONFIGURATION_CHANGED = (
    "the table's configuration changed after the files were written; Spark's statistics "
    "follow the configuration of the version that added each file, and ours, computed with "
    "that configuration, are equal"
)
VARIANT_BOUNDS = (
    "variant min/max bounds (Z85 path bounds of shredded variants) are not computed by "
    "delta_ops; the variant columns keep their null counts, every other field is equal"
)
DATA_FILE_MISSING = "the corpus copy lacks the data file, so no statistics can be computed"
DATA_FILE_RENAMED = (
    "the corpus stores the data files without the 'test%file%prefix-' the log names, so "
    "the file the log names does not exist; computed from the file stored, they are equal"
)
DV_FILE_RENAMED = (
    "the corpus names the DV files 'test%dv%prefix-deletion_vector_<uuid>.bin' while the "
    "descriptors encode only the UUID: the deletion vectors cannot be read, so COMPUTE "
    "STATS refuses; the physical statistics are equal"
)
CATALOG_MANAGED = (
    "a catalog-managed table: commits go through its catalog, so delta_ops does not commit "
    "to it; the statistics computed from the data are equal"
)

EXCEPTIONS: dict[str, str] = {
    "golden__data-skipping-basic-stats-all-types": SESSION_TIME_ZONE,
    "golden__data-skipping-basic-stats-all-types-checkpoint": SESSION_TIME_ZONE,
    "golden__data-skipping-basic-stats-all-types-columnmapping-id": SESSION_TIME_ZONE,
    "golden__data-skipping-basic-stats-all-types-columnmapping-name": SESSION_TIME_ZONE,
    "golden__kernel-timestamp-PST": SESSION_TIME_ZONE,
    "golden__data-skipping-change-stats-collected-across-versions": CONFIGURATION_CHANGED,
    "golden__log-replay-latest-metadata-protocol": CONFIGURATION_CHANGED,
    "golden__type-widening": CONFIGURATION_CHANGED,
    "spark__variant-stats-nested-no-checkpoint": VARIANT_BOUNDS,
    "spark__variant-stats-no-checkpoint": VARIANT_BOUNDS,
    "spark__variant-stats-state-reconstruction": VARIANT_BOUNDS,
    "spark__variant-stats-with-struct-no-checkpoint": VARIANT_BOUNDS,
    "golden__parquet-decimal-dictionaries-v1": DATA_FILE_MISSING,
    "spark__table-with-dv-gigantic": DATA_FILE_MISSING,
    "kernel-defaults__spark-variant-stable-feature-checkpoint": DATA_FILE_RENAMED,
    "spark__table-with-dv-small": DV_FILE_RENAMED,
    "spark__table-with-dv-large": DV_FILE_RENAMED,
    "spark__partitioned-table-with-dv-large": DV_FILE_RENAMED,
    "spark__table-with-dv-special-char": DV_FILE_RENAMED,
    "kernel-benchmarks__basic_catalog_managed/delta": CATALOG_MANAGED,
}


def _recorded(storage: Storage) -> dict[tuple[str, str | None], dict]:
    snap = load_snapshot(storage)
    return {
        (r["path"], dv_unique_id(r["deletionVector"])): r
        for r in snap.files.select(["path", "stats", "deletionVector"]).to_pylist()
    }


def _physical(storage: Storage, config, add: dict) -> dict:
    return parse(file_stats(storage, config, add, apply_dv=False))


def _check_against_recorded(name: str, storage: Storage, recorded_rows: dict, ours_of) -> int:
    """Compare, file by file, what `ours_of(key, row)` gives with the recorded statistics;
    returns how many fields were compared. Differences must be the table's exception."""
    reason = EXCEPTIONS.get(name)
    config = load_snapshot(storage).table_configuration
    at_add = configurations_at_add(storage) if reason == CONFIGURATION_CHANGED else {}
    compared = 0
    seen_reason = False
    for key, row in recorded_rows.items():
        if not row["stats"]:
            continue
        recorded = parse(row["stats"])
        ours = ours_of(key, row, config)
        compared += len(differences(recorded, {}))  # the recorded leaves
        diffs = differences(recorded, ours)
        if reason is None:
            assert diffs == [], (name, row["path"])
        elif reason == SESSION_TIME_ZONE:
            for d in diffs:
                assert d.recorded.endswith("-08:00") and d.ours.endswith("Z"), d
                assert same_instant(d.recorded, d.ours), d
            seen_reason |= bool(diffs)
        elif reason == CONFIGURATION_CHANGED:
            then = ours_of(key, row, at_add[key])
            assert differences(recorded, then) == [], (name, row["path"])
            if diffs:
                seen_reason = True
                _assert_configuration_difference(name, diffs)
        elif reason == VARIANT_BOUNDS:
            types = _column_types(config)
            assert diffs, row["path"]
            for d in diffs:
                assert d.path[0] in ("minValues", "maxValues") and d.ours is MISSING, d
                assert types[d.path[1:]] == PrimitiveType("variant"), d
            seen_reason = True
    if reason in (SESSION_TIME_ZONE, CONFIGURATION_CHANGED):
        assert seen_reason, f"{name}: the documented difference no longer shows"
    return compared


def _column_types(config) -> dict:
    from delta_ops.layout.statistics import StatsCollector

    return StatsCollector(config).column_types


def _assert_configuration_difference(name: str, diffs) -> None:
    """The specific difference of each table whose configuration changed."""
    if name == "golden__data-skipping-change-stats-collected-across-versions":
        # dataSkippingNumIndexedCols went 2 -> 1 -> 0: now only numRecords is collected.
        assert all(d.ours is MISSING and d.path[0] != "numRecords" for d in diffs), diffs
    elif name == "golden__log-replay-latest-metadata-protocol":
        # col2 was added after these files: now counted as all null, as Spark reads it.
        assert [d.path for d in diffs] == [("nullCount", "col2")], diffs
        assert diffs[0].recorded is MISSING and diffs[0].ours == 10
    elif name == "golden__type-widening":
        # Bounds written in the old types, ours in the widened ones: the same values.
        for d in diffs:
            assert d.path[0] in ("minValues", "maxValues"), d
            if isinstance(d.recorded, str):  # date -> timestamp_ntz
                assert d.ours == d.recorded + "T00:00:00.000", d
            else:
                assert abs(float(d.recorded) - float(d.ours)) < 1e-6, d
    else:
        raise AssertionError(f"no documented configuration change for {name}")


# ---- the tests -------------------------------------------------------------------------------


def test_the_list_is_every_corpus_table_with_stats():
    have = []
    for name in all_corpus_tables():
        try:
            snap = load_snapshot(Storage.for_uri(str(corpus_path(name))))
        except Exception:  # noqa: BLE001 - the deliberately broken tables
            continue
        if any(snap.files.column("stats").to_pylist()):
            have.append(name)
    assert sorted(have) == sorted(TABLES_WITH_STATS)
    assert set(EXCEPTIONS) <= set(TABLES_WITH_STATS)


@pytest.mark.parametrize("name", TABLES_WITH_STATS)
def test_stats_from_the_data_equal_the_recorded(name):
    """Physical statistics of every file, straight from the corpus (read-only)."""
    storage = Storage.for_uri(str(corpus_path(name)))
    recorded = _recorded(storage)
    reason = EXCEPTIONS.get(name)
    if reason == DATA_FILE_MISSING:
        missing = [r for r in recorded.values() if not (corpus_path(name) / r["path"]).exists()]
        assert missing
        config = load_snapshot(storage).table_configuration
        with pytest.raises(StatsReadError, match="cannot read the data file") as info:
            _physical(storage, config, missing[0])
        assert info.value.file == missing[0]["path"]
        return
    if reason == DATA_FILE_RENAMED:
        prefix = "test%25file%25prefix-"

        def ours_of(key, row, config):
            assert row["path"].startswith(prefix)
            assert not (corpus_path(name) / row["path"]).exists()
            return _physical(storage, config, {**row, "path": row["path"][len(prefix):]})
    else:

        def ours_of(key, row, config):
            return _physical(storage, config, row)

    assert _check_against_recorded(name, storage, recorded, ours_of) > 0


@pytest.mark.parametrize("name", TABLES_WITH_STATS)
def test_stripped_stats_recomputed_by_compute_stats_equal_the_recorded(name, table_copy):
    root = table_copy(name)
    storage = Storage.for_uri(str(root))
    recorded = _recorded(storage)
    reason = EXCEPTIONS.get(name)
    if reason == CATALOG_MANAGED:
        with pytest.raises(UnsupportedFeatureError, match="catalogManaged|catalogOwned"):
            compute_stats(storage, dry_run=False)
        return
    strip_stats(storage)
    planned = compute_stats(storage)
    assert planned.files_missing_stats == planned.files_total == len(recorded)
    if reason in (DATA_FILE_MISSING, DATA_FILE_RENAMED, DV_FILE_RENAMED):
        with pytest.raises(StatsReadError) as info:
            compute_stats(storage, dry_run=False)
        assert info.value.file is not None and info.value.table == storage.root
        return
    result = compute_stats(storage, dry_run=False, batch_size=7)
    assert result.files_updated == len(recorded) and result.files_skipped == 0
    assert len(result.versions) == -(-len(recorded) // 7)
    after = _recorded(storage)
    assert set(after) == set(recorded)  # same files, same deletion vectors
    config = load_snapshot(storage).table_configuration
    with_dv = {k for k in after if k[1] is not None}
    for key in with_dv:
        committed = parse(after[key]["stats"])
        assert committed == parse(file_stats(storage, config, after[key]))
        if "tightBounds" in committed:
            assert committed["tightBounds"] is True  # valid rows only: tight

    def ours_of(key, row, cfg):
        if key in with_dv:
            return _physical(storage, cfg, row)
        if cfg is config:
            return parse(after[key]["stats"])
        return parse(file_stats(storage, cfg, row))

    assert _check_against_recorded(name, storage, recorded, ours_of) > 0

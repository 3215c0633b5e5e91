"""The data layout in the Dagster wing: the `optimize` and `stats` assets of each table's
step, `due.optimize_need` from the newest `.crc`, the layout health on `delta_log`, the
`fsck` check with its severities, the `fsck_repair` job, and VACUUM's `keep_versions` policy.
Real Dagster runs (`execute_in_process`), real tables, `deltalake` as the independent reader.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from dagster import AssetKey, AutomationCondition, DagsterInstance, Definitions

from delta_ops.defs import build_definitions
from delta_ops.defs.jobs import TABLE_PARTITIONS
from delta_ops.defs.keys import COMPONENTS, OPTIMIZE, STATS
from delta_ops.defs.overview import fleet_overview
from delta_ops.log import load_snapshot
from delta_ops.maintenance.checksum import read_checksum, write_checksum
from delta_ops.maintenance.due import LayoutThresholds, optimize_need, small_files
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import copy_corpus_table
from delta_ops_tests.support.dagster_runs import md, write_registry
from delta_ops_tests.support.layout_tables import LayoutSpec, build_layout_table, deltalake_rows

#: Six small files in three commits, then deletion vectors on two of them.
SPEC = LayoutSpec(appends=(((5, 0), (5, 0)), ((5, 0), (5, 0)), ((5, 0), (5, 0))),
                  deletes=((0, (0, 1, 2)), (1, (0,))))


def _layout_table(root: Path) -> Storage:
    root.mkdir(parents=True)
    storage = Storage.of(str(root))
    build_layout_table(storage, SPEC)
    return storage


def _run(defs: Definitions, instance: DagsterInstance | None = None, **kwargs):
    return defs.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=instance or DagsterInstance.ephemeral(), raise_on_error=False, **kwargs)


def _events(result) -> dict[str, dict]:
    out = {}
    for event in result.get_asset_materialization_events():
        out[event.event_specific_data.materialization.asset_key.path[1]] = md(event)
    return out


def _checks(result) -> dict[str, object]:
    return {e.event_specific_data.check_name: e.event_specific_data for e in result.all_events
            if e.event_type_value == "ASSET_CHECK_EVALUATION"}


# ---- due: optimize from the .crc --------------------------------------------------------------


def test_optimize_need_reads_the_crc_histogram_and_deletion_vectors(tmp_path):
    storage = _layout_table(tmp_path / "t")
    version = load_snapshot(storage).version
    write_checksum(storage, version=version)
    crc = read_checksum(storage, version)
    assert crc.num_files == 6 and crc.num_deletion_vectors == 2
    assert small_files(crc.file_size_histogram, 1024 * 1024) == 6
    assert small_files(crc.file_size_histogram, 1) == 0
    both = optimize_need(crc, version, LayoutThresholds())
    assert both.due and "6 of 6 files are under" in both.reason
    assert "2 of 6 files carry a deletion vector" in both.reason
    only_dvs = optimize_need(crc, version, LayoutThresholds(small_file_bytes=1))
    assert only_dvs.due and "under" not in only_dvs.reason
    calm = optimize_need(crc, version, LayoutThresholds(small_file_share=1.0,
                                                        min_small_files=7,
                                                        deletion_vector_share=0.5))
    assert not calm.due and "under the thresholds" in calm.reason
    none = optimize_need(None, version, LayoutThresholds())
    assert not none.due and "has no .crc" in none.reason


# ---- the step's shape -------------------------------------------------------------------------


def test_a_table_is_one_step_with_the_layout_assets_and_three_checks(tmp_path):
    reg = write_registry(tmp_path, {"defaults": {"engine": "spark"}, "tables": [
        {"name": "t", "uri": "s3://bucket/t", "optimize": {"cron": "15 1 * * *"},
         "stats": {"cron": None}}]})
    defs = build_definitions(reg)
    Definitions.validate_loadable(defs)
    steps = {a for a in defs.assets if getattr(a, "keys", None)
             and AssetKey(["t", "delta_log"]) in a.keys}
    (step,) = steps
    assert step.node_def.name == "t__maintenance"
    assert {k.path[1] for k in step.keys} == set(COMPONENTS)
    assert {k.name for k in step.check_keys} == {"log_readable", "fsck", "checkpoint_fresh"}
    graph = defs.resolve_asset_graph()
    optimize = graph.get(AssetKey(["t", OPTIMIZE]))
    assert "spark" in optimize.kinds  # it runs on the table's engine
    assert isinstance(optimize.automation_condition, AutomationCondition)
    assert "15 1 * * *" in optimize.automation_condition.get_label()
    assert graph.get(AssetKey(["t", STATS])).automation_condition is None
    assert {p.path[1] for p in optimize.parent_keys} == {"delta_log"}


# ---- optimize and stats in a run --------------------------------------------------------------


def test_optimize_in_a_run_rewrites_small_files_and_purges_deletion_vectors(tmp_path):
    storage = _layout_table(tmp_path / "t")
    rows = sorted(deltalake_rows(storage))
    # A run over every asset leaves OPTIMIZE and stats out (they read every data file)...
    plain = write_registry(tmp_path, {"defaults": {"engine": "local"}, "tables": [
        {"name": "t", "uri": str(tmp_path / "t")}]})
    left_out = _run(build_definitions(plain))
    assert left_out.success and {OPTIMIZE, STATS}.isdisjoint(_events(left_out))
    assert load_snapshot(storage).num_files == 6
    # ... unless the policy puts them in.
    reg = write_registry(tmp_path, {"defaults": {"engine": "local", "optimize": {
        "in_materialize_all": True}, "stats": {"in_materialize_all": True}}, "tables": [
        {"name": "t", "uri": str(tmp_path / "t")}]})
    first = _run(build_definitions(reg))
    assert first.success, [e.step_failure_data for e in first.get_step_failure_events()]
    events = _events(first)
    log = events["delta_log"]
    # The health of the layout, as the run found it.
    assert (log["small_files"], log["deletion_vector_share"]) == (6, round(2 / 6, 4))
    assert log["stats_coverage"] == 1.0
    # The version checksum written earlier in the step says OPTIMIZE is due.
    m = events[OPTIMIZE]
    assert "skipped" not in m and "6 of 6 files are under" in m["due"]
    assert (m["files_before"], m["files_after"]) == (6, 1)
    assert m["bins"] >= 1 and m["bins_committed"] == m["bins"]
    assert m["rows_rewritten"] == 26 and m["rows_deleted"] == 4
    assert m["deletion_vectors_removed"] == 2
    assert m["bytes_before"] > 0 and m["bytes_after"] > 0
    assert isinstance(m["seconds"], float) and m["engine"] == "local"
    assert sorted(deltalake_rows(storage)) == rows  # the same rows for another reader
    snap = load_snapshot(storage)
    assert snap.num_files == 1
    # The next run: one file, no deletion vector, so OPTIMIZE is not due and says why.
    instance = DagsterInstance.ephemeral()
    second = _events(_run(build_definitions(reg), instance))
    assert second["delta_log"]["deletion_vector_share"] == 0.0
    assert second[OPTIMIZE]["skipped"] is True
    assert "not due:" in second[OPTIMIZE]["reason"]
    # The table's history feeds delta_log and the fleet overview: the OPTIMIZE commit.
    (optimized,) = m["versions"]
    assert second["delta_log"]["last_optimize_commit"].startswith(f"v{optimized} ")
    assert second["delta_log"]["last_fsck_commit"] == ""
    overview = fleet_overview(instance, [{"table": "t", "status": "ok"}])
    (row,) = overview.observation.metadata["tables"].value.records
    assert row.data["last_optimize_commit"].startswith(f"v{optimized} ")
    assert row.data["last_optimize"] and row.data["last_stats"]  # materialized then


def test_optimize_dry_run_policy_plans_without_writing(tmp_path):
    storage = _layout_table(tmp_path / "t")
    before = load_snapshot(storage).version
    reg = write_registry(tmp_path, {"defaults": {"engine": "local"}, "tables": [
        {"name": "t", "uri": str(tmp_path / "t"),
         "optimize": {"dry_run": True, "in_materialize_all": True}}]})
    result = _run(build_definitions(reg), asset_selection=[
        AssetKey(["t", "version_checksum"]), AssetKey(["t", OPTIMIZE])])
    m = _events(result)[OPTIMIZE]
    assert m["dry_run"] is True and m["bins"] >= 1 and m["versions"] == []
    after = load_snapshot(storage)
    assert after.version == before and after.num_files == 6


def test_stats_computes_what_the_files_lack_then_is_skipped(tmp_path):
    # A corpus table whose files carry no numRecords statistics.
    root = copy_corpus_table("golden__data-reader-nested-struct", tmp_path / "t")
    rows = sorted(map(str, deltalake_rows_any(root)))
    reg = write_registry(tmp_path, {"defaults": {"engine": "local"}, "tables": [
        {"name": "t", "uri": str(root)}]})
    events = _events(_run(build_definitions(reg), asset_selection=[
        AssetKey(["t", "delta_log"]), AssetKey(["t", STATS])]))
    assert events["delta_log"]["stats_coverage"] < 1.0
    m = events[STATS]
    assert "skipped" not in m and m["files_updated"] == m["files_planned"] > 0
    assert m["dry_run"] is False
    again = _events(_run(build_definitions(reg), asset_selection=[
        AssetKey(["t", "delta_log"]), AssetKey(["t", STATS])]))
    assert again["delta_log"]["stats_coverage"] == 1.0
    assert again[STATS]["skipped"] is True and "have statistics" in again[STATS]["reason"]
    assert sorted(map(str, deltalake_rows_any(root))) == rows


def deltalake_rows_any(root: Path) -> list[dict]:
    from deltalake import DeltaTable

    return DeltaTable(str(root)).to_pyarrow_table().to_pylist()


# ---- fsck: the check and the repair job -------------------------------------------------------


def _data_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.parquet") if "_delta_log" not in p.parts)


def test_fsck_check_fails_as_an_error_on_missing_data_and_warns_on_leftovers(tmp_path):
    hurt = copy_corpus_table("basic_append", tmp_path / "hurt")
    lost = _data_files(hurt)[0]
    lost.unlink()
    litter = copy_corpus_table("basic_append", tmp_path / "litter")
    stray = litter / "part-00000-stray.snappy.parquet"
    stray.write_bytes(_data_files(litter)[0].read_bytes())
    old = time.time() - 30 * 86_400
    os.utime(stray, (old, old))
    reg = write_registry(tmp_path, {"defaults": {"engine": "local"}, "tables": [
        {"name": "hurt", "uri": str(hurt)}, {"name": "litter", "uri": str(litter)},
        {"name": "whole", "uri": str(copy_corpus_table("basic_append", tmp_path / "whole"))},
    ]})
    result = _run(build_definitions(reg), asset_selection=[
        AssetKey([t, "delta_log"]) for t in ("hurt", "litter", "whole")])
    checks = {(e.event_specific_data.asset_key.path[0], e.event_specific_data.check_name):
              e.event_specific_data for e in result.all_events
              if e.event_type_value == "ASSET_CHECK_EVALUATION"}
    bad = checks[("hurt", "fsck")]
    assert not bad.passed and bad.severity.value == "ERROR"
    assert lost.name in bad.description and bad.metadata["num_errors"].value == 1
    assert "missing_file" in bad.metadata["problem_codes"].value
    warn = checks[("litter", "fsck")]
    assert not warn.passed and warn.severity.value == "WARN", warn.description
    assert warn.metadata["num_errors"].value == 0 and stray.name in warn.description
    whole = checks[("whole", "fsck")]
    assert whole.passed and "is whole" in whole.description


def test_fsck_repair_job_is_a_dry_run_until_confirmed(tmp_path):
    import pyarrow.parquet as pq

    root = copy_corpus_table("basic_append", tmp_path / "t")
    total = len(deltalake_rows_any(root))
    lost = _data_files(root)[0]
    lost_rows = pq.read_metadata(lost).num_rows
    lost.unlink()
    before = load_snapshot(Storage.of(str(root))).version
    reg = write_registry(tmp_path, {"defaults": {"engine": "local"}, "tables": [
        {"name": "t", "uri": str(root)}]})
    defs = build_definitions(reg)
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(TABLE_PARTITIONS.name, ["t", "gone"])
    job = defs.resolve_job_def("fsck_repair")
    stale = job.execute_in_process(instance=instance, partition_key="gone", raise_on_error=False)
    (failure,) = stale.get_step_failure_events()
    assert "partition 'gone' is not a registered table (registered: t)" in (
        failure.step_failure_data.user_failure_data.description)
    dry = job.execute_in_process(instance=instance, partition_key="t")
    (observed,) = [md(e) for e in dry.all_events if e.event_type_value == "ASSET_OBSERVATION"]
    assert observed["fsck_repair"] == "dry run" and observed["files_to_remove"] == 1
    assert observed["files_removed"] == 0 and lost.name in observed["removed"]
    assert load_snapshot(Storage.of(str(root))).version == before  # nothing committed
    done = job.execute_in_process(instance=instance, partition_key="t",
                                  run_config={"ops": {"repair_table": {"config": {
                                      "confirm": True}}}})
    (observed,) = [md(e) for e in done.all_events if e.event_type_value == "ASSET_OBSERVATION"]
    assert observed["fsck_repair"] == "committed" and observed["files_removed"] == 1
    assert observed["repair_version"] == before + 1
    log = _events(_run(defs, asset_selection=[AssetKey(["t", "delta_log"])]))["delta_log"]
    assert log["last_fsck_commit"].startswith(f"v{before + 1} ")
    # Another reader reads the repaired table: every row but the lost file's.
    assert len(deltalake_rows_any(root)) == total - lost_rows
    again = _run(defs, asset_selection=[AssetKey(["t", "delta_log"])])
    assert _checks(again)["fsck"].passed


# ---- VACUUM keep_versions -----------------------------------------------------------------------


def _rows_at(root: Path, version: int) -> int:
    """Rows of `version` as `deltalake` reads them (its query engine applies the DVs)."""
    import deltalake
    from deltalake import QueryBuilder

    t = deltalake.DeltaTable(str(root), version=version)
    return QueryBuilder().register("t", t).execute("select id from t").read_all().num_rows


def test_vacuum_keep_versions_keeps_a_version_readable(tmp_path):
    storage = _layout_table(tmp_path / "t")
    kept = load_snapshot(storage).version
    kept_rows = _rows_at(tmp_path / "t", kept)
    reg = write_registry(tmp_path, {"defaults": {"engine": "local"}, "tables": [
        {"name": "t", "uri": str(tmp_path / "t"),
         "optimize": {"in_materialize_all": True},
         "vacuum": {"retention": "0 hours", "force_retention": True,
                    "keep_versions": [kept]}}]})
    defs = build_definitions(reg)
    _run(defs, asset_selection=[AssetKey(["t", "version_checksum"]), AssetKey(["t", OPTIMIZE])])
    assert load_snapshot(storage).num_files == 1 and len(_data_files(tmp_path / "t")) == 7
    vacuumed = _run(defs, asset_selection=[AssetKey(["t", "vacuum"])])
    assert vacuumed.success
    m = _events(vacuumed)["vacuum"]
    # The six files OPTIMIZE replaced are what version `kept` reads: all kept.
    assert m["num_files"] == 0 and len(_data_files(tmp_path / "t")) == 7
    assert _rows_at(tmp_path / "t", kept) == kept_rows == 26


def test_vacuum_without_keep_versions_deletes_the_replaced_files(tmp_path):
    storage = _layout_table(tmp_path / "t")
    reg = write_registry(tmp_path, {"defaults": {"engine": "local"}, "tables": [
        {"name": "t", "uri": str(tmp_path / "t"), "optimize": {"in_materialize_all": True},
         "vacuum": {"retention": "0 hours", "force_retention": True}}]})
    defs = build_definitions(reg)
    _run(defs, asset_selection=[AssetKey(["t", "version_checksum"]), AssetKey(["t", OPTIMIZE])])
    m = _events(_run(defs, asset_selection=[AssetKey(["t", "vacuum"])]))["vacuum"]
    assert m["num_files"] == 6 and len(_data_files(tmp_path / "t")) == 1
    assert load_snapshot(storage).num_files == 1

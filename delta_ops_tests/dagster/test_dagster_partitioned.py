"""The partitioned asset layout (`automation.asset_layout: partitioned`, `delta_ops.defs.fleet`):
nine assets and three checks whatever the fleet's size, one partition per table; the watch
requests ranges of partitions naming their due tables; each table in a run is maintained,
refused or failed on its own, and recorded under its own partition; the crons become
schedules; the overview reads the partitions.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import yaml
from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetKey,
    AssetObservation,
    AssetRecordsFilter,
    DagsterInstance,
    build_schedule_context,
    build_sensor_context,
)

from delta_ops.defs import build_definitions
from delta_ops.defs.fleet import FLEET_STEP, fleet_request, fleet_runs
from delta_ops.defs.keys import COMPONENTS, fleet_key
from delta_ops.defs.overview import OVERVIEW_KEY
from delta_ops.defs.sensors import PARTITIONS_SENSOR, WATCH_SENSOR, runs_in_flight
from delta_ops_tests.support.fleet import numbered_fleet as fleet
from delta_ops_tests.support.fleet import write_table

PARTITIONS = "delta_tables"


def registry(tmp_path: Path, tables: dict[str, Path], automation=None, **defaults) -> Path:
    path = tmp_path / "tables.yaml"
    path.write_text(yaml.safe_dump({
        "defaults": {"engine": "local",
                     "automation": {"asset_layout": "partitioned", **(automation or {})},
                     **defaults},
        "tables": [{"name": n, "uri": str(p)} for n, p in tables.items()],
    }))
    return path


def add_partitions(defs, instance) -> list[str]:
    """What the `delta_tables_partitions` sensor does, through the sensor itself."""
    sensor = defs.resolve_sensor_def(PARTITIONS_SENSOR)
    result = sensor(build_sensor_context(instance=instance, definitions=defs,
                                         resources={"registry": defs.resources["registry"]}))
    for request in result.dynamic_partitions_requests:
        instance.add_dynamic_partitions(request.partitions_def_name, request.partition_keys)
    return instance.get_dynamic_partitions(PARTITIONS)


def tick(defs, instance, cursor=None):
    sensor = defs.resolve_sensor_def(WATCH_SENSOR)
    return sensor(build_sensor_context(instance=instance, cursor=cursor, definitions=defs,
                                       resources={"registry": defs.resources["registry"]}))


def launch(defs, instance, request):
    """A run request of the watch or a schedule, executed in this process."""
    job = defs.resolve_implicit_global_asset_job_def()
    return job.execute_in_process(
        instance=instance, asset_selection=request.asset_selection,
        partition_key=request.partition_key, tags=dict(request.tags),
        run_config=request.run_config or None, raise_on_error=False)


def run_range(defs, instance, partitions, selection=None):
    """One run over the range of `partitions` (a single-run backfill's), in this process."""
    return defs.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=instance, asset_selection=selection,
        tags={"dagster/asset_partition_range_start": partitions[0],
              "dagster/asset_partition_range_end": partitions[-1]},
        raise_on_error=False)


def crc(root: Path, version: int = 11) -> Path:
    return root / "_delta_log" / f"{version:020d}.crc"


def skipped(instance, component: str, table: str) -> bool:
    """Whether the latest materialization of `table`'s partition of `component` is a skip."""
    (record,) = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=fleet_key(component), asset_partitions=[table]),
        limit=1).records
    return record.asset_materialization.metadata.get("skipped") is not None


def test_nine_assets_and_three_checks_whatever_the_fleet(tmp_path):
    small = build_definitions(registry(tmp_path / "a", fleet(tmp_path / "a", 2)))
    large = build_definitions(registry(tmp_path / "b", fleet(tmp_path / "b", 30, commits=2)))
    for defs in (small, large):
        graph = defs.resolve_asset_graph()
        assert set(graph.get_all_asset_keys()) == {fleet_key(c) for c in COMPONENTS} | {
            OVERVIEW_KEY}
        assert {(k.asset_key, k.name) for k in graph.asset_check_keys} == {
            (fleet_key("delta_log"), "log_readable"), (fleet_key("delta_log"), "fsck"),
            (fleet_key("checkpoint"), "checkpoint_fresh"),
            # The fleet's own, which the watch reports without a run.
            (fleet_key("delta_log"), "logs_readable"),
            (fleet_key("checkpoint"), "checkpoints_fresh")}
        assert graph.get(fleet_key("checkpoint")).partitions_def.name == PARTITIONS
        assert graph.get(fleet_key("metadata_cleanup")).parent_keys == {
            fleet_key("checkpoint")}
        # The crons are schedules (none by default), not an automation sensor.
        assert defs.resolve_sensor_def(WATCH_SENSOR) is not None
        assert "delta_tables_automation" not in {s.name for s in defs.sensors}


def test_the_watch_requests_ranges_naming_their_due_tables_and_the_runs_maintain_them(
        tmp_path):
    tables = fleet(tmp_path, 10)
    defs = build_definitions(registry(
        tmp_path, tables, automation={"tables_per_run": 4, "runs_per_tick": 2}))
    instance = DagsterInstance.ephemeral()
    # No partition yet: the tables are watched, none is requested.
    before = tick(defs, instance)
    assert not before.run_requests
    assert add_partitions(defs, instance) == sorted(tables)

    first = tick(defs, instance)
    ranges = [(r.tags["dagster/asset_partition_range_start"],
               r.tags["dagster/asset_partition_range_end"],
               r.run_config["ops"][FLEET_STEP]["config"]["tables"]) for r in first.run_requests]
    assert ranges == [("t00", "t03", ["t00", "t01", "t02", "t03"]),
                      ("t04", "t07", ["t04", "t05", "t06", "t07"])]
    assert all(set(r.asset_selection) == {fleet_key("checkpoint"), fleet_key("version_checksum")}
               and r.asset_check_keys == [] for r in first.run_requests)
    # The watch's events are the partitions' events.
    observed = {e.partition for e in first.asset_events
                if isinstance(e, AssetObservation) and e.asset_key == fleet_key("delta_log")}
    assert observed == set(tables)
    # Checks: the fleet's, not the partitions' (see the next test but one).
    checks = {e.check_name: e for e in first.asset_events if isinstance(e, AssetCheckEvaluation)}
    assert set(checks) == {"logs_readable", "checkpoints_fresh"}
    assert checks["logs_readable"].passed and checks["logs_readable"].partition is None
    assert checks["logs_readable"].description == "all 10 tables"
    stale = checks["checkpoints_fresh"]
    assert not stale.passed and stale.severity.value == "WARN"
    assert stale.metadata["num_failing"].value == 10

    for request in first.run_requests:
        assert launch(defs, instance, request).success
    for name, root in tables.items():
        assert crc(root).exists() == (name < "t08"), name
    assert instance.get_materialized_partitions(fleet_key("version_checksum")) == {
        f"t{i:02d}" for i in range(8)}
    # The rest at the next tick; then nothing.
    second = tick(defs, instance, first.cursor)
    (rest,) = second.run_requests
    assert rest.run_config["ops"][FLEET_STEP]["config"]["tables"] == ["t08", "t09"]
    assert launch(defs, instance, rest).success
    assert all(crc(root).exists() for root in tables.values())
    assert not tick(defs, instance, second.cursor).run_requests


def test_a_run_maintains_only_the_tables_its_config_names(tmp_path):
    tables = fleet(tmp_path, 4)
    defs = build_definitions(registry(tmp_path, tables))
    instance = DagsterInstance.ephemeral()
    add_partitions(defs, instance)
    (run,) = fleet_runs(
        [type("D", (), {"name": n, "components": ("version_checksum",), "own_run": False,
                        "version": 11})() for n in ("t00", "t03")],
        instance.get_dynamic_partitions(PARTITIONS), 250)
    assert (run.first, run.last, run.tables) == ("t00", "t03", ("t00", "t03"))
    result = launch(defs, instance, fleet_request(run))
    assert result.success
    assert [crc(tables[n]).exists() for n in sorted(tables)] == [True, False, False, True]
    # Every partition of the range is recorded: the others as skipped, unread.
    assert instance.get_materialized_partitions(fleet_key("version_checksum")) == set(tables)
    assert skipped(instance, "version_checksum", "t01")
    assert not skipped(instance, "version_checksum", "t00")


def test_a_failing_table_fails_the_run_once_and_only_its_own_partition(tmp_path):
    tables = fleet(tmp_path, 3)
    (tables["t01"] / "_delta_log" / f"{5:020d}.json").write_text('{"add": {"path": "x", \n')
    defs = build_definitions(registry(tmp_path, tables))
    instance = DagsterInstance.ephemeral()
    partitions = add_partitions(defs, instance)
    result = run_range(defs, instance, partitions, [fleet_key("version_checksum")])
    assert not result.success
    (failure,) = result.get_step_failure_events()
    text = failure.step_failure_data.error.message
    assert "t01" in text and "00000000000000000005.json" in text
    assert instance.get_materialized_partitions(fleet_key("version_checksum")) == {"t00", "t02"}
    assert crc(tables["t00"]).exists() and crc(tables["t02"]).exists()
    assert not crc(tables["t01"]).exists()


def test_a_corrupt_table_fails_the_fleets_logs_readable_and_the_overview_lists_it(
        tmp_path):
    tables = fleet(tmp_path, 3)
    (tables["t02"] / "_delta_log" / f"{7:020d}.json").write_text("{not json\n")
    defs = build_definitions(registry(tmp_path, tables))
    instance = DagsterInstance.ephemeral()
    add_partitions(defs, instance)
    first = tick(defs, instance)
    (broken,) = [e for e in first.asset_events if isinstance(e, AssetCheckEvaluation)
                 and e.check_name == "logs_readable"]
    assert not broken.passed and broken.asset_key == fleet_key("delta_log")
    assert broken.description.startswith("1 of 3 tables: t02: cannot read the log: "
                                         "_delta_log/00000000000000000007.json")
    assert list(broken.metadata["failing"].value) == ["t02"]
    assert all("t02" not in r.run_config["ops"][FLEET_STEP]["config"]["tables"]
               for r in first.run_requests)
    (overview,) = [e for e in first.asset_events if e.asset_key == OVERVIEW_KEY]
    rows = {r.data["table"]: r.data for r in overview.metadata["tables"].value.records}
    assert list(rows)[0] == "t02" and "00000000000000000007.json" in rows["t02"]["attention"]

    # A run's own check results are read back by partition: the overview names the check.
    result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=instance, asset_selection=[fleet_key("delta_log")], partition_key="t02",
        raise_on_error=False)
    assert not result.success
    (evaluation,) = [e.event_specific_data for e in result.all_events
                     if e.event_type_value == "ASSET_CHECK_EVALUATION"
                     and e.event_specific_data.check_name == "log_readable"]
    assert (evaluation.partition, evaluation.passed) == ("t02", False)
    later = tick(defs, instance, first.cursor)
    (overview,) = [e for e in later.asset_events if e.asset_key == OVERVIEW_KEY]
    rows = {r.data["table"]: r.data for r in overview.metadata["tables"].value.records}
    assert "log_readable" in rows["t02"]["failing_checks"]
    assert rows["t00"]["failing_checks"] == ""


def test_destructive_components_stay_out_of_a_range_run_over_everything(tmp_path):
    tables = fleet(tmp_path, 2)
    defs = build_definitions(registry(tmp_path, tables))
    instance = DagsterInstance.ephemeral()
    partitions = add_partitions(defs, instance)
    result = run_range(defs, instance, partitions)
    assert result.success
    assert instance.get_materialized_partitions(fleet_key("checkpoint")) == set(tables)
    # Recorded as skipped, with why: a failed range run would otherwise mark them failed.
    for component in ("vacuum", "metadata_cleanup"):
        for name in tables:
            (record,) = instance.fetch_materializations(AssetRecordsFilter(
                asset_key=fleet_key(component), asset_partitions=[name]), limit=1).records
            metadata = record.asset_materialization.metadata
            assert metadata["skipped"].value is True
            assert f"{component} deletes files" in metadata["reason"].value
    assert any("vacuum deletes files" in (e.message or "")
               for e in instance.all_logs(result.run_id))


def test_an_unexpected_error_in_one_table_leaves_the_others_of_the_range_maintained(
        tmp_path, monkeypatch):
    import delta_ops.defs.tables as tables_module

    tables = fleet(tmp_path, 3)
    defs = build_definitions(registry(tmp_path, tables))
    instance = DagsterInstance.ephemeral()
    partitions = add_partitions(defs, instance)
    real = tables_module.run_component

    def buggy(run, component, config, log):  # a bug, not a refusal
        if run.name == "t01":
            raise KeyError("a bug")
        return real(run, component, config, log)

    monkeypatch.setattr(tables_module, "run_component", buggy)
    result = run_range(defs, instance, partitions, [fleet_key("version_checksum")])
    assert not result.success
    (failure,) = result.get_step_failure_events()
    assert "t01: KeyError" in failure.step_failure_data.error.message
    assert [crc(tables[n]).exists() for n in sorted(tables)] == [True, False, True]


def test_each_cron_becomes_a_schedule_of_its_tables(tmp_path):
    tables = fleet(tmp_path, 3, commits=2)
    path = tmp_path / "tables.yaml"
    path.write_text(yaml.safe_dump({
        "defaults": {"engine": "local", "automation": {"asset_layout": "partitioned"},
                     "vacuum": {"cron": "0 3 * * 0"}},
        "tables": [{"name": "t00", "uri": str(tables["t00"])},
                   {"name": "t01", "uri": str(tables["t01"]), "vacuum": {"cron": "0 4 * * *"}},
                   {"name": "t02", "uri": str(tables["t02"])}],
    }))
    defs = build_definitions(path)
    schedules = {s.cron_schedule: s for s in defs.schedules
                 if s.name.startswith("delta_tables_vacuum_")}
    assert set(schedules) == {"0 3 * * 0", "0 4 * * *"}
    # Metadata cleanup's default cron is one schedule of every table.
    assert len([s for s in defs.schedules
                if s.name.startswith("delta_tables_metadata_cleanup_")]) == 1
    # A schedule's context needs an instance it can refer to: the test's DAGSTER_HOME.
    instance = DagsterInstance.get()
    add_partitions(defs, instance)
    context = build_schedule_context(
        instance=instance, scheduled_execution_time=dt.datetime(2026, 11, 29, 3, tzinfo=dt.UTC),
        resources={"registry": defs.resources["registry"]})
    (request,) = schedules["0 3 * * 0"].evaluate_tick(context).run_requests
    assert request.asset_selection == [fleet_key("vacuum")]
    assert request.run_config["ops"][FLEET_STEP]["config"]["tables"] == ["t00", "t02"]
    # A run of only VACUUM is a deliberate pick: it runs (and finds nothing to delete).
    assert launch(defs, instance, request).success
    assert instance.get_materialized_partitions(fleet_key("vacuum")) == {"t00", "t01", "t02"}
    assert skipped(instance, "vacuum", "t01")


def test_runs_in_flight_are_read_from_partitions_and_ranges(tmp_path):
    tables = fleet(tmp_path, 4, commits=2)
    defs = build_definitions(registry(tmp_path, tables))
    instance = DagsterInstance.ephemeral()
    partitions = add_partitions(defs, instance)
    job = defs.resolve_implicit_global_asset_job_def()
    instance.create_run_for_job(
        job_def=job, asset_selection=frozenset({fleet_key("checkpoint")}),
        tags={"dagster/asset_partition_range_start": "t01",
              "dagster/asset_partition_range_end": "t02"})
    assert runs_in_flight(instance, list(tables), partitions).tables == {"t01", "t02"}
    instance.create_run_for_job(
        job_def=job, asset_selection=frozenset({fleet_key("checkpoint")}),
        tags={"dagster/partition": "t03"})
    assert runs_in_flight(instance, list(tables), partitions).tables == {"t01", "t02", "t03"}
    first = tick(defs, instance)
    (request,) = first.run_requests
    assert request.partition_key == "t00"
    assert AssetKey(["t00", "checkpoint"]) not in request.asset_selection


def test_a_table_discovered_after_load_is_maintained_without_a_reload(tmp_path):
    from dagster import Definitions

    from delta_ops.defs import definitions_kwargs
    from delta_ops.defs.sources import RegistrySource, refresh_discovery

    write_table(tmp_path / "lake" / "sales" / "orders", 1, 12)
    source = RegistrySource(
        base_dir=str(tmp_path),
        defaults={"engine": "local", "automation": {"asset_layout": "partitioned"}},
        discover=[{"prefix": str(tmp_path / "lake"), "max_depth": 2}],
        discovery_cache="cache.json")
    refresh_discovery(source)
    defs = Definitions(**definitions_kwargs(source=source))
    instance = DagsterInstance.ephemeral()
    assert add_partitions(defs, instance) == ["sales__orders"]
    write_table(tmp_path / "lake" / "sales" / "returns", 2, 12)
    discovery = defs.resolve_sensor_def("delta_tables_discovery")
    found = discovery(build_sensor_context(instance=instance, definitions=defs))
    assert found.skip_message == ("2 discovered tables; 1 new: sales__returns; their "
                                  "partitions follow at the next tick of delta_tables_partitions")
    # The same definitions: the partitions sensor adds it, the watch requests it.
    assert add_partitions(defs, instance) == ["sales__orders", "sales__returns"]
    (request,) = tick(defs, instance).run_requests
    assert request.run_config["ops"][FLEET_STEP]["config"]["tables"] == [
        "sales__orders", "sales__returns"]
    assert launch(defs, instance, request).success
    assert crc(tmp_path / "lake" / "sales" / "returns").exists()


def test_the_backfill_and_repair_jobs_record_under_the_tables_partition(tmp_path):
    from delta_ops_tests.support.corpus import copy_corpus_table

    root = copy_corpus_table("golden__dv-partitioned-with-checkpoint", tmp_path / "t")
    defs = build_definitions(registry(tmp_path, {"t": root}))
    instance = DagsterInstance.ephemeral()
    add_partitions(defs, instance)
    config = {"batch_size": 6, "confirm_protocol_upgrade": True}
    backfill = defs.resolve_job_def("row_tracking_backfill").execute_in_process(
        instance=instance, partition_key="t",
        run_config={"ops": {"backfill_row_tracking": {"config": config}}})
    assert backfill.success
    (mat,) = [e.event_specific_data.materialization
              for e in backfill.get_asset_materialization_events()]
    assert (mat.asset_key, mat.partition) == (fleet_key("row_tracking"), "t")
    assert mat.metadata["files_backfilled"].value > 0
    repair = defs.resolve_job_def("fsck_repair").execute_in_process(
        instance=instance, partition_key="t")
    assert repair.success
    (observed,) = [e.event_specific_data.asset_observation for e in repair.all_events
                   if e.event_type_value == "ASSET_OBSERVATION"]
    assert (observed.asset_key, observed.partition) == (fleet_key("delta_log"), "t")
    assert observed.metadata["fsck_repair"].value == "dry run"


def test_a_component_in_the_partitioned_layout_passes_dg_check_without_a_warning(tmp_path):
    import os
    import subprocess
    import sys

    from delta_ops_tests.support.corpus import REPO_ROOT
    from delta_ops_tests.support.dg_project import new_project, write_component

    tables = fleet(tmp_path, 2, commits=2)
    project = new_project(tmp_path / "proj", "part_proj")
    write_component(project, "part_proj", {
        "defaults": {"engine": "local", "automation": {"asset_layout": "partitioned"}},
        "tables": [{"name": n, "uri": str(p)} for n, p in tables.items()],
    })
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(project), str(REPO_ROOT)]))
    env.pop("DELTA_OPS_REGISTRY", None)
    check = subprocess.run([str(Path(sys.executable).parent / "dg"), "check", "defs"],
                           cwd=project, env=env, capture_output=True, text=True, timeout=180)
    assert check.returncode == 0, check.stdout[-2000:] + check.stderr[-2000:]
    assert "Warning" not in check.stdout + check.stderr, check.stderr[-2000:]
    listed = subprocess.run([str(Path(sys.executable).parent / "dg"), "list", "defs", "--json"],
                            cwd=project, env=env, capture_output=True, text=True, timeout=180)
    assert listed.returncode == 0, listed.stderr[-2000:]
    keys = {a["asset_key"] for a in json.loads(listed.stdout)["assets"]}
    assert keys == {f"delta_tables/{c}" for c in COMPONENTS} | {"delta_ops_fleet/overview"}


def test_a_large_fleet_in_the_per_table_layout_is_told_to_partition(tmp_path, caplog):
    from delta_ops.defs import PER_TABLE_ADVICE

    def load(n: int, **automation) -> list[str]:
        path = tmp_path / f"r{n}.yaml"
        path.write_text(yaml.safe_dump({
            "defaults": {"engine": "local", "automation": automation},
            "tables": [{"name": f"t{i}", "uri": str(tmp_path / f"t{i}")} for i in range(n)]}))
        caplog.clear()
        build_definitions(path)
        return [r.getMessage() for r in caplog.records if r.name == "delta_ops"]

    assert not load(PER_TABLE_ADVICE)
    (advice,) = load(PER_TABLE_ADVICE + 1)
    assert advice.startswith(f"{PER_TABLE_ADVICE + 1} tables in the per_table asset layout")
    assert "asset_layout: partitioned" in advice
    assert not load(PER_TABLE_ADVICE + 1, asset_layout="partitioned")


def test_the_watch_s_check_results_are_stored_tick_after_tick(tmp_path):
    """What the daemon does with a tick's events: store each through the instance. Dagster
    (1.13) stores a partition's check result without a run only once (its unique key is the
    check, the empty run id and the partition), so partitioned results from the watch failed
    every tick after the first that changed one, for good; the fleet's checks do not."""
    tables = fleet(tmp_path, 2, commits=3)
    defs = build_definitions(registry(tmp_path, tables))
    instance = DagsterInstance.get()
    add_partitions(defs, instance)
    cursor = None
    for version in (3, 4, 5):
        result = tick(defs, instance, cursor)
        cursor = result.cursor
        for event in result.asset_events:
            instance.report_runless_asset_event(event)
        if version == 4:  # commit 4 is broken
            (tables["t01"] / "_delta_log" / f"{version:020d}.json").write_text("{not json\n")
        else:
            (tables["t01"] / "_delta_log" / f"{version:020d}.json").write_text(
                json.dumps({"commitInfo": {"timestamp": version}}) + "\n")
    records = instance.event_log_storage.get_latest_asset_check_execution_by_key(
        [AssetCheckKey(fleet_key("delta_log"), "logs_readable")])
    (record,) = records.values()
    assert record.status.value == "FAILED"  # the third tick saw the broken commit 4



def test_a_table_an_earlier_run_still_maintains_is_left_to_it(tmp_path):
    tables = fleet(tmp_path, 3)
    defs = build_definitions(registry(tmp_path, tables))
    instance = DagsterInstance.ephemeral()
    partitions = add_partitions(defs, instance)
    job = defs.resolve_implicit_global_asset_job_def()
    # A backfill's run over t00..t01, created first and not finished.
    earlier = instance.create_run_for_job(
        job_def=job, asset_selection=frozenset({fleet_key("version_checksum")}),
        tags={"dagster/asset_partition_range_start": "t00",
              "dagster/asset_partition_range_end": "t01"})
    result = run_range(defs, instance, partitions, [fleet_key("version_checksum")])
    assert result.success
    assert [crc(tables[n]).exists() for n in sorted(tables)] == [False, False, True]
    (record,) = instance.fetch_materializations(AssetRecordsFilter(
        asset_key=fleet_key("version_checksum"), asset_partitions=["t00"]), limit=1).records
    assert record.asset_materialization.metadata["reason"].value.startswith(
        f"left to run {earlier.run_id}")
    # Once that run is over, a new run maintains them.
    instance.report_run_canceled(earlier)
    assert run_range(defs, instance, partitions, [fleet_key("version_checksum")]).success
    assert all(crc(root).exists() for root in tables.values())

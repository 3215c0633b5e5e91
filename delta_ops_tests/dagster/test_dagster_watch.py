"""The watch sensor at fleet scale and health where the user looks (issue 23): due work in a
bounded number of runs of several tables, never two runs for a table at once; a log the
watch cannot read fails that table's `log_readable` check at once, naming the file, and the
fleet overview lists it; destructive components stay out of a run over everything unless
confirmed; the launchpad config is readable.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import yaml
from dagster import (
    AssetCheckEvaluation,
    AssetKey,
    AssetObservation,
    DagsterInstance,
    build_sensor_context,
)

from delta_ops.defs import build_definitions
from delta_ops.defs.overview import OVERVIEW_KEY
from delta_ops.defs.sensors import WATCH_SENSOR, runs_in_flight
from delta_ops.maintenance.checkpoint import write_checkpoint
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import copy_corpus_table
from delta_ops_tests.support.fleet import numbered_fleet as fleet
from delta_ops_tests.support.fleet import write_table

DAY = 86_400


def registry(tmp_path: Path, tables: dict[str, Path], **defaults) -> Path:
    path = tmp_path / "tables.yaml"
    path.write_text(yaml.safe_dump({
        "defaults": {"engine": "local", **defaults},
        "tables": [{"name": n, "uri": str(p)} for n, p in tables.items()],
    }))
    return path


def tick(defs, instance, cursor=None):
    sensor = defs.resolve_sensor_def(WATCH_SENSOR)
    return sensor(build_sensor_context(instance=instance, cursor=cursor, definitions=defs,
                                       resources={"registry": defs.resources["registry"]}))


def checks_of(result, name: str) -> dict[str, AssetCheckEvaluation]:
    return {e.asset_key.path[0]: e for e in result.asset_events
            if isinstance(e, AssetCheckEvaluation) and e.check_name == name}


def overview_rows(result) -> dict[str, dict]:
    (obs,) = [e for e in result.asset_events
              if isinstance(e, AssetObservation) and e.asset_key == OVERVIEW_KEY]
    return {r.data["table"]: r.data for r in obs.metadata["tables"].value.records}


# ---- health where the user looks -------------------------------------------------------------


def test_a_corrupt_commit_fails_log_readable_from_the_watch_alone(tmp_path):
    tables = fleet(tmp_path, 3)
    bad = tables["t01"] / "_delta_log" / f"{5:020d}.json"
    bad.write_text('{"add": {"path": "x", \n')
    defs = build_definitions(registry(tmp_path, tables))
    instance = DagsterInstance.ephemeral()
    first = tick(defs, instance)
    readable = checks_of(first, "log_readable")
    assert readable["t00"].passed and readable["t02"].passed
    broken = readable["t01"]
    assert not broken.passed and broken.severity.value == "ERROR"
    assert "_delta_log/00000000000000000005.json" in broken.description
    assert broken.description.startswith("t01: cannot read the log: ")
    assert broken.metadata["file"].value == "_delta_log/00000000000000000005.json"
    # The broken table is neither observed as healthy nor maintained.
    observed = {e.asset_key.path[0] for e in first.asset_events
                if isinstance(e, AssetObservation) and e.asset_key != OVERVIEW_KEY}
    assert observed == {"t00", "t02"}
    assert "t01" not in {k.path[0] for r in first.run_requests for k in r.asset_selection}
    # The overview puts it first, with why.
    rows = overview_rows(first)
    assert list(rows)[0] == "t01" and rows["t01"]["status"] == "error"
    assert "00000000000000000005.json" in rows["t01"]["attention"]
    assert rows["t00"]["log_depth"] == 12 and rows["t00"]["due"] == (
        "checkpoint, version_checksum")

    # Not reported again while nothing changes; reported passing once repaired.
    quiet = tick(defs, instance, first.cursor)
    assert not checks_of(quiet, "log_readable")
    bad.write_text(json.dumps({"commitInfo": {"timestamp": 1}}) + "\n")
    repaired = tick(defs, instance, quiet.cursor)
    assert checks_of(repaired, "log_readable")["t01"].passed


def test_a_broken_last_checkpoint_and_a_missing_table_fail_log_readable(tmp_path):
    tables = fleet(tmp_path, 1)
    write_checkpoint(Storage.for_uri(str(tables["t00"])))
    (tables["t00"] / "_delta_log" / "_last_checkpoint").write_text("{broken")
    tables["gone"] = tmp_path / "lake" / "gone"
    defs = build_definitions(registry(tmp_path, tables))
    result = tick(defs, DagsterInstance.ephemeral())
    readable = checks_of(result, "log_readable")
    assert not readable["t00"].passed
    assert readable["t00"].metadata["file"].value == "_delta_log/_last_checkpoint"
    assert "not valid JSON" in readable["t00"].description
    gone = readable["gone"]
    assert not gone.passed and gone.description.startswith("gone does not exist")
    assert overview_rows(result)["gone"]["status"] == "missing"


def test_the_watch_observation_carries_files_bytes_and_schema_from_the_crc(tmp_path):
    root = copy_corpus_table("golden__checkpoint", tmp_path / "t")
    defs = build_definitions(registry(tmp_path, {"t": root}))
    instance = DagsterInstance.ephemeral()
    first = tick(defs, instance)
    run = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=instance, asset_selection=[AssetKey(["t", "version_checksum"])])
    assert run.success
    second = tick(defs, instance, first.cursor)
    (obs,) = [e for e in second.asset_events
              if isinstance(e, AssetObservation) and e.asset_key == AssetKey(["t", "delta_log"])]
    crc = json.loads((root / "_delta_log" / "00000000000000000014.crc").read_text())
    assert obs.metadata["num_files"].value == crc["numFiles"]
    assert obs.metadata["size_bytes"].value == crc["tableSizeBytes"]
    columns = obs.metadata["dagster/column_schema"].value.columns
    assert [c.name for c in columns] == [
        f["name"] for f in json.loads(crc["metadata"]["schemaString"])["fields"]]
    # The overview shows when the checksum last ran.
    assert overview_rows(second)["t"]["last_version_checksum"]


# ---- fleet-sized automation ------------------------------------------------------------------


def test_due_tables_become_a_bounded_number_of_runs_of_several_tables(tmp_path):
    tables = fleet(tmp_path, 10)
    defs = build_definitions(registry(
        tmp_path, tables, automation={"tables_per_run": 3, "runs_per_tick": 2}))
    instance = DagsterInstance.ephemeral()
    start = time.monotonic()
    first = tick(defs, instance)
    assert time.monotonic() - start < 10
    assert [[k.path[0] for k in r.asset_selection][::2] for r in first.run_requests] == [
        ["t00", "t01", "t02"], ["t03", "t04", "t05"]]
    assert [r.tags["delta_ops/tables"] for r in first.run_requests] == ["3", "3"]
    # The due work only: the watch reports log_readable and checkpoint_fresh itself.
    assert all(r.asset_check_keys == [] for r in first.run_requests)
    assert "4 due tables wait for a later tick" in first.skip_reason.skip_message \
        if first.skip_reason else True
    # The next tick asks for the rest, in a run of the remaining three and one of one.
    second = tick(defs, instance, first.cursor)
    assert [[k.path[0] for k in r.asset_selection][::2] for r in second.run_requests] == [
        ["t06", "t07", "t08"], ["t09"]]
    third = tick(defs, instance, second.cursor)
    assert not third.run_requests


def test_a_table_in_a_queued_run_is_not_requested_and_in_flight_runs_cap_new_ones(tmp_path):
    tables = fleet(tmp_path, 4)
    defs = build_definitions(registry(tmp_path, tables,
                                      automation={"max_runs_in_flight": 2}))
    instance = DagsterInstance.ephemeral()
    job = defs.resolve_implicit_global_asset_job_def()
    # A run the UI launched for t00, not started yet: t00 is in flight.
    instance.create_run_for_job(job_def=job, asset_selection=frozenset(
        {AssetKey(["t00", "checkpoint"])}))
    assert runs_in_flight(instance, list(tables)).tables == {"t00"}
    first = tick(defs, instance)
    (request,) = first.run_requests
    assert {k.path[0] for k in request.asset_selection} == {"t01", "t02", "t03"}
    assert overview_rows(first)["t00"]["status"] == "in flight"
    # Two runs of the watch queued: the cap is reached, nothing more is asked for.
    for _ in range(2):
        instance.create_run_for_job(job_def=job, tags={"dagster/sensor_name": WATCH_SENSOR},
                                    asset_selection=frozenset({AssetKey(["t01", "checkpoint"])}))
    assert runs_in_flight(instance, list(tables)).watch_runs == 2
    fresh = tick(defs, instance)
    assert not fresh.run_requests


def test_a_table_in_a_repair_or_backfill_run_is_in_flight(tmp_path):
    """The `fsck_repair` and `row_tracking_backfill` jobs are partitioned by table; a run of
    either maintains its partition's table. Before, the watch did not count them and asked
    for a run of that table beside one."""
    tables = fleet(tmp_path, 3)
    defs = build_definitions(registry(tmp_path, tables))
    instance = DagsterInstance.ephemeral()
    for name, table in (("fsck_repair", "t00"), ("row_tracking_backfill", "t01")):
        instance.create_run_for_job(job_def=defs.resolve_job_def(name),
                                    tags={"dagster/partition": table})
    assert runs_in_flight(instance, list(tables)).tables == {"t00", "t01"}
    (request,) = tick(defs, instance).run_requests
    assert {k.path[0] for k in request.asset_selection} == {"t02"}


def test_a_table_with_own_run_is_maintained_alone(tmp_path):
    tables = fleet(tmp_path, 3)
    path = registry(tmp_path, tables)
    data = yaml.safe_load(path.read_text())
    data["tables"][1]["automation"] = {"own_run": True}
    path.write_text(yaml.safe_dump(data))
    result = tick(build_definitions(path), DagsterInstance.ephemeral())
    runs = [sorted({k.path[0] for k in r.asset_selection}) for r in result.run_requests]
    assert runs == [["t00", "t02"], ["t01"]] or runs == [["t00", "t02"], ["t01"]][::-1]
    alone = next(r for r in result.run_requests if r.tags.get("delta_ops/table") == "t01")
    assert alone.run_key == "t01:11:checkpoint+version_checksum"


# ---- a fleet that reads well -----------------------------------------------------------------


def _aged(tmp_path: Path) -> Path:
    root = copy_corpus_table(
        "golden__data-skipping-change-stats-collected-across-versions", tmp_path / "t")
    old = time.time() - 30 * DAY
    for path in root.rglob("*"):
        if path.is_file() and "_delta_log" not in path.parts:
            os.utime(path, (old, old))
    return root


def _vacuumed(result) -> bool:
    return any(e.event_specific_data.materialization.asset_key == AssetKey(["t", "vacuum"])
               for e in result.get_asset_materialization_events())


def test_vacuum_stays_out_of_a_run_over_everything_unless_confirmed(tmp_path):
    root = _aged(tmp_path)
    before = sorted(p.name for p in root.rglob("*.parquet"))
    defs = build_definitions(registry(tmp_path, {"t": root}))
    job = defs.resolve_implicit_global_asset_job_def()
    instance = DagsterInstance.ephemeral()
    everything = job.execute_in_process(instance=instance)
    assert everything.success and not _vacuumed(everything)
    assert sorted(p.name for p in root.rglob("*.parquet")) == before
    assert any("vacuum deletes files" in e.user_message
               for e in instance.all_logs(everything.run_id))
    # A run selecting VACUUM alone is a deliberate pick; so is a confirmed run.
    alone = job.execute_in_process(instance=DagsterInstance.ephemeral(),
                                   asset_selection=[AssetKey(["t", "vacuum"])])
    assert alone.success and _vacuumed(alone)
    confirmed = job.execute_in_process(
        instance=DagsterInstance.ephemeral(),
        run_config={"ops": {"t__maintenance": {"config": {"confirm_deletes": True}}}})
    assert confirmed.success and _vacuumed(confirmed)


def test_no_op_components_materialize_marked_skipped(tmp_path):
    root = copy_corpus_table("golden__checkpoint", tmp_path / "t")
    defs = build_definitions(registry(tmp_path, {"t": root}))
    result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=DagsterInstance.ephemeral(), asset_selection=[
            AssetKey(["t", "log_compaction"]), AssetKey(["t", "row_tracking"])])
    done = {e.event_specific_data.materialization.asset_key.path[1]:
            e.event_specific_data.materialization.metadata
            for e in result.get_asset_materialization_events()}
    assert set(done) == {"log_compaction", "row_tracking"}
    for metadata in done.values():
        assert metadata["skipped"].value is True and metadata["reason"].value


def test_the_launchpad_shows_the_component_file_not_a_json_string(tmp_path):
    from delta_ops.defs import definitions_kwargs
    from delta_ops.defs.sources import RegistrySource

    root = copy_corpus_table("golden__checkpoint", tmp_path / "t")
    source = RegistrySource(base_dir=str(tmp_path), origin=str(tmp_path / "defs" / "defs.yaml"),
                            tables=[{"name": "t", "uri": str(root)}])
    resource = definitions_kwargs(source=source)["resources"]["registry"]
    assert resource.component == "defs/defs.yaml" and resource.source is None
    assert resource.load().names == ["t"]


def test_a_table_discovered_after_load_waits_for_a_reload_and_the_ui_says_so(tmp_path):
    from dagster import Definitions

    from delta_ops.defs import definitions_kwargs
    from delta_ops.defs.sources import RegistrySource, refresh_discovery

    write_table(tmp_path / "lake" / "sales" / "orders", 1, 12)
    source = RegistrySource(base_dir=str(tmp_path), defaults={"engine": "local"},
                            discover=[{"prefix": str(tmp_path / "lake"), "max_depth": 2}],
                            discovery_cache="cache.json")
    refresh_discovery(source)
    defs = Definitions(**definitions_kwargs(source=source))
    write_table(tmp_path / "lake" / "sales" / "returns", 2, 12)
    discovery = defs.resolve_sensor_def("delta_tables_discovery")
    found = discovery(build_sensor_context(instance=DagsterInstance.ephemeral(),
                                           definitions=defs))
    message = found.skip_message if hasattr(found, "skip_message") else \
        found.skip_reason.skip_message
    assert message.startswith("2 discovered tables; 1 new: sales__returns; reload the code "
                              "location (Deployment → Reload)")
    result = tick(defs, DagsterInstance.ephemeral())
    requested = {k.path[0] for r in result.run_requests for k in r.asset_selection}
    assert requested == {"sales__orders"}  # the new table has no assets to select yet
    row = overview_rows(result)["sales__returns"]
    assert row["status"] == "not loaded" and "reload it" in row["attention"]

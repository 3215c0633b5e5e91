"""The code location as a `dg` project: `DeltaMaintenanceComponent` scaffolded into a fresh
project and loaded, tables listed in `defs.yaml`, an invalid entry failing only its own
table's assets, tables discovered under a prefix through the cache the discovery sensor
writes, and `dg check defs` / `dg list defs` on this repository. Issue 16.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from dagster import (
    AssetKey,
    AssetObservation,
    DagsterInstance,
    Definitions,
    SkipReason,
    build_sensor_context,
    load_from_defs_folder,
)

from delta_ops.defs.overview import OVERVIEW_KEY
from delta_ops.defs.sources import RegistrySource, assemble_registry, read_cache
from delta_ops_tests.support.corpus import REPO_ROOT, copy_corpus_table
from delta_ops_tests.support.dg_project import new_project, write_component

DG = str(Path(sys.executable).parent / "dg")


@pytest.fixture
def make_project(monkeypatch):
    """Builds an empty dg project, importable in this process for the test's duration."""

    def make(root: Path, name: str) -> Path:
        project = new_project(root, name)
        monkeypatch.syspath_prepend(str(project))
        return project

    return make


def dg_env(*paths: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [*map(str, paths), str(REPO_ROOT), env.get("PYTHONPATH", "")]
    )
    env.pop("DELTA_OPS_REGISTRY", None)
    return env


def load(project: Path) -> Definitions:
    return load_from_defs_folder(path_within_project=project)


def materialize_all(defs: Definitions, instance: DagsterInstance | None = None):
    instance = instance or DagsterInstance.ephemeral()
    result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=instance, raise_on_error=False
    )
    done = {tuple(e.event_specific_data.materialization.asset_key.path)
            for e in result.get_asset_materialization_events()}
    failed = {
        tuple(e.step_key.rsplit("__", 1)): e.step_failure_data.user_failure_data
        for e in result.get_step_failure_events()
    }
    return result, done, failed


def test_scaffolded_component_loads_and_maintains_its_table(tmp_path, make_project):
    project = make_project(tmp_path / "proj", "scaffolded_proj")
    root = copy_corpus_table("golden__checkpoint", tmp_path / "tables" / "t")
    out = subprocess.run(
        [DG, "scaffold", "defs", "delta_ops.defs.component.DeltaMaintenanceComponent", "tables",
         "--json-params", json.dumps({"name": "t", "uri": str(root)})],
        cwd=project, env=dg_env(project), capture_output=True, text=True, timeout=180,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    written = yaml.safe_load((project / "scaffolded_proj/defs/tables/defs.yaml").read_text())
    assert written["type"] == "delta_ops.defs.component.DeltaMaintenanceComponent"
    assert written["attributes"]["tables"] == [{"name": "t", "uri": str(root)}]
    check = subprocess.run([DG, "check", "defs"], cwd=project, env=dg_env(project),
                           capture_output=True, text=True, timeout=180)
    assert check.returncode == 0, check.stdout[-2000:] + check.stderr[-2000:]
    assert "All definitions loaded successfully" in check.stdout + check.stderr
    # No warning of any kind (issue 16: `dagster dev`/`definitions validate` printed
    # SupersessionWarnings pointing at dg; dg itself must print none).
    assert "Warning" not in check.stdout + check.stderr, check.stderr[-2000:]

    defs = load(project)
    Definitions.validate_loadable(defs)
    keys = set(defs.resolve_asset_graph().get_all_asset_keys())
    assert AssetKey(["t", "checkpoint"]) in keys and len(keys) == 9 + 1  # + the overview
    result, done, failed = materialize_all(defs)
    assert not failed
    assert ("t", "version_checksum") in done
    assert (root / "_delta_log" / "00000000000000000014.crc").exists()


def test_an_invalid_entry_fails_only_its_own_assets(tmp_path, make_project):
    project = make_project(tmp_path / "proj", "broken_proj")
    good = copy_corpus_table("basic_append", tmp_path / "tables" / "good")
    write_component(project, "broken_proj", {
        "defaults": {"engine": "local"},
        "tables": [
            {"name": "good", "uri": str(good)},
            {"name": "bad_cron", "uri": str(good), "vacuum": {"cron": "every day"}},
            {"name": "twice", "uri": str(good)},
            {"name": "twice", "uri": str(good)},
            {"name": "9 lives", "uri": str(good)},
        ],
    })
    defs = load(project)
    Definitions.validate_loadable(defs)
    tables = {k.path[0] for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert tables == {"good", "bad_cron", "twice", "invalid_defs_yaml_tables_4",
                      "delta_ops_fleet"}
    _, done, failed = materialize_all(defs)
    assert ("good", "maintenance") not in failed and ("good", "version_checksum") in done
    # A run over every asset leaves VACUUM out unless the policy puts it in (issue 23).
    assert ("good", "vacuum") not in done
    assert {t for t, _ in failed} == {"bad_cron", "twice", "invalid_defs_yaml_tables_4"}
    bad = failed[("bad_cron", "maintenance")]
    assert "defs.yaml tables[1].vacuum.cron" in bad.description
    assert "expected 5 fields" in bad.description
    assert f"{project / 'broken_proj' / 'defs' / 'tables' / 'defs.yaml'}: " in bad.description
    # The table's one step fails once with the reason, not once per component.
    assert bad.description.count("vacuum.cron") == 1
    assert "components failed" not in bad.description
    assert "given 2 times" in failed[("twice", "maintenance")].description
    assert "not a valid name" in failed[
        ("invalid_defs_yaml_tables_4", "maintenance")].description
    # The watch sensor logs the invalid entries and goes on with the valid one.
    sensor = defs.resolve_sensor_def("delta_tables_watch")
    tick = sensor(build_sensor_context(instance=DagsterInstance.ephemeral(), definitions=defs,
                                       resources={"registry": defs.resources["registry"]}))
    assert {e.asset_key for e in tick.asset_events if isinstance(e, AssetObservation)} == {
        AssetKey(["good", "delta_log"]), OVERVIEW_KEY}


def test_tables_are_discovered_through_the_cache_the_sensor_refreshes(tmp_path, make_project):
    project = make_project(tmp_path / "proj", "discovery_proj")
    lake = tmp_path / "lake"
    copy_corpus_table("basic_append", lake / "sales" / "orders")
    copy_corpus_table("basic_append", lake / "sales" / "tmp_scratch")
    copy_corpus_table("golden__checkpoint", lake / "hr" / "people")
    copy_corpus_table("basic_append", lake / "deep" / "a" / "b" / "c" / "too_deep")
    (lake / "sales" / "orders" / "date=2024-01-01").mkdir()  # inside a table: not entered
    (lake / "notes").mkdir()
    write_component(project, "discovery_proj", {
        "defaults": {"engine": "local"},
        "tables": [{"name": "listed", "uri": str(lake / "hr" / "people")}],
        "discover": [{
            "prefix": str(lake),
            "include": ["sales/*", "hr/*", "deep/*"],
            "exclude": ["*/tmp_*"],
            "max_depth": 3,
            "policies": [{"match": "hr/*", "group": "hr", "vacuum": {"dry_run": True}}],
        }],
        "discovery_cache": "state/discovered.json",
        "discovery_interval_seconds": 120,
    })
    defs = load(project)
    # Nothing scanned yet: only the listed table; loading never lists the prefix.
    assert {k.path[0] for k in defs.resolve_asset_graph().get_all_asset_keys()} == {
        "listed", "delta_ops_fleet"}
    assert not (project / "state").exists()
    sensor = defs.resolve_sensor_def("delta_tables_discovery")
    assert sensor.minimum_interval_seconds == 120
    tick = sensor(build_sensor_context(instance=DagsterInstance.ephemeral(), definitions=defs))
    assert isinstance(tick, SkipReason) or tick.skip_message
    cache = read_cache(project / "state" / "discovered.json")
    (scan,) = cache.values()
    assert scan["paths"] == ["hr/people", "sales/orders", "sales/tmp_scratch"]

    # Loading reads the cache only: with the prefix gone, the same tables load.
    shutil.move(str(lake), str(tmp_path / "lake_moved"))
    defs = load(project)
    shutil.move(str(tmp_path / "lake_moved"), str(lake))
    graph = defs.resolve_asset_graph()
    assert {k.path[0] for k in graph.get_all_asset_keys()} == {
        "listed", "sales__orders", "hr__people", "delta_ops_fleet"}
    assert graph.get(AssetKey(["hr__people", "vacuum"])).group_name == "hr"
    source = defs.resources["registry"].registry_source()
    assert isinstance(source, RegistrySource)
    # The launchpad shows the component's defs.yaml, not its attributes as one JSON string.
    assert defs.resources["registry"].component == "discovery_proj/defs/tables/defs.yaml"
    registry = assemble_registry(source)
    assert registry.table("hr__people").policy.vacuum.dry_run is True
    assert registry.table("sales__orders").policy.vacuum.dry_run is False
    assert registry.table("sales__orders").uri == str(lake / "sales" / "orders")
    _, done, failed = materialize_all(defs)
    assert not failed, {k: v.description for k, v in failed.items()}
    # (hr__people's checkpoint is not due: recorded as an observation, not a materialization)
    assert {("sales__orders", "version_checksum"), ("hr__people", "version_checksum")} <= done


def test_dg_check_and_list_defs_from_the_repository_root(tmp_path):
    env = dg_env()
    check = subprocess.run([DG, "check", "defs"], cwd=REPO_ROOT, env=env,
                           capture_output=True, text=True, timeout=240)
    assert check.returncode == 0, check.stdout[-2000:] + check.stderr[-2000:]
    assert "All definitions loaded successfully" in check.stdout + check.stderr
    # No warning of any kind (issue 16: `dagster dev`/`definitions validate` printed
    # SupersessionWarnings pointing at dg; dg itself must print none).
    assert "Warning" not in check.stdout + check.stderr, check.stderr[-2000:]
    listed = subprocess.run([DG, "list", "defs", "--json"], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True, timeout=240)
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert "Warning" not in listed.stderr, listed.stderr[-2000:]
    data = json.loads(listed.stdout[listed.stdout.index("{"):])
    keys = {a["asset_key"] for a in data["assets"]}
    assert {a["source"] for a in data["assets"]} == {"delta_ops/location/tables/defs.yaml:4"}
    assert {"events/checkpoint", "customers/log_compaction", "orders_dv/vacuum"} <= keys
    assert len(keys) == 27 + 1  # three tables and the fleet overview
    sensors = {s["name"] for s in data["sensors"]}
    assert {"delta_tables_watch", "delta_tables_partitions"} <= sensors


def test_checks_of_an_unresolvable_table_return_a_failed_result(tmp_path, make_project):
    from delta_ops.defs.checks import check_result, checkpoint_fresh_result
    from delta_ops.defs.resources import SparkResource

    project = make_project(tmp_path / "proj", "checks_proj")
    write_component(project, "checks_proj", {
        "tables": [{"name": "bad", "uri": "x", "checkpoint": {"interval": 0}}],
    })
    defs = load(project)
    result = check_result("bad", "checkpoint", defs.resources["registry"], SparkResource(),
                          checkpoint_fresh_result)
    assert result.passed is False and result.severity.value == "ERROR"
    assert "tables[0].checkpoint.interval" in result.description


def test_spark_kind_only_where_spark_runs_and_standard_uri_metadata(tmp_path, make_project):
    project = make_project(tmp_path / "proj", "kinds_proj")
    write_component(project, "kinds_proj", {
        "defaults": {"engine": "spark"},
        "tables": [{"name": "t", "uri": "s3://bucket/t"}],
    })
    graph = load(project).resolve_asset_graph()
    spark = {k.path[1] for k in graph.get_all_asset_keys() if "spark" in graph.get(k).kinds}
    assert spark == {"checkpoint", "version_checksum", "vacuum", "row_tracking", "optimize"}
    node = graph.get(AssetKey(["t", "metadata_cleanup"]))
    assert node.kinds == {"delta"}
    assert graph.get(AssetKey(["t", "delta_log"])).metadata["dagster/uri"].value == "s3://bucket/t"


def test_one_run_derives_the_checksums_from_the_previous_one_before_checkpointing(
    tmp_path, make_project
):
    """What the watch sensor asks for when a table's log moved past the checkpoint interval:
    checkpoint and version checksum in one run. The checksums of the new versions come from
    the previous `.crc`, not from a fresh computation at the new checkpoint."""
    from deltalake import DeltaTable, write_deltalake

    project = make_project(tmp_path / "proj", "order_proj")
    root = copy_corpus_table("basic_append", tmp_path / "tables" / "t")
    write_component(project, "order_proj", {
        "defaults": {"engine": "local"},
        "tables": [{"name": "t", "uri": str(root), "checkpoint": {"interval": 2}}],
    })
    defs = load(project)
    instance = DagsterInstance.ephemeral()
    _, done, failed = materialize_all(defs, instance)
    assert not failed and ("t", "version_checksum") in done
    log = root / "_delta_log"
    assert (log / "00000000000000000001.crc").exists()
    rows = DeltaTable(str(root)).to_pyarrow_table().slice(0, 1)
    for _ in range(2):
        write_deltalake(str(root), rows, mode="append")
    result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=instance,
        asset_selection=[AssetKey(["t", "checkpoint"]), AssetKey(["t", "version_checksum"])],
    )
    assert result.success
    metadata = {
        e.event_specific_data.materialization.asset_key.path[1]:
            {k: v.value for k, v in e.event_specific_data.materialization.metadata.items()}
        for e in result.get_asset_materialization_events()
    }
    assert set(metadata) == {"checkpoint", "version_checksum"}
    assert metadata["version_checksum"]["written"] == [2, 3]
    assert metadata["version_checksum"]["incremental_computations"] == 2
    assert metadata["version_checksum"]["full_computations"] == 0
    assert metadata["checkpoint"]["version"] == 3
    assert (log / "00000000000000000003.checkpoint.parquet").exists()

"""The Dagster layer in process: registry validation, definitions, every asset, check,
sensor decision, schedule and job, against copies of real corpus tables.

One `maintenance` run over a registry of seven tables (module fixture) feeds most asset
and check tests; sensors and schedules are evaluated with `build_sensor_context` and
`build_schedule_context`; the loading contract (no pyspark, no JVM, `dagster definitions
validate`) runs in subprocesses. Spark is exercised by one test marked `spark`.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import unquote

import pyarrow.parquet as pq
import pytest
from dagster import (
    AssetKey,
    AssetsDefinition,
    AssetSelection,
    DagsterInstance,
    Definitions,
    Failure,
    evaluate_automation_conditions,
    materialize,
)

from delta_ops.defs import build_definitions
from delta_ops.defs.assets import COMPONENTS, CheckpointConfig, TableRun, result_metadata
from delta_ops.defs.checks import (
    checkpoint_fresh_result,
    fsck_result,
    log_readable_result,
)
from delta_ops.defs.jobs import TABLE_PARTITIONS
from delta_ops.defs.overview import OVERVIEW_KEY
from delta_ops.defs.registry import (
    REGISTRY_ENV,
    load_registry,
    parse_registry,
)
from delta_ops.defs.resources import SparkResource
from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
from delta_ops.maintenance.vacuum import VacuumResult
from delta_ops.protocol import features
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import REPO_ROOT, copy_corpus_table
from delta_ops_tests.support.dagster_runs import (
    age_files,
    data_files,
    md,
    write_registry,
)
from delta_ops_tests.support.spark_fixtures import LOCAL_IP, TEST_CONF

DAY = 86_400
EDGES = {
    ("checkpoint", "delta_log"),
    ("version_checksum", "delta_log"),
    ("log_compaction", "delta_log"),
    ("vacuum", "delta_log"),
    ("row_tracking", "delta_log"),
    ("optimize", "delta_log"),
    ("stats", "delta_log"),
    ("metadata_cleanup", "checkpoint"),
}


# ---- definitions -----------------------------------------------------------------------------


def component_failures(event) -> dict[tuple[str, str], object]:
    """(table, component) -> the failure of that component, from a step failure: the
    `<t>__delta_log` step's own, or each component the `<t>__maintenance` step names (one
    failure is the component's own Failure; several are listed under `failures`)."""
    table, step = event.step_key.rsplit("__", 1)
    data = event.step_failure_data.user_failure_data
    if step == "delta_log":
        return {(table, "delta_log"): event}
    if "failures" not in data.metadata:
        return {(table, data.metadata["component"].value): event}
    out = {}
    for component, detail in data.metadata["failures"].value.items():
        failure = SimpleNamespace(
            description=detail["description"],
            metadata={k: SimpleNamespace(value=v) for k, v in detail.items()},
        )
        out[(table, component)] = SimpleNamespace(
            step_failure_data=SimpleNamespace(user_failure_data=failure)
        )
    return out


@pytest.fixture(scope="module")
def maintained(tmp_path_factory):
    """Seven tables (corpus copies) maintained by one `maintenance` run, local engine."""
    base = tmp_path_factory.mktemp("maintained")
    tables = base / "tables"
    tables.mkdir()
    copies = {
        "ckpt": copy_corpus_table("golden__checkpoint", tables / "ckpt"),
        "stats": copy_corpus_table(
            "golden__data-skipping-change-stats-collected-across-versions", tables / "stats"),
        "dv": copy_corpus_table("golden__dv-partitioned-with-checkpoint", tables / "dv"),
        "coll": copy_corpus_table("golden__collations-table", tables / "coll"),
        "short": copy_corpus_table("basic_append", tables / "short"),
        "crc": copy_corpus_table(
            "golden__commit-info-containing-arbitrary-operationParams-types", tables / "crc"),
    }
    age_files(copies["ckpt"], 60 * DAY, log=True)  # every commit past the 30-day log retention
    age_files(copies["stats"], 30 * DAY)  # data files past the 7-day VACUUM retention
    age_files(copies["dv"], 30 * DAY)
    before = {name: data_files(root) for name, root in copies.items()}
    reg = write_registry(base, {
        # VACUUM and cleanup run in this run over every asset because the policy says so.
        "defaults": {"engine": "local", "cleanup": {"cron": "30 4 * * *",
                                                    "in_materialize_all": True},
                     "vacuum": {"in_materialize_all": True}},
        "tables": [
            {"name": "ckpt", "uri": "tables/ckpt", "checkpoint": {"interval": 2},
             "vacuum": {"cron": None}},
            {"name": "stats", "uri": "tables/stats", "compaction": {"interval": 2}},
            {"name": "dv", "uri": "tables/dv", "vacuum": {"dry_run": True},
             "row_tracking": {"backfill": True, "batch_size": 4,
                              "confirm_protocol_upgrade": True}},
            {"name": "coll", "uri": "tables/coll"},
            {"name": "short", "uri": "tables/short", "vacuum": {"retention": "1 hours"}},
            {"name": "crc", "uri": "tables/crc", "checksum": {"enabled": False}},
            {"name": "missing", "uri": "tables/not_there_yet"},
        ],
    })
    defs = build_definitions(reg)
    instance = DagsterInstance.ephemeral()
    result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=instance, raise_on_error=False
    )
    events: dict[tuple[str, str], object] = {}
    failures: dict[tuple[str, str], object] = {}
    checks: dict[tuple[str, str], object] = {}
    for event in result.all_events:
        if event.event_type_value in ("ASSET_MATERIALIZATION", "ASSET_OBSERVATION"):
            data = event.event_specific_data
            mat = getattr(data, "materialization", None) or data.asset_observation
            events[tuple(mat.asset_key.path)] = event
        elif event.event_type_value == "STEP_FAILURE":
            failures.update(component_failures(event))
        elif event.event_type_value == "ASSET_CHECK_EVALUATION":
            data = event.event_specific_data
            checks[(data.asset_key.path[0], data.check_name)] = data
    return {
        "registry": reg, "defs": defs, "instance": instance, "result": result,
        "roots": copies, "before": before, "events": events, "failures": failures,
        "checks": checks,
    }


def test_definitions_validate_and_cover_every_table_and_component(maintained):
    defs = maintained["defs"]
    Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    names = ["ckpt", "stats", "dv", "coll", "short", "crc", "missing"]
    keys = {k for k in graph.get_all_asset_keys()}
    assert keys == {AssetKey([t, c]) for t in names for c in COMPONENTS} | {OVERVIEW_KEY}
    for t in names:
        edges = {
            (key.path[1], parent.path[1])
            for key in keys if key.path[0] == t
            for parent in graph.get(key).parent_keys
        }
        assert edges == EDGES
        assert graph.get(AssetKey([t, "delta_log"])).is_materializable
        assert {graph.get(AssetKey([t, c])).group_name for c in COMPONENTS} == {t}
    check_names = {(k.asset_key.path[0], k.asset_key.path[1], k.name)
                   for k in graph.asset_check_keys}
    for t in names:
        assert {(t, "delta_log", "log_readable"), (t, "delta_log", "fsck"),
                (t, "checkpoint", "checkpoint_fresh")} == {
                    c for c in check_names if c[0] == t}
    # No job over every table's assets (a second job graph of the fleet at every load): a
    # run over all tables is the implicit asset job, which the watch sensor targets too.
    assert {j.name for j in defs.jobs} == {"row_tracking_backfill", "fsck_repair"}
    assert defs.resolve_sensor_def("delta_tables_watch").asset_selection is not None
    assert {s.name for s in defs.sensors} == {
        "delta_tables_watch", "delta_tables_partitions", "delta_tables_automation"}


def test_definitions_load_when_no_table_exists(tmp_path):
    reg = write_registry(tmp_path, {"tables": [{"name": "later", "uri": "not/yet"}]})
    defs = build_definitions(reg)
    Definitions.validate_loadable(defs)
    assert not (tmp_path / "not").exists()


def test_loading_the_definitions_imports_no_pyspark_and_starts_no_jvm():
    code = (
        "import os, sys\n"
        "import delta_ops.definitions as d\n"
        "from dagster import Definitions\n"
        "Definitions.validate_loadable(d.defs)\n"
        "assert len(d.defs.assets) == 4, len(d.defs.assets)\n"  # overview + 1 step a table
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j'))\n"
        "me = str(os.getpid())\n"
        "kids = []\n"
        "for p in os.listdir('/proc'):\n"
        "    if p.isdigit():\n"
        "        try:\n"
        "            stat = open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()\n"
        "        except OSError:\n"
        "            continue\n"
        "        if stat[1] == me:\n"
        "            kids.append(open(f'/proc/{p}/cmdline').read())\n"
        "print(heavy, kids)\n"
        "assert not heavy and not any('java' in k for k in kids)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != REGISTRY_ENV}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[] []"


def test_dagster_definitions_validate_command(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != REGISTRY_ENV}
    env["DAGSTER_HOME"] = str(tmp_path)
    out = subprocess.run(
        [str(Path(sys.executable).parent / "dagster"), "definitions", "validate",
         "-w", "workspace.yaml"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=180,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "Validation successful for code location delta_ops" in out.stdout + out.stderr
    # Loading the location warns about nothing: the one warning printed is Dagster's notice
    # that this command itself is superseded by `dg check defs` (which the README uses).
    warned = [line for line in (out.stdout + out.stderr).splitlines() if "Warning:" in line]
    assert len(warned) == 1 and "SupersessionWarning: Function `definitions_validate_command` " \
        "is superseded" in warned[0] and "Use 'dg check defs' instead" in warned[0], warned


def test_asset_specs_show_redacted_storage_options(tmp_path, monkeypatch):
    monkeypatch.setenv("DELTA_OPS_TEST_TOKEN", "s3cr3t-value")
    root = copy_corpus_table("basic_append", tmp_path / "t")
    reg = write_registry(tmp_path, {"defaults": {"engine": "local"}, "tables": [{
        "name": "t", "uri": str(root),
        "storage_options": {"token": {"env": "DELTA_OPS_TEST_TOKEN"}},
    }]})
    defs = build_definitions(reg)
    spec_md = defs.resolve_asset_graph().get(AssetKey(["t", "delta_log"])).metadata
    assert spec_md["storage_options"].value == {"token": "$DELTA_OPS_TEST_TOKEN"}
    instance = DagsterInstance.ephemeral()
    result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=instance, raise_on_error=False
    )
    assert result.success
    logged = json.dumps([str(e) for e in instance.all_logs(result.run_id)])
    assert "s3cr3t-value" not in logged and "$DELTA_OPS_TEST_TOKEN" in logged
    monkeypatch.delenv("DELTA_OPS_TEST_TOKEN")
    failed = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=instance, raise_on_error=False, asset_selection=[AssetKey(["t", "vacuum"])]
    )
    (failure,) = failed.get_step_failure_events()
    data = failure.step_failure_data.user_failure_data
    assert "environment variable DELTA_OPS_TEST_TOKEN, which is not set" in data.description
    assert data.metadata["table"].value == "t"


# ---- assets (one maintenance run) ------------------------------------------------------------


def test_delta_log_is_observed_with_the_table_version_as_data_version(maintained):
    event = maintained["events"][("ckpt", "delta_log")]
    obs = event.event_specific_data.materialization
    assert obs.tags["dagster/data_version"] == "14"
    m = md(event)
    snap = load_snapshot(Storage.for_uri(str(maintained["roots"]["dv"])), 15)
    dv = md(maintained["events"][("dv", "delta_log")])
    assert (dv["version"], dv["num_files"], dv["size_bytes"]) == (
        15, snap.num_files, snap.size_bytes)
    assert dv["protocol"]["readerFeatures"] == ["deletionVectors"]
    assert "| file size | files | bytes |" in dv["file_size_histogram"]
    assert sum(int(line.split("|")[2]) for line in dv["file_size_histogram"].splitlines()[2:]) \
        == snap.num_files
    assert isinstance(m["num_files"], int) and m["commits_since_checkpoint"] == 4


def test_missing_table_fails_its_log_and_skips_the_rest(maintained):
    failure = maintained["failures"][("missing", "delta_log")]
    data = failure.step_failure_data.user_failure_data
    assert "missing: the table does not exist yet" in data.description
    assert data.metadata["error"].value == "NotATableError"
    assert not [k for k in maintained["events"] if k[0] == "missing"]
    assert not [k for k in maintained["failures"] if k[0] == "missing" and k[1] != "delta_log"]


def test_checkpoint_is_written_when_due_and_skipped_otherwise(maintained):
    root = maintained["roots"]["ckpt"]
    m = md(maintained["events"][("ckpt", "checkpoint")])
    path = root / "_delta_log" / "00000000000000000014.checkpoint.parquet"
    assert path.exists()
    assert (m["version"], m["kind"], m["already_existed"]) == (14, "classic", False)
    # A checkpoint written is a materialization; one not due too, marked skipped (below),
    # so the asset shows when it was last looked after (issue 23).
    assert "skipped" not in m and m["checkpoint_version"] == 14
    assert m["size_in_bytes"] == path.stat().st_size
    assert m["num_add_files"] == pq.read_table(path).column("add").drop_null().length()
    assert isinstance(m["duration_s"], float)
    stats_event = maintained["events"][("stats", "checkpoint")]
    assert stats_event.event_type_value == "ASSET_MATERIALIZATION"
    stats = md(stats_event)
    assert stats["skipped"] is True and "not due: 5 commits" in stats["reason"]
    assert {"version", "checkpoint_version", "commits_since_checkpoint"} <= set(stats)
    assert not list((maintained["roots"]["stats"] / "_delta_log").glob("*.checkpoint.parquet"))


def test_version_checksum_is_written_and_verified(maintained):
    root = maintained["roots"]["ckpt"]
    assert (root / "_delta_log" / "00000000000000000014.crc").exists()
    m = md(maintained["events"][("ckpt", "version_checksum")])
    assert (m["version"], m["num_written"], m["written"]) == (14, 1, [14])
    check = maintained["checks"][("ckpt", "fsck")]  # it compares the newest .crc too
    assert check.metadata["version"].value == 14
    # The .crc just written matches; the golden table is a log without data files, which
    # fsck names (one `missing_file` error each), so the check fails on those alone.
    assert check.metadata["problem_codes"].value == ["missing_file"]
    off = md(maintained["events"][("crc", "version_checksum")])
    assert off["skipped"] is True and "off" in off["reason"]


def test_log_compaction_writes_the_policy_windows(maintained):
    log = maintained["roots"]["stats"] / "_delta_log"
    m = md(maintained["events"][("stats", "log_compaction")])
    assert (m["interval"], m["num_written"]) == (2, 2)
    assert m["ranges"] == [[0, 1], [2, 3]]
    assert (log / "00000000000000000000.00000000000000000001.compacted.json").exists()
    assert (log / "00000000000000000002.00000000000000000003.compacted.json").exists()
    off = md(maintained["events"][("ckpt", "log_compaction")])
    assert off["skipped"] is True


def test_metadata_cleanup_deletes_expired_log_files(maintained):
    log = maintained["roots"]["ckpt"] / "_delta_log"
    m = md(maintained["events"][("ckpt", "metadata_cleanup")])
    assert m["checkpoint_version"] == 14 and m["num_files"] > 0 and m["dry_run"] is False
    remaining = sorted(p.name for p in log.iterdir() if p.name[0].isdigit())
    assert remaining[0].startswith("00000000000000000014.")
    assert not (log / "00000000000000000000.json").exists()


def test_vacuum_deletes_unreferenced_old_files_and_reports_bytes(maintained):
    root = maintained["roots"]["stats"]
    m = md(maintained["events"][("stats", "vacuum")])
    live = {
        p for p in load_snapshot(Storage.for_uri(str(root))).files.column("path").to_pylist()
    }
    gone = maintained["before"]["stats"] - data_files(root)
    assert gone and data_files(root, side_files=False) == live
    assert m["num_files"] == len(gone) and m["bytes_reclaimed"] == m["size_bytes"] > 0
    dry = md(maintained["events"][("dv", "vacuum")])
    # Dry run: the orphans and expired tombstones' files are reported, nothing is deleted.
    assert dry["dry_run"] is True and dry["num_files"] > 5 and dry["size_bytes"] > 0
    assert dry["bytes_reclaimed"] == 0
    assert data_files(maintained["roots"]["dv"]) == maintained["before"]["dv"]


def test_row_tracking_backfills_per_policy_and_reports_otherwise(maintained):
    m = md(maintained["events"][("dv", "row_tracking")])
    assert m["backfilled"] is True and m["enabled"] is True and m["files_backfilled"] == 15
    assert m["batches"] == 4
    snap = load_snapshot(Storage.for_uri(str(maintained["roots"]["dv"])))
    assert features.is_feature_enabled(snap.protocol, snap.metadata.configuration, "rowTracking")
    report = md(maintained["events"][("ckpt", "row_tracking")])
    assert report["backfilled"] is False and report["files_missing_row_ids"] == 1


def test_refused_operations_fail_only_their_asset(maintained):
    failures, events = maintained["failures"], maintained["events"]
    for component in ("checkpoint", "version_checksum", "log_compaction", "vacuum"):
        data = failures[("coll", component)].step_failure_data.user_failure_data
        assert data.metadata["table"].value == "coll"
        assert data.metadata["version"].value == 0
        assert data.metadata["features"].value == ["collations"]
        assert "collations" in data.metadata["reason"].value
    assert ("coll", "delta_log") in events and ("coll", "row_tracking") in events
    short = failures[("short", "vacuum")].step_failure_data.user_failure_data
    assert short.metadata["error"].value == "RetentionError"
    assert "refusing to VACUUM with a retention of 1 hours" in short.description
    # In Dagster there is no command line: the refusal names the registry policy's opt-in.
    assert "vacuum: {force_retention: true}" in short.description
    assert "force_retention" in short.metadata["how_to_force"].value
    for component in ("delta_log", "version_checksum", "log_compaction", "row_tracking"):
        assert ("short", component) in events
    assert set(failures) == {
        ("coll", "checkpoint"), ("coll", "log_compaction"), ("coll", "vacuum"),
        ("coll", "version_checksum"),
        ("short", "vacuum"), ("missing", "delta_log"),
    }


def test_checks_in_the_maintenance_run(maintained):
    checks = maintained["checks"]
    assert checks[("ckpt", "log_readable")].passed
    coll = checks[("coll", "log_readable")]
    assert not coll.passed and coll.severity.value == "ERROR"
    assert coll.metadata["blocked_operations"].value["vacuum"] == ["collations"]
    fresh = checks[("ckpt", "checkpoint_fresh")]
    assert fresh.passed and fresh.metadata["commits_since_checkpoint"].value == 0
    crc = checks[("crc", "fsck")]
    assert crc.metadata["num_errors"].value == 0 and crc.metadata["version"].value == 2


def test_result_metadata_keeps_numbers_as_numbers():
    result = VacuumResult(table="file:///t", version=3, files=("a.parquet", "b.parquet"),
                          num_files=2, size_bytes=1234, directories=(), dry_run=False,
                          retention_hours=168.0)
    m = result_metadata(result, duration_s=0.1234, bytes_reclaimed=1234)
    assert m["version"] == 3 and m["size_bytes"] == 1234 and m["retention_hours"] == 168.0
    assert m["uri"] == "file:///t" and "table" not in m
    assert m["files"].value == "- `a.parquet`\n- `b.parquet`"
    assert m["duration_s"].value == 0.123 and m["bytes_reclaimed"] == 1234


def test_checkpoint_can_be_forced_with_materialize(tmp_path):
    root = copy_corpus_table("golden__data-skipping-change-stats-collected-across-versions",
                             tmp_path / "t")
    reg = write_registry(tmp_path, {"defaults": {"engine": "local"},
                                    "tables": [{"name": "t", "uri": str(root)}]})
    defs = build_definitions(reg)
    assets = [a for a in defs.assets if isinstance(a, AssetsDefinition)
              and any(k.path[0] == "t" for k in a.keys)]
    result = materialize(
        assets, selection=[AssetKey(["t", "checkpoint"])],
        resources=defs.resources,
        run_config={"ops": {"t__maintenance": {
            "config": {"checkpoint": CheckpointConfig(force=True).model_dump()}}}},
    )
    (mat,) = result.asset_materializations_for_node("t__maintenance")
    assert mat.metadata["version"].value == 4 and "skipped" not in mat.metadata
    assert (root / "_delta_log" / "00000000000000000004.checkpoint.parquet").exists()


# ---- policies: force_retention and allow_catalog_managed --------------------------------------


def test_policy_opt_ins_default_off_and_are_documented():
    reg = parse_registry({"tables": [{"name": "a", "uri": "x"}]})
    policy = reg.table("a").policy
    for section in (policy.vacuum, policy.cleanup):
        assert section.force_retention is False and section.allow_catalog_managed is False
        fields = type(section).model_fields
        assert "time travel" in fields["force_retention"].description
        assert "catalog's permission" in fields["allow_catalog_managed"].description


def _now_ms() -> int:
    return int(time.time() * 1000)


def test_vacuum_force_retention_from_the_registry_policy(tmp_path):
    from delta_ops.defs.assets import run_vacuum

    root = copy_corpus_table("basic_append", tmp_path / "t")
    age_files(root, 2 * 3600)
    for force in (False, True):
        reg = write_registry(tmp_path, {"defaults": {"engine": "local"}, "tables": [{
            "name": "t", "uri": str(root),
            "vacuum": {"retention": "1 hours", "dry_run": True, "force_retention": force},
        }]})
        run = TableRun(load_registry(reg).table("t"), "vacuum", SparkResource(), _now_ms())
        if not force:
            with pytest.raises(Failure, match="refusing to VACUUM") as info:
                run_vacuum(run)
            assert "vacuum: {force_retention: true}" in info.value.description
        else:
            result = run_vacuum(run)
            assert result.metadata["retention_hours"] == 1.0
            assert result.metadata["dry_run"] is True


def test_cleanup_force_retention_from_the_registry_policy(tmp_path):
    from delta_ops.defs.assets import run_cleanup

    root = copy_corpus_table("golden__checkpoint", tmp_path / "t")
    age_files(root, 2 * DAY, log=True)
    log_before = sorted(p.name for p in (root / "_delta_log").iterdir())
    reg = write_registry(tmp_path, {"defaults": {"engine": "local"}, "tables": [{
        "name": "t", "uri": str(root), "cleanup": {"retention": "1 days"}}]})
    run = TableRun(load_registry(reg).table("t"), "metadata_cleanup", SparkResource(), _now_ms())
    with pytest.raises(Failure, match="force_retention") as info:
        run_cleanup(run)
    assert "cleanup: {force_retention: true}" in info.value.description
    assert sorted(p.name for p in (root / "_delta_log").iterdir()) == log_before
    reg = write_registry(tmp_path, {"defaults": {"engine": "local"}, "tables": [{
        "name": "t", "uri": str(root),
        "cleanup": {"retention": "1 days", "force_retention": True}}]})
    run = TableRun(load_registry(reg).table("t"), "metadata_cleanup", SparkResource(), _now_ms())
    run_cleanup(run)
    assert (root / "_delta_log" / "00000000000000000000.json").exists() is False
    assert load_snapshot(Storage.for_uri(str(root))).version == 14


@pytest.mark.parametrize("component", ["vacuum", "cleanup"])
def test_catalog_managed_tables_need_the_policy_opt_in(tmp_path, component):
    from delta_ops.defs.assets import run_cleanup, run_vacuum

    root = copy_corpus_table("kernel-defaults__catalog-owned-preview", tmp_path / "t")
    runner = run_vacuum if component == "vacuum" else run_cleanup
    name = "vacuum" if component == "vacuum" else "metadata_cleanup"
    extra = {"dry_run": True} if component == "vacuum" else {}
    for allow in (False, True):
        reg = write_registry(tmp_path, {"defaults": {"engine": "local"}, "tables": [{
            "name": "t", "uri": str(root),
            component: {"allow_catalog_managed": allow, **extra}}]})
        run = TableRun(load_registry(reg).table("t"), name, SparkResource(), _now_ms())
        if not allow:
            with pytest.raises(Failure) as info:
                runner(run)
            assert info.value.metadata["error"].value == "UnsupportedFeatureError"
        else:
            runner(run)


# ---- checks (direct) -------------------------------------------------------------------------


def _run(registry_path: Path, name: str) -> TableRun:
    return TableRun(load_registry(registry_path).table(name), "test", SparkResource(), 0)


def test_checksum_check_catches_a_tampered_crc(tmp_path):
    root = copy_corpus_table(
        "golden__commit-info-containing-arbitrary-operationParams-types", tmp_path / "t")
    reg = write_registry(tmp_path, {"defaults": {"engine": "local"},
                                    "tables": [{"name": "t", "uri": str(root)}]})
    assert fsck_result(_run(reg, "t")).metadata["num_errors"].value == 0
    crc = root / "_delta_log" / "00000000000000000002.crc"
    obj = json.loads(crc.read_text())
    obj["numFiles"] += 1
    crc.write_text(json.dumps(obj))
    result = fsck_result(_run(reg, "t"))
    assert not result.passed and result.severity.value == "ERROR"
    assert result.metadata["problem_codes"].value == ["checksum_mismatch"]
    assert "00000000000000000002.crc" in result.description
    assert "numFiles" in result.description


def test_checksum_check_without_any_crc(tmp_path):
    root = copy_corpus_table("basic_append", tmp_path / "t")
    reg = write_registry(tmp_path, {"defaults": {"engine": "local"}, "tables": [
        {"name": "on", "uri": str(root)},
        {"name": "off", "uri": str(root), "checksum": {"enabled": False}},
    ]})
    # A table without any .crc is not hurt: fsck has nothing to compare (the
    # version_checksum component writes them; the watch says when one is due).
    on = fsck_result(_run(reg, "on"))
    assert "checksum_mismatch" not in on.metadata["problem_codes"].value
    assert on.metadata["num_errors"].value == 0
    assert fsck_result(_run(reg, "off")).metadata["num_errors"].value == 0


def test_checkpoint_fresh_and_protocol_checks_direct(tmp_path):
    root = copy_corpus_table("golden__checkpoint", tmp_path / "t")
    reg = write_registry(tmp_path, {"defaults": {"engine": "local"}, "tables": [
        {"name": "tight", "uri": str(root), "checkpoint": {"interval": 3}},
        {"name": "loose", "uri": str(root)},
        {"name": "gone", "uri": str(tmp_path / "gone")},
    ]})
    tight = checkpoint_fresh_result(_run(reg, "tight"))
    assert not tight.passed and tight.metadata["commits_since_checkpoint"].value == 4
    assert tight.description == "4 commits since the last checkpoint, more than the interval of 3"
    assert checkpoint_fresh_result(_run(reg, "loose")).passed  # delta.checkpointInterval: 10
    # A missing table fails the existence check, as an error naming where it looked; the
    # other checks say so as a warning pointing at it.
    gone = log_readable_result(_run(reg, "gone"))
    assert not gone.passed and gone.severity.value == "ERROR"
    assert gone.description == f"gone does not exist: no Delta log at {tmp_path / 'gone'}"
    stale = checkpoint_fresh_result(_run(reg, "gone"))
    assert not stale.passed and stale.severity.value == "WARN"
    assert "does not exist yet" in stale.description and "see log_readable" in stale.description
    assert log_readable_result(_run(reg, "loose")).passed


# ---- automation (cron conditions instead of schedules) ---------------------------------------


def test_cron_conditions_follow_each_table_policy_without_schedules(maintained):
    """Issue 16: no schedule per table; VACUUM and metadata cleanup carry a cron
    AutomationCondition evaluated by one stopped-by-default sensor."""
    defs = maintained["defs"]
    assert not list(defs.schedules or [])
    graph = defs.resolve_asset_graph()
    conditions = {
        tuple(k.path): graph.get(k).automation_condition for k in graph.get_all_asset_keys()
        if graph.get(k).automation_condition is not None
    }
    names = ["ckpt", "stats", "dv", "coll", "short", "crc", "missing"]
    expected = {(t, c) for t in names
                for c in ("vacuum", "metadata_cleanup", "optimize", "stats")} - {
        ("ckpt", "vacuum")}  # cron: null
    assert set(conditions) == expected
    assert "30 4 * * *" in conditions[("ckpt", "metadata_cleanup")].get_label()
    assert "0 3 * * 0" in conditions[("dv", "vacuum")].get_label()
    (sensor,) = [s for s in defs.sensors if s.name == "delta_tables_automation"]
    assert sensor.default_status.value == "STOPPED"


def test_cron_condition_requests_only_its_asset_once_per_tick(maintained):
    defs, instance = maintained["defs"], DagsterInstance.ephemeral()
    selection = AssetSelection.assets(AssetKey(["short", "metadata_cleanup"]),
                                      AssetKey(["dv", "vacuum"]))
    before = dt.datetime(2024, 1, 8, 4, 0, tzinfo=dt.timezone.utc)
    first = evaluate_automation_conditions(
        defs, instance, asset_selection=selection, evaluation_time=before)
    assert first.total_requested == 0
    after = dt.datetime(2024, 1, 8, 4, 31, tzinfo=dt.timezone.utc)
    second = evaluate_automation_conditions(
        defs, instance, asset_selection=selection, evaluation_time=after, cursor=first.cursor)
    assert second.total_requested == 1
    assert second.get_num_requested(AssetKey(["short", "metadata_cleanup"])) == 1
    third = evaluate_automation_conditions(
        defs, instance, asset_selection=selection,
        evaluation_time=after + dt.timedelta(minutes=5), cursor=second.cursor)
    assert third.total_requested == 0  # once per cron tick
    result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=instance, asset_selection=[AssetKey(["short", "metadata_cleanup"])])
    keys = [e.event_specific_data.materialization.asset_key
            for e in result.get_asset_materialization_events()]
    assert keys == [AssetKey(["short", "metadata_cleanup"])]


# ---- the row-tracking backfill job ------------------------------------------------------------


def test_row_tracking_backfill_job_by_partition(tmp_path):
    root = copy_corpus_table("golden__dv-partitioned-with-checkpoint", tmp_path / "t")
    reg = write_registry(tmp_path, {"defaults": {"engine": "local"},
                                    "tables": [{"name": "t", "uri": str(root)}]})
    defs = build_definitions(reg)
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(TABLE_PARTITIONS.name, ["t", "gone"])
    job = defs.resolve_job_def("row_tracking_backfill")
    # The table's protocol lacks rowTracking: without the confirmation nothing is committed.
    log_before = sorted(p.name for p in (root / "_delta_log").iterdir())
    refused = job.execute_in_process(
        instance=instance, partition_key="t", raise_on_error=False,
        run_config={"ops": {"backfill_row_tracking": {"config": {"batch_size": 6}}}},
    )
    assert not refused.success
    (failure,) = refused.get_step_failure_events()
    description = failure.step_failure_data.user_failure_data.description
    assert "rowTracking" in description and "deltalake" in description
    assert "confirm_protocol_upgrade: true" in description
    assert sorted(p.name for p in (root / "_delta_log").iterdir()) == log_before
    # A batch size below 1 is refused by name, nothing done (0 was the policy's, -5 a
    # traceback from inside the backfill).
    for bad in (0, -5):
        config = {"batch_size": bad, "confirm_protocol_upgrade": True}
        refused = job.execute_in_process(
            instance=instance, partition_key="t", raise_on_error=False,
            run_config={"ops": {"backfill_row_tracking": {"config": config}}},
        )
        (failure,) = refused.get_step_failure_events()
        assert f"batch_size must be at least 1, got {bad}" in (
            failure.step_failure_data.user_failure_data.description)
        assert sorted(p.name for p in (root / "_delta_log").iterdir()) == log_before
    config = {"batch_size": 6, "confirm_protocol_upgrade": True}
    result = job.execute_in_process(
        instance=instance, partition_key="t",
        run_config={"ops": {"backfill_row_tracking": {"config": config}}},
    )
    assert result.success
    warned = [r.user_message for r in instance.all_logs(result.run_id)
              if "can no longer write it" in (r.user_message or "")]
    assert len(warned) == 1 and "delta-rs" in warned[0]
    (mat,) = [e.event_specific_data.materialization
              for e in result.get_asset_materialization_events()]
    assert mat.asset_key == AssetKey(["t", "row_tracking"])
    assert mat.metadata["files_backfilled"].value == 15 and mat.metadata["batches"].value == 3
    progress = [r.user_message for r in instance.all_logs(result.run_id)
                if "row tracking batch committed" in (r.user_message or "")]
    assert [p.split(": ", 1)[1] for p in progress] == [
        "row tracking batch committed version 17: 6/15 files backfilled in 1 batch(es)",
        "row tracking batch committed version 18: 12/15 files backfilled in 2 batch(es)",
        "row tracking batch committed version 19: 15/15 files backfilled in 3 batch(es)",
    ]
    assert instance.get_latest_materialization_event(AssetKey(["t", "row_tracking"]))
    stale = job.execute_in_process(instance=instance, partition_key="gone", raise_on_error=False)
    (failure,) = stale.get_step_failure_events()
    assert "partition 'gone' is not a registered table" in (
        failure.step_failure_data.user_failure_data.description)


# ---- Spark -----------------------------------------------------------------------------------


@pytest.mark.spark
def test_spark_engine_session_lives_inside_the_run(tmp_path):
    from pyspark import SparkContext

    root = copy_corpus_table("golden__data-skipping-change-stats-collected-across-versions",
                             tmp_path / "t")
    age_files(root, 30 * DAY)
    before = data_files(root)
    # No size threshold: every table of engine spark runs on Spark.
    reg = write_registry(tmp_path, {"defaults": {"engine": "spark", "spark_above_files": None},
                                    "tables": [{"name": "t", "uri": str(root)}]})
    spark = SparkResource(master="local[2]", local_ip=LOCAL_IP, python=sys.executable,
                          conf=dict(TEST_CONF))
    defs = build_definitions(reg, spark=spark)
    already = SparkContext._active_spark_context  # another test's session, if any
    result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=DagsterInstance.ephemeral(),
        asset_selection=[AssetKey(["t", "delta_log"]), AssetKey(["t", "vacuum"])],
    )
    assert result.success
    (mat,) = [m for m in result.asset_materializations_for_node("t__maintenance")
              if m.asset_key.path[1] == "vacuum"]
    assert mat.metadata["num_files"].value == len(before - data_files(root)) > 0
    assert mat.metadata["engine"].value == "spark"
    # A session the run started is stopped when the run ends; one it joined is left running.
    assert SparkContext._active_spark_context is already


def test_fsck_check_names_a_deleted_data_file(tmp_path):
    root = copy_corpus_table("golden__dv-partitioned-with-checkpoint", tmp_path / "t")
    reg = write_registry(tmp_path, {"defaults": {"engine": "local"},
                                    "tables": [{"name": "t", "uri": str(root)}]})
    defs = build_definitions(reg)
    job = defs.resolve_implicit_global_asset_job_def()

    def fsck():
        result = job.execute_in_process(
            instance=DagsterInstance.ephemeral(), raise_on_error=False,
            asset_selection=[AssetKey(["t", "delta_log"])],
        )
        (evaluation,) = [e for e in result.get_asset_check_evaluations()
                         if e.check_name == "fsck"]
        return evaluation

    intact = fsck()
    assert intact.metadata["num_errors"].value == 0
    live = load_snapshot(Storage.for_uri(str(root))).files.column("path").to_pylist()
    gone = sorted(live)[0]
    (root / unquote(gone)).unlink()
    broken = fsck()
    assert not broken.passed and broken.severity.value == "ERROR"
    assert broken.metadata["num_errors"].value == 1
    assert "missing_file" in broken.metadata["problem_codes"].value
    assert unquote(gone) in broken.description or gone in broken.description

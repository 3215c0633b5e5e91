"""End to end: `dagster dev` on 127.0.0.1, the way a user with a `dg` project runs it.

A temporary dg project holds one `DeltaMaintenanceComponent` (`defs/tables/defs.yaml`): a
registry file with three corpus copies, three tables listed in the YAML (one intact table
with a data file deleted, one with a URI of an unsupported scheme, one whose storage
options name an environment variable that is not set) and a discovery prefix (`lake/`)
holding one table at start. Over GraphQL, one `dagster dev` start:

1. the location loads with every table's assets, the broken ones included;
2. a table copied under the prefix after start is found by the discovery sensor's tick and
   gets its assets at the reload of the location (issue 16: discovery by the sensor);
3. `maintenance` over all tables: the two broken tables' steps fail, each naming the
   problem once (the file and key of the entry, or the unset variable), every other table
   is maintained (checkpoint, checksums, compaction files written) and `fsck` fails
   on the table with the deleted file, naming it, and passes on the others (a broken entry
   leaves the others loaded; the missing-files check);
4. two commits appended to three discovered tables by another writer (`deltalake`) and a
   corrupt commit written to `dv`; one tick of the watch sensor, started over GraphQL,
   fails `dv`'s `log_readable` check naming the file (no run), lists it in the fleet
   overview, records an observation of each moved log, and requests one run
   (`runs_per_tick: 1`) of two tables (`tables_per_run: 2`), one step each, writing their
   checkpoints and version checksums (derived incrementally from the `.crc` the
   maintenance run left); the third table waits for a later tick (issue 23);
5. `row_tracking_backfill` on one partition.

Process handling (its own process group, killed as a whole at the end) is in
`delta_ops_tests.support.dagster_dev`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
from delta_ops.protocol import features
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import copy_corpus_table
from delta_ops_tests.support.dagster_dev import (
    Dagit,
    project_environment,
    running_dagster_dev,
)
from delta_ops_tests.support.dg_project import new_project, write_component

pytestmark = pytest.mark.e2e

COMPONENTS = ("delta_log", "checkpoint", "version_checksum", "log_compaction",
              "metadata_cleanup", "vacuum", "row_tracking", "optimize", "stats")
EDGES = {
    ("checkpoint", "delta_log"), ("version_checksum", "delta_log"),
    ("log_compaction", "delta_log"), ("vacuum", "delta_log"), ("row_tracking", "delta_log"),
    ("optimize", "delta_log"), ("stats", "delta_log"), ("metadata_cleanup", "checkpoint"),
}
PROJECT = "e2e_proj"
REGISTERED = {"ckpt", "dv", "stats"}           # from the registry file
LISTED = {"gone", "bad_uri", "no_secret"}       # listed in defs.yaml
BROKEN = {"bad_uri", "no_secret"}
DISCOVERED = {"sales__orders", "sales__refunds", "sales__returns"}  # returns: after start
UNSET_SECRET = "DELTA_OPS_E2E_UNSET_SECRET"
DEADLINE_S = 240  # the whole test, start to stop, stays under 4 minutes


def log_file(root: Path, version: int, suffix: str) -> Path:
    return root / "_delta_log" / f"{version:020d}.{suffix}"


@pytest.fixture
def dagster_dev(tmp_path):
    project = new_project(tmp_path / "proj", PROJECT, location="delta_ops")
    tables, lake = project / "tables", project / "lake"
    roots = {
        "ckpt": copy_corpus_table("golden__checkpoint", tables / "ckpt"),
        "dv": copy_corpus_table("golden__dv-partitioned-with-checkpoint", tables / "dv"),
        "stats": copy_corpus_table(
            "golden__data-skipping-change-stats-collected-across-versions", tables / "stats"),
        "gone": copy_corpus_table("basic_append", tables / "gone"),
        "sales__orders": copy_corpus_table("basic_append", lake / "sales" / "orders"),
        "sales__refunds": copy_corpus_table("basic_append", lake / "sales" / "refunds"),
    }
    snap = load_snapshot(Storage.for_uri(str(roots["gone"])))
    deleted = sorted(snap.files.column("path").to_pylist())[0]
    (roots["gone"] / deleted).unlink()
    (project / "tables.yaml").write_text(yaml.safe_dump({
        "defaults": {"engine": "local"},
        "tables": [
            {"name": "ckpt", "uri": "tables/ckpt", "checkpoint": {"interval": 2}},
            {"name": "dv", "uri": "tables/dv"},
            {"name": "stats", "uri": "tables/stats", "compaction": {"interval": 2}},
        ],
    }))
    write_component(project, PROJECT, {
        "registry_file": "tables.yaml",
        # Small caps, so that one tick of the watch shows them: two tables a run, one run.
        "defaults": {"engine": "local",
                     "automation": {"tables_per_run": 2, "runs_per_tick": 1}},
        "tables": [
            {"name": "gone", "uri": "tables/gone"},
            {"name": "bad_uri", "uri": "ftp://files.example.com/bad_uri"},
            {"name": "no_secret", "uri": "s3://delta-ops-e2e/no_secret",
             "storage_options": {"secret": {"env": UNSET_SECRET}}},
        ],
        "discover": [{"prefix": "lake", "policies": [
            {"match": "sales/*", "checkpoint": {"interval": 2}}]}],
        "discovery_interval_seconds": 5,
    })
    env = project_environment(project, f"{PROJECT}.definitions", tmp_path / "dagster_home")
    env.pop(UNSET_SECRET, None)
    with running_dagster_dev(project, env, tmp_path / "dagster_dev.log") as (dagit, proc):
        yield dagit, project, roots, deleted, proc


#: How long a test waits for a sensor's tick. The daemon evaluates sensors in turn, and a
#: busy 2-core CI machine can delay a tick well past its interval; a hang still fails,
#: naming the wait.
SENSOR_WAIT_S = 180


def wait_until(what: str, timeout: float, probe):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = probe()
        if out:
            return out
        time.sleep(1)
    raise AssertionError(f"{what}: not within {timeout} s")


def assert_graph(dagit: Dagit, tables: set[str]) -> None:
    nodes = dagit.asset_nodes()
    assert {tuple(n["assetKey"]["path"]) for n in nodes} == {
        (t, c) for t in tables for c in COMPONENTS} | {("delta_ops_fleet", "overview")}
    nodes = [n for n in nodes if n["assetKey"]["path"][0] != "delta_ops_fleet"]
    for table in tables:
        mine = [n for n in nodes if n["assetKey"]["path"][0] == table]
        edges = {(n["assetKey"]["path"][1], d["path"][1]) for n in mine
                 for d in n["dependencyKeys"]}
        assert edges == EDGES, table
        # One step per table: the log is materialized by reading it, nothing is observable.
        assert [n["assetKey"]["path"][1] for n in mine if n["isObservable"]] == []
    assert {n["groupName"] for n in nodes if n["assetKey"]["path"][0] == "dv"} == {"dv"}


def discover_new_table(dagit: Dagit, project: Path, roots: dict[str, Path]) -> None:
    """A table copied under the prefix after start: in the cache after a discovery tick,
    with assets after the reload."""
    roots["sales__returns"] = copy_corpus_table(
        "basic_append", project / "lake" / "sales" / "returns")
    cache = project / ".delta_ops" / "discovered_tables.json"

    def cached() -> bool:
        try:
            scans = json.loads(cache.read_text())["scans"]
        except (OSError, ValueError, KeyError):
            return False
        return any("sales/returns" in s["paths"] for s in scans.values())

    wait_until("the discovery sensor finds lake/sales/returns", SENSOR_WAIT_S, cached)
    # The cache is written inside the tick; the tick's reason shows once the tick ends.
    # It says, in the UI, which tables are new and that a reload adds them.
    message = "1 new: sales__returns; reload the code location"

    def reported() -> bool:
        return any(message in (t["skipReason"] or "")
                   for t in dagit.sensor_ticks("delta_tables_discovery"))

    wait_until("a discovery tick reports sales__returns", SENSOR_WAIT_S, reported)
    ticks = dagit.sensor_ticks("delta_tables_discovery")
    assert ticks and all(t["error"] is None for t in ticks), ticks
    dagit.reload()
    assert_graph(dagit, REGISTERED | LISTED | DISCOVERED)


def check_maintenance(dagit: Dagit, roots: dict[str, Path], deleted: str) -> None:
    run_id = dagit.launch("__ASSET_JOB")  # every asset, as Materialize all
    assert dagit.wait(run_id, timeout=120) == "FAILURE"  # the two broken tables' steps
    steps = dagit.step_stats(run_id)
    broken_steps = {f"{t}__maintenance" for t in BROKEN}  # one step per table
    assert {k for k, s in steps.items() if s != "SUCCESS"} == broken_steps, steps
    good = REGISTERED | DISCOVERED | {"gone"}
    assert {f"{t}__maintenance" for t in good} == {
        k for k, s in steps.items() if s == "SUCCESS"}
    failures = {e["stepKey"]: e["error"]["message"] for e in dagit.events(run_id)
                if e["__typename"] == "ExecutionStepFailureEvent"}
    assert set(failures) == broken_steps
    for step in broken_steps:
        message = failures[step]
        # One reason, named once, in the file the entry is written in.
        if step.startswith("bad_uri"):
            assert "defs.yaml: invalid table registry: defs.yaml tables[1].uri" in message
            assert "unsupported scheme 'ftp'" in message and message.count("ftp://") == 1
        else:
            assert f"environment variable {UNSET_SECRET}, which is not set" in message
            assert "(table no_secret)" in message and message.count(UNSET_SECRET) == 1

    ckpt, dv, stats = roots["ckpt"], roots["dv"], roots["stats"]
    assert log_file(ckpt, 14, "checkpoint.parquet").exists()
    assert log_file(ckpt, 14, "crc").exists()
    assert json.loads((ckpt / "_delta_log" / "_last_checkpoint").read_text())["version"] == 14
    assert log_file(dv, 15, "crc").exists()
    assert (stats / "_delta_log" /
            "00000000000000000002.00000000000000000003.compacted.json").exists()
    assert log_file(roots["gone"], 1, "crc").exists()
    assert log_file(roots["sales__returns"], 1, "crc").exists()

    missing = dagit.check_evaluation(["gone", "delta_log"], "fsck")
    assert missing is not None and missing["success"] is False, missing
    assert missing["severity"] == "ERROR"
    assert deleted in missing["description"] and "1 error(s)" in missing["description"]
    assert deleted in missing["metadata"]["problems"]
    assert missing["metadata"]["num_errors"] == 1
    for table in ("dv", "stats", "sales__orders"):
        intact = dagit.check_evaluation([table, "delta_log"], "fsck")
        assert intact is not None and intact["metadata"]["num_errors"] == 0, (table, intact)
    for table in BROKEN:
        result = dagit.check_evaluation([table, "delta_log"], "fsck")
        assert result is not None and result["success"] is False, (table, result)
        assert table in result["description"], result


def check_watch(dagit: Dagit, roots: dict[str, Path]) -> None:
    """Another writer appends to three tables and corrupts a fourth's log; one tick of the
    watch sensor fails the corrupt table's log_readable check (no run), lists it in the
    fleet overview, and asks for one run (runs_per_tick 1) of two tables (tables_per_run 2),
    one step each; the third table waits for a later tick."""
    from deltalake import DeltaTable, write_deltalake

    appended = ("sales__orders", "sales__refunds", "sales__returns")
    for name in appended:
        assert log_file(roots[name], 1, "crc").exists()
        rows = DeltaTable(str(roots[name])).to_pyarrow_table().slice(0, 1)
        for _ in range(2):
            write_deltalake(str(roots[name]), rows, mode="append")
        assert not log_file(roots[name], 3, "crc").exists()
    corrupt = log_file(roots["dv"], 16, "json")
    corrupt.write_text('{"commitInfo": {"timestamp": 1\n')

    dagit.start_sensor("delta_tables_watch")
    tick = wait_until(
        "a tick of delta_tables_watch", SENSOR_WAIT_S,
        lambda: next((t for t in dagit.sensor_ticks("delta_tables_watch")
                      if t["status"] in ("SUCCESS", "FAILURE", "SKIPPED")), None),
    )
    dagit.stop_sensor("delta_tables_watch")
    assert tick["status"] == "SUCCESS", tick
    runs = dagit.runs({"dagster/sensor_name": "delta_tables_watch"})
    assert [r["runId"] for r in runs] == tick["runIds"] and len(runs) == 1, (tick, runs)
    (run,) = runs
    assert run["tags"]["delta_ops/tables"] == "2"
    assert run["tags"]["delta_ops/components"] == "checkpoint,version_checksum"

    # The corrupt table: its log_readable check failed from the watch alone, naming the file.
    readable = dagit.check_evaluation(["dv", "delta_log"], "log_readable")
    assert readable is not None and readable["success"] is False, readable
    assert "_delta_log/00000000000000000016.json" in readable["description"], readable
    # The fleet overview lists it first, with why; the third appended table waits.
    overview = dagit.latest_observation_full(["delta_ops_fleet", "overview"])
    rows = {r["table"]: r for r in overview["tables"]}
    assert overview["tables"][0]["table"] in ("dv", "bad_uri", "no_secret", "gone")
    assert rows["dv"]["status"] == "error"
    assert "00000000000000000016.json" in rows["dv"]["attention"]
    assert "dv" in overview["report"]
    assert rows["sales__returns"]["due"] == "checkpoint, version_checksum"
    assert rows["sales__returns"]["status"] == "ok"  # not requested: waits for a later tick
    assert {rows[t]["status"] for t in ("sales__orders", "sales__refunds")} == {"requested"}

    # The sensor itself keeps the log's asset current (no run needed for that).
    seen = dagit.latest_observation(["sales__orders", "delta_log"])
    assert seen["version"] == 3 and seen["observed_by"] == "delta_tables_watch", seen
    assert dagit.wait(run["runId"], timeout=60) == "SUCCESS"
    assert dagit.step_stats(run["runId"]) == {"sales__orders__maintenance": "SUCCESS",
                                              "sales__refunds__maintenance": "SUCCESS"}
    done = {tuple(e["assetKey"]["path"]): {m["label"]: m.get("intValue")
                                           for m in e["metadataEntries"]}
            for e in dagit.events(run["runId"]) if e["__typename"] == "MaterializationEvent"}
    assert set(done) == {(t, c) for t in ("sales__orders", "sales__refunds")
                         for c in ("checkpoint", "version_checksum")}
    checksum = done[("sales__orders", "version_checksum")]
    assert checksum["incremental_computations"] == 2 and checksum["full_computations"] == 0
    orders = roots["sales__orders"]
    assert log_file(orders, 3, "checkpoint.parquet").exists()
    assert json.loads((orders / "_delta_log" / "_last_checkpoint").read_text())["version"] == 3
    assert log_file(orders, 2, "crc").exists() and log_file(orders, 3, "crc").exists()
    assert not log_file(roots["sales__returns"], 3, "crc").exists()
    corrupt.unlink()  # repaired: the backfill below uses dv


def test_dagster_dev_end_to_end(dagster_dev):
    started = time.monotonic()
    dagit, project, roots, deleted, proc = dagster_dev
    dagit.wait_for_location(proc, timeout=120)
    # Loading never lists the prefix: no discovered table before the sensor's first tick.
    assert_graph(dagit, REGISTERED | LISTED)

    discover_new_table(dagit, project, roots)
    check_maintenance(dagit, roots, deleted)
    check_watch(dagit, roots)

    names = REGISTERED | LISTED | DISCOVERED
    wait_until("the partitions sensor registers every table", SENSOR_WAIT_S,
               lambda: dagit.partitions("row_tracking_backfill_partition_set") == names)
    run_id = dagit.launch(
        "row_tracking_backfill",
        {"ops": {"backfill_row_tracking": {"config": {"batch_size": 5,
                                                      "confirm_protocol_upgrade": True}}}},
        partition="dv",
    )
    assert dagit.wait(run_id, timeout=60) == "SUCCESS"
    snap = load_snapshot(Storage.for_uri(str(roots["dv"])))
    assert features.is_feature_enabled(snap.protocol, snap.metadata.configuration, "rowTracking")
    assert snap.files.column("baseRowId").null_count == 0
    progress = [m for m in dagit.messages(run_id) if "row tracking batch committed" in m]
    assert len(progress) == 3  # 15 files in batches of 5
    assert time.monotonic() - started < DEADLINE_S

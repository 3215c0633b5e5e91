"""End to end, the partitioned asset layout: `dagster dev` on 127.0.0.1 over a fleet.

A temporary dg project holds one `DeltaMaintenanceComponent` whose defaults switch the
layout on (`automation: {asset_layout: partitioned, tables_per_run: 5, runs_per_tick: 2}`)
and list thirteen small generated tables (`delta_ops_tests.support.fleet`: three commits
each, no `.crc`, so each is due for a version checksum; three of them set
`delta.checkpointInterval: 2` and are due for a checkpoint too). One table's latest commit
is truncated (not JSON). Over GraphQL, one `dagster dev` start:

1. the asset graph is the layout's: nine `delta_tables/<component>` assets and the fleet
   overview, no per-table key; the nine and the three checks partitioned by the dynamic
   partitions `delta_tables`, which the `delta_tables_partitions` sensor (running by
   default) fills with one partition per table, in the registry's order;
2. the watch sensor, started over GraphQL: its first tick fails the fleet's `logs_readable`
   check on `delta_tables/delta_log` (no run: the sensor reports it), naming the corrupt
   table and its file; no partition's own check is reported without a run;
3. the fleet overview (`delta_ops_fleet/overview`) lists the corrupt table first, as the one
   table needing attention, in its table and its markdown report;
4. no tick launches more than `runs_per_tick` runs (the first launches exactly two: twelve
   due tables need three ranges of five); each run is a range of at most `tables_per_run`
   partitions (tags `dagster/asset_partition_range_start`/`_end`) naming its due tables in
   its config, several in at least one, never the corrupt table;
5. every healthy table ends maintained: a `.crc` at its latest version (and a checkpoint
   where its interval asks for one), and its partition of `delta_tables/version_checksum`
   materialized by a watch run, not recorded as skipped; the corrupt table is never
   maintained (a range run over its partition records it as skipped).

Process handling is in `delta_ops_tests.support.dagster_dev`.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from delta_ops.defs.keys import COMPONENTS
from delta_ops_tests.support.dagster_dev import (
    Dagit,
    project_environment,
    running_dagster_dev,
    wait_until,
)
from delta_ops_tests.support.dg_project import new_project, write_component
from delta_ops_tests.support.fleet import fleet_configuration, write_fleet

pytestmark = pytest.mark.e2e

#: The layout's lineage: each component on the log, metadata cleanup on the checkpoint.
UPSTREAM = {c: "delta_log" for c in COMPONENTS[1:]} | {"metadata_cleanup": "checkpoint"}
#: Component -> its checks -> their partitions: a table's own checks are partitioned, the
#: fleet's (which the watch reports without a run) are not.
CHECKS = {"delta_log": {"log_readable": "delta_tables", "fsck": "delta_tables",
                        "logs_readable": None},
          "checkpoint": {"checkpoint_fresh": "delta_tables", "checkpoints_fresh": None}}
OVERVIEW = ("delta_ops_fleet", "overview")
PARTITIONS = "delta_tables"
PROJECT = "e2e_fleet"
TABLES = 13
CORRUPT_INDEX = 6  # in the middle: its partition falls inside a range run
COMMITS = 3
LATEST = COMMITS - 1
TABLES_PER_RUN = 5
RUNS_PER_TICK = 2
WATCH = "delta_tables_watch"
#: The whole test, from the location's load to the last assertion (about 80 s when idle on
#: 2 cores: a load, one partitions tick, two watch ticks 30 s apart, three short runs).
DEADLINE_S = 170
#: How long a test waits for a sensor's tick. The daemon evaluates sensors in turn, and a
#: busy 2-core CI machine can delay a tick past its interval; a hang still fails, naming the
#: wait.
SENSOR_WAIT_S = 90
#: The watch's interval is 30 s: the third range is requested by its second tick.
MAINTAINED_WAIT_S = 120
CORRUPT_FILE = f"_delta_log/{LATEST:020d}.json"


def log_file(root: Path, version: int, suffix: str) -> Path:
    return root / "_delta_log" / f"{version:020d}.{suffix}"


@pytest.fixture
def dagster_dev(tmp_path):
    project = new_project(tmp_path / "proj", PROJECT, location="delta_ops")
    paths = write_fleet(project / "lake", TABLES, commits=COMMITS)
    names = [p.replace("/", "__") for p in paths]
    roots = {n: project / "lake" / p for n, p in zip(names, paths, strict=True)}
    corrupt = names[CORRUPT_INDEX]
    # Another writer died mid-commit: the latest commit is cut short, not JSON.
    log_file(roots[corrupt], LATEST, "json").write_text('{"commitInfo": {"timestamp": 1\n')
    write_component(project, PROJECT, {
        "defaults": {"engine": "local", "automation": {
            "asset_layout": "partitioned", "tables_per_run": TABLES_PER_RUN,
            "runs_per_tick": RUNS_PER_TICK}},
        "tables": [{"name": n, "uri": f"lake/{p}"} for n, p in zip(names, paths, strict=True)],
    })
    env = project_environment(project, f"{PROJECT}.definitions", tmp_path / "dagster_home")
    with running_dagster_dev(project, env, tmp_path / "dagster_dev.log") as (dagit, proc):
        yield dagit, names, roots, corrupt, proc


def assert_graph(dagit: Dagit) -> None:
    """Nine partitioned assets and the overview, whatever the fleet's size."""
    graph = dagit.asset_graph()
    assert set(graph) == {(PARTITIONS, c) for c in COMPONENTS} | {OVERVIEW}, sorted(graph)
    for component in COMPONENTS:
        node = graph[(PARTITIONS, component)]
        assert node["partitions"] == PARTITIONS, (component, node)
        assert not node["observable"], component
        assert node["deps"] == ({(PARTITIONS, UPSTREAM[component])}
                                if component in UPSTREAM else set()), (component, node)
        assert node["checks"] == CHECKS.get(component, {}), node
    assert graph[OVERVIEW]["partitions"] is None and graph[OVERVIEW]["checks"] == {}


def watch_ticks(dagit: Dagit) -> list[dict]:
    """The watch's ticks, oldest first; a failed tick fails the test, with its error."""
    ticks = dagit.sensor_ticks(WATCH)[::-1]
    failed = [t for t in ticks if t["status"] == "FAILURE"]
    assert not failed, f"a tick of {WATCH} failed: {failed[0]['error']['message'][:2000]}"
    return ticks


def first_tick(dagit: Dagit) -> dict:
    return wait_until(
        f"a tick of {WATCH}", SENSOR_WAIT_S,
        lambda: next((t for t in watch_ticks(dagit) if t["status"] != "STARTED"), None))


def check_corrupt_table(dagit: Dagit, names: list[str], corrupt: str) -> None:
    """The watch's own evaluation: the fleet's logs_readable fails, naming the corrupt table
    and its file, and no run evaluated it. (A partition's own result reported without a run
    can be stored only once by Dagster 1.13, so the watch reports none: see
    `delta_ops.defs.fleet.FLEET_HEALTH`.)"""
    readable = dagit.partition_check_evaluation([PARTITIONS, "delta_log"], "logs_readable",
                                                None)
    assert readable is not None and readable["success"] is False, readable
    assert readable["partition"] is None and readable["runId"] == "", readable
    assert readable["severity"] == "ERROR", readable
    assert readable["description"].startswith(
        f"1 of {len(names)} tables: {corrupt}: cannot read the log: {CORRUPT_FILE}"), readable
    assert readable["metadata"]["num_failing"] == 1, readable
    assert readable["metadata"]["num_tables"] == len(names), readable
    statuses = dagit.check_partition_statuses([PARTITIONS, "delta_log"], "log_readable")
    assert not any(statuses.values()), statuses


def check_overview(dagit: Dagit, names: list[str], corrupt: str) -> None:
    """The overview lists the corrupt table, first, as the one needing attention."""
    overview = dagit.latest_observation_full(list(OVERVIEW))
    rows = {r["table"]: r for r in overview["tables"]}
    assert set(rows) == set(names), sorted(rows)
    assert overview["tables"][0]["table"] == corrupt, overview["tables"][0]
    assert rows[corrupt]["status"] == "error", rows[corrupt]
    assert CORRUPT_FILE in rows[corrupt]["attention"], rows[corrupt]
    assert rows[corrupt]["due"] == "", rows[corrupt]
    others = [rows[n] for n in names if n != corrupt]
    assert [r for r in others if r["attention"] or r["status"] == "error"] == [], others
    assert overview["num_tables"] == TABLES and overview["num_attention"] == 1, overview
    report = overview["report"]
    attention = report.split("| --- | --- | --- |", 1)[1] if "| --- |" in report else ""
    assert f"| {corrupt} | error |" in attention and CORRUPT_FILE in attention, report
    assert not any(n in attention for n in names if n != corrupt), report


def check_runs(dagit: Dagit, names: list[str], corrupt: str, ticks: list[dict]) -> dict:
    """Runs per tick bounded; each run a range of at most tables_per_run partitions naming
    its tables; every healthy table requested once, the corrupt one never. Returns table ->
    the run id that maintained it."""
    assert ticks and all(len(t["runIds"]) <= RUNS_PER_TICK for t in ticks), ticks
    # Twelve due tables in ranges of five: the first tick hits the cap, a later one has the rest.
    launching = [t for t in ticks if t["runIds"]]
    assert len(launching[0]["runIds"]) == RUNS_PER_TICK, ticks
    assert len(launching) >= 2, ticks
    runs = dagit.runs({"dagster/sensor_name": WATCH})
    assert sorted(r["runId"] for r in runs) == sorted(
        i for t in ticks for i in t["runIds"]), (runs, ticks)
    order = dagit.partition_keys([PARTITIONS, "delta_log"])
    maintained_by: dict[str, str] = {}
    for run in runs:
        tags = dict(run["tags"])
        details = dagit.run_details(run["runId"])
        assert details["job"] == "__ASSET_JOB" and details["checks"] == [], details
        assert details["assets"] and all(k[0] == PARTITIONS for k in details["assets"])
        assert (PARTITIONS, "version_checksum") in details["assets"], details
        if "dagster/partition" in tags:  # a range of one
            tables = [tags["dagster/partition"]]
        else:
            first = order.index(tags["dagster/asset_partition_range_start"])
            last = order.index(tags["dagster/asset_partition_range_end"])
            assert 0 < last - first < TABLES_PER_RUN, tags
            tables = details["config"]["ops"]["delta_tables__maintenance"]["config"]["tables"]
            assert set(tables) <= set(order[first:last + 1]), (tags, tables)
            assert tables[0] == order[first] and tables[-1] == order[last], (tags, tables)
        assert tags["delta_ops/tables"] == str(len(tables)), (tags, tables)
        assert corrupt not in tables, (corrupt, tags, tables)
        for table in tables:
            assert table not in maintained_by, f"{table} requested twice"
            maintained_by[table] = run["runId"]
    assert set(maintained_by) == set(names) - {corrupt}, sorted(maintained_by)
    assert max(int(dict(r["tags"])["delta_ops/tables"]) for r in runs) > 1, runs
    return maintained_by


def check_materialized(dagit: Dagit, names: list[str], corrupt: str,
                       maintained_by: dict[str, str]) -> None:
    """Each healthy partition of version_checksum materialized by its run (not skipped);
    the corrupt one never maintained."""
    statuses = dagit.partition_statuses([PARTITIONS, "version_checksum"])
    healthy = set(names) - {corrupt}
    assert healthy <= statuses["materialized"], statuses
    assert not statuses["failed"] and not statuses["materializing"], statuses
    for table in sorted(healthy):
        done = dagit.partition_materialization([PARTITIONS, "version_checksum"], table)
        assert done is not None and done["runId"] == maintained_by[table], (table, done)
        assert "skipped" not in done["metadata"], (table, done)
        assert done["metadata"]["end"] == LATEST, (table, done)
    # A range run over the corrupt table's partition records it as skipped, never maintained.
    done = dagit.partition_materialization([PARTITIONS, "version_checksum"], corrupt)
    assert done is None or "skipped" in done["metadata"], done


def test_partitioned_fleet_end_to_end(dagster_dev):
    dagit, names, roots, corrupt, proc = dagster_dev
    dagit.wait_for_location(proc, timeout=120)
    started = time.monotonic()
    assert_graph(dagit)
    # One partition per table, in the registry's order, from the partitions sensor.
    partitions = wait_until(
        "the partitions sensor adds a partition per table", SENSOR_WAIT_S,
        lambda: (keys := dagit.partition_keys([PARTITIONS, "delta_log"])) and
        set(keys) == set(names) and keys)
    assert partitions == names

    dagit.start_sensor(WATCH)
    tick = first_tick(dagit)
    assert tick["status"] == "SUCCESS", tick
    check_corrupt_table(dagit, names, corrupt)
    check_overview(dagit, names, corrupt)

    healthy = [n for n in names if n != corrupt]

    def maintained() -> bool:
        watch_ticks(dagit)  # a failed tick fails at once, naming its error
        return all(log_file(roots[n], LATEST, "crc").exists() for n in healthy)

    wait_until("every healthy table has a .crc at its latest version", MAINTAINED_WAIT_S,
               maintained, every=2)
    dagit.stop_sensor(WATCH)
    # A tick under way when the sensor stopped may still launch its runs: let it end.
    ticks = wait_until(f"the last tick of {WATCH} ends", SENSOR_WAIT_S, lambda: (
        ts := watch_ticks(dagit)) and all(t["status"] != "STARTED" for t in ts) and ts)
    maintained_by = check_runs(dagit, names, corrupt, ticks)
    for run_id in sorted(set(maintained_by.values())):
        assert dagit.wait(run_id, timeout=60) == "SUCCESS", run_id
    check_materialized(dagit, names, corrupt, maintained_by)

    for name in healthy:
        i = names.index(name)
        checkpoint = log_file(roots[name], LATEST, "checkpoint.parquet")
        # Interval 2 (fleet_configuration): three commits call for a checkpoint.
        assert checkpoint.exists() == ("delta.checkpointInterval" in fleet_configuration(i)), (
            name)
    assert not log_file(roots[corrupt], LATEST, "crc").exists()
    assert not log_file(roots[corrupt], LATEST, "checkpoint.parquet").exists()
    assert not list((roots[corrupt] / "_delta_log").glob("*.crc"))
    assert time.monotonic() - started < DEADLINE_S

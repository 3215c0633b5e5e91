"""The Dagster layer with a fleet of 1,000 discovered tables: the watch sensor's cursor stays
small (Dagster stores it with every tick) while the sensor keeps its behaviour: a bounded
number of runs per tick, several tables per run, each table with all of its due components,
quiet tables cost no new events, new tables and new commits are picked up. Sizes only; times are for
`benchmarks/bench_dagster.py`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from dagster import (
    AssetKey,
    AssetObservation,
    DagsterInstance,
    Definitions,
    build_sensor_context,
)

from delta_ops.defs import definitions_kwargs
from delta_ops.defs.overview import OVERVIEW_KEY
from delta_ops.defs.sensors import EVENTS_PER_TICK, InFlight, watch_tick
from delta_ops.defs.sources import (
    RegistrySource,
    assemble_registry,
    discovered_name,
    refresh_discovery,
)
from delta_ops.defs.watch_cursor import (
    CURSOR_PREFIX,
    DUE_PROPERTIES,
    due_settings,
    dump_cursor,
    load_cursor,
)
from delta_ops.log.segment.log_state import TableSettings
from delta_ops_tests.support import s3_server as s3_fixtures
from delta_ops_tests.support.corpus import REPO_ROOT
from delta_ops_tests.support.dg_project import new_project, write_component
from delta_ops_tests.support.fleet import fleet_configuration, fleet_path, write_fleet

FLEET = 1000
CURSOR_LIMIT = 20_000


def _tick(defs: Definitions, instance: DagsterInstance, cursor: str | None):
    sensor = defs.resolve_sensor_def("delta_tables_watch")
    context = build_sensor_context(instance=instance, cursor=cursor, definitions=defs,
                                   resources={"registry": defs.resources["registry"]})
    return sensor(context)


def load_registry_of(defs: Definitions):
    return defs.resources["registry"].load()


def _name(source: RegistrySource, i: int) -> str:
    return discovered_name(source.discover[0], fleet_path(i))


def test_watch_cursor_stays_small_with_1000_discovered_tables(tmp_path):
    lake = tmp_path / "lake"
    write_fleet(lake, FLEET, commits=3)
    source = RegistrySource(
        base_dir=str(tmp_path),
        defaults={"engine": "local", "automation": {"tables_per_run": 100}},
        discover=[{"prefix": str(lake), "max_depth": 2}], discovery_cache="cache.json",
    )
    assert refresh_discovery(source)["found"] == FLEET
    defs = Definitions(**definitions_kwargs(source=source))
    instance = DagsterInstance.ephemeral()

    first = _tick(defs, instance, None)
    assert first.cursor.startswith(CURSOR_PREFIX)
    assert len(first.cursor.encode()) < CURSOR_LIMIT, len(first.cursor)
    # A bounded number of runs, several tables each (issue 23): runs_per_tick (4) runs of
    # tables_per_run (100 here) tables, each table with every component due: tables with
    # delta.checkpointInterval=2 (every fifth) need a checkpoint too.
    assert len(first.run_requests) == 4
    per_run = [{k.path[0] for k in r.asset_selection} for r in first.run_requests]
    assert [len(t) for t in per_run] == [100] * 4 and not set.intersection(*per_run)
    selected = {(k.path[0], k.path[1]) for r in first.run_requests for k in r.asset_selection}
    names = [_name(source, i) for i in range(FLEET)]
    order = sorted(range(FLEET), key=lambda i: names[i])  # the registry's (discovery) order
    first_400 = [i for i in order[:400]]
    for i in first_400[:20]:
        assert (names[i], "version_checksum") in selected
        assert ((names[i], "checkpoint") in selected) == (i % 5 == 0)
    assert {t for t, _ in selected} == {names[i] for i in first_400}
    # At most EVENTS_PER_TICK observations and check results a tick (the daemon stores
    # each as an event): the first logs and the fleet overview; the rest come later.
    observations = [e for e in first.asset_events if isinstance(e, AssetObservation)]
    assert len(observations) == EVENTS_PER_TICK + 1
    assert len(first.asset_events) == EVENTS_PER_TICK + 1
    # What the cursor keeps is what the next tick needs: version, protocol, due properties.
    entries = load_cursor(first.cursor)
    assert len(entries) == FLEET
    entry = entries[_name(source, 3)]
    assert entry["version"] == 2 and entry["status"] == "ok"
    assert entry["settings"]["protocol"] == {"minReaderVersion": 1, "minWriterVersion": 4}
    assert entries[_name(source, 5)]["settings"]["configuration"] == {
        "delta.checkpointInterval": "2"}
    assert entries[_name(source, 6)]["settings"]["configuration"] == {}

    # The next tick asks for the next tables, never the ones it asked for already; while
    # runs of the watch are in flight (max_runs_in_flight, 4) it asks for none.
    busy = watch_tick(load_registry_of(defs), first.cursor, lambda _: None,
                      InFlight(frozenset(), 4))
    assert not busy.requests and busy.waiting == 600
    quiet = _tick(defs, instance, first.cursor)
    seen = {e.asset_key.path[0] for e in observations}
    later = [e for e in quiet.asset_events if isinstance(e, AssetObservation)
             and e.asset_key != OVERVIEW_KEY]
    assert len(later) == EVENTS_PER_TICK and not seen & {e.asset_key.path[0] for e in later}
    again = {k.path[0] for r in quiet.run_requests for k in r.asset_selection}
    assert again == {names[i] for i in order[400:800]}
    assert len(quiet.cursor.encode()) < CURSOR_LIMIT

    cursor = quiet.cursor
    for _ in range(FLEET // EVENTS_PER_TICK - 2):  # the first look reported in full
        cursor = _tick(defs, instance, cursor).cursor

    # A new commit on one table and a new table found by discovery.
    table_7 = lake / fleet_path(7) / "_delta_log"
    (table_7 / f"{3:020d}.json").write_text(
        json.dumps({"commitInfo": {"timestamp": 1_700_000_001_000, "operation": "WRITE"}})
        + "\n")
    write_fleet(lake, 1, commits=3, start=FLEET)
    assert refresh_discovery(source)["added"] == [_name(source, FLEET)]
    defs = Definitions(**definitions_kwargs(source=source))
    moved = _tick(defs, instance, cursor)
    assert {e.asset_key.path[0] for e in moved.asset_events
            if isinstance(e, AssetObservation) and e.asset_key != OVERVIEW_KEY} == {
        _name(source, 7), _name(source, FLEET)}
    wanted = {(k.path[0], k.path[1]) for r in moved.run_requests for k in r.asset_selection}
    assert (_name(source, 7), "version_checksum") in wanted  # moved: due again at version 3
    assert (_name(source, FLEET), "checkpoint") in wanted or _name(source, FLEET) not in {
        t for t, _ in wanted}
    assert len(moved.cursor.encode()) < CURSOR_LIMIT


def test_cursor_keeps_only_the_due_properties_unless_one_is_invalid():
    settings = TableSettings(4, {"minReaderVersion": 1, "minWriterVersion": 2},
                             fleet_configuration(5))
    kept = due_settings(settings)
    assert kept.configuration == {"delta.checkpointInterval": "2"}
    assert kept.checkpoint_interval == settings.checkpoint_interval == 2
    assert set(DUE_PROPERTIES) >= set(kept.configuration)
    # Each property is parsed on its own: an invalid one the rules do not read changes
    # nothing, and an invalid interval gives the default both ways, so the sensor decides
    # as `delta-ops due` does from the full configuration.
    broken = TableSettings(4, settings.protocol, {**settings.configuration,
                                                  "delta.appendOnly": "maybe"})
    assert due_settings(broken).configuration == {"delta.checkpointInterval": "2"}
    assert due_settings(broken).checkpoint_interval == broken.checkpoint_interval == 2
    bad_interval = TableSettings(4, settings.protocol, {**settings.configuration,
                                                        "delta.checkpointInterval": "often"})
    assert due_settings(bad_interval).checkpoint_interval == 10
    assert bad_interval.checkpoint_interval == 10


def test_cursor_round_trip_and_older_or_broken_cursors():
    protocol = {"minReaderVersion": 1, "minWriterVersion": 2}
    entries = {
        "a": {"status": "ok", "version": 7,
              "settings": {"version": 7, "protocol": protocol, "configuration": {}}},
        "b": {"status": "error", "version": 3,
              "settings": {"version": 3, "protocol": protocol, "configuration": {}}},
        "c": {"status": "ok", "version": 9, "settings": {
            "version": 8, "protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                                       "readerFeatures": [], "writerFeatures": ["appendOnly"]},
            "configuration": {"delta.checkpointInterval": "5"}}},
        "missing": {"status": "missing"},
        "invalid": {"status": "invalid"},
    }
    assert load_cursor(dump_cursor(entries)) == entries
    # The plain JSON cursor of format 1 (before the packing) is still read.
    legacy = json.dumps({"format": 1, "tables": entries})
    assert load_cursor(legacy) == entries
    for garbage in ("", "not json", CURSOR_PREFIX + "!!!", CURSOR_PREFIX + "eJzLSM3JBwAGLAIW",
                    json.dumps({"format": 7, "tables": entries})):
        assert load_cursor(garbage) == {}


@pytest.mark.parametrize("step", ["maintenance"])
def test_a_table_step_is_its_template_op_renamed(step):
    """Each table's step is the template op copied under the table's name (loading 1,000
    tables validates the op once): the same op Dagster's own renaming gives."""
    from delta_ops.defs.tables import _template, renamed_op, table_pool

    template = _template(table_pool("table")).op
    ours = renamed_op(template, f"sales__{step}", "Maintenance of sales")
    theirs = template.with_replaced_properties(name=f"sales__{step}",
                                               description="Maintenance of sales")
    assert template.name == f"table__{step}"
    for attribute in ("name", "description", "pool", "tags", "required_resource_keys",
                      "compute_fn", "positional_inputs", "retry_policy"):
        assert getattr(ours, attribute) == getattr(theirs, attribute), attribute
    for ours_defs, theirs_defs in ((ours.input_defs, theirs.input_defs),
                                   (ours.output_defs, theirs.output_defs)):
        assert [(d.name, d.dagster_type.key) for d in ours_defs] == [
            (d.name, d.dagster_type.key) for d in theirs_defs]
    assert [o.is_required for o in ours.output_defs] == [o.is_required for o in theirs.output_defs]
    assert ours.config_schema.config_type.key == theirs.config_schema.config_type.key


def test_an_op_with_more_than_its_plain_attributes_is_renamed_by_dagster():
    import copy

    from delta_ops.defs.tables import _template, renamed_op, table_pool

    template = _template(table_pool("table")).op
    cached = copy.copy(template)
    cached._some_cache = {"name": "table__maintenance"}  # what a Dagster upgrade might add
    renamed = renamed_op(cached, "sales__maintenance", None)
    assert renamed.name == "sales__maintenance"
    assert not hasattr(renamed, "_some_cache")  # rebuilt by with_replaced_properties
    pooled = renamed_op(cached, "sales__maintenance", None, table_pool("sales"))
    assert pooled.pool == "delta_ops_table/sales" and not hasattr(pooled, "_some_cache")
    assert [d.name for d in pooled.output_defs] == [d.name for d in template.output_defs]
    assert pooled.required_resource_keys == template.required_resource_keys
    plain = renamed_op(template, "sales__maintenance", None)
    assert plain._compute_fn is template._compute_fn and plain.name == "sales__maintenance"
    assert renamed_op(template, "sales__maintenance", None, "p").pool == "p"
    assert template.pool == "delta_ops_table/table"  # the template is not changed


#: A code server's view of a project: its definitions loaded and resolved, then what the
#: process imported and how many objects the collector froze (none); then full collections,
#: after which a new reference cycle is collected and new objects stay tracked; and, from an
#: exit handler registered before the
#: definitions were loaded (so it runs after theirs), how many objects the final
#: collections still had to traverse.
LOAD_PROBE = """
import atexit, gc, json, sys
atexit.register(lambda: print(json.dumps({"tracked_at_exit": len(gc.get_objects())})))
from dagster import Definitions
from fleet_proj.definitions import defs
Definitions.validate_loadable(defs)
loaded = {
    "assets": len(defs.resolve_asset_graph().get_all_asset_keys()),
    "heavy": sorted(m for m in ("pyarrow", "numpy", "pandas", "pyspark") if m in sys.modules),
    "frozen": gc.get_freeze_count(),
}
for _ in range(15):
    gc.collect()
kept = [[i] for i in range(5000)]
cycle = []
cycle.append(cycle)
del cycle
loaded["collected_later"] = gc.collect()
loaded["tracked_later"] = len(gc.get_objects())
print(json.dumps(loaded))
"""


@pytest.mark.parametrize("tables", [3, 100])
def test_a_code_location_loads_without_arrow_and_freezes_nothing(tmp_path, tables):
    """Loading the definitions (a listed table is never opened at load) imports no Arrow,
    numpy, pandas or pyspark; nothing is frozen away from the garbage collector (load time
    comes from doing less), and later garbage is collected."""
    project = new_project(tmp_path / "project", "fleet_proj")
    write_component(project, "fleet_proj", {
        "defaults": {"engine": "local"},
        "tables": [{"name": f"t{i:03d}", "uri": str(tmp_path / "lake" / f"t{i:03d}")}
                   for i in range(tables)],
    })
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(project), str(REPO_ROOT)]))
    out = subprocess.run([sys.executable, "-c", LOAD_PROBE], cwd=project, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    loaded, at_exit = (json.loads(line) for line in out.stdout.splitlines()[-2:])
    assert loaded["assets"] == 9 * tables + 1  # and the fleet overview
    assert loaded["heavy"] == []
    assert loaded["collected_later"] >= 1 and loaded["tracked_later"] > 5000, loaded
    assert loaded["frozen"] == 0
    assert at_exit["tracked_at_exit"] > 10_000, at_exit




@pytest.mark.s3
def test_a_tick_over_tables_on_s3_reads_them_concurrently_in_registry_order(
    tmp_path, s3_server, monkeypatch
):
    """Tables on an object store are read by several threads at once; the decisions, log
    lines and requests still come in the registry's order, and the cursor works the same."""
    monkeypatch.setenv("FLEET_S3_KEY", s3_fixtures.ACCESS_KEY)
    monkeypatch.setenv("FLEET_S3_SECRET", s3_fixtures.SECRET_KEY)
    local = tmp_path / "local"
    paths = write_fleet(local, 12, commits=3)
    prefix = s3_server.fresh_uri("fleet")
    client = s3_server.client()
    bucket, key_prefix = prefix[len("s3://"):].split("/", 1)
    for path in local.rglob("*.json"):
        client.upload_file(str(path), bucket, f"{key_prefix}/{path.relative_to(local)}")
    options = {"endpoint_url": s3_server.endpoint_url, "key": {"env": "FLEET_S3_KEY"},
               "secret": {"env": "FLEET_S3_SECRET"}}
    tables = [{"name": f"t{i:02d}", "uri": f"{prefix}/{p}", "storage_options": options}
              for i, p in enumerate(paths)]
    tables.append({"name": "gone", "uri": f"{prefix}/nothing_here", "storage_options": options})
    registry = assemble_registry(RegistrySource(
        base_dir=str(tmp_path), defaults={"engine": "local"}, tables=tables))
    lines: list[str] = []
    first = watch_tick(registry, None, lines.append)
    (request,) = first.requests  # the twelve tables in one run, in the registry's order
    assert [k.path[0] for k in request.asset_selection][:3] == ["t00", "t00", "t01"]
    assert request.asset_selection[:3] == [  # interval 2: t00 needs a checkpoint too
        AssetKey(["t00", "checkpoint"]), AssetKey(["t00", "version_checksum"]),
        AssetKey(["t01", "version_checksum"])]
    assert lines[-1].startswith("gone does not exist: no Delta log at ")
    due_lines = [line for line in lines if ": due at version" in line]
    assert [line.split(":")[0] for line in due_lines] == [f"t{i:02d}" for i in range(12)]
    quiet = watch_tick(registry, first.cursor, lines.append)
    assert not quiet.observations and not quiet.requests

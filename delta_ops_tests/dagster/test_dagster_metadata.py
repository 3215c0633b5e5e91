"""The metadata a Dagster user expects (issue 16): owners and tags of each table on its asset
specs, `dagster/column_schema` from the Delta schema (nested types spelled out),
`dagster/uri`, `dagster/table_name`, `dagster/row_count` when the stats give it, the same
keys whether a component had nothing to do or did its work, and times as timestamp values.
"""

from __future__ import annotations

import json
import time

import pyarrow.dataset as ds
import pytest
from dagster import (
    AssetKey,
    AssetObservation,
    DagsterInstance,
    Definitions,
    PathMetadataValue,
    TableSchemaMetadataValue,
    TimestampMetadataValue,
    build_sensor_context,
)

from delta_ops.defs import build_definitions, definitions_kwargs
from delta_ops.defs.keys import COMPONENTS
from delta_ops.defs.metadata import column_schema
from delta_ops.defs.sources import RegistrySource, assemble_registry, refresh_discovery
from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import copy_corpus_table, corpus_path
from delta_ops_tests.support.dagster_runs import write_registry

DAY = 86_400


def run_all(defs: Definitions, **kwargs):
    return defs.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=DagsterInstance.ephemeral(), raise_on_error=False, **kwargs)


def events_by_key(result) -> dict[tuple[str, str], tuple[str, dict]]:
    """(table, component) -> (MATERIALIZATION | OBSERVATION, raw metadata values)."""
    out = {}
    for event in result.all_events:
        if event.event_type_value in ("ASSET_MATERIALIZATION", "ASSET_OBSERVATION"):
            data = event.event_specific_data
            record = getattr(data, "materialization", None) or data.asset_observation
            out[tuple(record.asset_key.path)] = (event.event_type_value[6:], record.metadata)
    return out


def plain(metadata: dict) -> dict:
    return {k: getattr(v, "value", v) for k, v in metadata.items()}


# ---- owners and tags -------------------------------------------------------------------------


def test_owners_and_tags_of_each_table_reach_every_asset_spec(tmp_path):
    reg = write_registry(tmp_path, {"defaults": {"engine": "local"}, "tables": [
        {"name": "sales", "uri": "sales", "owners": ["ana@example.com", "team:data-eng"],
         "tags": {"tier": "gold", "domain": "sales"}},
        {"name": "plain", "uri": "plain"},
    ]})
    graph = build_definitions(reg).resolve_asset_graph()
    for component in COMPONENTS:
        node = graph.get(AssetKey(["sales", component]))
        assert list(node.owners) == ["ana@example.com", "team:data-eng"], component
        assert {k: v for k, v in node.tags.items() if not k.startswith("dagster/")} == {
            "tier": "gold", "domain": "sales", "delta_ops/component": component}
        other = graph.get(AssetKey(["plain", component]))
        assert not other.owners and "tier" not in other.tags


def test_discovered_tables_take_owners_and_tags_from_their_spec_and_pattern(tmp_path):
    lake = tmp_path / "lake"
    copy_corpus_table("basic_append", lake / "sales" / "orders")
    copy_corpus_table("basic_append", lake / "hr" / "people")
    source = RegistrySource(
        base_dir=str(tmp_path), defaults={"engine": "local"}, discovery_cache="cache.json",
        discover=[{
            "prefix": str(lake), "owners": ["team:lake"], "tags": {"source": "lake"},
            "policies": [{"match": "hr/*", "owners": ["hr@example.com"],
                          "tags": {"pii": "yes"}}],
        }],
    )
    refresh_discovery(source)
    registry = assemble_registry(source)
    orders, people = registry.table("sales__orders"), registry.table("hr__people")
    assert (orders.owners, dict(orders.tags)) == (("team:lake",), {"source": "lake"})
    assert (people.owners, dict(people.tags)) == (
        ("hr@example.com",), {"source": "lake", "pii": "yes"})
    graph = Definitions(**definitions_kwargs(source=source)).resolve_asset_graph()
    node = graph.get(AssetKey(["hr__people", "vacuum"]))
    assert list(node.owners) == ["hr@example.com"] and node.tags["pii"] == "yes"


def test_an_owner_or_tag_dagster_refuses_fails_only_its_table(tmp_path):
    source = RegistrySource(base_dir=str(tmp_path), defaults={"engine": "local"}, tables=[
        {"name": "good", "uri": "good", "owners": ["team:ok"]},
        {"name": "bad_owner", "uri": "b", "owners": ["bob"]},
        {"name": "bad_tag", "uri": "c", "tags": {"cost center": "x y"}},
    ])
    registry = assemble_registry(source)
    problems = {t.name: " ".join(t.problems) for t in registry.tables}
    assert problems["good"] == ""
    assert "owner 'bob' is neither an email address nor a team name" in problems["bad_owner"]
    assert "tag key 'cost center'" in problems["bad_tag"]
    # The code location loads (Dagster itself would refuse such specs); their assets fail.
    defs = Definitions(**definitions_kwargs(source=source))
    Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    assert list(graph.get(AssetKey(["good", "delta_log"])).owners) == ["team:ok"]
    assert not graph.get(AssetKey(["bad_owner", "delta_log"])).owners


# ---- the table's shape and standard keys ------------------------------------------------------


def test_column_schema_spells_out_nested_types_nullability_and_comments():
    schema = {"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": False,
         "metadata": {"comment": "primary key"}},
        {"name": "amount", "type": "decimal(12,2)", "nullable": True, "metadata": {}},
        {"name": "address", "type": {"type": "struct", "fields": [
            {"name": "city", "type": "string", "nullable": True, "metadata": {}},
            {"name": "geo", "type": {"type": "array", "elementType": "double",
                                     "containsNull": False}, "nullable": True, "metadata": {}},
        ]}, "nullable": True, "metadata": {}},
        {"name": "attrs", "type": {"type": "map", "keyType": "string", "valueType": {
            "type": "array", "elementType": {"type": "struct", "fields": [
                {"name": "v", "type": "integer", "nullable": True, "metadata": {}}]},
            "containsNull": True}, "valueContainsNull": True}, "nullable": True,
         "metadata": {}},
    ]}
    columns = column_schema(schema).columns
    assert [(c.name, c.type) for c in columns] == [
        ("id", "long"),
        ("amount", "decimal(12,2)"),
        ("address", "struct<city: string, geo: array<double>>"),
        ("attrs", "map<string, array<struct<v: integer>>>"),
    ]
    assert columns[0].description == "primary key" and columns[1].description is None
    assert [c.constraints.nullable for c in columns] == [False, True, True, True]


#: DAT tables (their expected rows are in the corpus) and one without numRecords stats.
SHAPES = {
    "basic_append": "dat",
    "deletion_vectors": "dat",
    "nested_types": "dat",
    "with_checkpoint": "dat",
    "golden__data-reader-nested-struct": None,
}


@pytest.fixture(scope="module")
def observed(tmp_path_factory):
    base = tmp_path_factory.mktemp("shapes")
    names = {name: name.replace("-", "_") for name in SHAPES}
    reg = write_registry(base, {"defaults": {"engine": "local"}, "tables": [
        {"name": table, "uri": str(corpus_path(name))} for name, table in names.items()]})
    result = run_all(build_definitions(reg), asset_selection=[
        AssetKey([table, "delta_log"]) for table in names.values()])
    assert result.success
    return names, events_by_key(result)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_the_observed_log_carries_the_standard_keys(observed, name):
    names, events = observed
    table = names[name]
    kind, metadata = events[(table, "delta_log")]
    root = corpus_path(name)
    snap = load_snapshot(Storage.for_uri(str(root)))
    assert kind == "MATERIALIZATION"
    assert isinstance(metadata["dagster/uri"], PathMetadataValue)
    assert metadata["dagster/uri"].value == snap.table
    assert metadata["dagster/table_name"].value == table
    assert isinstance(metadata["dagster/column_schema"], TableSchemaMetadataValue)
    expected_columns = [f["name"] for f in json.loads(snap.metadata.schema_string)["fields"]]
    assert [c.name for c in metadata["dagster/column_schema"].value.columns] == expected_columns
    if SHAPES[name] == "dat":
        rows = ds.dataset(str(root.parent / "expected" / "latest" / "table_content"),
                          format="parquet").count_rows()
        assert metadata["dagster/row_count"].value == rows
    else:  # no numRecords in the stats: no row count rather than a wrong one
        assert "dagster/row_count" not in metadata
    assert isinstance(metadata["last_commit_timestamp"], TimestampMetadataValue)
    assert metadata["last_commit_timestamp"].value == snap.timestamp / 1000


def test_nested_types_in_the_observed_schema(observed):
    names, events = observed
    columns = events[(names["nested_types"], "delta_log")][1]["dagster/column_schema"].value
    assert {c.name: c.type for c in columns.columns} == {
        "pk": "integer",
        "struct": "struct<float64: double, bool: boolean>",
        "array": "array<short>",
        "map": "map<string, integer>",
    }


# ---- keys that stay the same from run to run ---------------------------------------------------


def test_a_component_reports_the_same_keys_with_or_without_work(tmp_path):
    """Each component that can have nothing to do is run once that way (a materialization
    marked skipped) and once doing its work on copies of the same table: the idle one's
    keys, but `skipped` and `reason`, are among the working one's, with the same types."""
    idle = copy_corpus_table("golden__dv-partitioned-with-checkpoint", tmp_path / "idle")
    busy = copy_corpus_table("golden__dv-partitioned-with-checkpoint", tmp_path / "busy")
    reg = write_registry(tmp_path, {"defaults": {"engine": "local"}, "tables": [
        {"name": "idle", "uri": str(idle), "checkpoint": {"interval": 50},
         "checksum": {"enabled": False}, "compaction": {"interval": 0}},
        {"name": "busy", "uri": str(busy), "checkpoint": {"interval": 2},
         "compaction": {"interval": 2}, "row_tracking": {"backfill": True, "batch_size": 8,
                                                           "confirm_protocol_upgrade": True}},
    ]})
    events = events_by_key(run_all(build_definitions(reg)))
    for component in ("checkpoint", "version_checksum", "log_compaction", "row_tracking"):
        idle_kind, idle_md = events[("idle", component)]
        busy_kind, busy_md = events[("busy", component)]
        assert (idle_kind, busy_kind) == ("MATERIALIZATION", "MATERIALIZATION"), component
        assert idle_md["skipped"].value is True and "skipped" not in busy_md
        shared = set(idle_md) - {"skipped", "reason"}
        assert shared <= set(busy_md), (component, shared - set(busy_md))
        for key in shared:
            if idle_md[key].value is not None:
                assert type(idle_md[key]) is type(busy_md[key]), (component, key)


def test_repeated_runs_and_the_sensor_keep_their_keys(tmp_path):
    root = copy_corpus_table("golden__checkpoint", tmp_path / "t")
    reg = write_registry(tmp_path, {"defaults": {"engine": "local"}, "tables": [
        {"name": "t", "uri": str(root), "checkpoint": {"interval": 2}}]})
    defs = build_definitions(reg)
    confirm = {"ops": {"t__maintenance": {"config": {"confirm_deletes": True}}}}
    first = events_by_key(run_all(defs, run_config=confirm))
    # The second run finds the checkpoint there (already_existed) and nothing to delete.
    second = events_by_key(run_all(defs, run_config={"ops": {"t__maintenance": {"config": {
        "checkpoint": {"force": True}, "confirm_deletes": True}}}}))
    for component in ("checkpoint", "version_checksum", "metadata_cleanup", "vacuum"):
        assert first[("t", component)][0] == second[("t", component)][0] == "MATERIALIZATION"
        assert set(first[("t", component)][1]) == set(second[("t", component)][1]), component
    assert plain(second[("t", "checkpoint")][1])["already_existed"] is True
    assert plain(second[("t", "checkpoint")][1])["engine"] == "none"
    # The watch sensor's observation of the log uses the observed asset's own keys.
    sensor = defs.resolve_sensor_def("delta_tables_watch")
    tick = sensor(build_sensor_context(instance=DagsterInstance.ephemeral(), definitions=defs,
                                       resources={"registry": defs.resources["registry"]}))
    (observation,) = [e for e in tick.asset_events if isinstance(e, AssetObservation)
                      and e.asset_key.path[0] == "t"]
    sensor_keys = set(observation.metadata) - {"observed_by", "size_source"}
    assert sensor_keys <= set(first[("t", "delta_log")][1])
    assert {"dagster/uri", "dagster/table_name", "version"} <= sensor_keys


def test_cutoffs_are_timestamps(tmp_path):
    root = copy_corpus_table("golden__data-skipping-change-stats-collected-across-versions",
                             tmp_path / "t")
    reg = write_registry(tmp_path, {"defaults": {"engine": "local"}, "tables": [
        {"name": "t", "uri": str(root), "vacuum": {"retention": "10 days",
                                                   "in_materialize_all": True},
         "cleanup": {"retention": "40 days", "in_materialize_all": True}}]})
    before = time.time()
    events = events_by_key(run_all(build_definitions(reg)))
    after = time.time()
    for component, days in (("vacuum", 10), ("metadata_cleanup", 40)):
        cutoff = events[("t", component)][1]["cutoff_timestamp"]
        assert isinstance(cutoff, TimestampMetadataValue), component
        # cleanup's cutoff is the start of the day (UTC) of now - retention
        low = before - days * DAY - (DAY if component == "metadata_cleanup" else 0)
        assert low - 1 <= cutoff.value <= after - days * DAY + 1, component

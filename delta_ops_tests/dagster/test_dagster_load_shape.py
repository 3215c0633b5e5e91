"""What the definitions hold per table, which is what loading 1,000 tables costs (issue 25):
one step, nine assets and three checks per table, no job over every asset, and the table's
own metadata on its `delta_log` only."""

from __future__ import annotations

from dagster import AssetKey, AssetSelection, DagsterInstance, build_sensor_context

from delta_ops.defs import build_definitions
from delta_ops.defs.keys import COMPONENTS
from delta_ops_tests.support.corpus import copy_corpus_table
from delta_ops_tests.support.dagster_runs import write_registry

TABLE_KEYS = {"dagster/uri", "dagster/table_name", "uri", "storage_options", "engine"}


def _defs(tmp_path):
    roots = [copy_corpus_table("basic_append", tmp_path / n) for n in ("a", "b")]
    reg = write_registry(tmp_path, {"defaults": {"engine": "local"}, "tables": [
        {"name": n, "uri": str(r)} for n, r in zip(("a", "b"), roots, strict=True)]})
    return build_definitions(reg)


def test_one_step_nine_assets_three_checks_per_table_and_no_job_over_every_asset(tmp_path):
    defs = _defs(tmp_path)
    graph = defs.resolve_asset_graph()
    for table in ("a", "b"):
        keys = {k for k in graph.get_all_asset_keys() if k.path[0] == table}
        assert keys == {AssetKey([table, c]) for c in COMPONENTS} and len(keys) == 9
        assert len([k for k in graph.asset_check_keys if k.asset_key.path[0] == table]) == 3
        steps = {graph.get(k).assets_def.node_def.name for k in keys}
        assert steps == {f"{table}__maintenance"}
    assert {j.name for j in defs.jobs} == {"row_tracking_backfill", "fsck_repair"}
    watch = defs.resolve_sensor_def("delta_tables_watch")
    assert watch.asset_selection == AssetSelection.all()
    assert not watch.targets  # no job of its own: its runs are the implicit asset job's


def test_the_watch_requests_runs_of_the_implicit_asset_job(tmp_path):
    defs = _defs(tmp_path)
    watch = defs.resolve_sensor_def("delta_tables_watch")
    context = build_sensor_context(instance=DagsterInstance.ephemeral(), definitions=defs,
                                   resources={"registry": defs.resources["registry"]})
    result = watch(context)
    assert result.run_requests, "basic_append has no .crc: its checksums are due"
    for request in result.run_requests:
        assert request.job_name in (None, "__ASSET_JOB")
        assert request.asset_selection and all(k.path[0] in ("a", "b")
                                               for k in request.asset_selection)


def test_the_tables_metadata_is_on_its_delta_log_only(tmp_path):
    graph = _defs(tmp_path).resolve_asset_graph()
    log = graph.get(AssetKey(["a", "delta_log"])).metadata
    assert TABLE_KEYS <= set(log)
    assert log["dagster/table_name"] == "a"
    for component in COMPONENTS:
        if component == "delta_log":
            continue
        own = set(graph.get(AssetKey(["a", component])).metadata) & TABLE_KEYS
        engine = component in {"checkpoint", "version_checksum", "vacuum", "row_tracking",
                               "optimize"}
        assert own == ({"engine"} if engine else set()), component

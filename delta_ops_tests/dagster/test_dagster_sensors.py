"""The Dagster sensors, evaluated with `build_sensor_context`: the watch sensor requests what
each table needs, is quiet once maintained and learns new commits from its cursor; the
partitions sensor keeps the partitions equal to the registry."""

from __future__ import annotations

import pytest
from dagster import (
    AssetCheckEvaluation,
    AssetKey,
    AssetObservation,
    DagsterInstance,
    SkipReason,
    build_sensor_context,
)

from delta_ops.defs import build_definitions
from delta_ops.defs.jobs import TABLE_PARTITIONS
from delta_ops.defs.overview import OVERVIEW_KEY
from delta_ops.defs.registry import (
    load_registry,
)
from delta_ops.defs.sensors import evaluate_watch, load_cursor
from delta_ops_tests.support.corpus import copy_corpus_table
from delta_ops_tests.support.dagster_runs import (
    write_registry,
)

# ---- sensors ---------------------------------------------------------------------------------


@pytest.fixture
def watched(tmp_path):
    tables = tmp_path / "tables"
    roots = {
        "ckpt": copy_corpus_table("golden__checkpoint", tables / "ckpt"),
        "stats": copy_corpus_table(
            "golden__data-skipping-change-stats-collected-across-versions", tables / "stats"),
        "coll": copy_corpus_table("golden__collations-table", tables / "coll"),
    }
    reg = write_registry(tmp_path, {"defaults": {"engine": "local"}, "tables": [
        {"name": "ckpt", "uri": "tables/ckpt", "checkpoint": {"interval": 3}},
        {"name": "stats", "uri": "tables/stats", "compaction": {"interval": 2},
         "checksum": {"enabled": False}},
        {"name": "coll", "uri": "tables/coll", "checkpoint": {"interval": 1}},
        {"name": "missing", "uri": "tables/missing"},
    ]})
    defs = build_definitions(reg)
    return defs, roots, reg


def _tick(defs, instance, cursor=None):
    sensor = defs.resolve_sensor_def("delta_tables_watch")
    ctx = build_sensor_context(instance=instance, cursor=cursor, definitions=defs,
                               resources={"registry": defs.resources["registry"]})
    return sensor(ctx)


def test_watch_sensor_requests_what_each_table_needs(watched):
    defs, roots, _ = watched
    instance = DagsterInstance.ephemeral()
    result = _tick(defs, instance)
    # Several tables per run (issue 23), each with everything it needs (issue 16): one run
    # here, whose steps are the two tables' maintenance steps.
    (req,) = result.run_requests
    assert req.asset_selection == [
        # 4 commits since the checkpoint at 10, interval 3; and no .crc
        AssetKey(["ckpt", "checkpoint"]), AssetKey(["ckpt", "version_checksum"]),
        AssetKey(["stats", "log_compaction"]),  # version 4: windows [0,1], [2,3]; no checksums
    ]
    assert req.tags["delta_ops/tables"] == "2"
    assert req.tags["delta_ops/components"] == "checkpoint,version_checksum,log_compaction"
    assert req.run_key.startswith("watch:")
    # The sensor observed each table's log: data version = table version.
    observed = {tuple(e.asset_key.path): e for e in result.asset_events
                if isinstance(e, AssetObservation) and e.asset_key != OVERVIEW_KEY}
    assert set(observed) == {("ckpt", "delta_log"), ("stats", "delta_log"), ("coll", "delta_log")}
    assert observed[("ckpt", "delta_log")].tags["dagster/data_version"] == "14"
    assert observed[("ckpt", "delta_log")].metadata["commits_since_checkpoint"].value == 4
    # ... and evaluated log_readable on each: the missing table fails it, as does the
    # collations table (its features block the maintenance), without any run.
    readable = {e.asset_key.path[0]: e for e in result.asset_events
                if isinstance(e, AssetCheckEvaluation) and e.check_name == "log_readable"}
    assert {n for n, e in readable.items() if e.passed} == {"ckpt", "stats"}
    assert readable["missing"].description.startswith("missing does not exist: no Delta log")
    assert "collations" in readable["coll"].description
    cursor = load_cursor(result.cursor)
    assert cursor["missing"]["status"] == "missing"
    assert cursor["ckpt"]["version"] == 14 and cursor["ckpt"]["settings"]["protocol"]
    assert cursor["ckpt"]["requested"] == 14 and "requested" not in cursor["coll"]
    # The collations table needs a checkpoint, but delta_ops cannot write one: no request.
    assert cursor["coll"]["status"] == "ok"
    assert "coll" not in {k.path[0] for k in req.asset_selection}


def test_watch_sensor_is_quiet_once_maintained(watched):
    defs, roots, _ = watched
    instance = DagsterInstance.ephemeral()
    first = _tick(defs, instance)
    selection = [AssetKey(["ckpt", "checkpoint"]), AssetKey(["ckpt", "version_checksum"]),
                 AssetKey(["stats", "log_compaction"])]
    run = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=instance, asset_selection=selection)
    assert run.success
    second = _tick(defs, instance, first.cursor)
    assert not second.run_requests
    assert "0 with work due" in second.skip_reason.skip_message


def test_watch_sensor_learns_new_commits_from_the_cursor(watched, tmp_path):
    from delta_ops.commit import Transaction

    defs, roots, _ = watched
    instance = DagsterInstance.ephemeral()
    first = _tick(defs, instance)
    # Restart: a fresh context with the persisted cursor does not request the same work
    # again (the cursor keeps the version each table was requested at).
    again = _tick(defs, DagsterInstance.ephemeral(), first.cursor)
    assert not again.run_requests
    # A new commit on `stats` sets delta.checkpointInterval=5: read from that commit alone,
    # it makes the 6 commits without a checkpoint due for one.
    Transaction(str(roots["stats"])).update_configuration(
        {"delta.checkpointInterval": "5"}).commit()
    third = _tick(defs, instance, first.cursor)
    assert [r.run_key for r in third.run_requests] == ["stats:5:checkpoint+log_compaction"]
    assert load_cursor(third.cursor)["stats"]["settings"]["configuration"][
        "delta.checkpointInterval"] == "5"
    # A garbage cursor starts afresh rather than failing the tick.
    assert _tick(defs, instance, "not json").run_requests


def test_watch_sensor_reads_only_new_commits(watched):
    defs, roots, reg = watched
    registry = load_registry(reg)
    lines: list[str] = []
    _, cursor = evaluate_watch(registry, None, lines.append)
    # Break the checkpoint's content: only a full read of it would notice.
    (roots["ckpt"] / "_delta_log" / "00000000000000000010.checkpoint.parquet").write_bytes(b"x")
    with open(roots["ckpt"] / "_delta_log" / "00000000000000000015.json", "wb") as fh:
        fh.write(b'{"commitInfo":{"timestamp":1,"operation":"WRITE"}}\n')
    requests, cursor2 = evaluate_watch(registry, cursor, lines.append)
    assert "ckpt:15:checkpoint+version_checksum" in {r.run_key for r in requests}
    assert load_cursor(cursor2)["ckpt"]["status"] == "ok"
    # Without the cursor the broken checkpoint is read, and the tick reports it, not fails.
    lines.clear()
    requests, cursor3 = evaluate_watch(registry, None, lines.append)
    assert load_cursor(cursor3)["ckpt"]["status"] == "error"
    assert any(line.startswith("ckpt: cannot read the log") for line in lines)


def test_partitions_sensor_keeps_partitions_equal_to_the_registry(watched):
    defs, _, _ = watched
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(TABLE_PARTITIONS.name, ["retired", "ckpt"])
    sensor = defs.resolve_sensor_def("delta_tables_partitions")
    resources = {"registry": defs.resources["registry"]}
    result = sensor(build_sensor_context(instance=instance, definitions=defs, resources=resources))
    adds, deletes = result.dynamic_partitions_requests
    assert adds.partition_keys == ["stats", "coll", "missing"]
    assert deletes.partition_keys == ["retired"]
    instance.add_dynamic_partitions(TABLE_PARTITIONS.name, adds.partition_keys)
    instance.delete_dynamic_partition(TABLE_PARTITIONS.name, "retired")
    again = sensor(build_sensor_context(instance=instance, definitions=defs, resources=resources))
    assert isinstance(again, SkipReason)

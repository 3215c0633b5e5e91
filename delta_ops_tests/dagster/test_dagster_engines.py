"""The engine per table in the Dagster layer: a table's size, read cheaply, picks the local
engine or Spark under `engine: spark` and the `spark_above_files`/`spark_above_bytes`
thresholds; a Spark that does not start fails a step quickly with a short `dagster.Failure`
naming the master, and every check still returns a result with a reason (issue 16).
"""

from __future__ import annotations

import os
import socket
import sys
import time

import pytest
from dagster import AssetKey, DagsterInstance

from delta_ops.defs import build_definitions
from delta_ops.defs.engines import choose_engine, describe_engine, needs_size
from delta_ops.defs.policy import Policy
from delta_ops.defs.resources import SparkResource
from delta_ops.log.segment.log_state import inspect_log
from delta_ops.log.segment.table_size import TableSize, table_size
from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
from delta_ops.maintenance.checksum.operations import write_checksums
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import copy_corpus_table, corpus_path
from delta_ops_tests.support.dagster_runs import write_registry
from delta_ops_tests.support.spark_fixtures import LOCAL_IP, TEST_CONF

DAY = 86_400


def metadata_of(result, node: str) -> dict:
    return {
        tuple(m.asset_key.path): {k: getattr(v, "value", v) for k, v in m.metadata.items()}
        for m in result.asset_materializations_for_node(node)
    }


# ---- the size of a table, read cheaply ---------------------------------------------------------


@pytest.mark.parametrize("name", [
    "basic_append",                                   # commits only
    "golden__checkpoint",                             # _last_checkpoint + commits
    "golden__dv-partitioned-with-checkpoint",         # deletion vectors after a checkpoint
    "golden__basic-with-inserts-deletes-checkpoint",  # removes after the checkpoint
    "golden__commit-info-containing-arbitrary-operationParams-types",  # .crc at the latest
    "golden__snapshot-data3",                         # a remove without a size
])
def test_table_size_agrees_with_the_snapshot(name):
    storage = Storage.for_uri(str(corpus_path(name)))
    size = table_size(storage, inspect_log(storage))
    snap = load_snapshot(storage)
    assert size.version == snap.version
    assert size.num_files == snap.num_files, size
    assert size.size_bytes in (None, snap.size_bytes), size


def test_table_size_starts_from_the_newest_crc(tmp_path):
    root = copy_corpus_table("golden__basic-with-inserts-deletes-checkpoint", tmp_path / "t")
    storage = Storage.for_uri(str(root))
    write_checksums(storage, start=11, end=11)
    size = table_size(storage, inspect_log(storage))
    snap = load_snapshot(storage)
    assert size.source == "11.crc + 2 commits"
    assert (size.num_files, size.size_bytes) == (snap.num_files, snap.size_bytes)


def test_engine_choice_follows_the_policy_and_the_size():
    small = TableSize(7, 40, 4_000, "7.crc")
    big = TableSize(7, 400, 4_000, "7.crc")
    heavy = TableSize(7, 40, 9_000_000, "7.crc")
    unknown = TableSize(7, None, None, "unknown: checkpoint 5 without a file count, no .crc")
    policy = Policy(engine="spark", spark_above_files=100, spark_above_bytes=1_000_000)
    assert needs_size(policy)
    assert choose_engine(policy, small).name == "local"
    assert choose_engine(policy, big).name == "spark"
    assert choose_engine(policy, heavy).name == "spark"
    assert "above spark_above_bytes (1000000)" in choose_engine(policy, heavy).reason
    assert choose_engine(policy, unknown).name == "spark"
    assert choose_engine(policy, small).reason == (
        "40 live files, 4000 bytes at version 7 (7.crc): not above spark_above_files (100) "
        "or spark_above_bytes (1000000)")
    assert describe_engine(policy) == "spark above 100 files or 1000000 bytes, else local"
    always = Policy(engine="spark", spark_above_files=None)
    assert not needs_size(always) and choose_engine(always, None).name == "spark"
    local = Policy(engine="local", spark_above_files=0)
    assert not needs_size(local) and choose_engine(local, big).name == "local"
    assert Policy().spark_above_files == 100_000  # the default: Spark only for big tables


@pytest.mark.spark
def test_a_small_table_runs_locally_and_a_larger_one_on_spark(tmp_path):
    """Threshold set low: 2 live files stay local, 3 go to a real local Spark session."""
    small = copy_corpus_table("basic_append", tmp_path / "small")  # 2 files
    large = copy_corpus_table("golden__data-skipping-change-stats-collected-across-versions",
                              tmp_path / "large")  # 3 files
    old = time.time() - 30 * DAY
    for root in (small, large):
        for path in root.rglob("*.parquet"):
            os.utime(path, (old, old))
    reg = write_registry(tmp_path, {
        "defaults": {"engine": "spark", "spark_above_files": 2,
                     "vacuum": {"in_materialize_all": True}},
        "tables": [{"name": "small", "uri": str(small)}, {"name": "large", "uri": str(large)}],
    })
    spark = SparkResource(master="local[2]", local_ip=LOCAL_IP, python=sys.executable,
                          conf=dict(TEST_CONF))
    defs = build_definitions(reg, spark=spark)
    graph = defs.resolve_asset_graph()
    engine_md = graph.get(AssetKey(["small", "vacuum"])).metadata["engine"]
    assert getattr(engine_md, "value", engine_md) == "spark above 2 files, else local"
    result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=DagsterInstance.ephemeral(),
        asset_selection=[AssetKey([t, c]) for t in ("small", "large")
                         for c in ("vacuum", "version_checksum")],
    )
    assert result.success
    small_md = metadata_of(result, "small__maintenance")
    large_md = metadata_of(result, "large__maintenance")
    for component in ("vacuum", "version_checksum"):
        assert small_md[("small", component)]["engine"] == "local"
        assert large_md[("large", component)]["engine"] == "spark"
    # (the step reads the size once, for the checksum, before 1.crc is written: vacuum,
    # after it, shares that size)
    assert small_md[("small", "vacuum")]["engine_reason"] == (
        "2 live files, 1980 bytes at version 1 (the commits): not above spark_above_files (2)")
    assert large_md[("large", "vacuum")]["engine_reason"].startswith("3 live files")
    assert "above spark_above_files (2)" in large_md[("large", "vacuum")]["engine_reason"]
    # The runs did their work: VACUUM found the old unreferenced files of the large table on
    # Spark (the session starts on the engine's first job).
    assert large_md[("large", "vacuum")]["num_files"] > 0


# ---- Spark that does not start -----------------------------------------------------------------


def free_port() -> int:
    """A local TCP port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind((LOCAL_IP, 0))
        return sock.getsockname()[1]


#: Seconds a run against a dead master may take. The start-up check is one refused TCP
#: connection to 127.0.0.1 (milliseconds); the rest of the run is local reads of a small
#: table, a few seconds on a busy machine. Without the check a standalone master that
#: never answers costs the JVM start and Spark's registration retries, three of 20 s each,
#: before anything fails (the 77 s of the issue): a run under this bound did not go there.
DEAD_MASTER_BOUND_S = 45


def test_a_dead_spark_master_fails_the_step_fast_naming_it(tmp_path):
    master = f"spark://{LOCAL_IP}:{free_port()}"
    # Version checksums up to the latest version exist: fsck compares them on the engine.
    root = copy_corpus_table(
        "golden__commit-info-containing-arbitrary-operationParams-types", tmp_path / "t")
    reg = write_registry(tmp_path, {
        "defaults": {"engine": "spark", "spark_above_files": None,
                     "vacuum": {"in_materialize_all": True},
                     "cleanup": {"in_materialize_all": True}},
        "tables": [{"name": "t", "uri": str(root)}],
    })
    defs = build_definitions(reg, spark=SparkResource(master=master, local_ip=LOCAL_IP))
    start = time.monotonic()
    result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=DagsterInstance.ephemeral(), raise_on_error=False)
    elapsed = time.monotonic() - start
    assert elapsed < DEAD_MASTER_BOUND_S, elapsed

    (failure,) = result.get_step_failure_events()
    assert failure.step_key == "t__maintenance"
    data = failure.step_failure_data
    description = data.user_failure_data.description
    # The components that need the engine (checksums, VACUUM) fail, each in one line that
    # names the master and the cause; no Py4J in sight.
    assert description.startswith(
        f"t: 2 components failed: version_checksum: cannot reach Spark master {master} (")
    assert description.count(f"cannot reach Spark master {master}") == 2
    assert "Connection refused" in description
    assert "py4j" not in str(data.error).lower() and len(description) < 600
    failures = data.user_failure_data.metadata["failures"].value
    assert {c: f["error"] for c, f in failures.items()} == {
        "version_checksum": "EngineError", "vacuum": "EngineError"}
    # The components that needed no engine still ran, and every check returned a result
    # with a reason: fsck names the master instead of crashing the step.
    done = {tuple(m.asset_key.path) for m in result.asset_materializations_for_node(
        "t__maintenance")}
    assert ("t", "metadata_cleanup") in done
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert set(checks) == {"log_readable", "fsck", "checkpoint_fresh"}
    matches = checks["fsck"]
    assert matches.passed is False
    assert f"cannot reach Spark master {master}" in matches.description
    assert matches.metadata["error"].value == "EngineError"


def test_malformed_spark_settings_are_an_engine_error():
    from delta_ops.errors import EngineError

    resource = SparkResource(remote="http://connect-host:15002")
    with pytest.raises(EngineError, match="invalid Spark settings: a Spark Connect URL starts "
                       "with 'sc://', got 'http://connect-host:15002'"):
        resource.engine("spark")
    # Remembered for the run: a second component fails at once with the same error.
    with pytest.raises(EngineError, match="invalid Spark settings"):
        resource.engine("spark")

"""End to end on real Spark deployments started by the tests: a Spark Connect server and a
standalone cluster (master + worker JVMs from `bin/spark-class`), both on 127.0.0.1 and
stopped by PID afterwards.

Each test runs VACUUM (dry run and real), a V2 checkpoint with sidecars, a full checksum
and a row-tracking backfill through `SparkEngine` and compares every result with the local
engine's on an identical copy of the table. The Connect test runs first: the standalone
test then also proves that a classic session still starts in a process that has used
Spark Connect.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from delta_ops.engine.local import LocalEngine
from delta_ops.engine.session import SparkSessionConfig
from delta_ops.engine.spark import SparkEngine
from delta_ops.maintenance.checkpoint import write_checkpoint
from delta_ops.maintenance.checksum import compute_version_checksum
from delta_ops.maintenance.vacuum import vacuum
from delta_ops.storage import Storage
from delta_ops_tests.support.engine_pairs import (
    BACKFILL_TABLES,
    NOW_MS,
    ROW_ID_COLUMNS,
    V2_TABLES,
    CountingEngine,
    _backfill,
    _v2_result_view,
    copy_pair,
    sidecar_digests,
    sorted_files,
    tree,
    without,
)
from delta_ops_tests.support.spark_fixtures import spark_test_config

pytestmark = pytest.mark.spark

# Fixtures (module scope): the Connect server and the standalone cluster.

VACUUM_TABLE = "golden__dv-partitioned-with-checkpoint"


def run_all_operations(engine: CountingEngine, base: Path) -> None:
    """Every engine-backed operation on `engine` and on the local engine, compared."""
    local = LocalEngine()

    a, b = copy_pair(VACUUM_TABLE, base / "vacuum")
    dry_a = vacuum(Storage.for_uri(str(a)), dry_run=True, now_ms=NOW_MS, engine=local)
    dry_b = vacuum(Storage.for_uri(str(b)), dry_run=True, now_ms=NOW_MS, engine=engine)
    assert without(dry_b.to_dict(), "table") == without(dry_a.to_dict(), "table")
    real_a = vacuum(Storage.for_uri(str(a)), now_ms=NOW_MS, engine=local, dry_run=False)
    real_b = vacuum(Storage.for_uri(str(b)), now_ms=NOW_MS, engine=engine, dry_run=False)
    assert without(real_b.to_dict(), "table") == without(real_a.to_dict(), "table")
    assert real_a.num_files > 0 and tree(a) == tree(b)

    name, version = V2_TABLES[0]
    a, b = copy_pair(name, base / "checkpoint")
    kwargs = {"version": version, "kind": "v2-uuid", "sidecar_actions": 2, "now_ms": NOW_MS}
    cp_a = write_checkpoint(Storage.for_uri(str(a)), engine=local, **kwargs)
    cp_b = write_checkpoint(Storage.for_uri(str(b)), engine=engine, **kwargs)
    assert _v2_result_view(cp_b) == _v2_result_view(cp_a)
    assert sidecar_digests(b) == sidecar_digests(a) != []

    a, b = copy_pair(VACUUM_TABLE, base / "checksum")
    crc_a = compute_version_checksum(Storage.for_uri(str(a)), engine=local, method="full")
    crc_b = compute_version_checksum(Storage.for_uri(str(b)), engine=engine, method="full")
    assert crc_b.checksum.to_dict() == crc_a.checksum.to_dict()

    a, b = copy_pair(BACKFILL_TABLES[0], base / "backfill")
    bf_a = _backfill(a, local)
    bf_b = _backfill(b, engine)
    assert without(bf_b.to_dict(), "table") == without(bf_a.to_dict(), "table")
    assert sorted_files(Storage.for_uri(str(b)), ROW_ID_COLUMNS).equals(
        sorted_files(Storage.for_uri(str(a)), ROW_ID_COLUMNS)
    )

    for method in ("find_unreferenced", "delete_files", "write_parquet_files",
                   "size_histogram", "parquet_row_counts"):
        assert engine.calls[method] > 0, method


def test_spark_connect_end_to_end(connect_server, tmp_path):
    engine = SparkEngine(SparkSessionConfig(remote=connect_server.url))
    try:
        assert not engine.started
        run_all_operations(CountingEngine(engine), tmp_path)
        assert engine.is_connect
        assert type(engine.session).__module__.startswith("pyspark.sql.connect")
    finally:
        engine.close()
    assert not engine.started
    # The server ran the tasks: its Python workers imported delta_ops and read the table.
    assert connect_server.server.process.poll() is None


def test_standalone_cluster_end_to_end(standalone_cluster, tmp_path):
    engine = SparkEngine(spark_test_config(standalone_cluster.master_url))
    try:
        run_all_operations(CountingEngine(engine), tmp_path)
        assert engine.session.sparkContext.master == standalone_cluster.master_url
        assert not engine.is_connect
    finally:
        engine.close()
    # The worker launched an executor JVM for the application.
    assert "Asked to launch executor" in standalone_cluster.worker.log_text()

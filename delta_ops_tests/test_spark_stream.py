"""The streamed (large-table) paths on the Spark engine give what the local engine gives.

Every test forces the streamed path with the threshold at 0 (`$DELTA_OPS_STREAM_THRESHOLD_BYTES`)
so the whole corpus goes through it: the full checksum with the checkpoint's row groups read on
executors (one task per row group, partial aggregates added up on the driver), and the
checkpoint written by the streamed writer inside one executor task, `_last_checkpoint`
advanced by the driver.
"""

from __future__ import annotations

import pytest

from delta_ops.log.snapshot import load_snapshot
from delta_ops.log.stream import THRESHOLD_ENV
from delta_ops.maintenance.checksum.operations import compute_version_checksum
from delta_ops.storage import Storage
from delta_ops_tests import test_checkpoint as tc
from delta_ops_tests.conftest import corpus_path
from delta_ops_tests.spark_fixtures import spark_engine  # noqa: F401  (the fixture)

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("name", tc.SUPPORTED)
def test_full_checksum_on_spark_equals_local(name, monkeypatch, spark_engine):  # noqa: F811
    storage = Storage.for_uri(str(corpus_path(name)))
    local = compute_version_checksum(storage, method="full")
    monkeypatch.setenv(THRESHOLD_ENV, "0")
    assert load_snapshot(storage, stream=True).streamed
    calls = []
    real = spark_engine.map_tasks

    def spy(storage_, fn, items):
        calls.append(len(items))
        return real(storage_, fn, items)

    monkeypatch.setattr(spark_engine, "map_tasks", spy)
    on_spark = compute_version_checksum(storage, method="full", engine=spark_engine)
    assert on_spark.checksum == local.checksum
    # The checkpoint's row groups went to the executors (tables with a checkpoint).
    snap = load_snapshot(storage, stream=True)
    if snap.checkpoint_version is not None:
        assert calls and calls[0] == len(snap.files.read_items())

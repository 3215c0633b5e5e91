"""OPTIMIZE and PURGE on the Spark engine: the driver plans and commits, each bin is
rewritten by one task on the executors (`Engine.map_tasks` ships `rewrite_bin` and the bin;
the task rebuilds the table's Storage from its config). On `local[2]` and on
`local-cluster[2,1,1024]` (executor JVMs and Python workers of their own), against the local
engine on identical copies of a few tables: the same plan (bins, files, bytes), the same
commits (bins committed, files removed and added), and the same rows, as a multiset with
their stable row IDs and row commit versions, read by our reader and by deltalake."""

from __future__ import annotations

import shutil

import pytest

from delta_ops.engine.local import LocalEngine
from delta_ops.layout.optimize import optimize
from delta_ops.layout.purge import purge
from delta_ops.log import load_snapshot
from delta_ops.storage import Storage
from delta_ops_tests.support.layout_tables import (
    LayoutSpec,
    build_layout_table,
    deltalake_rows,
    our_rows,
)

pytestmark = pytest.mark.spark

_APPENDS = (((30, 0), (20, 1), (25, 2), (5, 4)), ((10, 0), (15, 1), (12, 2)),
            ((8, 0), (9, 1), (11, 2), (4, 4)))
TABLES = {
    "partitioned-rowtracking-dvs": LayoutSpec(
        partitioned=True, row_tracking=True, appends=_APPENDS,
        deletes=((0, (1, 2, 3)), (4, (0, 5)), (6, (2,)))),
    "unpartitioned-dvs": LayoutSpec(appends=_APPENDS, deletes=((1, (0, 1, 2, 3, 4)),)),
    "mapping-id-rowtracking-cdf": LayoutSpec(
        partitioned=True, mapping="id", row_tracking=True, cdf=True, appends=_APPENDS,
        deletes=((2, (0, 7)),)),
}


def _summary(result) -> dict:  # type: ignore[no-untyped-def]
    out = result.to_dict()
    for volatile in ("table", "seconds", "bytes_after", "bytes_added"):
        out.pop(volatile)  # new files' sizes may differ by a few bytes (footer metadata)
    return out


@pytest.mark.parametrize("name", list(TABLES))
@pytest.mark.parametrize("op", ["optimize", "purge"])
def test_spark_rewrites_the_same_bins_into_the_same_rows(
    spark_engine_each, tmp_path, name, op
):
    built = tmp_path / "built"
    built.mkdir()
    build_layout_table(Storage.of(str(built)), TABLES[name])
    local_root, spark_root = tmp_path / "local", tmp_path / "spark"
    shutil.copytree(built, local_root)
    shutil.copytree(built, spark_root)
    before = our_rows(Storage.of(str(built)))
    run = optimize if op == "optimize" else purge
    kwargs = {"target_size": 10**6, "dry_run": False, "bins_per_commit": 2}
    local_engine = LocalEngine(max_workers=2)
    try:
        ours = run(Storage.of(str(local_root)), engine=local_engine, **kwargs)
    finally:
        local_engine.close()
    theirs = run(Storage.of(str(spark_root)), engine=spark_engine_each, **kwargs)
    assert ours.bins > 0 and ours.failed == {} and theirs.failed == {}
    assert _summary(theirs) == _summary(ours)
    local_storage, spark_storage = Storage.of(str(local_root)), Storage.of(str(spark_root))
    assert our_rows(spark_storage) == our_rows(local_storage) == before
    assert deltalake_rows(spark_storage) == deltalake_rows(local_storage)
    # The new files were written by the executors into the table, under the same
    # partition directories, and none carries a deletion vector after purge.
    snap_l, snap_s = load_snapshot(local_storage), load_snapshot(spark_storage)
    assert snap_s.num_files == snap_l.num_files
    parts = lambda s: sorted(  # noqa: E731
        repr(sorted(dict(p or []).items())) for p in s.files.column("partitionValues").to_pylist())
    assert parts(snap_s) == parts(snap_l)
    if op == "purge":
        assert snap_s.files.column("deletionVector").null_count == snap_s.num_files

"""OPTIMIZE and PURGE with the Spark engine: the bins are rewritten on executors (the task
and `rewrite_bin` shipped by `SparkEngine.map_tasks`) and the table ends with the same rows,
row IDs and layout as with the local engine."""

from __future__ import annotations

import pytest

from delta_ops.layout.optimize import optimize
from delta_ops.layout.purge import purge
from delta_ops.log import load_snapshot
from delta_ops.storage import Storage
from delta_ops_tests.support.layout_tables import LayoutSpec, build_layout_table, our_rows

pytestmark = pytest.mark.spark

SPEC = LayoutSpec(partitioned=True, mapping="id", row_tracking=True, cdf=True,
                  appends=(((3, 0), (4, 0), (5, 1), (2, 1)), ((3, 2), (3, 2), (1, 4))),
                  deletes=((0, (0,)), (4, (1, 2))))


def _layout(storage: Storage) -> list[tuple]:
    snap = load_snapshot(storage)
    return sorted(((repr(sorted(a["partitionValues"] or [])), a["baseRowId"] is not None,
                    a["deletionVector"] is None) for a in snap.files.to_pylist()), key=repr)


def test_spark_and_local_engines_give_the_same_table(tmp_path, spark_engine):
    tables = []
    for side in ("local", "spark"):
        root = tmp_path / side
        root.mkdir()
        storage = Storage.of(str(root))
        build_layout_table(storage, SPEC)
        tables.append(storage)
    local, spark = tables
    before = our_rows(local)
    assert our_rows(spark) == before
    plans = []
    for storage, engine in ((local, None), (spark, spark_engine)):
        first = optimize(storage, dry_run=False, target_size=2000, engine=engine)
        second = purge(storage, dry_run=False, engine=engine)
        assert not first.failed and not second.failed
        plans.append((first.plan["bin_details"], second.plan["bin_details"]))
        assert our_rows(storage) == before
    assert plans[0] == plans[1]
    assert _layout(local) == _layout(spark)

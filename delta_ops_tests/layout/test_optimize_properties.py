"""Property tests of OPTIMIZE and PURGE over generated tables: partitioned or not, column
mapping none/name/id, row tracking, change data feed, deletion vectors, awkward partition
values (spaces, `=`, `%`, unicode, null).

After OPTIMIZE, then PURGE, the rows are the same multiset read by `deltalake` (its query
engine applies deletion vectors) and by our reader; every row keeps its stable row ID and
row commit version; no file has a deletion vector after PURGE; no partition ends OPTIMIZE
with more than ceil(bytes / target) + 1 files; no CDC file is written.
"""

from __future__ import annotations

import math
import tempfile
from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings

from delta_ops.layout.optimize import optimize
from delta_ops.layout.purge import purge
from delta_ops.log import load_snapshot
from delta_ops.storage import Storage
from delta_ops_tests.support.layout_tables import (
    LayoutSpec,
    build_layout_table,
    deltalake_rows,
    layout_specs,
    our_rows,
)

TARGET = 3000


def _partition_files(storage: Storage) -> dict[tuple, list[int]]:
    sizes: dict[tuple, list[int]] = defaultdict(list)
    for add in load_snapshot(storage).files.to_pylist():
        sizes[tuple(sorted(add["partitionValues"] or []))].append(add["size"])
    return sizes


def _check(storage: Storage, spec: LayoutSpec) -> None:
    before = our_rows(storage)
    theirs = deltalake_rows(storage)
    assert [r[:3] for r in before] == theirs
    if spec.row_tracking:
        assert all(r[3] is not None and r[4] is not None for r in before)

    result = optimize(storage, dry_run=False, target_size=TARGET)
    assert not result.failed
    assert our_rows(storage) == before
    assert deltalake_rows(storage) == theirs
    for sizes in _partition_files(storage).values():
        assert len(sizes) <= math.ceil(sum(sizes) / TARGET) + 1, sizes
    snap = load_snapshot(storage)
    for v in result.versions:
        actions = storage.read_text(f"_delta_log/{v:020d}.json")
        assert '"cdc"' not in actions
        assert '"operation":"OPTIMIZE"' in actions

    purged = purge(storage, dry_run=False)
    assert not purged.failed
    snap = load_snapshot(storage)
    dvs = snap.files.column("deletionVector").to_pylist()
    assert all(dv is None or dv.get("storageType") is None for dv in dvs)
    assert our_rows(storage) == before
    assert deltalake_rows(storage) == theirs
    assert purged.deletion_vectors_removed == purged.plan["files"]


@pytest.mark.slow
@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(spec=layout_specs())
def test_optimize_then_purge_keeps_rows_and_row_ids(spec):
    with tempfile.TemporaryDirectory() as d:
        storage = Storage.of(d)
        build_layout_table(storage, spec)
        _check(storage, spec)


def test_optimize_every_option_at_once(layout_storage):
    """One fixed table with every option on, so a run without hypothesis covers them."""
    spec = LayoutSpec(
        partitioned=True, mapping="id", row_tracking=True, cdf=True,
        appends=(((3, 0), (4, 1), (5, 2), (2, 4)), ((2, 3), (2, 4), (6, 5)),
                 ((3, 0), (3, 3), (3, 4), (1, 4))),
        deletes=((0, (0, 1)), (3, (2,)), (5, (0, 1, 2))),
    )
    build_layout_table(layout_storage, spec)
    _check(layout_storage, spec)
    snap = load_snapshot(layout_storage)
    cfg = snap.metadata.configuration
    # The new files hold the materialized row IDs: fresh baseRowIds differ from stable IDs.
    assert cfg.get("delta.rowTracking.materializedRowIdColumnName")
    assert all(a["baseRowId"] is not None for a in snap.files.to_pylist())

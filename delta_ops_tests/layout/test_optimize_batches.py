"""Large runs commit in batches: a run that dies after its first batch leaves a readable
table with the same rows (the committed batch in place, the rest untouched, files of the
unfinished batch unreferenced), and a re-run finishes the work. The rewrite task pickles,
as a distributed engine ships it."""

from __future__ import annotations

import pickle
import threading

import pytest

from delta_ops.engine.local import LocalEngine
from delta_ops.layout.optimize import optimize
from delta_ops.layout.rewrite import rewrite_bin
from delta_ops.log import load_snapshot
from delta_ops_tests.support.layout_tables import LayoutSpec, build_layout_table, our_rows

SPEC = LayoutSpec(partitioned=True, mapping="name", row_tracking=True,
                  appends=(((3, 0), (4, 0), (5, 1), (2, 1), (3, 2), (3, 2), (4, 3), (1, 3)),),
                  deletes=((0, (0,)), (5, (1,))))


class Dies(Exception):
    pass


class DiesAfterFirstBatch(LocalEngine):
    """Runs the first batch's two bins, then rewrites the second batch's two and dies
    before its commit (as a kill between the rewrite and the commit would). Bins are
    counted, not calls."""

    def __init__(self) -> None:
        super().__init__(max_workers=2)
        self.lock = threading.Lock()
        self.rewritten = 0
        self.shipped: list = []

    def map_tasks(self, storage, fn, items, **kwargs):
        items = list(items)
        with self.lock:
            self.shipped.extend(pickle.loads(pickle.dumps((fn, items)))[1])
        results = super().map_tasks(storage, fn, items, **kwargs)
        with self.lock:
            self.rewritten += len(items)
            last = self.rewritten == 4
        if last:
            raise Dies("killed")
        return results


def _data_files(storage) -> set[str]:
    return {i.path for i in storage.walk("") if i.path.endswith(".parquet")
            and not i.path.startswith("_delta_log")}


def test_a_run_dying_after_a_batch_leaves_the_table_whole_and_a_rerun_finishes(
        layout_storage):
    build_layout_table(layout_storage, SPEC)
    before = our_rows(layout_storage)
    version = load_snapshot(layout_storage).version
    engine = DiesAfterFirstBatch()
    with pytest.raises(Dies):
        optimize(layout_storage, dry_run=False, bins_per_commit=2, engine=engine)
    assert len(engine.shipped) == 4 and all(t.bin.files for t in engine.shipped)
    snap = load_snapshot(layout_storage)
    assert snap.version == version + 1  # the first batch only
    assert our_rows(layout_storage) == before
    live = {p for p in snap.files.column("path").to_pylist()}
    orphans = _data_files(layout_storage) - live
    assert orphans  # the second batch's files: written, never committed, left for VACUUM
    again = optimize(layout_storage, dry_run=False, bins_per_commit=2)
    assert again.bins == 2 and again.bins_committed == 2 and not again.failed
    assert our_rows(layout_storage) == before
    assert optimize(layout_storage, dry_run=False).bins == 0


def test_the_rewrite_task_and_function_pickle(layout_storage):
    build_layout_table(layout_storage, SPEC)
    engine = DiesAfterFirstBatch()
    with pytest.raises(Dies):
        optimize(layout_storage, dry_run=False, bins_per_commit=2, engine=engine)
    assert pickle.loads(pickle.dumps(rewrite_bin)) is rewrite_bin
    task = pickle.loads(pickle.dumps(engine.shipped[0]))
    assert task == engine.shipped[0]

"""A local engine rewrites at most one bin per core at a time, however many threads it has
(each bin holds a row group's buffers, so a wide engine would multiply memory, not speed),
and starts the next bin as soon as a core is free: a large bin beside small ones does not
leave a core idle until it ends. After a failing bin no further bin starts."""

from __future__ import annotations

import threading
import time
from urllib.parse import unquote

import pytest

from delta_ops.engine.local import LocalEngine
from delta_ops.errors import MissingFileError, RewriteError
from delta_ops.layout import run as run_module
from delta_ops.layout.optimize import optimize
from delta_ops.log import load_snapshot
from delta_ops.storage import Storage
from delta_ops_tests.support.layout_tables import LayoutSpec, build_layout_table, our_rows

#: Six partitions of two small files each: six bins, one commit batch.
SPEC = LayoutSpec(
    partitioned=True,
    appends=tuple(((10, p), (12, p)) for p in range(6)),
)

#: Partition 0 holds a bin of 40 files of 20,000 rows; partitions 1 to 5 one of two tiny
#: files each.
SKEWED = LayoutSpec(
    partitioned=True,
    appends=(tuple((20_000, 0) for _ in range(40)),
             tuple((10, p) for p in range(1, 6)), tuple((10, p) for p in range(1, 6))),
)


class _Recording(LocalEngine):
    """A 16-thread local engine that records, per bin, when its rewrite started and ended,
    and the most bins rewritten at once."""

    def __init__(self, max_workers: int = 16) -> None:
        super().__init__(max_workers=max_workers)
        self.lock = threading.Lock()
        self.running = self.most = 0
        self.spans: dict[int, tuple[float, float]] = {}

    def map_tasks(self, storage, fn, items, **kwargs):  # type: ignore[no-untyped-def]
        def recorded(storage, task):  # type: ignore[no-untyped-def]
            with self.lock:
                self.running += 1
                self.most = max(self.most, self.running)
            start = time.monotonic()
            try:
                return fn(storage, task)
            finally:
                with self.lock:
                    self.running -= 1
                    self.spans[task.bin.index] = (start, time.monotonic())

        return super().map_tasks(storage, recorded, items, **kwargs)


def _table(tmp_path, spec: LayoutSpec) -> tuple[Storage, list]:
    storage = Storage.for_uri(str(tmp_path / "t"))
    build_layout_table(storage, spec)
    return storage, sorted(our_rows(storage))


def test_bins_are_rewritten_one_per_core_at_a_time(tmp_path, monkeypatch):
    storage, before = _table(tmp_path, SPEC)
    monkeypatch.setattr(run_module.os, "cpu_count", lambda: 2)
    engine = _Recording()

    result = optimize(storage, dry_run=False, engine=engine, target_size="64mb")

    assert len(engine.spans) == 6 and engine.most == 2, (engine.spans, engine.most)
    assert result.bins_committed == 6 and not result.failed
    assert sorted(our_rows(storage)) == before


def test_an_engine_of_one_thread_rewrites_one_bin_at_a_time(tmp_path, monkeypatch):
    storage, before = _table(tmp_path, SPEC)
    monkeypatch.setattr(run_module.os, "cpu_count", lambda: 2)
    engine = _Recording(max_workers=1)  # the user's limit holds below the core count

    result = optimize(storage, dry_run=False, engine=engine, target_size="64mb")

    assert len(engine.spans) == 6 and engine.most == 1, (engine.spans, engine.most)
    assert result.bins_committed == 6 and sorted(our_rows(storage)) == before


def test_small_bins_do_not_wait_for_a_large_one(tmp_path, monkeypatch):
    storage, before = _table(tmp_path, SKEWED)
    monkeypatch.setattr(run_module.os, "cpu_count", lambda: 2)
    engine = _Recording()

    bins = optimize(storage, target_size="64mb").plan["bin_details"]
    large = max(range(len(bins)), key=lambda i: bins[i]["files"])
    assert large < 2 and bins[large]["files"] == 40  # in the first pair of bins

    result = optimize(storage, dry_run=False, engine=engine, target_size="64mb")

    assert result.bins_committed == 6 and not result.failed
    # In waves of two, bins 2 to 5 would start only once the large bin had ended. Each
    # small bin takes a few milliseconds, the large one a few hundred.
    end = engine.spans[large][1]
    during = [i for i, (start, _) in engine.spans.items() if i >= 2 and start < end]
    assert during, engine.spans
    assert engine.most == 2
    assert sorted(our_rows(storage)) == before


def test_a_failing_bin_stops_the_bins_not_yet_started(tmp_path, monkeypatch):
    storage, before = _table(tmp_path, SPEC)
    monkeypatch.setattr(run_module.os, "cpu_count", lambda: 2)
    # An input of the second bin is gone: its rewrite fails at once. (The first bin's
    # first input is read before any rewrite, for the table's codec.)
    snap = load_snapshot(storage)
    second = optimize(storage, target_size="64mb").plan["bin_details"][1]["partition"]
    path = next(f["path"] for f in snap.files.to_pylist()
                if dict(f["partitionValues"]) == second)
    (tmp_path / "t" / unquote(path)).rename(tmp_path / "moved.parquet")
    engine = _Recording()

    with pytest.raises(MissingFileError, match="bin 1") as err:
        optimize(storage, dry_run=False, engine=engine, target_size="64mb")

    assert "nothing of this batch is committed" in str(err.value)
    # Bins 0 and 1 started together and bin 1 failed at once. A core freed before the
    # failure was seen may have taken one more bin each; the rest never started.
    assert {0, 1} <= set(engine.spans) and len(engine.spans) <= 4, engine.spans
    assert load_snapshot(storage).version == snap.version


def test_a_failed_batch_leaves_none_of_its_new_files_and_names_the_bad_input(tmp_path,
                                                                            monkeypatch):
    # A corrupt input (not Parquet) failed its bin with Arrow's message and no file named,
    # and the files the batch's other bins had written stayed in the partitions, named by
    # no commit (six of them in a probe).
    storage, before = _table(tmp_path, SPEC)
    monkeypatch.setattr(run_module.os, "cpu_count", lambda: 2)
    root = tmp_path / "t"
    snap = load_snapshot(storage)
    plan = optimize(storage, target_size="64mb").plan["bin_details"]
    last = plan[-1]["partition"]
    path = next(f["path"] for f in snap.files.to_pylist()
                if dict(f["partitionValues"]) == last)
    (root / unquote(path)).write_bytes(b"garbage-not-parquet")
    files_before = {p for p in root.rglob("*.parquet")}

    with pytest.raises(RewriteError) as err:
        optimize(storage, dry_run=False, target_size="64mb")

    assert "the data file does not read as Parquet" in err.value.reason
    assert err.value.file == storage.absolute_uri(unquote(path))
    assert err.value.table == storage.root
    assert {p for p in root.rglob("*.parquet")} == files_before
    assert load_snapshot(storage).version == snap.version

"""A local engine rewrites at most one bin per core at a time, however many threads it has:
each bin holds a row group's buffers, so a wide engine would multiply memory, not speed."""

from __future__ import annotations

from delta_ops.engine.local import LocalEngine
from delta_ops.layout import run as run_module
from delta_ops.layout.optimize import optimize
from delta_ops.storage import Storage
from delta_ops_tests.support.layout_tables import LayoutSpec, build_layout_table, our_rows

#: Six partitions of two small files each: six bins, one commit batch.
SPEC = LayoutSpec(
    partitioned=True,
    appends=tuple(((10, p), (12, p)) for p in range(6)),
)


class _Recording(LocalEngine):
    def __init__(self) -> None:
        super().__init__(max_workers=16)
        self.waves: list[int] = []

    def map_tasks(self, storage, fn, items):  # type: ignore[no-untyped-def]
        self.waves.append(len(items))
        return super().map_tasks(storage, fn, items)


def test_bins_are_rewritten_one_per_core_at_a_time(tmp_path, monkeypatch):
    storage = Storage.for_uri(str(tmp_path / "t"))
    build_layout_table(storage, SPEC)
    before = sorted(our_rows(storage))
    monkeypatch.setattr(run_module.os, "cpu_count", lambda: 2)
    engine = _Recording()

    result = optimize(storage, dry_run=False, engine=engine, target_size="64mb")

    assert sum(engine.waves) == 6 and max(engine.waves) == 2, engine.waves
    assert result.bins_committed == 6 and not result.failed
    assert sorted(our_rows(storage)) == before

"""fsck's unreferenced-file warnings with VACUUM's references spilled in fsck's buckets
(`maintenance.fsck.leftovers`: one bucket per 100,000 live files): over corpus tables with
deletion vectors, `_change_data` and removes, litter of every kind (hidden names, Iceberg
`metadata`, `_delta_index`, `_change_data`, orphans in partitions and at the root, a Hadoop
side checksum) at both sides of the retention, and clocks on the edges of the tombstones'
expiry, the warnings name exactly the files (and sizes) VACUUM's own dry run would delete,
whatever the bucket count. And the Arrow pool fsck runs with (`engine.arrow_memory`)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import delta_ops.maintenance.vacuum.plan as vacuum_plan
from delta_ops.engine.arrow_memory import returning_pool
from delta_ops.engine.local import LocalEngine
from delta_ops.log import load_snapshot
from delta_ops.maintenance.fsck import fsck
from delta_ops.maintenance.fsck.leftovers import KEYS_PER_BUCKET, unreferenced_files
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import copy_corpus_table

OLD_S = 1_600_000_000
WEEK_MS = 7 * 24 * 3_600_000
TABLES = ["golden__dv-partitioned-with-checkpoint", "cdf", "golden__checkpoint",
          "golden__time-travel-partition-changes-b"]
#: Litter: (path, hidden from VACUUM).
LITTER = [
    ("orphan.parquet", False),
    ("_tmp_writer.parquet", True),
    (".hidden.parquet", True),
    ("metadata/v1.metadata.json", True),
    ("_delta_index/i.bin", True),
    ("_change_data/cdc-orphan.parquet", False),
    ("deep/er/orphan.parquet", False),
    ("deep/er/.orphan.parquet.crc", False),
    ("_hidden_dir/x.parquet", True),
]


def _tombstone_times(root: Path) -> list[int]:
    snap = load_snapshot(Storage.for_uri(str(root)))
    removes = getattr(snap, "tombstones", None)
    if removes is None or not len(removes):
        return []
    return [t for t in removes.column("deletionTimestamp").to_pylist() if t is not None]


def _findings(root: Path, now_ms: int, live_files: int | None) -> set[tuple[str, str]]:
    engine = LocalEngine()
    try:
        found, note = unreferenced_files(Storage.for_uri(str(root)), engine,
                                         clock=lambda: now_ms, live_files=live_files)
    finally:
        engine.close()
    assert note is None
    return {(p.file, p.reason.split(" ", 1)[0]) for p in found}


def _vacuum_dry_run(root: Path, now_ms: int) -> set[tuple[str, str]]:
    plan = vacuum_plan.plan_vacuum(Storage.for_uri(str(root)), now_ms=now_ms)
    return {(p, str(s)) for p, s in zip(plan.files, plan.sizes, strict=True)}


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    table=st.sampled_from(TABLES),
    litter=st.lists(st.tuples(st.sampled_from(LITTER), st.booleans()), max_size=6,
                    unique_by=lambda x: x[0][0]),
    edge=st.sampled_from(["fresh", "before", "at", "after", "late"]),
    live_files=st.sampled_from([None, KEYS_PER_BUCKET, 3 * KEYS_PER_BUCKET - 1,
                                40 * KEYS_PER_BUCKET, 10**9]),
)
def test_warnings_are_what_vacuum_would_delete(table, litter, edge, live_files):
    with tempfile.TemporaryDirectory() as tmp:
        root = copy_corpus_table(table, Path(tmp) / "t")
        for folder, _dirs, files in os.walk(root):
            for f in files:
                os.utime(os.path.join(folder, f), (OLD_S, OLD_S))
        stamps = _tombstone_times(root)
        # The clock on an edge of a tombstone's expiry (or of the files' age).
        base = (max(stamps) if stamps else OLD_S * 1000) + WEEK_MS
        now_ms = {"fresh": OLD_S * 1000 + 3_600_000, "before": base - 1, "at": base,
                  "after": base + 1, "late": base + 10 * WEEK_MS}[edge]
        old_litter = set()
        for (path, hidden), old in litter:
            at = root / path
            at.parent.mkdir(parents=True, exist_ok=True)
            at.write_bytes(b"x" * (len(path) + 3))
            t = OLD_S if old else now_ms // 1000
            os.utime(at, (t, t))
            if old and not hidden and now_ms - WEEK_MS > OLD_S * 1000:
                old_litter.add(path)
        expected = _vacuum_dry_run(root, now_ms)
        got = _findings(root, now_ms, live_files)
        assert got == expected
        # Old litter VACUUM may delete is found (a side checksum goes with its file).
        named = {p for p, _ in got}
        assert {p for p in old_litter if not p.endswith(".crc")} <= named
        assert not {p for (p, hidden), _ in litter if hidden} & named


def test_fsck_spills_the_plan_in_its_buckets(tmp_path, monkeypatch):
    """A table of more than `KEYS_PER_BUCKET` live files (as the data check counts them)
    has VACUUM's references spilled in one bucket per `KEYS_PER_BUCKET` files."""
    root = copy_corpus_table(TABLES[0], tmp_path / "t")
    (root / "orphan.parquet").write_bytes(b"x" * 7)
    os.utime(root / "orphan.parquet", (OLD_S, OLD_S))
    calls: list[dict] = []
    real = vacuum_plan.plan_vacuum

    def recording(storage, **kwargs):
        calls.append(kwargs)
        return real(storage, **kwargs)

    monkeypatch.setattr(vacuum_plan, "plan_vacuum", recording)
    now_ms = (OLD_S * 1000) + 2 * WEEK_MS
    got = _findings(root, now_ms, 25 * KEYS_PER_BUCKET + 1)
    assert calls[-1]["buckets"] == 26 and calls[-1]["partition_files"] == 0
    assert ("orphan.parquet", "7") in got
    assert got == _findings(root, now_ms, None)
    assert "buckets" not in calls[-1]  # below the size: VACUUM's own sizing


def test_fsck_runs_with_a_pool_that_returns_memory_and_restores_the_default(
        tmp_path, monkeypatch):
    monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)
    root = copy_corpus_table(TABLES[0], tmp_path / "t")
    before = pa.default_memory_pool().backend_name
    seen: list[str] = []

    class Recording(LocalEngine):
        def list_files(self, storage, directories, *args, **kwargs):
            seen.append(pa.default_memory_pool().backend_name)
            return super().list_files(storage, directories, *args, **kwargs)

    engine = Recording()
    try:
        result = fsck(str(root), engine=engine)
    finally:
        engine.close()
    assert result.problems == () or all(p.severity == "warning" for p in result.problems)
    assert seen and set(seen) <= {"jemalloc", "system"}
    assert pa.default_memory_pool().backend_name == before
    # Nested blocks share it; the default comes back after the outer one.
    with returning_pool():
        inner = pa.default_memory_pool().backend_name
        with returning_pool():
            assert pa.default_memory_pool().backend_name == inner
        assert pa.default_memory_pool().backend_name == inner
    assert pa.default_memory_pool().backend_name == before


def test_a_pool_named_by_the_user_is_kept(monkeypatch):
    monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", "mimalloc")
    before = pa.default_memory_pool().backend_name
    with returning_pool():
        assert pa.default_memory_pool().backend_name == before

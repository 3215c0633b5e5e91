"""VACUUM on real corpus tables and generated histories.

Expected deletions are computed here by a naive oracle: the state from the independent
`oracle_replay`, DV files resolved per the spec, a plain `os.walk` of the table with the
hidden-name rule written out again, and file ages from `os.stat`. Corpus tables are copied
and their files aged with `os.utime`. Generated histories (test_cleanup.RawHistory) add
orphans, change data files, hidden files, paths outside the table and random ages; after
VACUUM no file referenced by any version inside the retention window may be gone. Crash
tests fail the k-th delete for every k.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings

from delta_ops.engine.base import LISTING_SCHEMA
from delta_ops.engine.local import LocalEngine
from delta_ops.errors import RetentionError, StorageError, UnsupportedFeatureError
from delta_ops.maintenance.cleanup import DAY_MS, cleanup_metadata
from delta_ops.maintenance.vacuum import is_hidden, vacuum
from delta_ops.storage import Storage
from delta_ops.table import DeltaTable
from delta_ops_tests.support.corpus import corpus_path
from delta_ops_tests.support.oracle import oracle_replay
from delta_ops_tests.support.raw_histories import (
    BASE_MS,
    HOUR_MS,
    FailingStorage,
    _cli,
    _simple_spec,
    build_raw,
    raw_specs,
    set_mtime,
)
from delta_ops_tests.support.vacuum_checks import (
    VACUUM_TABLES,
    _age_table,
    _assert_live_files_exist,
    corpus_vacuum_matches_the_rules_file_for_file,
    naive_vacuum,
    property_no_file_of_a_version_in_the_window_is_deleted,
    referenced,
    vacuum_dry_run_does_not_import_pandas,
    walk,
)

# --------------------------------------------------------------------------------------
# The oracle
# --------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------
# Corpus tables
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", VACUUM_TABLES)
def test_corpus_vacuum_matches_the_rules_file_for_file(table_copy, name):
    corpus_vacuum_matches_the_rules_file_for_file(table_copy, name)


def test_corpus_tables_keep_every_referenced_file_with_default_retention(table_copy):
    """Default retention (1 week) on a table whose files are all old: only files neither
    live nor tombstoned within the week go."""
    root = table_copy("golden__dv-partitioned-with-checkpoint")
    state = oracle_replay(root)
    now = max(r["deletionTimestamp"] for r in state.tombstones.values()) + 3 * DAY_MS
    _age_table(root, now - 30 * DAY_MS, now - 30 * DAY_MS)
    expected = naive_vacuum(root, now - 7 * DAY_MS)
    keep = referenced(root, None, now - 7 * DAY_MS)
    result = vacuum(str(root), now_ms=now, dry_run=False)
    assert result.retention_hours == 168
    assert set(result.files) == expected and expected
    assert not any(os.path.normpath(str(root / f)) in keep for f in result.files)
    _assert_live_files_exist(root)


def _add_commit(root: Path, actions: list[dict]) -> int:
    log = root / "_delta_log"
    latest = max(int(p.name[:20]) for p in log.glob("[0-9]*.json") if len(p.name) == 25)
    data = "\n".join(json.dumps(a) for a in actions).encode() + b"\n"
    assert Storage.for_uri(str(root)).put_if_absent(f"_delta_log/{latest + 1:020d}.json", data)
    return latest + 1


class _NoListingEngine(LocalEngine):
    """A real LocalEngine that records calls (a refused VACUUM must never list)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def find_unreferenced(self, storage, directories, keep, older_than_ms):
        self.calls.append("find_unreferenced")
        return super().find_unreferenced(storage, directories, keep, older_than_ms)

    def list_files(self, storage, directories):
        self.calls.append("list_files")
        return super().list_files(storage, directories)

    def delete_files(self, storage, paths):
        self.calls.append("delete_files")
        return super().delete_files(storage, paths)


def test_vacuum_protocol_check_table_vacuums(table_copy):
    root = table_copy("golden__basic-with-vacuum-protocol-check-feature")
    snap = DeltaTable(str(root)).snapshot()
    assert "vacuumProtocolCheck" in snap.writer_features
    (root / "orphan.parquet").write_bytes(b"x")
    set_mtime(root / "orphan.parquet", BASE_MS)
    engine = _NoListingEngine()
    result = vacuum(str(root), now_ms=BASE_MS + 400 * DAY_MS, engine=engine, dry_run=False)
    assert "orphan.parquet" in result.files
    assert not (root / "orphan.parquet").exists()
    assert engine.calls == ["find_unreferenced", "delete_files"]
    _assert_live_files_exist(root)


@pytest.mark.parametrize("where", ["writerFeatures", "readerFeatures"])
def test_unknown_feature_is_refused_before_listing(table_copy, where):
    root = table_copy("golden__basic-with-vacuum-protocol-check-feature")
    snap = DeltaTable(str(root)).snapshot()
    protocol = dict(snap.protocol)
    protocol[where] = [*protocol.get(where, []), "futureFeature"]
    if where == "readerFeatures":
        protocol["writerFeatures"] = [*protocol["writerFeatures"], "futureFeature"]
    _add_commit(root, [{"commitInfo": {"operation": "UPGRADE PROTOCOL"}}, {"protocol": protocol}])
    (root / "orphan.parquet").write_bytes(b"x")
    set_mtime(root / "orphan.parquet", BASE_MS)
    before = walk(root)
    engine = _NoListingEngine()
    with pytest.raises(UnsupportedFeatureError, match="futureFeature") as info:
        vacuum(str(root), now_ms=BASE_MS + 400 * DAY_MS, engine=engine, dry_run=False)
    assert info.value.features == ["futureFeature"]
    assert engine.calls == []
    assert walk(root) == before


# --------------------------------------------------------------------------------------
# Retention safety
# --------------------------------------------------------------------------------------


def test_short_retention_is_refused_unless_forced(tmp_path):
    hist = build_raw(tmp_path / "t", _simple_spec(3, checkpoints={}), data_files=True)
    (hist.root / "orphan.parquet").write_bytes(b"x")
    set_mtime(hist.root / "orphan.parquet", hist.commit_ms[-1])
    now = hist.commit_ms[-1] + 2 * HOUR_MS
    with pytest.raises(RetentionError, match=r"retention of 1 hours, shorter than "
                       r"delta.deletedFileRetentionDuration \(168 hours\)"):
        vacuum(str(hist.root), retention_hours=1, now_ms=now, dry_run=False)
    assert (hist.root / "orphan.parquet").exists()
    result = vacuum(str(hist.root), retention_hours=1, force_retention=True, now_ms=now,
                    dry_run=False)
    assert result.files == ("orphan.parquet",)
    with pytest.raises(RetentionError, match="cannot be negative"):
        vacuum(str(hist.root), retention_hours=-1, force_retention=True, now_ms=now, dry_run=False)


def test_log_retention_shorter_than_file_retention_is_refused(tmp_path):
    spec = _simple_spec(3, checkpoints={},
                        configuration={"delta.logRetentionDuration": "interval 2 days"})
    hist = build_raw(tmp_path / "t", spec, data_files=True)
    with pytest.raises(RetentionError, match=r"logRetentionDuration \(48 hours\) is shorter"):
        vacuum(str(hist.root), now_ms=hist.commit_ms[-1] + 30 * DAY_MS, dry_run=False)
    ok = vacuum(str(hist.root), retention_hours=48, force_retention=True, dry_run=True,
                now_ms=hist.commit_ms[-1] + 30 * DAY_MS)
    assert ok.retention_hours == 48


def test_table_retention_property_is_used(tmp_path):
    spec = _simple_spec(3, checkpoints={},
                        configuration={"delta.deletedFileRetentionDuration": "interval 2 days"})
    hist = build_raw(tmp_path / "t", spec, data_files=True)
    for age_h, name in ((47, "young.parquet"), (49, "old.parquet")):
        (hist.root / name).write_bytes(b"x")
        set_mtime(hist.root / name, hist.commit_ms[-1] - age_h * HOUR_MS)
    result = vacuum(str(hist.root), now_ms=hist.commit_ms[-1], dry_run=False)
    assert result.retention_hours == 48
    assert result.files == ("old.parquet",)


# --------------------------------------------------------------------------------------
# What is listed and what is kept
# --------------------------------------------------------------------------------------


def test_hidden_rule():
    parts = ("_p=", "p=")
    assert is_hidden("_delta_log", parts) and is_hidden(".x.crc", parts)
    assert is_hidden("_tmp", parts) and is_hidden("metadata", parts)
    assert is_hidden("_delta_index", parts)
    assert not is_hidden("_change_data", parts) and not is_hidden("_p=1", parts)
    assert is_hidden("_q=1", parts) and not is_hidden("q=1", parts)
    assert not is_hidden("part-0.parquet", parts)


def test_property_no_file_of_a_version_in_the_window_is_deleted(tmp_path_factory):
    property_no_file_of_a_version_in_the_window_is_deleted(tmp_path_factory)


# --------------------------------------------------------------------------------------
# Directories, lite mode, crashes
# --------------------------------------------------------------------------------------


def _partition_history(tmp_path: Path) -> tuple:
    """Partition p=1 emptied by removes long ago; p=2 live; nested dirs under a junk dir."""
    ops = [
        [("add", 0, 9, 1, False), ("add", 1, 9, 1, False), ("add", 2, 0, 2, False)],
        [("remove", 0, 9, 1, False), ("remove", 1, 9, 1, False)],
        [("add", 4, 9, 2, False)],
    ]
    spec = {**_simple_spec(3, checkpoints={}), "commits": ops, "gaps_h": [24, 24, 24 * 30]}
    hist = build_raw(tmp_path / "t", spec, data_files=True)
    (hist.root / "junk" / "a" / "b").mkdir(parents=True)
    (hist.root / "junk" / "a" / "b" / "x.bin").write_bytes(b"x")
    set_mtime(hist.root / "junk" / "a" / "b" / "x.bin", BASE_MS)
    (hist.root / "p=2" / "empty").mkdir()
    return hist, hist.commit_ms[-1] + DAY_MS


def test_empty_directories_are_removed_and_dry_run_says_which(tmp_path):
    hist, now = _partition_history(tmp_path)
    dry = vacuum(str(hist.root), now_ms=now, dry_run=True)
    assert set(dry.files) == {"p=1/a.parquet", "p=1/b.parquet", "junk/a/b/x.bin"}
    assert dry.directories == ("junk/a/b", "junk/a", "junk", "p=1")
    result = vacuum(str(hist.root), now_ms=now, dry_run=False)
    assert set(result.directories) >= set(dry.directories)
    assert "p=2/empty" in result.directories  # already empty before: removed too
    for d in result.directories:
        assert not (hist.root / d).exists()
    assert (hist.root / "p=2").is_dir() and (hist.root / "_delta_log").is_dir()
    _assert_live_files_exist(hist.root)


def test_empty_hidden_directories_are_left_where_they_are(tmp_path):
    """VACUUM removes empty data directories, never hidden ones nor anything below one
    (Spark's rule, `listing.is_hidden`): a writer may be about to write into an empty
    `_temporary/0`, and `nested/_delta_log` is the log of a table being created there.
    Before the fix, the sweep that follows an emptied top-level directory (`p=1`) removed
    every empty directory below the root, hidden ones included, which the dry run did not
    announce."""
    hist, now = _partition_history(tmp_path)
    hidden = ["_temporary/0", "nested/_delta_log", ".aux/x", "metadata/m", "p=2/_temporary/0",
              "junk/.staging"]
    for d in hidden:
        (hist.root / d).mkdir(parents=True)
    result = vacuum(str(hist.root), now_ms=now, dry_run=False)
    assert "p=1" in result.directories and "p=2/empty" in result.directories
    assert [d for d in hidden if not (hist.root / d).is_dir()] == []
    assert not any(part.startswith(("_", ".")) or part == "metadata"
                   for d in result.directories for part in d.split("/"))


def test_lite_mode_uses_tombstones_and_says_what_it_cannot_see(tmp_path):
    hist, now = _partition_history(tmp_path)
    (hist.root / "orphan.parquet").write_bytes(b"x")
    set_mtime(hist.root / "orphan.parquet", BASE_MS)
    engine = _NoListingEngine()
    lite = vacuum(str(hist.root), now_ms=now, lite=True, dry_run=True, engine=engine)
    assert set(lite.files) == {"p=1/a.parquet", "p=1/b.parquet"}
    assert lite.lite and "cannot see files never committed" in lite.messages[0]
    assert "find_unreferenced" not in engine.calls and "list_files" not in engine.calls
    full = vacuum(str(hist.root), now_ms=now, dry_run=True)
    assert set(lite.files) < set(full.files) and "orphan.parquet" in full.files
    done = vacuum(str(hist.root), now_ms=now, lite=True, dry_run=False)
    assert not (hist.root / "p=1").exists()
    assert (hist.root / "orphan.parquet").exists()
    assert done.files == lite.files


def test_paths_outside_the_table_are_never_touched(tmp_path):
    spec = {**_simple_spec(2, checkpoints={}), "outside": True}
    hist = build_raw(tmp_path / "t", spec, data_files=True)
    outside = tmp_path / "outside"
    before = walk(outside)
    result = vacuum(str(hist.root), retention_hours=0, force_retention=True,
                    now_ms=hist.commit_ms[-1] + 400 * DAY_MS, dry_run=False)
    assert walk(outside) == before
    assert not any(".." in f or f.startswith("/") for f in result.files)
    lite = vacuum(str(hist.root), retention_hours=0, force_retention=True, lite=True,
                  now_ms=hist.commit_ms[-1] + 400 * DAY_MS, dry_run=False)
    assert walk(outside) == before and lite.files == ()


def test_dot_segments_in_log_paths_protect_the_file(tmp_path):
    hist = build_raw(tmp_path / "t", _simple_spec(1, checkpoints={}), data_files=True)
    (hist.root / "x").mkdir()
    (hist.root / "kept.parquet").write_bytes(b"k")
    set_mtime(hist.root / "kept.parquet", BASE_MS)
    _add_commit(hist.root, [{"add": {"path": "x/../kept.parquet", "partitionValues": {},
                                     "size": 1, "modificationTime": 0, "dataChange": True}}])
    vacuum(str(hist.root), retention_hours=0, force_retention=True,
           now_ms=hist.commit_ms[-1] + 400 * DAY_MS, dry_run=False)
    assert (hist.root / "kept.parquet").exists()


CRASH_SPEC = {
    **_simple_spec(4, checkpoints={2: "classic"}),
    "commits": [
        [("add", 0, 0, 1, False), ("add", 1, 1, 0, False), ("add", 2, 9, 2, True)],
        [("remove", 0, 0, 1, False), ("add", 0, 2, 1, False)],
        [("remove", 1, 1, 0, False), ("remove", 2, 9, 2, True)],
        [("add", 3, 9, 3, False)],
    ],
    "side_crc": True,
}


def test_crash_at_every_delete_then_rerun_finishes(tmp_path):
    reference = build_raw(tmp_path / "reference", CRASH_SPEC, data_files=True)
    now = reference.commit_ms[-1] + 400 * DAY_MS

    def decorate(root: Path) -> None:
        for rel in ("orphan.parquet", "p=3/orphan2.parquet", "junk/deep/x.bin"):
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(b"x")
            set_mtime(root / rel, BASE_MS)
        for rel in list(walk(root)):
            if not rel.startswith("_delta_log") and not rel.rsplit("/", 1)[-1].startswith("."):
                side = root / Path(rel).parent / f".{Path(rel).name}.crc"
                side.write_bytes(b"c")
                set_mtime(side, BASE_MS)

    decorate(reference.root)
    full = vacuum(str(reference.root), retention_hours=0, force_retention=True, now_ms=now,
                  dry_run=False)
    final = walk(reference.root)
    assert full.num_files >= 8
    for k in range(1, full.num_files + 1):
        hist = build_raw(tmp_path / f"crash{k}", CRASH_SPEC, data_files=True)
        decorate(hist.root)
        engine = LocalEngine(max_workers=1)  # deletes in a deterministic order
        with pytest.raises(StorageError, match=f"injected failure on delete #{k}"):
            vacuum(FailingStorage.at(hist.root, k), retention_hours=0, force_retention=True,
                   now_ms=now, engine=engine, dry_run=False)
        _assert_live_files_exist(hist.root)
        leftover = walk(hist.root)
        for rel in leftover:  # no side file outlives its data file
            name = rel.rsplit("/", 1)[-1]
            if name.startswith(".") and name.endswith(".crc") and not rel.startswith("_delta_log"):
                head = rel.rpartition("/")[0]
                main = f"{head}/{name[1:-4]}" if head else name[1:-4]
                assert main in leftover, f"crash at {k} left {rel} without {main}"
        vacuum(str(hist.root), retention_hours=0, force_retention=True, now_ms=now, dry_run=False)
        assert set(walk(hist.root)) == set(final)


def test_engine_runs_listing_and_deleting(tmp_path):
    hist, now = _partition_history(tmp_path)
    engine = _NoListingEngine()
    vacuum(str(hist.root), now_ms=now, engine=engine, dry_run=False)
    assert engine.calls == ["find_unreferenced", "delete_files"]


@pytest.mark.parametrize("where", ["local", "memory"])
def test_local_engine_find_unreferenced_is_the_filtered_listing(tmp_path, where):
    root = tmp_path / "t"
    if where == "local":
        storage = Storage.for_uri(str(root))
    else:
        storage = Storage.for_uri(f"memory://find-unreferenced-{uuid.uuid4().hex}")
    paths = [
        "top.parquet", "kept.parquet", "p=1/a.parquet", "p=1/b.parquet",
        "p=1/q=2/c.parquet", "p=1/q=2/young.parquet", "p=2/d.parquet", "p=3/e.parquet",
    ]
    for p in paths:
        storage.put_atomic(p, p.encode())
    if where == "local":
        for p in paths:
            set_mtime(root / p, BASE_MS + (2 * DAY_MS if "young" in p else 0))
        cutoff = BASE_MS + DAY_MS
    else:  # memory files are as old as this test
        cutoff = int(time.time() * 1000) + HOUR_MS
    keep = pa.array(["kept.parquet", "p=1/b.parquet", "p=2/d.parquet", "not/there"], pa.string())
    dirs = ["", "p=1", "p=2"]
    engine = LocalEngine()
    listing = engine.list_files(storage, dirs)
    assert listing.schema == LISTING_SCHEMA
    assert listing.column("path").to_pylist() == sorted(p for p in paths if p != "p=3/e.parquet")
    want = [
        row for row in listing.to_pylist()
        if row["path"] not in set(keep.to_pylist()) and row["modification_time"] < cutoff
    ]
    got = engine.find_unreferenced(storage, dirs, keep, cutoff)
    assert got.schema == LISTING_SCHEMA
    assert got.to_pylist() == want
    expected = ["p=1/a.parquet", "p=1/q=2/c.parquet", "top.parquet"]
    if where == "memory":
        expected = sorted([*expected, "p=1/q=2/young.parquet"])
    assert [row["path"] for row in want] == expected
    assert engine.find_unreferenced(storage, dirs, keep, 0).num_rows == 0
    assert engine.find_unreferenced(storage, [], keep, cutoff).num_rows == 0
    everything = engine.find_unreferenced(storage, dirs, pa.array([], pa.string()), cutoff)
    assert everything.num_rows == len(want) + 3


def test_vacuum_dry_run_does_not_import_pandas(table_copy):
    """pyarrow imports pandas (a third of a second in a cold process) the first time it
    converts Python objects; the dry run builds its arrays from buffers instead."""
    vacuum_dry_run_does_not_import_pandas(table_copy)


def test_cli_vacuum_json(tmp_path, monkeypatch, capsys):
    hist, _now = _partition_history(tmp_path)
    code, out, err = _cli(monkeypatch, capsys, ["vacuum", str(hist.root), "--dry-run", "--json"])
    assert code == 0, err
    obj = json.loads(out)
    assert obj["dry_run"] is True and obj["retention_hours"] == 168
    assert set(obj["files"]) == {"p=1/a.parquet", "p=1/b.parquet", "junk/a/b/x.bin"}
    assert obj["num_files"] == 3 and obj["size_bytes"] == 3
    assert obj["directories"] == ["junk/a/b", "junk/a", "junk", "p=1"]
    code, out, err = _cli(monkeypatch, capsys, ["vacuum", str(hist.root), "--retention-hours",
                                                "1"])
    assert code == 1 and "deletedFileRetentionDuration" in err
    code, out, err = _cli(monkeypatch, capsys, ["vacuum", str(hist.root), "--retention-hours",
                                                "1", "--force-retention", "--lite"])
    assert code == 0, err
    assert "deleted 2 files" in out


# --------------------------------------------------------------------------------------
# The two commit readers
# --------------------------------------------------------------------------------------


def _segment_rows(root: Path):
    from delta_ops.log.replay.references import read_deltas as _read_deltas
    from delta_ops.log.segment.log_segment import build_log_segment

    storage = Storage.for_uri(str(root))
    segment = build_log_segment(storage)
    return storage, segment, _read_deltas(storage, segment)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(spec=raw_specs())
def test_arrow_and_orjson_commit_readers_agree(tmp_path_factory, spec):
    from delta_ops.log.replay.references import _commit_rows_columnar, _commit_rows_python

    hist = build_raw(tmp_path_factory.mktemp("rows") / "t", {**spec, "outside": True})
    storage, segment, blobs = _segment_rows(hist.root)
    arrow = _commit_rows_columnar(segment, blobs, storage.root).to_pylist()
    python = _commit_rows_python(segment, blobs, storage.root).to_pylist()
    assert sorted(arrow, key=repr) == sorted(python, key=repr)
    assert len({r["key"] for r in arrow}) == len(arrow)


def test_unusual_json_falls_back_to_orjson(tmp_path):
    """A deletionTimestamp written as a string: Arrow's reader refuses the line, the orjson
    reader takes over and the tombstone still protects its file."""
    hist = build_raw(tmp_path / "t", _simple_spec(1, checkpoints={}), data_files=True)
    (hist.root / "gone.parquet").write_bytes(b"x")
    set_mtime(hist.root / "gone.parquet", BASE_MS)
    now = hist.commit_ms[-1] + 30 * DAY_MS
    _add_commit(hist.root, [{"remove": {"path": "gone.parquet", "dataChange": True,
                                        "deletionTimestamp": str(now - DAY_MS)}}])
    kept = vacuum(str(hist.root), now_ms=now, dry_run=True)
    assert "gone.parquet" not in kept.files
    expired = vacuum(str(hist.root), now_ms=now + 30 * DAY_MS, dry_run=True)
    assert "gone.parquet" in expired.files


def test_vacuum_and_cleanup_on_an_object_store_like_backend(tmp_path):
    """The in-memory backend (no directories, no os.utime): files are as old as the test
    says by moving `now` forward."""
    src = corpus_path("golden__dv-partitioned-with-checkpoint")
    storage = Storage.for_uri(f"memory://vacuum-{uuid.uuid4().hex}")
    for rel in walk(src):
        storage.put_atomic(rel, (src / rel).read_bytes())
    now = int(time.time() * 1000) + 400 * DAY_MS
    local = tmp_path / "local"
    shutil.copytree(src, local)
    for rel in walk(local):
        set_mtime(local / rel, now - 300 * DAY_MS)
    want = vacuum(str(local), now_ms=now, dry_run=True)
    dry = vacuum(storage, now_ms=now, dry_run=True)
    assert dry.files == want.files and dry.num_files > 0
    assert dry.directories == ()
    done = vacuum(storage, now_ms=now, dry_run=False)
    assert done.files == dry.files
    assert vacuum(storage, now_ms=now, dry_run=False).files == ()
    cleaned = cleanup_metadata(storage, now_ms=now, dry_run=False)
    assert cleaned.checkpoint_version == 10 and cleaned.num_files > 0
    assert DeltaTable(storage=storage).snapshot().version == 15


# --------------------------------------------------------------------------------------
# The clock
# --------------------------------------------------------------------------------------


def test_vacuum_reads_an_injected_clock_once(tmp_path):
    from delta_ops.clock import fixed_clock

    hist = build_raw(tmp_path / "t", _simple_spec(3, checkpoints={}), data_files=True)
    (hist.root / "orphan.parquet").write_bytes(b"x")
    set_mtime(hist.root / "orphan.parquet", hist.commit_ms[-1])
    now = hist.commit_ms[-1] + 2 * HOUR_MS
    reads: list[int] = []

    def clock() -> int:
        reads.append(now)
        return now

    by_clock = vacuum(str(hist.root), retention_hours=1, force_retention=True, clock=clock,
                      dry_run=True)
    assert reads == [now]
    assert by_clock.files == ("orphan.parquet",)
    by_ms = vacuum(str(hist.root), retention_hours=1, force_retention=True, now_ms=now,
                   dry_run=True)
    assert by_ms == by_clock
    # An hour earlier the orphan is younger than the retention.
    early = vacuum(str(hist.root), retention_hours=1, force_retention=True,
                   clock=fixed_clock(now - HOUR_MS), dry_run=True)
    assert early.files == ()
    with pytest.raises(ValueError, match="either clock or now_ms"):
        vacuum(str(hist.root), clock=clock, now_ms=now, dry_run=True)
    assert (hist.root / "orphan.parquet").exists()

"""The streamed state (issue 15): large tables are checkpointed and checksummed from a state
that is read one row group at a time, and give exactly what the loaded state gives.

Every test forces the streamed path with the threshold at 0 (`$DELTA_OPS_STREAM_THRESHOLD_BYTES`),
so the whole corpus runs through it; memory is measured by `benchmarks/bench_scale.py`,
never here.
"""

from __future__ import annotations

import shutil
from itertools import chain
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from delta_ops.errors import CheckpointVerificationError
from delta_ops.log.read_options import STREAM_THRESHOLD_ENV as THRESHOLD_ENV
from delta_ops.log.replay import reference_buckets
from delta_ops.log.replay import streamed_actions as stream_module
from delta_ops.log.replay.reference_buckets import spilled_file_references
from delta_ops.log.replay.references import file_references
from delta_ops.log.replay.streamed_actions import StreamedActions
from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
from delta_ops.maintenance.checkpoint import actions as act
from delta_ops.maintenance.checkpoint import streamed, writer
from delta_ops.maintenance.checkpoint.writer import write_checkpoint
from delta_ops.maintenance.checksum.operations import compute_version_checksum
from delta_ops.protocol.file_actions import ADD_TYPE
from delta_ops.storage import Storage
from delta_ops_tests.support import checkpoint_checks as tc
from delta_ops_tests.support.corpus import corpus_path

LOG = "_delta_log"


def _rows(actions) -> list[dict]:
    if isinstance(actions, StreamedActions):
        return [r for t in actions.tables() for r in t.to_pylist(maps_as_pydicts="strict")]
    return actions.to_pylist(maps_as_pydicts="strict")


@pytest.mark.parametrize("name", tc.READABLE)
def test_streamed_state_equals_the_loaded_one(name):
    """Same live files and tombstones, in the same order, and the same header, on every
    readable corpus table."""
    storage = Storage.for_uri(str(corpus_path(name)))
    loaded = load_snapshot(storage)
    streamed_snap = load_snapshot(storage, stream=True)
    assert streamed_snap.streamed and not loaded.streamed
    assert streamed_snap.version == loaded.version
    assert _rows(streamed_snap.files) == _rows(loaded.files)
    assert _rows(streamed_snap.tombstones) == _rows(loaded.tombstones)
    assert streamed_snap.num_files == loaded.num_files
    assert streamed_snap.size_bytes == loaded.size_bytes
    assert streamed_snap.protocol == loaded.protocol
    assert streamed_snap.metadata.raw == loaded.metadata.raw
    assert streamed_snap.txns == loaded.txns and streamed_snap.domains == loaded.domains
    now = tc.NOW
    assert _rows(streamed_snap.unexpired_tombstones(now)) == _rows(
        loaded.unexpired_tombstones(now)
    )


@pytest.fixture
def streamed_only(monkeypatch):
    """Threshold 0, and a record of the snapshots the checkpoint writer loads."""
    monkeypatch.setenv(THRESHOLD_ENV, "0")
    loaded = []
    real = writer.load_snapshot

    def spy(*args, **kwargs):
        snap = real(*args, **kwargs)
        loaded.append(snap)
        return snap

    monkeypatch.setattr(writer, "load_snapshot", spy)
    return loaded


@pytest.mark.parametrize("name", tc.SUPPORTED)
def test_round_trip_corpus_streamed(name, tmp_path, streamed_only):
    """The corpus round trip of `test_checkpoint` (every kind the table allows, read back by
    delta_ops and by deltalake) with every checkpoint written from a streamed state."""
    tc.round_trip_corpus(name, tmp_path)
    assert streamed_only and all(s.streamed for s in streamed_only)


@pytest.mark.parametrize("name", tc.SUPPORTED)
def test_full_checksum_streamed_equals_loaded(name, monkeypatch):
    storage = Storage.for_uri(str(corpus_path(name)))
    loaded = compute_version_checksum(storage, method="full")
    monkeypatch.setenv(THRESHOLD_ENV, "0")
    streamed_sum = compute_version_checksum(storage, method="full")
    assert streamed_sum.checksum == loaded.checksum


def _big_history(tmp_path: Path, monkeypatch, v3: bool = True) -> tuple[Storage, int]:
    """A table whose checkpoint has many row groups, then commits that remove files from
    several of them and add new ones: the shape streaming filters batch by batch."""
    monkeypatch.setattr(act, "BATCH_ROWS", 7)
    storage = Storage.for_uri(str(tmp_path / "t"))
    commits = [[("add", f, f % 3, 100 + f, True) for f in range(len(tc.PATHS))]]
    latest = tc._write_history(storage, commits, v3=v3)
    write_checkpoint(storage, kind="classic", now_ms=tc.NOW, stream_threshold=10**12)
    more = [[("remove", f, 0, False) for f in range(0, len(tc.PATHS), 3)]]
    more.append([("add", f, 1, 900 + f, True) for f in range(1, len(tc.PATHS), 4)])
    for steps in more:
        latest += 1
        actions = [tc._action(s, latest, v3) for s in steps]
        actions.append({"commitInfo": {"timestamp": tc.NOW - 1000 + latest}})
        storage.put_if_absent(
            f"{LOG}/{latest:020d}.json", b"\n".join(orjson.dumps(a) for a in actions) + b"\n"
        )
    return storage, latest


@pytest.mark.parametrize(
    "kind,options",
    [("classic", {}), ("multi-part", {"parts": 3}), ("v2-uuid", {"sidecar_actions": 4}),
     ("v2-uuid", {"sidecar_actions": 0}), ("v2-classic", {})],
)
def test_streamed_kinds_equal_loaded_over_many_row_groups(kind, options, tmp_path, monkeypatch):
    # The v3 history supports v2Checkpoint (deletion vectors too); multi-part needs v1.
    storage, latest = _big_history(tmp_path, monkeypatch, v3=kind != "multi-part")
    pf = pq.ParquetFile(tmp_path / "t" / LOG / f"{latest - 2:020d}.checkpoint.parquet")
    assert pf.metadata.num_row_groups >= 3
    expected = tc._full_state(load_snapshot(storage))
    root = tmp_path / "copy"
    shutil.copytree(tmp_path / "t", root)
    target = Storage.for_uri(str(root))
    monkeypatch.setattr(streamed, "PART_BUFFER_ROWS", 2)
    result = write_checkpoint(target, kind=kind, now_ms=tc.NOW, stream_threshold=0, **options)
    assert result.version == latest and not result.already_existed
    tc._delete_commits_upto(root, latest)
    for name in list((root / LOG).iterdir()):
        if ".checkpoint." in name.name and name.name not in result.files:
            name.unlink()
    after = load_snapshot(target)
    assert after.checkpoint_version == latest
    assert tc._full_state(after) == expected
    theirs = tc._rs_files(root)  # None where deltalake cannot read the table
    assert theirs is None or len(theirs) == len({r["path"] for r in expected["files"]})


def test_one_large_row_group_is_decoded_a_batch_at_a_time(tmp_path, monkeypatch):
    """deltalake's shape: the whole checkpoint in one row group. It is decoded a batch at a
    time where it is consumed, never handed whole to a read-ahead thread, and the streamed
    state and VACUUM's spilled references equal the loaded ones."""
    storage, latest = _big_history(tmp_path, monkeypatch)
    part = tmp_path / "t" / LOG / f"{latest - 2:020d}.checkpoint.parquet"
    pq.write_table(pq.read_table(part), part, row_group_size=1 << 20)
    assert pq.ParquetFile(part).metadata.num_row_groups == 1
    loaded = load_snapshot(storage)
    whole = file_references(storage, loaded.segment, None, 0)
    monkeypatch.setattr(stream_module, "BATCH_ROWS", 3)
    monkeypatch.setattr(reference_buckets, "CHECKPOINT_BATCH_ROWS", 3)
    read_ahead = []
    real_submit = stream_module.io_submit
    monkeypatch.setattr(stream_module, "io_submit",
                        lambda fn, *a: read_ahead.append(a) or real_submit(fn, *a))
    adds = list(stream_module._parquet_groups(
        storage, f"{LOG}/{part.name}", latest - 2, "add", ADD_TYPE))
    assert read_ahead == []
    assert len(adds) > 1 and all(t.num_rows <= 3 for t in adds)
    assert sum(t.num_rows for t in adds) == len(tc.PATHS)
    streamed_snap = load_snapshot(storage, stream=True)
    assert streamed_snap.streamed
    assert _rows(streamed_snap.files) == _rows(loaded.files)
    assert _rows(streamed_snap.tombstones) == _rows(loaded.tombstones)
    with spilled_file_references(storage, loaded.segment, None, 0, buckets=3) as spilled:
        kept = chain.from_iterable(c.to_pylist() for c in spilled.keep_chunks())
        assert sorted(set(kept)) == sorted(whole.keep.to_pylist())
        assert spilled.expired_keys().to_pylist() == whole.expired.to_pylist()
    assert read_ahead == []


def test_a_streamed_checkpoint_that_does_not_read_back_is_not_published(tmp_path, monkeypatch):
    """A fault between the state and the bytes (here: one live file's size written wrong)
    is caught by the read-back digest; no checkpoint file and no `_last_checkpoint` appear."""
    storage, latest = _big_history(tmp_path, monkeypatch)
    before = sorted(p.name for p in (tmp_path / "t" / LOG).iterdir())
    real = act.add_struct

    def wrong_size(batch, layout):
        arr = real(batch, layout)
        sizes = arr.field("size").to_pylist()
        sizes[0] += 1
        return pa.StructArray.from_arrays(
            [
                pa.array(sizes, pa.int64()) if f.name == "size" else arr.field(f.name)
                for f in arr.type
            ],
            fields=list(arr.type),
        )

    monkeypatch.setattr(act, "add_struct", wrong_size)
    with pytest.raises(CheckpointVerificationError) as err:
        write_checkpoint(storage, kind="classic", now_ms=tc.NOW, stream_threshold=0)
    assert "differ" in str(err.value) and f"{latest:020d}.checkpoint.parquet" in str(err.value)
    assert sorted(p.name for p in (tmp_path / "t" / LOG).iterdir()) == before


def test_put_streams_a_local_file(tmp_path, s3_server):
    """`Storage.put_atomic` and `put_if_absent` take a local file: copied from disk on local
    storage and uploaded from disk to S3, with the same content."""
    data = bytes(range(256)) * 40_000  # 10 MB: more than one S3 upload part
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    for storage in (
        Storage.for_uri(str(tmp_path / "dest")),
        Storage.for_uri(s3_server.fresh_uri(), s3_server.storage_options),
    ):
        storage.put_atomic("a/b.bin", src)
        assert storage.read("a/b.bin") == data
        assert storage.put_if_absent("a/c.bin", src) is True
        assert storage.put_if_absent("a/c.bin", src) is False
        assert storage.read("a/c.bin") == data

"""fsck's data check in buckets: a state of more than `group_files` live files is spilled to
disk by the hash of each file's directory and checked a bucket at a time. Over random hurts
of a partitioned table with deletion vectors (hypothesis: deleted and truncated data files,
a deleted or corrupted DV file), the bucketed check, forced with a small `group_files`,
finds exactly what the in-memory check (one bucket) finds, on a loaded and on a streamed
state, and lists every directory exactly once."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from urllib.parse import unquote

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delta_ops.engine.local import LocalEngine
from delta_ops.log import load_snapshot
from delta_ops.maintenance.fsck.data_files import check_data
from delta_ops.maintenance.fsck.problems import sort_problems
from delta_ops.protocol.deletion_vectors import DeletionVectorDescriptor
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import copy_corpus_table

PARTITIONED = "golden__dv-partitioned-with-checkpoint"
WHOLE = 10**9  # more than any table here: one bucket, held in memory


class RecordingEngine(LocalEngine):
    """A local engine that remembers the directories of each listing."""

    def __init__(self) -> None:
        super().__init__()
        self.listed: list[list[str]] = []

    def list_files(self, storage, directories, *args, **kwargs):
        self.listed.append(list(directories))
        return super().list_files(storage, directories, *args, **kwargs)


def _check(root: Path, group_files: int, *, stream: bool, verify_data: bool):
    storage = Storage.for_uri(str(root))
    snapshot = load_snapshot(storage, stream=stream)
    assert snapshot.streamed == stream
    engine = RecordingEngine()
    try:
        out = check_data(storage, snapshot, engine, verify_data=verify_data,
                         group_files=group_files)
    finally:
        engine.close()
    return out, engine.listed


def _summary(out):
    return (
        sort_problems(out.problems),
        {k: (f.missing, f.dv_key, f.dv_missing, f.dv_corrupt, f.row)
         for k, f in out.damaged.items()},
        out.num_files, out.num_deletion_vectors, out.num_outside_table,
    )


def _hurt(root: Path, rows: list[dict], deleted: set[int], truncated: set[int],
          dv_hurt: str) -> set[str]:
    """Hurt the copy; the codes the check must find."""
    expect: set[str] = set()
    for n in sorted(deleted):
        (root / unquote(rows[n]["path"])).unlink()
        expect.add("missing_file")
    for n in sorted(truncated - deleted):
        path = root / unquote(rows[n]["path"])
        os.truncate(path, path.stat().st_size // 2)
        expect.add("size_mismatch")
    with_dv = [r for r in rows if r["deletionVector"]]
    if dv_hurt != "none" and with_dv:
        d = DeletionVectorDescriptor.from_dict(with_dv[0]["deletionVector"])
        at = root / d.relative_path()
        if dv_hurt == "delete":
            at.unlink()
            expect.add("missing_dv")
        else:
            data = bytearray(at.read_bytes())
            data[d.offset + 4 + d.size_in_bytes] ^= 0xFF  # its CRC-32's first byte
            at.write_bytes(bytes(data))
            expect.add("corrupt_dv")
    return expect


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    deleted=st.sets(st.integers(0, 14), max_size=6),
    truncated=st.sets(st.integers(0, 14), max_size=4),
    dv_hurt=st.sampled_from(["none", "delete", "corrupt"]),
    group_files=st.integers(1, 7),
    verify_data=st.booleans(),
)
def test_buckets_find_what_one_bucket_finds(deleted, truncated, dv_hurt, group_files,
                                            verify_data):
    with tempfile.TemporaryDirectory() as tmp:
        root = copy_corpus_table(PARTITIONED, Path(tmp) / "t")
        rows = sorted(load_snapshot(Storage.for_uri(str(root))).files.to_pylist(),
                      key=lambda r: r["path"])
        assert len(rows) == 15
        expect = _hurt(root, rows, deleted, truncated, dv_hurt)
        whole, whole_listed = _check(root, WHOLE, stream=False, verify_data=verify_data)
        found = {p.code for p in whole.problems}
        assert expect <= found
        assert found - expect <= ({"unreadable_parquet", "row_count_mismatch"}
                                  if verify_data else set())
        assert len(whole_listed) == 1  # one bucket: one listing of every directory
        for stream in (False, True):
            bucketed, listed = _check(root, group_files, stream=stream,
                                      verify_data=verify_data)
            assert _summary(bucketed) == _summary(whole)
            # Each directory in exactly one listing, and several listings.
            assert sorted(d for call in listed for d in call) == sorted(whole_listed[0])
            assert len(listed) > 1


def test_spilled_check_on_a_healthy_table_finds_nothing(tmp_path):
    root = copy_corpus_table(PARTITIONED, tmp_path / "t")
    out, listed = _check(root, 1, stream=True, verify_data=True)
    assert out.problems == [] and out.damaged == {}
    assert out.num_files == 15 and out.num_deletion_vectors > 0
    assert len(listed) > 1
    # The partitions of the live files, and the root for the DV files.
    parts = {r["path"].split("/")[0] for r in load_snapshot(
        Storage.for_uri(str(root))).files.to_pylist()}
    assert sorted(d for call in listed for d in call) == sorted({"", *parts})

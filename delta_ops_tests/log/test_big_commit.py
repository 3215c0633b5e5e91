"""A commit larger than the chunk bound (as a CREATE TABLE AS SELECT writes a whole table in
one commit) is read in pieces of whole lines, and gives the state and checkpoint it gave
whole; a commit's `commitInfo` is read without parsing its file actions (issue 22).

Memory itself is measured by `benchmarks/bench_big_commit.py`, never here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from delta_ops.errors import CorruptLogError
from delta_ops.log.read_options import REBUILD_THRESHOLD_ENV
from delta_ops.log.replay.delta_chunks import delta_chunks, read_commit_info
from delta_ops.log.segment.log_segment import build_log_segment
from delta_ops.log.snapshot import rebuild as rb
from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
from delta_ops.maintenance.checkpoint.writer import write_checkpoint
from delta_ops.maintenance.checksum import compute_version_checksum
from delta_ops.storage import Storage

LOG = "_delta_log"
NOW = 1_800_000_000_000
PROTOCOL = {"minReaderVersion": 3, "minWriterVersion": 7,
            "readerFeatures": ["deletionVectors"], "writerFeatures": ["deletionVectors"]}
METADATA = {
    "id": "big-commit",
    "format": {"provider": "parquet", "options": {}},
    "schemaString": json.dumps({"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "part", "type": "string", "nullable": True, "metadata": {}},
    ]}),
    "partitionColumns": ["part"],
    "configuration": {},
    "createdTime": 0,
}
DV = {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "offset": 1,
      "sizeInBytes": 36, "cardinality": 2}
#: The chunk bound of these tests: the first commit is several times larger.
CHUNK = 20_000


def _add(i: int, version: int, **extra) -> dict:
    return {"add": {
        "path": f"part={i % 5}/f{i}.parquet", "partitionValues": {"part": str(i % 5)},
        "size": 100 + i, "modificationTime": version, "dataChange": True,
        "stats": json.dumps({"numRecords": i % 7 + 1, "minValues": {"id": i},
                             "maxValues": {"id": i + 9}, "nullCount": {"id": 0}}),
        **extra,
    }}


def _write(log: Path, version: int, objs: list[dict]) -> None:
    (log / f"{version:020d}.json").write_bytes(b"\n".join(orjson.dumps(o) for o in objs) + b"\n")


def _ctas_table(root: Path, n: int = 600) -> Path:
    """Version 0: one commit with protocol, metadata and `n` adds (a CTAS); version 1
    removes some of them, re-adds one file with a deletion vector and adds new ones."""
    log = root / LOG
    log.mkdir(parents=True)
    _write(log, 0, [
        {"commitInfo": {"timestamp": NOW, "operation": "CREATE TABLE AS SELECT",
                        "txnId": "ctas-0"}},
        {"protocol": PROTOCOL}, {"metaData": METADATA},
        *(_add(i, 0) for i in range(n)),
    ])
    removes = [{"remove": {"path": f"part={i % 5}/f{i}.parquet", "deletionTimestamp": NOW + 1,
                           "dataChange": True, "partitionValues": {"part": str(i % 5)},
                           "size": 100 + i}} for i in range(0, n, 7)]
    _write(log, 1, [
        {"commitInfo": {"timestamp": NOW + 1, "operation": "DELETE", "txnId": "del-1"}},
        *removes,
        _add(3, 1, deletionVector=DV),
        {"remove": {"path": "part=3/f3.parquet", "deletionTimestamp": NOW + 1,
                    "dataChange": True}},
        *(_add(i, 1) for i in range(n, n + 20)),
    ])
    return root


def _files(snapshot) -> list[str]:
    files = snapshot.files
    tables = [files] if isinstance(files, pa.Table) else list(files.tables())
    rows = [r for t in tables for r in t.to_pylist(maps_as_pydicts="strict")]
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)


def test_a_commit_larger_than_the_chunk_is_read_in_pieces(tmp_path):
    root = _ctas_table(tmp_path / "t")
    storage = Storage.for_uri(str(root))
    segment = build_log_segment(storage)
    size0 = segment.deltas[0].file.size
    assert size0 > 4 * CHUNK
    chunks = list(delta_chunks(storage, segment.deltas, CHUNK))
    pieces = [p for c in chunks for p in c if p.delta.end == 0]
    assert len(pieces) >= 4
    longest = max(len(line) for line in (root / LOG / f"{0:020d}.json").read_bytes().split(b"\n"))
    assert all(len(p.data) <= CHUNK + longest for p in pieces)
    # Whole lines, in order, every byte once, numbered as in the file.
    assert b"".join(p.data for p in pieces) == (root / LOG / f"{0:020d}.json").read_bytes()
    assert all(p.data.endswith(b"\n") for p in pieces)
    assert [p.first_line for p in pieces][0] == 1
    for a, b in zip(pieces, pieces[1:], strict=False):
        assert b.first_line == a.first_line + a.data.count(b"\n")


@pytest.mark.parametrize("buckets", [1, 3])
def test_the_rebuild_reads_a_big_commit_in_chunks_and_gives_the_same_state(
    tmp_path, monkeypatch, buckets
):
    root = _ctas_table(tmp_path / "t")
    storage = Storage.for_uri(str(root))
    loaded = load_snapshot(storage)  # the in-memory replay: whole commits
    seen: list[int] = []
    real = rb.reconcile

    def spy(files, *args, **kwargs):
        seen.append(sum(len(f.data) for f in files))
        return real(files, *args, **kwargs)

    monkeypatch.setattr(rb, "reconcile", spy)
    monkeypatch.setattr(rb, "CHUNK_BYTES", CHUNK)
    with rb.rebuild_snapshot(storage, buckets=buckets) as rebuilt:
        assert _files(rebuilt.snapshot) == _files(loaded)
        assert rebuilt.snapshot.num_files == loaded.num_files == 600 - 86 + 20 + 1 - 1
        assert rebuilt.snapshot.commit_infos[0].raw["txnId"] == "ctas-0"
        assert rebuilt.snapshot.metadata.raw == loaded.metadata.raw
    size0 = (root / LOG / f"{0:020d}.json").stat().st_size
    assert len(seen) >= 5  # the CTAS commit alone is several chunks
    assert max(seen) < size0 // 2


def test_the_first_checkpoint_of_a_big_commit_equals_the_in_memory_one(tmp_path, monkeypatch):
    """The checkpoint rebuilt from the CTAS commit in chunks has the actions of the one
    written from the commits replayed whole, and deltalake reads it to the same files."""
    src = _ctas_table(tmp_path / "src")
    written = {}
    monkeypatch.setattr(rb, "CHUNK_BYTES", CHUNK)
    for label, rebuild in (("chunked", True), ("whole", False)):
        root = tmp_path / label
        shutil.copytree(src, root)
        result = write_checkpoint(str(root), now_ms=NOW + 10, rebuild=rebuild,
                                  stream_threshold=10**15)
        assert (result.rebuilt_buckets > 0) == rebuild
        rows = pa.concat_tables(
            [pq.read_table(root / LOG / f) for f in result.files]
        ).to_pylist(maps_as_pydicts="strict")
        written[label] = sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)
        theirs = DeltaTable(str(root)).get_add_actions(flatten=True).column("path").to_pylist()
        ours = load_snapshot(Storage.for_uri(str(root))).files.column("path").to_pylist()
        assert sorted(theirs) == sorted(ours) and len(ours) == 534
    assert written["chunked"] == written["whole"]


def test_a_big_compaction_file_is_read_backwards_in_pieces(tmp_path, monkeypatch):
    """A compaction file's lines are read newest first (its first line for a key wins):
    cut into pieces from its end, it gives the state it gives whole."""
    root = _ctas_table(tmp_path / "t")
    log = root / LOG
    storage = Storage.for_uri(str(root))
    expected = _files(load_snapshot(storage))
    # Databricks' form: the covered commits' actions, newest commit first, unreconciled.
    lines = [line for v in (1, 0) for line in (log / f"{v:020d}.json").read_bytes().splitlines()
             if not line.startswith(b'{"commitInfo"')]
    (log / f"{0:020d}.{1:020d}.compacted.json").write_bytes(b"\n".join(lines) + b"\n")
    (log / f"{0:020d}.json").unlink()
    (log / f"{1:020d}.json").unlink()
    monkeypatch.setattr(rb, "CHUNK_BYTES", CHUNK)
    with rb.rebuild_snapshot(storage, buckets=2) as rebuilt:
        assert _files(rebuilt.snapshot) == expected


def test_commit_info_is_read_without_parsing_the_file_actions(tmp_path):
    root = _ctas_table(tmp_path / "t")
    path = root / LOG / f"{0:020d}.json"
    # A corrupt add, and a line that is not JSON at all, far after the commitInfo.
    path.write_bytes(path.read_bytes() + b'{"add": {"path": broken\n' + b"garbage\n" * 1000)
    storage = Storage.for_uri(str(root))
    assert read_commit_info(storage, 0)["txnId"] == "ctas-0"
    # Another reader still refuses the commit, naming its line: it is corrupt.
    with pytest.raises(CorruptLogError, match="line 604"):
        load_snapshot(storage, 0)


def test_commit_info_is_found_after_other_actions_and_may_be_missing(tmp_path):
    log = tmp_path / LOG
    log.mkdir()
    _write(log, 0, [{"protocol": PROTOCOL}, {"metaData": METADATA}, _add(1, 0),
                    {"commitInfo": {"timestamp": 5, "txnId": "late"}}])
    _write(log, 1, [_add(2, 1)])
    storage = Storage.for_uri(str(tmp_path))
    assert read_commit_info(storage, 0) == {"timestamp": 5, "txnId": "late"}
    assert read_commit_info(storage, 1) is None


def test_crc_compute_at_a_checkpoint_reads_only_the_commit_info(tmp_path):
    """A checkpoint at the version: the checksum takes txnId from the commit's commitInfo
    and never parses the commit's adds (a corrupt one after the commitInfo is not seen)."""
    root = _ctas_table(tmp_path / "t")
    write_checkpoint(str(root), version=0, now_ms=NOW + 10, rebuild=False)
    path = root / LOG / f"{0:020d}.json"
    path.write_bytes(path.read_bytes() + b'{"add": {"path": broken\n')
    computed = compute_version_checksum(str(root), version=0, method="full")
    assert computed.checksum.txn_id == "ctas-0"
    assert computed.checksum.num_files == 600


def test_crc_of_a_big_commit_without_checkpoint_is_computed_from_the_rebuild(
    tmp_path, monkeypatch
):
    """No checkpoint and commits above the rebuild threshold: the full checksum aggregates
    the state rebuilt by bucket (commits read in chunks); it equals the in-memory one, is
    written, and verifies."""
    from delta_ops.maintenance.checksum import operations as ops
    from delta_ops.maintenance.checksum import verify_checksum, write_checksum

    root = _ctas_table(tmp_path / "t")
    monkeypatch.setattr(rb, "CHUNK_BYTES", CHUNK)
    monkeypatch.setenv(REBUILD_THRESHOLD_ENV, str(10**15))
    in_memory = compute_version_checksum(str(root), method="full").checksum
    rebuilt: list[int] = []
    real = ops.rebuild_snapshot

    def spy(storage, version=None, **kwargs):
        rebuilt.append(version)
        return real(storage, version, **kwargs)

    monkeypatch.setattr(ops, "rebuild_snapshot", spy)
    monkeypatch.setenv(REBUILD_THRESHOLD_ENV, "1")
    chunked = compute_version_checksum(str(root), method="full").checksum
    assert rebuilt == [1]
    assert chunked.to_dict() == in_memory.to_dict()
    assert chunked.num_files == 534 and chunked.txn_id == "del-1"
    assert write_checksum(str(root), version=1).written
    assert verify_checksum(str(root), version=1).ok
    assert not list((tmp_path).glob("**/delta-ops-rebuild*"))


def test_incremental_checksum_steps_aside_for_a_commit_too_large(tmp_path, monkeypatch):
    from delta_ops.maintenance.checksum import operations as ops
    from delta_ops.maintenance.checksum import write_checksum

    root = _ctas_table(tmp_path / "t")
    _write(root / LOG, 2, [{"commitInfo": {"timestamp": NOW + 2, "operation": "WRITE"}},
                           *(_add(i, 2) for i in range(1000, 1100))])
    assert write_checksum(str(root), version=1).written
    size = (root / LOG / f"{2:020d}.json").stat().st_size
    assert compute_version_checksum(str(root), version=2).method == "incremental"
    monkeypatch.setattr(ops, "INCREMENTAL_MAX_COMMIT_BYTES", size - 1)
    computed = compute_version_checksum(str(root), version=2)
    assert computed.method == "full"
    assert f"commit 2 holds {size} bytes" in computed.fallback_reason
    assert computed.checksum.num_files == 634


def test_a_big_commit_after_a_checkpoint_is_rebuilt_in_chunks(tmp_path, monkeypatch):
    """A checkpoint, then a commit larger than the chunk bound: the next checkpoint is
    rebuilt by bucket (the commit read in pieces) and has the actions the streamed path
    gives; small commits after a checkpoint still stream."""
    src = tmp_path / "src"
    log = src / LOG
    log.mkdir(parents=True)
    _write(log, 0, [{"commitInfo": {"timestamp": NOW}}, {"protocol": PROTOCOL},
                    {"metaData": METADATA}, *(_add(i, 0) for i in range(50))])
    write_checkpoint(str(src), version=0, now_ms=NOW + 10, rebuild=False)
    _write(log, 1, [{"commitInfo": {"timestamp": NOW + 1, "txnId": "big"}},
                    *(_add(i, 1) for i in range(50, 650))])
    monkeypatch.setattr(rb, "CHUNK_BYTES", CHUNK)
    monkeypatch.setenv(REBUILD_THRESHOLD_ENV, "1")
    storage = Storage.for_uri(str(src))
    assert rb.needs_rebuild(storage, 1, 1)
    assert not rb.needs_rebuild(storage, 1, 10**12)
    written = {}
    for label, rebuild in (("rebuilt", None), ("streamed", False)):
        root = tmp_path / label
        shutil.copytree(src, root)
        result = write_checkpoint(str(root), now_ms=NOW + 10, rebuild=rebuild,
                                  stream_threshold=0)
        assert (result.rebuilt_buckets > 0) == (label == "rebuilt")
        rows = pa.concat_tables(
            [pq.read_table(root / LOG / f) for f in result.files]
        ).to_pylist(maps_as_pydicts="strict")
        written[label] = sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)
    assert written["rebuilt"] == written["streamed"]
    # A small commit after the checkpoint: the stream, as before.
    monkeypatch.setattr(rb, "CHUNK_BYTES", 10**9)
    assert not rb.needs_rebuild(storage, 1, 1)

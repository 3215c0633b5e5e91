"""The log's light replay of protocol and metaData (`delta_ops.log.segment.protocol_metadata`).

What it must give: exactly what the full replay (`load_snapshot`) gives, at every version of
every corpus table delta_ops reads, and what deltalake (an independent reader) reports for the
latest version; the newest action when a Databricks-form compaction (newest commit first,
first line wins) sits in the segment; with a starting point, only the deltas after it are
read. Errors name the table, the version and the file.

A file that is not read cannot hurt: several tests prove what is (not) read by putting a
broken file where a wrong reader would trip over it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest
from deltalake import DeltaTable as RsTable

from delta_ops.errors import CorruptLogError, DeltaOpsError
from delta_ops.log.segment.log_segment import build_log_segment
from delta_ops.log.segment.protocol_metadata import (
    read_protocol,
    read_protocol_metadata,
)
from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
from delta_ops.protocol.actions import Metadata
from delta_ops.protocol.filenames import commit_name
from delta_ops.protocol.table_configuration import TableConfiguration
from delta_ops.storage import Storage
from delta_ops_tests.support.compaction_fixtures import (
    build_compaction_table,
    write_databricks_compaction,
)
from delta_ops_tests.support.corpus import all_corpus_tables, corpus_path

LOG = "_delta_log"
# golden__checkpoint: commits 0..14, a classic checkpoint at 10; protocol and metaData only
# in commit 0 (so in the checkpoint); commits 11..14 hold neither.
CHECKPOINTED = "golden__checkpoint"


def _storage(root: Path) -> Storage:
    return Storage.for_uri(str(root))


def _readable_tables() -> list[str]:
    out = []
    for name in all_corpus_tables():
        try:
            load_snapshot(_storage(corpus_path(name)))
        except DeltaOpsError:
            continue
        out.append(name)
    return out


# ---- same answer as the full replay and as deltalake -----------------------------------------


def test_every_version_of_every_corpus_table_reads_as_the_full_replay():
    tables = _readable_tables()
    assert len(tables) > 100
    checked = 0
    with_checkpoint = 0
    for name in tables:
        storage = _storage(corpus_path(name))
        latest = load_snapshot(storage).version
        for version in range(latest + 1):
            try:
                snap = load_snapshot(storage, version)
            except DeltaOpsError:
                continue  # truncated logs: the early versions are gone
            got = read_protocol_metadata(storage, snap.segment)
            assert got.version == version
            assert got.protocol == snap.protocol, (name, version)
            assert dict(got.metadata.raw) == dict(snap.metadata.raw), (name, version)
            assert read_protocol(storage, snap.segment) == snap.protocol, (name, version)
            checked += 1
            with_checkpoint += snap.segment.checkpoint is not None
    assert checked > 400 and with_checkpoint > 40


def _features(value) -> list[str] | None:
    return sorted(value) if value else None


def test_latest_protocol_and_properties_match_deltalake():
    compared = 0
    for name in _readable_tables():
        root = corpus_path(name)
        try:
            theirs = RsTable(str(root))
            p, m = theirs.protocol(), theirs.metadata()
        except Exception:  # noqa: BLE001 - deltalake's errors have no common class
            continue
        storage = _storage(root)
        got = read_protocol_metadata(storage, build_log_segment(storage))
        assert (
            got.protocol["minReaderVersion"], got.protocol["minWriterVersion"],
            _features(got.protocol.get("readerFeatures")),
            _features(got.protocol.get("writerFeatures")),
        ) == (
            p.min_reader_version, p.min_writer_version,
            _features(p.reader_features), _features(p.writer_features),
        ), name
        assert got.metadata.id == m.id, name
        assert got.metadata.configuration == dict(m.configuration), name
        assert got.metadata.partition_columns == list(m.partition_columns), name
        compared += 1
    assert compared > 120


@pytest.mark.parametrize(
    "name",
    [
        "golden__v2-checkpoint-json",
        "golden__v2-checkpoint-parquet",
        "golden__multi-part-checkpoint",
        "kernel-defaults__kernel-pagination-multi-part-checkpoints",
    ],
)
def test_from_the_checkpoint_alone(name, tmp_path):
    """Every delta after the checkpoint deleted: the answer comes from the checkpoint's own
    protocol/metaData (V2 JSON and Parquet top-level files, multi-part)."""
    root = shutil.copytree(corpus_path(name), tmp_path / "t")
    storage = _storage(root)
    want = load_snapshot(storage)
    segment = build_log_segment(storage, want.segment.checkpoint.version)
    assert segment.checkpoint is not None and not segment.deltas
    got = read_protocol_metadata(storage, segment)
    assert got.protocol == want.protocol
    assert dict(got.metadata.raw) == dict(want.metadata.raw)


# ---- Databricks-form compaction: inside it, the first line wins ------------------------------


@pytest.fixture(scope="module")
def compacted(tmp_path_factory):
    """(storage with commits only, storage with Databricks-form compactions 1..5 and 6..12)."""
    base = tmp_path_factory.mktemp("pm")
    table = build_compaction_table(base / "commits")
    copy = shutil.copytree(table.root, base / "compacted")
    storage = _storage(copy)
    for start, end in ((1, 5), (6, 12)):
        write_databricks_compaction(storage, start, end)
    return table.storage, storage


def test_a_databricks_compaction_gives_its_newest_protocol_and_metadata(compacted):
    commits, storage = compacted
    segment = build_log_segment(storage, 12)
    assert [(d.start, d.end) for d in segment.deltas] == [(0, 0), (1, 5), (6, 12)]
    # The window 6..12 holds v11's metaData (first) and v8's (below it).
    data = storage.read(segment.deltas[-1].file.path)
    assert data.count(b'"metaData"') == 2
    got = read_protocol_metadata(storage, segment)
    want = load_snapshot(commits, 12)
    assert got.metadata.configuration == want.metadata.configuration
    assert got.metadata.configuration["fixture.step"] == "11"
    assert got.protocol == want.protocol
    # The protocol of v2 (domainMetadata added) is inside the window 1..5.
    assert "domainMetadata" in got.protocol["writerFeatures"]


def test_a_starting_point_inside_a_compaction_window(compacted):
    """From v9 (cursor) the deltas after it are the compaction 6..12: its first metaData
    (v11) is taken, not the v8 one below it, and not the seed."""
    commits, storage = compacted
    at9 = load_snapshot(commits, 9)
    since = TableConfiguration(at9.protocol, at9.metadata, 9)
    got = read_protocol_metadata(storage, build_log_segment(storage, 12), since=since)
    assert got.metadata.configuration["fixture.step"] == "11"
    assert got.metadata.configuration == load_snapshot(commits, 12).metadata.configuration


# ---- a starting point: only the deltas after it ----------------------------------------------


def _break_commit(root: Path, version: int) -> str:
    """Make commit `version` a file any reader of its protocol/metaData trips over."""
    path = root / LOG / commit_name(version)
    path.write_bytes(b'{"protocol":{"minReaderVersion":\n')
    return f"{LOG}/{commit_name(version)}"


def test_a_starting_point_reads_only_the_deltas_after_it(table_copy):
    root = table_copy(CHECKPOINTED)
    storage = _storage(root)
    at12 = load_snapshot(storage, 12)
    broken = _break_commit(root, 11)
    segment = build_log_segment(storage, 14)
    with pytest.raises(CorruptLogError, match="invalid JSON") as info:
        read_protocol_metadata(storage, segment)
    assert (info.value.version, info.value.file) == (11, broken)
    assert info.value.table == storage.root
    # Seeded at 12: commits 13 and 14 are read (they hold neither action), 11 is not.
    seed = TableConfiguration({"minReaderVersion": 1, "minWriterVersion": 2, "seed": 1},
                              Metadata({**at12.metadata.raw, "configuration": {"seed": "yes"}}),
                              12)
    got = read_protocol_metadata(storage, segment, since=seed)
    assert got.version == 14
    assert got.protocol == seed.protocol and got.metadata.configuration == {"seed": "yes"}


def test_newer_actions_win_over_the_starting_point(table_copy):
    root = table_copy(CHECKPOINTED)
    storage = _storage(root)
    at12 = load_snapshot(storage, 12)
    newer = {**at12.metadata.raw, "configuration": {"delta.checkpointInterval": "3"}}
    (root / LOG / commit_name(15)).write_bytes(orjson.dumps({"metaData": newer}) + b"\n")
    since = TableConfiguration({"minReaderVersion": 1, "minWriterVersion": 2, "seed": 1},
                               at12.metadata, 12)
    got = read_protocol_metadata(storage, build_log_segment(storage, 15), since=since)
    assert got.metadata.configuration == {"delta.checkpointInterval": "3"}
    assert got.protocol == since.protocol  # no protocol after 12: the seed's


@pytest.mark.parametrize("seed_version", [5, 9, 20])
def test_a_starting_point_the_segment_does_not_reach_is_ignored(table_copy, seed_version):
    """Before the checkpoint (10) the commits between the seed and it are not in the
    segment; past the segment's version the seed describes another state. Either way the
    answer comes from the log, never from the seed."""
    root = table_copy(CHECKPOINTED)
    storage = _storage(root)
    want = load_snapshot(storage, 14)
    fake = TableConfiguration({"minReaderVersion": 3, "minWriterVersion": 7},
                              Metadata({"id": "not-this-table"}), seed_version)
    got = read_protocol_metadata(storage, want.segment, since=fake)
    assert got.protocol == want.protocol and dict(got.metadata.raw) == dict(want.metadata.raw)


def test_a_starting_point_at_the_version_reads_nothing(table_copy):
    root = table_copy(CHECKPOINTED)
    storage = _storage(root)
    segment = build_log_segment(storage, 14)
    for v in range(11, 15):
        _break_commit(root, v)
    (root / LOG / "00000000000000000010.checkpoint.parquet").write_bytes(b"not parquet")
    seed = TableConfiguration({"minReaderVersion": 1, "minWriterVersion": 2},
                              Metadata({"id": "x"}), 14)
    assert read_protocol_metadata(storage, segment, since=seed) == seed


# ---- reading stops when what is wanted is found ----------------------------------------------


def test_protocol_alone_stops_at_the_newest_protocol(table_copy):
    """Commit 15 holds a protocol and the checkpoint is garbage: the protocol alone is found
    without opening the checkpoint; protocol and metaData need it and name it."""
    root = table_copy(CHECKPOINTED)
    storage = _storage(root)
    protocol = {"minReaderVersion": 1, "minWriterVersion": 3}
    (root / LOG / commit_name(15)).write_bytes(orjson.dumps({"protocol": protocol}) + b"\n")
    segment = build_log_segment(storage, 15)
    checkpoint = f"{LOG}/00000000000000000010.checkpoint.parquet"
    (root / checkpoint).write_bytes(b"not parquet at all")
    assert read_protocol(storage, segment) == protocol
    with pytest.raises(CorruptLogError, match="cannot be read as Parquet") as info:
        read_protocol_metadata(storage, segment)
    assert (info.value.version, info.value.file) == (10, checkpoint)


# ---- errors name table, version and file -----------------------------------------------------


@pytest.mark.parametrize(
    ("name", "missing", "read"),
    [
        ("golden__deltalog-state-reconstruction-without-protocol", "protocol",
         "00000000000000000000.json"),
        ("golden__deltalog-state-reconstruction-without-metadata", "metaData",
         "00000000000000000000.json"),
        ("golden__deltalog-state-reconstruction-from-checkpoint-missing-protocol", "protocol",
         "checkpoint 00000000000000000010.checkpoint.parquet"),
        ("golden__deltalog-state-reconstruction-from-checkpoint-missing-metadata", "metaData",
         "checkpoint 00000000000000000010.checkpoint.parquet"),
    ],
)
def test_no_protocol_or_no_metadata(name, missing, read):
    storage = _storage(corpus_path(name))
    segment = build_log_segment(storage)
    with pytest.raises(CorruptLogError, match=f"no {missing} action") as info:
        read_protocol_metadata(storage, segment)
    assert info.value.table == storage.root and info.value.version == segment.version
    assert f"read: {read}" in str(info.value)


def test_invalid_json_in_a_protocol_line_names_the_file(table_copy):
    root = table_copy("golden__basic-with-inserts-deletes-checkpoint")
    storage = _storage(root)
    (root / LOG / commit_name(14)).write_bytes(b'{"commitInfo":{}}\n{"metaData": {"id": \n')
    with pytest.raises(CorruptLogError, match="invalid JSON") as info:
        read_protocol_metadata(storage, build_log_segment(storage, 14))
    assert (info.value.version, info.value.file) == (14, f"{LOG}/{commit_name(14)}")
    assert info.value.table == storage.root

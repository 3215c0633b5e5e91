"""Log file names, `_last_checkpoint` checksums, log segments and time travel."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from hypothesis import given
from hypothesis import strategies as st

from delta_ops.errors import CorruptLogError, NotATableError, VersionNotFoundError
from delta_ops.log.segment.log_segment import build_log_segment
from delta_ops.protocol import filenames
from delta_ops.protocol.filenames import LogFileKind
from delta_ops.protocol.last_checkpoint import (
    build_last_checkpoint,
    canonicalize,
    compute_checksum,
    parse_last_checkpoint,
)
from delta_ops.storage import Storage
from delta_ops.table import DeltaTable
from delta_ops_tests.support.corpus import CORPUS, corpus_path

SPEC_JSON = (
    '{"k0":"\'v 0\'", "checksum": "adsaskfljadfkjadfkj", "k1":{"k2": 2, "k3": ["v3", [1, 2], '
    '{"k4": "v4", "k5": ["v5", "v6", "v7"]}]}}'
)


def test_spec_checksum_example():
    obj = json.loads(SPEC_JSON)
    assert canonicalize(obj) == (
        '"k0"="%27v%200%27","k1"+"k2"=2,"k1"+"k3"+0="v3","k1"+"k3"+1+0=1,"k1"+"k3"+1+1=2,'
        '"k1"+"k3"+2+"k4"="v4","k1"+"k3"+2+"k5"+0="v5","k1"+"k3"+2+"k5"+1="v6",'
        '"k1"+"k3"+2+"k5"+2="v7"'
    )
    assert compute_checksum(obj) == "6a92d155a59bf2eecbd4b4ec7fd1f875"


def test_every_spark_last_checkpoint_checksum_validates():
    checked = 0
    for path in CORPUS.rglob("_last_checkpoint"):
        data = path.read_bytes()
        if not data.strip():
            continue
        lc = parse_last_checkpoint(data)
        if lc.checksum is not None:
            assert lc.checksum_valid, path
            checked += 1
    assert checked >= 20


def test_built_last_checkpoint_validates_and_tamper_fails():
    lc = build_last_checkpoint(
        version=12, size=40, size_in_bytes=1234, num_of_add_files=30, parts=2
    )
    assert lc.checksum_valid
    tampered = dict(lc.raw, size=41)
    assert compute_checksum(tampered) != lc.checksum


@pytest.mark.parametrize(
    "name,kind,version,extra",
    [
        ("00000000000000000007.json", LogFileKind.COMMIT, 7, {}),
        ("00000000000000000010.checkpoint.parquet", LogFileKind.CHECKPOINT_CLASSIC, 10, {}),
        (
            "00000000000000000010.checkpoint.0000000002.0000000003.parquet",
            LogFileKind.CHECKPOINT_MULTIPART,
            10,
            {"part": 2, "num_parts": 3},
        ),
        (
            "00000000000000000002.checkpoint.6374b053-df23-479b-b2cf-c9c550132b49.json",
            LogFileKind.CHECKPOINT_UUID,
            2,
            {"uuid": "6374b053-df23-479b-b2cf-c9c550132b49", "format": "json"},
        ),
        (
            "00000000000000000006.00000000000000000010.compacted.json",
            LogFileKind.COMPACTION,
            10,
            {"start_version": 6},
        ),
        ("00000000000000000004.crc", LogFileKind.CHECKSUM, 4, {}),
    ],
)
def test_parse_names(name, kind, version, extra):
    lf = filenames.parse(name)
    assert lf is not None and lf.kind == kind and lf.version == version
    for k, v in extra.items():
        assert getattr(lf, k) == v


@pytest.mark.parametrize(
    "name",
    [
        ".00000000000000000000.json.crc",
        "_last_checkpoint",
        "00000000000000000001.json.tmp",
        "0000000000000000001.json",
        "00000000000000000010.checkpoint.0000000004.0000000003.parquet",
        "00000000000000000010.00000000000000000006.compacted.json",
        "_sidecars",
    ],
)
def test_non_log_names(name):
    assert filenames.parse(name) is None


@given(st.integers(0, 10**15), st.integers(1, 50), st.data())
def test_names_round_trip(version, parts, data):
    part = data.draw(st.integers(1, parts))
    for name in (
        filenames.commit_name(version),
        filenames.checksum_name(version),
        filenames.classic_checkpoint_name(version),
        filenames.multipart_checkpoint_name(version, part, parts),
        filenames.uuid_checkpoint_name(version, "3a0d65cd-4056-49b8-937b-95f9e3ee90e5", "parquet"),
        filenames.compaction_name(version, version + parts),
    ):
        lf = filenames.parse(name)
        assert lf is not None and lf.name == name
        assert lf.version in (version, version + parts)


def _copy(tmp_path, name):
    dest = tmp_path / name.replace("/", "__")
    shutil.copytree(corpus_path(name), dest)
    return dest


def test_segment_uses_multipart_checkpoint():
    seg = build_log_segment(Storage.for_uri(str(corpus_path("golden__multi-part-checkpoint"))))
    assert seg.checkpoint is not None and seg.checkpoint.kind == LogFileKind.CHECKPOINT_MULTIPART
    assert len(seg.checkpoint.files) == 2


def test_incomplete_multipart_checkpoint_is_skipped(tmp_path):
    root = _copy(tmp_path, "kernel-defaults__kernel-pagination-multi-part-checkpoints")
    part = next((root / "_delta_log").glob("*.checkpoint.0000000002.0000000003.parquet"))
    part.unlink()
    (root / "_delta_log" / "_last_checkpoint").unlink()
    seg = build_log_segment(Storage.for_uri(str(root)))
    assert seg.checkpoint is None
    assert [d.start for d in seg.deltas] == [0, 1, 2]


def test_stale_last_checkpoint_pointing_to_missing_checkpoint(tmp_path):
    root = _copy(tmp_path, "kernel-defaults__basic-with-checkpoint")
    (root / "_delta_log" / "00000000000000000010.checkpoint.parquet").unlink()
    seg = build_log_segment(Storage.for_uri(str(root)))
    assert seg.checkpoint is None and seg.version == 14
    assert "no complete checkpoint" in (seg.last_checkpoint_problem or "")


def test_compaction_files_replace_commits(tmp_path):
    root = _copy(tmp_path, "basic_partitioned")
    log = root / "_delta_log"
    # A compaction of commits 0..1 holding the reconciled actions (here: just both commits).
    lines = []
    for v in (0, 1):
        for line in (log / filenames.commit_name(v)).read_text().splitlines():
            if line.strip() and "commitInfo" not in line:
                lines.append(line)
    (log / filenames.compaction_name(0, 1)).write_text("\n".join(lines) + "\n")
    seg = build_log_segment(Storage.for_uri(str(root)))
    assert [(d.start, d.end) for d in seg.deltas] == [(0, 1)]
    assert build_log_segment(Storage.for_uri(str(root)), 0).deltas[0].end == 0


def test_overlapping_compactions_pick_the_longest_that_fits(tmp_path):
    root = tmp_path / "t"
    log = root / "_delta_log"
    log.mkdir(parents=True)
    for v in range(0, 17):
        (log / filenames.commit_name(v)).write_text("{}\n")
    for s, e in ((6, 10), (6, 15), (11, 12)):
        (log / filenames.compaction_name(s, e)).write_text("{}\n")
    storage = Storage.for_uri(str(root))
    spans = lambda v: [(d.start, d.end) for d in build_log_segment(storage, v).deltas]  # noqa: E731
    assert spans(16)[6:] == [(6, 15), (16, 16)]
    assert spans(12)[6:] == [(6, 10), (11, 12)]
    assert spans(8)[6:] == [(6, 6), (7, 7), (8, 8)]


def test_empty_location_is_not_a_table(tmp_path):
    with pytest.raises(NotATableError, match="no Delta log"):
        DeltaTable(str(tmp_path)).snapshot()


def test_gap_after_checkpoint(tmp_path):
    root = _copy(tmp_path, "kernel-defaults__basic-with-checkpoint")
    (root / "_delta_log" / "00000000000000000012.json").unlink()
    with pytest.raises(CorruptLogError, match="commit 12 is missing") as info:
        DeltaTable(str(root)).snapshot()
    assert "00000000000000000012.json" in str(info.value)
    assert DeltaTable(str(root)).snapshot(11).version == 11


def _set_commit_times(root, times_ms):
    for v, t in enumerate(times_ms):
        p = root / "_delta_log" / filenames.commit_name(v)
        os.utime(p, (t / 1000, t / 1000))


def test_time_travel_by_file_modification_time(tmp_path):
    root = _copy(tmp_path, "golden__time-travel-start-start20-start40")
    base = 1_700_000_000_000
    _set_commit_times(root, [base, base + 20_000, base + 40_000])
    table = DeltaTable(str(root))
    assert table.snapshot(timestamp=base).version == 0
    assert table.snapshot(timestamp=base + 19_999).version == 0
    assert table.snapshot(timestamp=base + 20_000).version == 1
    assert table.snapshot(timestamp=base + 40_000).version == 2
    with pytest.raises(VersionNotFoundError, match="before the earliest"):
        table.snapshot(timestamp=base - 1)
    with pytest.raises(VersionNotFoundError, match="after the latest"):
        table.snapshot(timestamp=base + 50_000)


def test_time_travel_monotonizes_file_times(tmp_path):
    root = _copy(tmp_path, "golden__time-travel-start-start20-start40")
    base = 1_700_000_000_000
    _set_commit_times(root, [base, base - 5_000, base + 40_000])  # commit 1 looks older
    table = DeltaTable(str(root))
    assert table.snapshot(timestamp=base + 1).version == 1
    assert table.snapshot(timestamp=base).version == 0


def test_in_commit_timestamps_are_used(tmp_path):
    root = tmp_path / "ict"
    log = root / "_delta_log"
    log.mkdir(parents=True)
    proto = {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["inCommitTimestamp"]}
    md = {
        "id": "x",
        "format": {"provider": "parquet", "options": {}},
        "partitionColumns": [],
        "schemaString": '{"type":"struct","fields":[]}',
        "configuration": {"delta.enableInCommitTimestamps": "true"},
    }
    icts = [1_000_000, 2_000_000, 3_000_000]
    for v, ict in enumerate(icts):
        actions = [{"commitInfo": {"inCommitTimestamp": ict, "timestamp": ict}}]
        if v == 0:
            actions += [{"protocol": proto}, {"metaData": md}]
        (log / filenames.commit_name(v)).write_text(
            "\n".join(json.dumps(a) for a in actions) + "\n"
        )
        os.utime(
            log / filenames.commit_name(v), (5_000_000 - v, 5_000_000 - v)
        )  # misleading mtimes
    table = DeltaTable(str(root))
    assert table.snapshot().timestamp == 3_000_000
    assert table.snapshot(1).timestamp == 2_000_000
    assert table.snapshot(timestamp=2_500_000).version == 1
    assert table.snapshot(timestamp=1_000_000).version == 0


def test_ict_enablement_version_splits_history(tmp_path):
    root = tmp_path / "ict2"
    log = root / "_delta_log"
    log.mkdir(parents=True)
    md = {
        "id": "x",
        "format": {"provider": "parquet", "options": {}},
        "partitionColumns": [],
        "schemaString": '{"type":"struct","fields":[]}',
        "configuration": {},
    }
    (log / filenames.commit_name(0)).write_text(
        json.dumps({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}})
        + "\n"
        + json.dumps({"metaData": md})
        + "\n"
    )
    os.utime(log / filenames.commit_name(0), (100, 100))  # 100 s -> 100_000 ms
    md2 = dict(
        md,
        configuration={
            "delta.enableInCommitTimestamps": "true",
            "delta.inCommitTimestampEnablementVersion": "1",
            "delta.inCommitTimestampEnablementTimestamp": "200000",
        },
    )
    (log / filenames.commit_name(1)).write_text(
        json.dumps({"commitInfo": {"inCommitTimestamp": 200_000}})
        + "\n"
        + json.dumps(
            {
                "protocol": {
                    "minReaderVersion": 1,
                    "minWriterVersion": 7,
                    "writerFeatures": ["inCommitTimestamp"],
                }
            }
        )
        + "\n"
        + json.dumps({"metaData": md2})
        + "\n"
    )
    os.utime(log / filenames.commit_name(1), (1, 1))
    table = DeltaTable(str(root))
    assert table.snapshot(0).timestamp == 100_000
    assert table.snapshot(1).timestamp == 200_000
    assert table.snapshot(timestamp=150_000).version == 0
    assert table.snapshot(timestamp=200_000).version == 1

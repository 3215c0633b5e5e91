"""`crc verify` compares `allFiles` as a set keyed by file and statistics by meaning:
a checkpoint that keeps only typed statistics (`stats_parsed`, as delta-rs/kernel and
delta-kernel-rs write with `delta.checkpoint.writeStatsAsJson` off) verifies against a
`.crc` recorded from the JSON commits, a real difference in those statistics is still
found, and every recorded `.crc` of the corpus verifies except the listed true differences
(issue 22)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from delta_ops.maintenance.checksum import verify_checksum, write_checksum
from delta_ops_tests.support.corpus import CORPUS
from delta_ops_tests.support.typed_stats import (
    _data,
)

#: Every recorded `.crc` of the corpus that truly differs from its version's state:
#: (table relative to the corpus, version) -> the mismatching fields. None today.
TRUE_DIFFERENCES: dict[tuple[str, int], list[str]] = {}


@pytest.fixture
def struct_stats_only(tmp_path) -> Path:
    """A table of two commits with JSON statistics, its `.crc` at version 1 written from
    those commits (allFiles with JSON `stats`), then a checkpoint at version 1 written by
    deltalake with typed statistics only."""
    root = tmp_path / "struct-stats-only"
    config = {
        "delta.checkpoint.writeStatsAsJson": "false",
        "delta.checkpoint.writeStatsAsStruct": "true",
    }
    write_deltalake(str(root), _data(), configuration=config)
    write_deltalake(str(root), _data().slice(1, 2), mode="append")
    assert write_checksum(str(root), version=1).written
    DeltaTable(str(root)).create_checkpoint()
    checkpoint = root / "_delta_log" / f"{1:020d}.checkpoint.parquet"
    adds = [a for a in pq.read_table(checkpoint).column("add").to_pylist() if a]
    # The precondition: the checkpoint's adds carry typed statistics and no JSON.
    assert len(adds) == 2
    assert all(a.get("stats") is None and a["stats_parsed"]["numRecords"] for a in adds)
    crc = json.loads((root / "_delta_log" / f"{1:020d}.crc").read_text())
    assert all(json.loads(a["stats"])["numRecords"] for a in crc["allFiles"])
    return root


def _edit_crc(root: Path, edit, version: int = 1) -> None:
    path = root / "_delta_log" / f"{version:020d}.crc"
    crc = json.loads(path.read_text())
    edit(crc)
    path.write_text(json.dumps(crc))


def test_struct_stats_only_checkpoint_verifies(struct_stats_only):
    result = verify_checksum(str(struct_stats_only), version=1)
    assert result.ok, [m.to_dict() for m in result.mismatches]
    # In any order, with the same instant written with another offset.
    def edit(crc):
        crc["allFiles"].reverse()
        for a in crc["allFiles"]:
            stats = json.loads(a["stats"])
            if stats["maxValues"]["ts"] == "2022-01-01T00:00:00Z":
                stats["maxValues"]["ts"] = "2022-01-01T01:00:00.000+01:00"
            a["stats"] = json.dumps(stats, indent=1)

    _edit_crc(struct_stats_only, edit)
    assert verify_checksum(str(struct_stats_only), version=1).ok


@pytest.mark.parametrize(
    ("column", "key", "value"),
    [
        ("maxValues", "ts", "2022-01-01T00:00:00.001Z"),  # one millisecond later
        ("minValues", "dec", -4.51),
        ("nullCount", "s", 0),
        ("maxValues", "f", 0.25),
    ],
)
def test_a_typed_statistic_that_differs_is_a_mismatch(struct_stats_only, column, key, value):
    def edit(crc):
        a = crc["allFiles"][0]
        stats = json.loads(a["stats"])
        stats[column][key] = value
        a["stats"] = json.dumps(stats)

    _edit_crc(struct_stats_only, edit)
    result = verify_checksum(str(struct_stats_only), version=1)
    assert [m.field for m in result.mismatches] == ["allFiles"]
    recorded, computed = result.mismatches[0].recorded, result.mismatches[0].computed
    assert len(recorded) == len(computed) == 1


def test_stats_meaning_normalisation():
    from delta_ops.protocol.crc import stats_meaning

    assert stats_meaning('{"numRecords":1,"minValues":{"a":null,"b":2}}') == stats_meaning(
        {"minValues": {"b": 2.0}, "numRecords": 1}
    )
    assert stats_meaning('{"minValues":{"a":true}}') != stats_meaning('{"minValues":{"a":1}}')
    assert stats_meaning("") is None and stats_meaning(None) is None
    assert stats_meaning("not json") == "not json"


def _tables_with_checksums() -> list[Path]:
    crcs = [p for p in CORPUS.rglob("_delta_log/*.crc") if len(p.name) == len("0" * 20 + ".crc")]
    return sorted({p.parent.parent for p in crcs})


def test_every_recorded_crc_in_the_corpus_verifies_but_the_true_differences():
    tables = _tables_with_checksums()
    assert len(tables) >= 14
    found: dict[tuple[str, int], list[str]] = {}
    verified = 0
    for root in tables:
        result = verify_checksum(str(root), all_versions=True)
        verified += len(result.versions)
        for m in result.mismatches:
            key = (str(root.relative_to(CORPUS)), m.version)
            found.setdefault(key, []).append(m.field)
    assert verified >= 25
    assert found == TRUE_DIFFERENCES


def test_the_dagster_check_makes_the_same_comparison(struct_stats_only, tmp_path):
    """The Dagster `fsck` check (which took over `checksum_matches`) passes on the table
    `crc verify` accepts, and fails as an error naming allFiles where `crc verify` finds a
    changed typed statistic."""
    import yaml
    from dagster import AssetCheckSeverity

    from delta_ops.defs.assets import TableRun
    from delta_ops.defs.checks import fsck_result
    from delta_ops.defs.registry import load_registry
    from delta_ops.defs.resources import SparkResource

    registry = tmp_path / "registry.yaml"
    registry.write_text(yaml.safe_dump({
        "defaults": {"engine": "local"},
        "tables": [{"name": "t", "uri": str(struct_stats_only)}],
    }))

    def check():
        run = TableRun(load_registry(registry).table("t"), "test", SparkResource(), 0)
        return fsck_result(run)

    before = check()
    assert before.passed, before.description

    def edit(crc):
        stats = json.loads(crc["allFiles"][1]["stats"])
        stats["numRecords"] += 1
        crc["allFiles"][1]["stats"] = json.dumps(stats)

    _edit_crc(struct_stats_only, edit)
    result = check()
    assert not result.passed and result.severity == AssetCheckSeverity.ERROR
    assert "checksum_mismatch" in result.metadata["problem_codes"].value
    assert "allFiles" in result.description
    assert [m.field for m in verify_checksum(str(struct_stats_only)).mismatches] == ["allFiles"]


@pytest.mark.parametrize("edit", [
    "ict removed", "ict added", "baseRowId changed", "baseRowId removed",
    "defaultRowCommitVersion changed", "tags added",
])
def test_row_ids_tags_and_the_ict_are_compared(tmp_path, edit):
    """Before, a `.crc` whose `allFiles` carried other row IDs or tags, or whose
    `inCommitTimestampOpt` was missing on an ICT table (or present on another), verified."""
    from delta_ops.maintenance.row_tracking import backfill_row_tracking
    from delta_ops.storage import Storage
    from delta_ops_tests.support.histories import HistorySpec, build_history

    ict = edit != "ict added"
    storage = Storage.for_uri(str(tmp_path / "t"))
    build_history(storage, HistorySpec(in_commit_timestamps=ict,
                                       steps=(("append", (2, 3), True),)))
    backfill_row_tracking(storage, sleep=lambda _s: None, confirm_protocol_upgrade=True)
    version = write_checksum(storage, method="full").version
    assert verify_checksum(storage, version=version).mismatches == ()

    def change(crc: dict) -> None:
        first = crc["allFiles"][0]
        if edit == "ict removed":
            del crc["inCommitTimestampOpt"]
        elif edit == "ict added":
            crc["inCommitTimestampOpt"] = 123
        elif edit == "baseRowId changed":
            first["baseRowId"] = 999_999
        elif edit == "baseRowId removed":
            del first["baseRowId"]
        elif edit == "defaultRowCommitVersion changed":
            first["defaultRowCommitVersion"] = 77
        else:
            first["tags"] = {"k": "v"}

    _edit_crc(tmp_path / "t", change, version=version)
    fields = [m.field for m in verify_checksum(storage, version=version).mismatches]
    assert fields == ["inCommitTimestampOpt" if "ict" in edit else "allFiles"]


@pytest.mark.parametrize("streamed", [False, True])
def test_a_live_file_without_a_size_gets_no_checksum(tmp_path, streamed):
    # Summed as 0 it gave a .crc whose tableSizeBytes and histogram were wrong; the
    # incremental path already steps aside for such a commit, the full one now refuses.
    from delta_ops.errors import CorruptLogError
    from delta_ops.log import ReadOptions
    from delta_ops.maintenance.checkpoint import write_checkpoint

    root = tmp_path / "t"
    write_deltalake(str(root), pa.table({"a": [1, 2]}))
    write_checksum(str(root), version=0)
    write_checkpoint(str(root), version=0)  # a state to stream from
    log = root / "_delta_log"
    (log / "00000000000000000001.json").write_text(json.dumps({"add": {
        "path": "no-size.parquet", "partitionValues": {}, "modificationTime": 1,
        "dataChange": True}}) + "\n")
    options = ReadOptions(stream_threshold_bytes=0) if streamed else None
    with pytest.raises(CorruptLogError) as info:
        write_checksum(str(root), version=1, read_options=options)
    assert "the live file 'no-size.parquet' has no size" in info.value.reason
    assert info.value.version == 1 and info.value.table.endswith("/t")
    assert not (log / "00000000000000000001.crc").exists()


def test_a_crc_left_below_where_the_log_starts_is_not_a_mismatch(tmp_path):
    # deltalake's cleanup_metadata deletes commits and checkpoints but leaves .crc files:
    # fsck reported an error and `crc verify --all` a mismatch on a healthy table.
    from delta_ops.errors import VersionNotFoundError
    from delta_ops.maintenance.checkpoint import write_checkpoint
    from delta_ops.maintenance.fsck import fsck

    root = tmp_path / "t"
    for i in range(3):
        write_deltalake(str(root), pa.table({"a": [i]}), mode="append")
    write_checksum(str(root), version=1)
    write_checkpoint(str(root), version=2)
    log = root / "_delta_log"
    for v in (0, 1):  # what another writer's log cleanup removes
        (log / f"{v:020d}.json").unlink()
    assert DeltaTable(str(root)).version() == 2

    result = fsck(str(root))
    assert not result.errors
    (stale,) = [p for p in result.warnings if p.code == "stale_checksum"]
    assert stale.file == "_delta_log/00000000000000000001.crc" and stale.version == 1
    with pytest.raises(VersionNotFoundError, match="no verifiable version checksum"):
        verify_checksum(str(root), all_versions=True)
    write_checksum(str(root), version=2)
    verified = verify_checksum(str(root), all_versions=True)
    assert verified.ok and verified.versions == (2,) and verified.removed_versions == (1,)
    # A .crc beyond the latest version is not old but a sign of lost commits: refused.
    from delta_ops.errors import CorruptLogError

    (log / "00000000000000000009.crc").write_bytes((log / "00000000000000000002.crc").read_bytes())
    with pytest.raises(CorruptLogError, match="versions 3 to 9 are missing"):
        verify_checksum(str(root), all_versions=True)

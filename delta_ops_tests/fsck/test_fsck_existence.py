"""`delta_ops.maintenance.fsck.check_files_exist` (the data files of the latest version,
listed on the engine) and its CLI twin `delta-ops fsck --check-files`, on corpus tables
copied to tmp_path: intact, and with one data file deleted; and the maintenance entries the
Dagster assets call (`row_count`, `checkpoint.current`, `checksum.missing`)."""

from __future__ import annotations

import json
import re
from urllib.parse import unquote

import pytest

from delta_ops.cli import main
from delta_ops.engine.local import LocalEngine
from delta_ops.errors import NotATableError
from delta_ops.log.segment.log_state import inspect_log, read_settings
from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
from delta_ops.maintenance.checkpoint import write_checkpoint
from delta_ops.maintenance.checkpoint.current import checkpoint_latest, current_checkpoint
from delta_ops.maintenance.checksum.missing import missing_range, write_missing_checksums
from delta_ops.maintenance.fsck import check_files_exist
from delta_ops.maintenance.row_count import live_row_count
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import copy_corpus_table

#: A partitioned table with deletion vectors and a checkpoint: live files in subdirectories.
PARTITIONED = "golden__dv-partitioned-with-checkpoint"


def _delete_one(root) -> str:
    live = load_snapshot(Storage.for_uri(str(root))).files.column("path").to_pylist()
    gone = unquote(sorted(live)[0])
    (root / gone).unlink()
    return gone


@pytest.mark.parametrize("name", ["basic_append", PARTITIONED])
def test_intact_table_has_every_file(tmp_path, name):
    root = copy_corpus_table(name, tmp_path / "t")
    engine = LocalEngine()
    try:
        result = check_files_exist(str(root), engine=engine)
    finally:
        engine.close()
    snap = load_snapshot(Storage.for_uri(str(root)))
    assert result.ok and result.missing == ()
    assert result.version == snap.version
    assert result.num_files == result.num_checked == snap.num_files > 0
    assert result.num_outside_table == 0


@pytest.mark.parametrize("name", ["basic_append", PARTITIONED])
def test_a_deleted_data_file_is_named(tmp_path, name):
    root = copy_corpus_table(name, tmp_path / "t")
    gone = _delete_one(root)
    result = check_files_exist(Storage.for_uri(str(root)))
    assert not result.ok
    assert result.missing == (gone,)
    assert result.to_dict()["missing"] == [gone] and result.to_dict()["ok"] is False


def test_not_a_table(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotATableError):
        check_files_exist(str(tmp_path / "empty"))


def test_cli_fsck_check_files_text_and_json(tmp_path, capsys):
    root = copy_corpus_table(PARTITIONED, tmp_path / "t")
    assert main(["fsck", str(root), "--check-files"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"files\s+\d+ checked, 0 missing", out)
    gone = _delete_one(root)
    assert main(["fsck", str(root), "--check-files", "--json"]) == 3
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False and data["files"]["missing"] == [gone]
    assert main(["fsck", str(root), "--check-files"]) == 3
    assert f"missing   {gone}" in capsys.readouterr().out


def test_cli_fsck_check_files_takes_no_repair(tmp_path, capsys):
    root = copy_corpus_table("basic_append", tmp_path / "t")
    assert main(["fsck", str(root), "--check-files", "--repair"]) == 2
    assert "--check-files" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["basic_append", PARTITIONED,
                                  "kernel-defaults__basic-dv-no-checkpoint"])
def test_row_count_is_the_stats_sum_less_deletion_vectors(tmp_path, name):
    root = copy_corpus_table(name, tmp_path / "t")
    snap = load_snapshot(Storage.for_uri(str(root)))
    # What the regex over the stats JSON gave before the count moved to maintenance/.
    counts = [re.search(r'"numRecords"\s*:\s*(\d+)', s) if s else None
              for s in snap.files.column("stats").to_pylist()]
    expected = None
    if all(counts):
        expected = sum(int(m.group(1)) for m in counts) - sum(
            (dv or {}).get("cardinality") or 0
            for dv in snap.files.column("deletionVector").to_pylist())
    assert live_row_count(snap) == expected


def test_existing_checkpoint_is_reported_without_writing(tmp_path):
    root = copy_corpus_table("basic_append", tmp_path / "t")
    storage = Storage.for_uri(str(root))
    written = write_checkpoint(storage)
    state = inspect_log(storage)
    before = sorted(p.name for p in (root / "_delta_log").iterdir())
    found = checkpoint_latest(storage, state, read_settings(storage, state),
                              engine=lambda: pytest.fail("no engine needed"))
    assert found == current_checkpoint(state)
    assert found.already_existed and found.version == written.version
    assert found.files == written.files and found.kind == written.kind
    assert sorted(p.name for p in (root / "_delta_log").iterdir()) == before


def test_missing_checksums_start_after_the_newest(tmp_path):
    root = copy_corpus_table("basic_append", tmp_path / "t")
    storage = Storage.for_uri(str(root))
    state = inspect_log(storage)
    assert missing_range(state) == (state.version, state.version)
    result = write_missing_checksums(storage, state)
    assert result.written == [state.version] or list(result.written) == [state.version]
    assert missing_range(inspect_log(storage)) == (state.version, state.version)


def test_newest_checksum_looks_before_the_checkpoint(tmp_path):
    from delta_ops.maintenance.checksum import write_checksums
    from delta_ops.maintenance.checksum.missing import newest_checksum

    root = copy_corpus_table("basic_append", tmp_path / "t")
    storage = Storage.for_uri(str(root))
    assert newest_checksum(storage, inspect_log(storage)) is None
    write_checksums(storage, start=0, end=0)
    write_checkpoint(storage)
    state = inspect_log(storage)
    assert state.newest_checksum is None  # listed from the checkpoint (version 1) on
    assert newest_checksum(storage, state) == 0

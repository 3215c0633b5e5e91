"""`history` on generated tables: where each timestamp comes from (in-commit timestamps
enabled midway), versions removed by log cleanup, `--limit`, and the command line."""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta

import deltalake
import pytest

import delta_ops
from delta_ops.maintenance.history import COMMIT_INFO, ICT, table_history
from delta_ops.protocol.filenames import LOG_DIR, commit_name
from delta_ops_tests.support.histories import HistorySpec, build_history


def test_in_commit_timestamps_are_used_from_their_enablement_version(new_storage) -> None:
    storage = new_storage()
    spec = HistorySpec(steps=(("append", (2,), True), ("enable_ict",), ("append", (3,), True)))
    build_history(storage, spec)
    result = table_history(storage)
    by_version = {e.version: e for e in result.entries}
    assert [e.version for e in result.entries] == [3, 2, 1, 0]
    assert result.ict is not None and result.ict.version == 2
    for v in (0, 1):
        assert by_version[v].timestamp_source == COMMIT_INFO
        assert by_version[v].timestamp == by_version[v].commit_info["timestamp"]
    for v in (2, 3):
        assert by_version[v].timestamp_source == ICT
        assert by_version[v].timestamp == by_version[v].commit_info["inCommitTimestamp"]
    theirs = deltalake.DeltaTable(storage.root).history()
    assert [(e.version, e.operation) for e in result.entries] == [
        (h["version"], h["operation"]) for h in theirs
    ]


def test_versions_removed_by_cleanup_and_the_checkpoint_covering_them(new_storage,
                                                                      tmp_path) -> None:
    storage = new_storage("cleaned")
    build_history(storage, HistorySpec(steps=(("append", (1,), True),) * 5))
    table = delta_ops.DeltaTable(storage=storage)
    table.checkpoint(version=3)
    past = time.time() - 30 * 86400
    for v in range(0, 6):
        os.utime(tmp_path / "cleaned" / LOG_DIR / commit_name(v), (past, past))
    table.cleanup_metadata(retention=timedelta(hours=1), force_retention=True, dry_run=False)
    result = table.history()
    assert [e.version for e in result.entries] == [5, 4, 3]
    assert result.removed is not None
    assert (result.removed.first, result.removed.last, result.removed.checkpoint) == (0, 2, 3)
    theirs = deltalake.DeltaTable(storage.root).history()
    assert [h["version"] for h in theirs] == [5, 4, 3]
    # The checkpoint holds version 3's state, not theirs (it said it did).
    assert result.removed.describe() == (
        "versions 0-2: removed by log cleanup; they can no longer be read: the log now "
        "starts at the checkpoint at version 3")
    for gone in (0, 2):
        with pytest.raises(Exception):  # noqa: B017 - deltalake's own error type
            deltalake.DeltaTable(storage.root, version=gone)
    assert deltalake.DeltaTable(storage.root, version=3).version() == 3


def test_limit_reads_only_the_newest_commits(new_storage) -> None:
    storage = new_storage()
    build_history(storage, HistorySpec(steps=(("append", (1,), True),) * 4))
    result = delta_ops.history(storage, limit=2)
    assert [e.version for e in result.entries] == [4, 3]
    assert not result.complete
    assert delta_ops.table_history(storage).complete
    with pytest.raises(ValueError, match="limit must be at least 1"):
        table_history(storage, limit=0)


def test_cli_history_json_and_text(new_storage, cli) -> None:
    storage = new_storage()
    build_history(storage, HistorySpec(steps=(("append", (2,), True), ("remove", 0))))
    code, out, _ = cli("history", storage.root, "--json", "--limit", "2")
    assert code == 0
    doc = json.loads(out)
    assert [e["version"] for e in doc["entries"]] == [2, 1]
    assert [e["operation"] for e in doc["entries"]] == ["DELETE", "WRITE"]
    assert doc["entries"][0]["timestamp_source"] == "commitInfo.timestamp"
    assert doc["removed"] is None and doc["complete"] is False
    code, out, _ = cli("history", storage.root)
    assert code == 0
    assert "DELETE" in out and "(commitInfo.timestamp)" in out and "CREATE TABLE" in out
    code, _, err = cli("history", storage.root, "--limit", "0")
    assert code == 2 and "must be at least 1" in err


def test_history_lists_the_log_once_and_reads_only_the_commits_asked_for(new_storage) -> None:
    from collections import Counter

    from delta_ops_tests.support.counting_storage import CountingStorage

    plain = new_storage()
    build_history(plain, HistorySpec(steps=(("append", (1,), True),) * 9))
    calls: Counter = Counter()
    result = table_history(CountingStorage.wrap(plain, calls), limit=3)
    assert [e.version for e in result.entries] == [9, 8, 7]
    assert calls["list_dir", LOG_DIR] == 1
    opened = sorted(path for (method, path) in calls if method in ("open_input", "read"))
    assert opened == [f"{LOG_DIR}/{commit_name(v)}" for v in (7, 8, 9)]


def test_time_travel_after_the_ict_enablement_ignores_older_files_times(new_storage,
                                                                        tmp_path) -> None:
    """Versions 0-1 have no in-commit timestamp and their files were copied (modified now);
    2-4 carry in-commit timestamps from long ago. A time between versions 3's and 4's is
    version 3 by the spec ("only table versions >= enablement version should be
    considered"). Before, version 0's file time made it "before the earliest commit"."""
    from delta_ops.log import load_snapshot, version_at_timestamp

    storage = new_storage("ict")
    build_history(storage, HistorySpec(steps=(("append", (2,), True), ("enable_ict",),
                                              ("append", (3,), True), ("append", (1,), True))))
    now = time.time()
    for v in (0, 1):
        os.utime(tmp_path / "ict" / LOG_DIR / commit_name(v), (now, now))
    entries = {e.version: e for e in table_history(storage).entries}
    assert [entries[v].timestamp_source for v in (2, 3, 4)] == [ICT] * 3
    ict = load_snapshot(storage).table_configuration.ict
    between = (entries[3].timestamp + entries[4].timestamp) // 2
    assert entries[3].timestamp <= between < entries[4].timestamp < now * 1000
    assert version_at_timestamp(storage, between, ict) == 3
    assert version_at_timestamp(storage, entries[2].timestamp, ict) == 2
    assert version_at_timestamp(storage, entries[4].timestamp, ict) == 4


@pytest.mark.parametrize("info", [[{"inCommitTimestamp": 1}], {"inCommitTimestamp": "1"}])
def test_a_malformed_commit_info_under_ict_is_a_clean_error(new_storage, tmp_path, info):
    """`commitInfo` as a JSON array (before: AttributeError) or a timestamp that is not an
    integer: a CorruptLogError naming the commit."""
    from delta_ops.errors import CorruptLogError
    from delta_ops.log import load_snapshot, version_at_timestamp

    storage = new_storage("bad")
    spec = HistorySpec(in_commit_timestamps=True, steps=(("append", (1,), True),) * 3)
    build_history(storage, spec)
    ict = load_snapshot(storage).table_configuration.ict
    path = tmp_path / "bad" / LOG_DIR / commit_name(3)
    lines = path.read_text().splitlines()
    lines = [json.dumps({"commitInfo": info}) if '"commitInfo"' in line else line
             for line in lines]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(CorruptLogError, match="inCommitTimestamp") as raised:
        version_at_timestamp(storage, 1, ict)
    assert raised.value.file.endswith(commit_name(3))


def test_what_a_removed_range_says_about_its_checkpoint() -> None:
    from delta_ops.maintenance.history import RemovedVersions

    assert RemovedVersions(0, 3, 3).describe() == (
        "versions 0-3: removed by log cleanup; version 3 still reads from its checkpoint, "
        "the ones before it no longer")
    assert RemovedVersions(4, 4, 4).describe() == (
        "version 4: removed by log cleanup; version 4 still reads from its checkpoint")
    assert RemovedVersions(0, 1, None).describe() == (
        "versions 0-1: removed by log cleanup; no checkpoint covers them")

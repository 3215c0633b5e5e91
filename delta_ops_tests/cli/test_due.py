"""`delta_ops.maintenance.due` (what a table needs now) over `delta_ops.log.segment.log_state` (the
cheap log read), on corpus tables copied to tmp_path and on logs written here, and the CLI's
`delta-ops due` (text and --json)."""

from __future__ import annotations

import json

import pytest

from delta_ops.cli import main
from delta_ops.commit import Transaction
from delta_ops.errors import NotATableError
from delta_ops.log.segment.log_state import inspect_log, read_settings
from delta_ops.maintenance.checkpoint import write_checkpoint
from delta_ops.maintenance.compaction import compact_by_policy
from delta_ops.maintenance.due import (
    CHECKPOINT,
    LOG_COMPACTION,
    VERSION_CHECKSUM,
    DuePolicy,
    checkpoint_current,
    checkpoint_kind,
    due,
    what_is_due,
)
from delta_ops.protocol.filenames import LogFileKind
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import copy_corpus_table
from delta_ops_tests.support.histories import HistorySpec, build_history


def _storage(root) -> Storage:
    return Storage.for_uri(str(root))


# ---- the log state --------------------------------------------------------------------------


def test_log_state_lists_once_from_the_checkpoint(tmp_path):
    root = copy_corpus_table("golden__checkpoint", tmp_path / "t")
    state = inspect_log(_storage(root))
    assert (state.version, state.checkpoint_version, state.commits_since_checkpoint) == (
        14, 10, 4)
    # Listed from the checkpoint `_last_checkpoint` names: nothing older is in the listing.
    assert min(lf.version for lf, _ in state.listing) == 10
    assert state.listing == state.segment.listing


def test_log_state_after_a_stale_hint_keeps_the_full_listing(tmp_path):
    root = copy_corpus_table("golden__checkpoint", tmp_path / "t")
    (root / "_delta_log" / "00000000000000000010.checkpoint.parquet").unlink()
    state = inspect_log(_storage(root))
    # The hint names a checkpoint that is gone: the segment listed the whole log and
    # kept that listing (versions 0..14), not the short one from version 10.
    assert state.checkpoint_version is None and state.version == 14
    assert state.commits_since_checkpoint == 15
    commits = [lf.version for lf, _ in state.listing if lf.kind == LogFileKind.COMMIT]
    assert commits == list(range(15))
    assert "no complete checkpoint" in state.segment.last_checkpoint_problem


def test_log_state_of_a_missing_table(tmp_path):
    with pytest.raises(NotATableError, match="no Delta log found"):
        inspect_log(_storage(tmp_path / "nothing"))


# ---- the decisions ----------------------------------------------------------------------------


def test_checkpoint_due_follows_the_policy_then_the_table(tmp_path):
    root = copy_corpus_table("golden__checkpoint", tmp_path / "t")
    storage = _storage(root)
    table_default = what_is_due(storage)  # delta.checkpointInterval unset: 10
    need = table_default.need(CHECKPOINT)
    assert table_default.checkpoint_interval == 10 and not need.due
    assert need.reason == "4 commits since the last checkpoint, fewer than the interval 10"
    tight = what_is_due(storage, DuePolicy(checkpoint_interval=3)).need(CHECKPOINT)
    assert tight.due and tight.runnable and tight.version == 14
    assert tight.reason == "4 commits since the last checkpoint (interval 3)"
    exact = what_is_due(storage, DuePolicy(checkpoint_interval=4)).need(CHECKPOINT)
    assert exact.due  # reaching the interval is enough


def test_an_invalid_table_interval_is_said_not_hidden_behind_the_default(tmp_path):
    # It read as the default, 10, with no word of the property (the checkpoint writer, which
    # does not need the property, writes; a policy interval needs no table property).
    root = copy_corpus_table("golden__checkpoint", tmp_path / "t")
    storage = _storage(root)
    snapshot_version = inspect_log(storage).version
    Transaction(storage, operation="SET TBLPROPERTIES").update_configuration(
        {"delta.checkpointInterval": "abc"}).commit()
    need = what_is_due(storage).need(CHECKPOINT)
    assert need.reason == (
        "5 commits since the last checkpoint, fewer than the interval 10; table property "
        "delta.checkpointInterval='abc' is invalid: expected an integer, so the default 10 "
        "is used")
    assert inspect_log(storage).version == snapshot_version + 1
    by_policy = what_is_due(storage, DuePolicy(checkpoint_interval=3)).need(CHECKPOINT)
    assert by_policy.reason == "5 commits since the last checkpoint (interval 3)"


def test_checkpoint_written_is_no_longer_due_and_is_current(tmp_path):
    root = copy_corpus_table("golden__checkpoint", tmp_path / "t")
    storage = _storage(root)
    write_checkpoint(storage)
    state = inspect_log(storage)
    settings = read_settings(storage, state)
    report = due(state, settings, DuePolicy(checkpoint_interval=1))
    need = report.need(CHECKPOINT)
    assert not need.due and need.reason == "version 14 already has a checkpoint"
    assert report.commits_since_checkpoint == 0
    assert checkpoint_kind(state) == "classic" and checkpoint_current(state, settings)


def test_checkpoint_current_needs_the_kind_the_writer_would_write(tmp_path):
    multi = copy_corpus_table("golden__multi-part-checkpoint", tmp_path / "multi")
    state = inspect_log(_storage(multi))
    settings = read_settings(_storage(multi), state)
    # A multi-part checkpoint at the latest version: the writer's default is classic, so it
    # would still write one; the checkpoint is not "current" for it.
    assert state.checkpoint_version == state.version == 1
    assert checkpoint_kind(state) == "multi-part" and not checkpoint_current(state, settings)
    v2 = copy_corpus_table("golden__v2-checkpoint-parquet", tmp_path / "v2")
    state = inspect_log(_storage(v2))
    settings = read_settings(_storage(v2), state)
    assert checkpoint_kind(state) == "v2-uuid" and checkpoint_current(state, settings)


def test_checksum_due_unless_off_or_present(tmp_path):
    bare = copy_corpus_table("golden__checkpoint", tmp_path / "bare")
    need = what_is_due(_storage(bare)).need(VERSION_CHECKSUM)
    assert need.due and need.reason == "version 14 has no .crc"
    off = what_is_due(_storage(bare), DuePolicy(checksums=False)).need(VERSION_CHECKSUM)
    assert not off.due and off.reason == "checksums are off in the policy"
    crc = copy_corpus_table(
        "golden__commit-info-containing-arbitrary-operationParams-types", tmp_path / "crc")
    have = what_is_due(_storage(crc)).need(VERSION_CHECKSUM)
    assert not have.due and have.reason == "version 2 has a .crc"


def test_compaction_due_until_the_windows_are_written(tmp_path):
    root = copy_corpus_table(
        "golden__data-skipping-change-stats-collected-across-versions", tmp_path / "t")
    storage = _storage(root)
    assert not what_is_due(storage).need(LOG_COMPACTION).due  # off unless asked for
    policy = DuePolicy(compaction_interval=2)
    need = what_is_due(storage, policy).need(LOG_COMPACTION)
    assert need.due and need.version == 3
    assert need.reason == "2 compaction window(s) of 2 commits to write"
    compact_by_policy(storage, interval=2)
    after = what_is_due(storage, policy).need(LOG_COMPACTION)
    assert not after.due and after.reason == "no window of 2 commits is left to compact"


def test_a_forbidden_component_is_due_but_blocked(tmp_path):
    root = copy_corpus_table("golden__collations-table", tmp_path / "t")
    report = what_is_due(_storage(root), DuePolicy(checkpoint_interval=1))
    need = report.need(CHECKPOINT)
    assert need.due and need.blocked_by == ("collations",) and not need.runnable
    assert report.runnable == [] and report.blocked == [need]


def test_generated_log_follows_its_table_properties(tmp_path):
    storage = _storage(tmp_path / "gen")
    appends = tuple(("append", (i,), True) for i in range(5))
    build_history(storage, HistorySpec(steps=appends))  # versions 0..5, no checkpoint
    Transaction(storage.root).update_configuration({
        "delta.checkpointInterval": "7", "delta.logCompactionInterval": "3",
    }).commit()  # version 6
    report = what_is_due(storage)
    assert (report.version, report.checkpoint_version) == (6, None)
    assert (report.checkpoint_interval, report.compaction_interval) == (7, 3)
    # 7 commits (0..6) without a checkpoint reach the table's interval of 7.
    assert report.need(CHECKPOINT).due
    # Windows [0,2] and [3,5] of 3 commits end at or before version 6.
    assert report.need(LOG_COMPACTION).version == 5
    # A policy interval of 0 switches compaction off whatever the table says.
    assert not what_is_due(storage, DuePolicy(compaction_interval=0)).need(LOG_COMPACTION).due
    assert [n.component for n in report.runnable] == [CHECKPOINT, VERSION_CHECKSUM,
                                                       LOG_COMPACTION]


def test_due_is_pure_over_the_state(tmp_path):
    """The same state and settings give the same report, and no file is read to decide."""
    root = copy_corpus_table("golden__checkpoint", tmp_path / "t")
    storage = _storage(root)
    state = inspect_log(storage)
    settings = read_settings(storage, state)
    first = due(state, settings, DuePolicy(checkpoint_interval=3))
    for path in (root / "_delta_log").iterdir():
        path.unlink()
    assert due(state, settings, DuePolicy(checkpoint_interval=3)) == first


# ---- delta-ops due ------------------------------------------------------------------------------


def test_cli_due_text(tmp_path, capsys):
    root = copy_corpus_table("golden__checkpoint", tmp_path / "t")
    code = main(["due", str(root), "--checkpoint-interval", "3"])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"table       {_storage(root).root}"
    assert lines[1] == "version     14 (checkpoint at 10, 4 commits since)"
    assert lines[2] == "checkpoint  due: 4 commits since the last checkpoint (interval 3)"
    assert lines[3] == "checksum    due: version 14 has no .crc"
    assert lines[4].startswith("compaction  not due: log compaction is off")


def test_cli_due_json(tmp_path, capsys):
    root = copy_corpus_table("golden__collations-table", tmp_path / "t")
    code = main(["due", str(root), "--json", "--checkpoint-interval", "1", "--no-checksums"])
    out, err = capsys.readouterr()
    assert code == 0, err
    obj = json.loads(out)
    assert obj["version"] == 0 and obj["checkpoint_version"] is None
    assert obj["due"] == []  # due, but blocked: nothing to run
    ckpt = obj["components"]["checkpoint"]
    assert ckpt == {"due": True, "version": 0, "blocked_by": ["collations"],
                    "reason": "1 commits since the last checkpoint (interval 1)"}
    assert obj["components"]["version_checksum"]["reason"] == "checksums are off in the policy"
    assert set(obj["components"]) == {"checkpoint", "version_checksum", "log_compaction"}


def test_cli_due_blocked_text_and_errors(tmp_path, capsys):
    root = copy_corpus_table("golden__collations-table", tmp_path / "t")
    assert main(["due", str(root), "--checkpoint-interval", "1"]) == 0
    out, _ = capsys.readouterr()
    assert ("checkpoint  due, but blocked by features delta_ops cannot maintain "
            "(collations): 1 commits since the last checkpoint (interval 1)") in out
    assert main(["due", str(tmp_path / "missing"), "--json"]) == 1
    out, err = capsys.readouterr()
    assert err.startswith("delta-ops due: no Delta log found")
    assert json.loads(out)["error"]["type"] == "NotATableError"
    with pytest.raises(SystemExit) as exc:
        main(["due", str(root), "--compaction-interval", "1"])
    assert exc.value.code == 2
    assert "a compaction covers at least 2 commits" in capsys.readouterr().err

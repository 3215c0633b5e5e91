"""Log compaction files in both forms read exactly like the commits they cover.

Spec section "Log Compaction Files"; the two forms are described in
`delta_ops_tests.support.compaction_fixtures`: the spec's reconciled form (one line per key, any
order) and Databricks' unreconciled form (newest commit first, several lines per key, the
first line for a key wins). Every version of the generated table is read through the
compaction files (with the covered commits kept, and deleted so that nothing else can be
read) and compared with the commits-only reading, on the columnar replay and on the
action-by-action one; the wrong rule (last line wins, the test-only switch) is shown to
give another state on the same files, so the fixture really exercises the order.
"""

from __future__ import annotations

import shutil

import orjson
import pytest

from delta_ops.log.replay.columnar_commits import CommitFile
from delta_ops.log.replay.columnar_commits import reconcile as reconcile_columnar
from delta_ops.log.replay.full_replay import delta_lines_oldest_first, parse_json_actions
from delta_ops.log.segment.log_segment import build_log_segment
from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
from delta_ops.maintenance.compaction import reconcile_actions
from delta_ops.protocol.filenames import commit_name
from delta_ops.storage import Storage
from delta_ops_tests.support.compaction_fixtures import (
    CompactionTable,
    commit_lines,
    databricks_compaction_bytes,
    segment_state,
    snapshot_state,
    write_databricks_compaction,
    write_spec_compaction,
)
from delta_ops_tests.support.compaction_rule import last_line_wins

WINDOWS = [(0, 5), (6, 11)]  # non-overlapping: their commits can be deleted
OVERLAPPING = [(3, 9), (1, 12)]  # chosen at 9, 10 and 12 when the commits are kept
WRITERS = {"databricks": write_databricks_compaction, "spec": write_spec_compaction}


@pytest.fixture
def table(template, tmp_path) -> CompactionTable:
    """A fresh copy of the generated table (no compaction files yet)."""
    root = tmp_path / "t"
    shutil.copytree(template.root, root)
    return CompactionTable(
        Storage.for_uri(str(root)), root, template.latest, dict(template.files),
        template.reference,
    )


def _first_line_wins(data: bytes) -> set[bytes]:
    """An independent reduction of one compaction file: the first line per key wins (file
    key = path + DV unique id; txn by appId; domain by domain; protocol and metaData once);
    commitInfo dropped. The surviving actions, canonically serialized."""
    seen: set[tuple] = set()
    out: set[bytes] = set()
    for line in data.splitlines():
        if not line.strip():
            continue
        obj = orjson.loads(line)
        (kind, body), = obj.items()
        if kind in ("add", "remove"):
            dv = body.get("deletionVector")
            uid = None
            if dv:
                uid = dv["storageType"] + dv["pathOrInlineDv"]
                if dv.get("offset") is not None:
                    uid += f"@{dv['offset']}"
            key: tuple = ("file", body["path"], uid)
        elif kind == "txn":
            key = (kind, body["appId"])
        elif kind == "domainMetadata":
            key = (kind, body["domain"])
        elif kind in ("protocol", "metaData"):
            key = (kind,)
        else:
            continue
        if key not in seen:
            seen.add(key)
            out.add(orjson.dumps(obj, option=orjson.OPT_SORT_KEYS))
    return out


def _force_action_by_action(table: CompactionTable, path: str) -> None:
    """Rewrite a compaction file's file actions as `{ "add": ...}` (valid JSON, another
    spacing than writers use): the columnar replay steps aside for such lines."""
    file = table.root / path
    data = file.read_bytes()
    rewritten = data.replace(b'{"add":', b'{ "add":').replace(b'{"remove":', b'{ "remove":')
    assert rewritten != data
    file.write_bytes(rewritten)


def _delete_commits(table: CompactionTable, versions) -> None:
    for v in versions:
        (table.root / "_delta_log" / commit_name(v)).unlink()


def _live_keys(snap) -> set[tuple]:
    out = set()
    for r in snap.files.select(["path", "deletionVector"]).to_pylist():
        dv = r["deletionVector"]
        out.add((r["path"], None if dv is None else dv["pathOrInlineDv"]))
    return out


# ---- the fixture is what it claims --------------------------------------------------------


def test_databricks_form_repeats_keys_newest_first(table):
    """The Databricks-form file holds every covered action but commitInfo, newest commit
    first, so keys repeat (else the test below proves nothing)."""
    data = databricks_compaction_bytes(table.storage, 0, 11)
    lines = data.splitlines()
    expected = [
        line
        for v in range(11, -1, -1)
        for line in commit_lines(table.storage, v)
        if b'"commitInfo"' not in line
    ]
    assert lines == expected
    assert len(_first_line_wins(data)) < len(lines)
    a = table.files["A"]
    kinds = [next(iter(orjson.loads(x))) for x in lines if a.encode() in x]
    # v11, v4, v3 each remove the DV before and add a new one; v1 added A: every remove is
    # above the add it cancels.
    assert kinds == ["remove", "add", "remove", "add", "remove", "add", "add"]
    assert sum(1 for x in lines if b'"metaData"' in x) == 3  # v11, v8, v0
    assert sum(1 for x in lines if b'"txn"' in x and b'"app-1"' in x) == 3


@pytest.mark.parametrize("start,end", [*WINDOWS, *OVERLAPPING, (0, 12), (3, 4), (7, 9)])
def test_databricks_form_reduced_first_line_wins_equals_our_writer(table, start, end):
    """Databricks' file reduced first-line-wins is the spec's reconciled file our writer
    produces for the same range (as sets of actions); so is the library's reading of it."""
    ours = orjson.loads(b"[" + b",".join(
        table.storage.read(write_spec_compaction(table.storage, start, end)).splitlines()
    ) + b"]")
    ours_set = {orjson.dumps(a, option=orjson.OPT_SORT_KEYS) for a in ours}
    theirs = databricks_compaction_bytes(table.storage, start, end)
    assert _first_line_wins(theirs) == ours_set
    # The library's rule: lines oldest first, then the last line wins.
    ordered = delta_lines_oldest_first(theirs, is_compaction=True)
    actions = parse_json_actions(ordered, table=table.storage.root, version=end, file="x")
    library = reconcile_actions([actions], root=table.storage.root)
    assert {orjson.dumps(a, option=orjson.OPT_SORT_KEYS) for a in library} == ours_set


# ---- reading through compaction files equals reading the commits --------------------------


@pytest.mark.parametrize("path", ["columnar", "action-by-action"])
@pytest.mark.parametrize("form", ["databricks", "spec"])
def test_every_version_reads_like_the_commits(table, form, path):
    storage = table.storage
    for start, end in WINDOWS + OVERLAPPING:
        written = WRITERS[form](storage, start, end)
        if path == "action-by-action":
            _force_action_by_action(table, written)
    used = set()
    for v in range(table.latest + 1):
        segment = build_log_segment(storage, v)
        used |= {(d.start, d.end) for d in segment.deltas if d.is_compaction}
        got = snapshot_state(load_snapshot(storage, v))
        assert got == table.reference[v], (form, path, v)
        commits_only = build_log_segment(storage, v, use_compactions=False)
        assert not any(d.is_compaction for d in commits_only.deltas)
        assert segment_state(storage, commits_only) == got, v
    assert used == {(0, 5), (6, 11), (3, 9), (1, 12)}, used


@pytest.mark.parametrize("path", ["columnar", "action-by-action"])
@pytest.mark.parametrize("form", ["databricks", "spec"])
def test_reads_through_compactions_alone(table, form, path):
    """The covered commits deleted: versions 5, 11 and 12 can only be read through the
    compaction files."""
    storage = table.storage
    for start, end in WINDOWS:
        written = WRITERS[form](storage, start, end)
        if path == "action-by-action":
            _force_action_by_action(table, written)
    _delete_commits(table, range(0, 12))
    for v in (5, 11, 12):
        segment = build_log_segment(storage, v)
        assert [d.is_compaction for d in segment.deltas][:2] == [True, True] or v == 5
        assert snapshot_state(load_snapshot(storage, v)) == table.reference[v], (form, v)


def test_action_by_action_rewrite_really_steps_aside(table):
    """The rewritten compaction file is not one the columnar replay takes (so the
    action-by-action replay is what the tests above exercise)."""
    storage = table.storage
    written = write_databricks_compaction(storage, 0, 5)
    data = delta_lines_oldest_first(storage.read(written), is_compaction=True)
    assert reconcile_columnar([CommitFile(5, written, data)], storage.root) is not None
    _force_action_by_action(table, written)
    data = delta_lines_oldest_first(storage.read(written), is_compaction=True)
    assert reconcile_columnar([CommitFile(5, written, data)], storage.root) is None


# ---- the wrong rule gives another state on the same files ---------------------------------


@pytest.mark.parametrize("path", ["columnar", "action-by-action"])
def test_last_line_wins_switch_reads_databricks_form_wrong(table, monkeypatch, path):
    """With the test-only switch (last line wins inside compaction files, the old reading)
    the Databricks-form table reads other files: removed files come back, re-added ones
    vanish. Read at call time, on both replay paths."""
    storage = table.storage
    for start, end in WINDOWS:
        written = write_databricks_compaction(storage, start, end)
        if path == "action-by-action":
            _force_action_by_action(table, written)
    _delete_commits(table, range(0, 12))
    right = {v: load_snapshot(storage, v) for v in (5, 11)}
    last_line_wins(monkeypatch)
    wrong = {v: load_snapshot(storage, v) for v in (5, 11)}
    a, b, e = table.files["A"], table.files["B"], table.files["E"]
    # v5: B, C, D (removed by OPTIMIZE) and A with its first DV come back.
    resurrected = _live_keys(wrong[5]) - _live_keys(right[5])
    assert {p for p, _ in resurrected} == {a, b, table.files["C"], table.files["D"]}
    assert snapshot_state(wrong[5]) != table.reference[5]
    # v11: E (removed at v7, re-added at v9) is gone; the oldest metaData and txns win.
    assert e in {p for p, _ in _live_keys(right[11])}
    assert e not in {p for p, _ in _live_keys(wrong[11])}
    assert wrong[11].metadata.configuration.get("fixture.step") == "8"
    assert right[11].metadata.configuration.get("fixture.step") == "11"
    assert wrong[11].txns["app-1"].version == 2 and right[11].txns["app-1"].version == 3
    last_line_wins(monkeypatch, on=False)
    assert snapshot_state(load_snapshot(storage, 11)) == table.reference[11]


def test_last_line_wins_switch_does_not_change_the_spec_form(table, monkeypatch):
    """A reconciled file has one line per key: the order rule does not matter for it."""
    for start, end in WINDOWS:
        write_spec_compaction(table.storage, start, end)
    _delete_commits(table, range(0, 12))
    last_line_wins(monkeypatch)
    for v in (5, 11, 12):
        assert snapshot_state(load_snapshot(table.storage, v)) == table.reference[v]


# ---- the one helper ---------------------------------------------------------------------


def test_delta_lines_oldest_first(monkeypatch):
    commit = b'{"a":1}\n{"b":2}\n'
    assert delta_lines_oldest_first(commit, is_compaction=False) is commit
    assert delta_lines_oldest_first(commit, is_compaction=True) == b'{"b":2}\n{"a":1}\n'
    # No final newline, CRLF, blank lines: lines reversed, each ended by \n.
    assert delta_lines_oldest_first(b"x\r\ny\n\nz", is_compaction=True) == b"z\n\ny\nx\n"
    assert delta_lines_oldest_first(b'{"a":1}', is_compaction=True) == b'{"a":1}'
    assert delta_lines_oldest_first(b"", is_compaction=True) == b""
    last_line_wins(monkeypatch)
    assert delta_lines_oldest_first(commit, is_compaction=True) is commit

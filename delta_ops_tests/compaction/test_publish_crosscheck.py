"""No operation publishes a state it did not cross-check (issue 13, second acceptance point).

A Databricks-form log compaction file (unreconciled, newest commit first, repeated keys: the
first line for a key wins) read with a deliberately wrong rule (injected by the tests,
`delta_ops_tests.support.compaction_rule.last_line_wins`: last line wins) resurrects a removed
file and an old transaction version. Every publishing operation (checkpoint of every kind,
`.crc`, log compaction) must then refuse with CrossCheckError naming the table, the version,
both counts and the first differing file, and leave `_delta_log` byte-for-byte unchanged.
With the right rule they succeed, and deltalake reads the checkpoint as the commits.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import orjson
import pytest
from deltalake import DeltaTable as RsTable

from delta_ops.errors import CrossCheckError
from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
from delta_ops.maintenance import compaction as compaction_mod
from delta_ops.maintenance.checkpoint import write_checkpoint
from delta_ops.maintenance.checksum import read_checksum, write_checksum, write_checksums
from delta_ops.maintenance.compaction import compact_log
from delta_ops.maintenance.crosscheck import independent_path
from delta_ops.protocol.filenames import commit_name, compaction_name
from delta_ops.storage import Storage
from delta_ops_tests.support.compaction_rule import last_line_wins

NOW = 1_700_000_000_000
PROTOCOL = {"minReaderVersion": 1, "minWriterVersion": 2}
METADATA = {
    "id": "crosscheck-table",
    "format": {"provider": "parquet", "options": {}},
    "schemaString": json.dumps(
        {"type": "struct", "fields": [{"name": "x", "type": "long", "nullable": True,
                                      "metadata": {}}]}
    ),
    "partitionColumns": [],
    "configuration": {},
    "createdTime": NOW,
}
V2_PROTOCOL = {
    "minReaderVersion": 3,
    "minWriterVersion": 7,
    "readerFeatures": ["v2Checkpoint"],
    "writerFeatures": ["v2Checkpoint"],
}


def _add(path: str, size: int) -> dict:
    return {"add": {"path": path, "partitionValues": {}, "size": size,
                    "modificationTime": NOW, "dataChange": True,
                    "stats": json.dumps({"numRecords": 1})}}


def _remove(path: str, size: int) -> dict:
    return {"remove": {"path": path, "deletionTimestamp": NOW, "dataChange": True,
                       "extendedFileMetadata": True, "partitionValues": {}, "size": size}}


def _txn(version: int) -> dict:
    return {"txn": {"appId": "stream-1", "version": version, "lastUpdated": NOW}}


def _ci(op: str) -> dict:
    return {"commitInfo": {"timestamp": NOW, "operation": op}}


def _lines(actions: list[dict]) -> bytes:
    return b"".join(orjson.dumps(a) + b"\n" for a in actions)


def make_table(root: Path, *, v2: bool = False) -> Path:
    """Commits 0..2 and Databricks' unreconciled compaction 1.2 (newest commit first).

    commit 1: add a.parquet, txn stream-1 v1; commit 2: remove a.parquet, add b.parquet,
    txn stream-1 v2. The compaction holds commit 2's actions, then commit 1's: remove a,
    add b, txn v2, add a, txn v1. First line wins: {b}, txn 2; last line wins: {a, b}, txn 1.
    """
    log = root / "_delta_log"
    log.mkdir(parents=True)
    commits = [
        [_ci("CREATE TABLE"), {"protocol": V2_PROTOCOL if v2 else PROTOCOL},
         {"metaData": METADATA}],
        [_ci("WRITE"), _add("a.parquet", 100), _txn(1)],
        [_ci("DELETE"), _remove("a.parquet", 100), _add("b.parquet", 200), _txn(2)],
    ]
    for v, actions in enumerate(commits):
        (log / commit_name(v)).write_bytes(_lines(actions))
        os.utime(log / commit_name(v), (NOW / 1000 + v, NOW / 1000 + v))
    databricks = [
        _remove("a.parquet", 100), _add("b.parquet", 200), _txn(2),  # commit 2
        _add("a.parquet", 100), _txn(1),  # commit 1
    ]
    (log / compaction_name(1, 2)).write_bytes(_lines(databricks))
    for name in ("a.parquet", "b.parquet"):
        (root / name).write_bytes(b"not read by these tests")
    return root


def listing(root: Path) -> dict[str, bytes]:
    """Every file under `_delta_log` (sidecars included) with its bytes."""
    log = root / "_delta_log"
    return {
        str(p.relative_to(log)): p.read_bytes() for p in sorted(log.rglob("*")) if p.is_file()
    }


def live(root: Path, version: int = 2) -> set[str]:
    snap = load_snapshot(Storage.for_uri(str(root)), version)
    return set(snap.files.column("path").to_pylist())


@pytest.fixture
def wrong_rule(monkeypatch):
    """Switch to the wrong rule, after proving that it really changes what is read (so
    that no test below can pass vacuously if the switch had no effect)."""

    def on(root: Path) -> None:
        assert live(root) == {"b.parquet"}
        last_line_wins(monkeypatch)
        assert live(root) == {"a.parquet", "b.parquet"}, "the test-only switch has no effect"

    return on


KINDS = [
    ("classic", {}, False),
    ("multi-part", {"parts": 2}, False),
    ("v2-classic", {"sidecar_actions": 1}, True),
    ("v2-uuid", {"sidecar_actions": 1}, True),
    ("v2-uuid", {"fmt": "json", "sidecar_actions": 0}, True),
    ("v2-uuid", {"sidecar_actions": 0}, True),
]


@pytest.mark.parametrize(("kind", "options", "v2"), KINDS)
def test_checkpoint_refuses_wrong_reconciliation(tmp_path, wrong_rule, kind, options, v2):
    root = make_table(tmp_path / "t", v2=v2)
    wrong_rule(root)
    before = listing(root)
    with pytest.raises(CrossCheckError, match=r"first differing file: a\.parquet") as info:
        write_checkpoint(str(root), version=2, kind=kind, now_ms=NOW, **options)
    err = info.value
    assert err.version == 2 and err.table == Storage.for_uri(str(root)).root
    assert (err.published_count, err.independent_count) == (2, 1)
    assert "2 in the state to publish, 1 in the independent replay" in str(err)
    assert str(root) in str(err) and "version 2" in str(err)
    assert listing(root) == before  # no checkpoint, part, sidecar or _last_checkpoint


@pytest.mark.parametrize(("kind", "options", "v2"), KINDS)
def test_checkpoint_right_rule_matches_commits_and_deltalake(tmp_path, kind, options, v2):
    root = make_table(tmp_path / "t", v2=v2)
    result = write_checkpoint(str(root), version=2, kind=kind, now_ms=NOW, **options)
    assert not result.already_existed and result.num_add_files == 1
    assert result.cross_check == (
        "passed: the deltas read through commits 0 + compaction 1..2 reconcile to the same "
        "actions as the independent commits 0..2"
    )
    # The checkpoint alone (the compaction and the commits moved away) reads as the commits.
    log = root / "_delta_log"
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    for name in (compaction_name(1, 2), *(commit_name(v) for v in range(2))):
        (log / name).rename(hidden / name)
    snap = load_snapshot(Storage.for_uri(str(root)), 2)
    assert snap.checkpoint_version == 2
    assert set(snap.files.column("path").to_pylist()) == {"b.parquet"}
    assert {k: t.version for k, t in snap.txns.items()} == {"stream-1": 2}
    rs = RsTable(str(root))
    assert rs.version() == 2
    assert {os.path.basename(p) for p in rs.get_add_actions().column("path").to_pylist()} == {
        "b.parquet"
    }


def test_checkpoint_below_the_compaction(tmp_path, monkeypatch):
    """Checkpoint 0 + compaction 1..2: the independent path starts from the same checkpoint
    (read once); wrong rule refused, right rule passes and names the segments."""
    root = make_table(tmp_path / "t")
    first = write_checkpoint(str(root), version=0, now_ms=NOW)
    assert first.cross_check.startswith("commits-only segment (commits 0)")
    ok = write_checkpoint(str(root), version=2, kind="multi-part", parts=2, now_ms=NOW)
    assert ok.cross_check == (
        "passed: the deltas read through checkpoint 0 + compaction 1..2 reconcile to the same "
        "actions as the independent checkpoint 0 + commits 1..2"
    )
    for p in (root / "_delta_log").glob("*.checkpoint.*.parquet"):
        p.unlink()
    (root / "_delta_log" / "_last_checkpoint").unlink()
    assert live(root) == {"b.parquet"}
    last_line_wins(monkeypatch)
    assert live(root) == {"a.parquet", "b.parquet"}, "the test-only switch has no effect"
    before = listing(root)
    with pytest.raises(CrossCheckError, match=r"independent replay of checkpoint 0 \+ commits "
                       r"1\.\.2 in live files: 2 .* 1 .*first differing file: a\.parquet"):
        write_checkpoint(str(root), version=2, now_ms=NOW)
    assert listing(root) == before


def test_wrong_transaction_version_alone_is_refused(tmp_path, monkeypatch):
    """Live files right, the txn wrong: still refused (txns are compared too)."""
    root = make_table(tmp_path / "t")
    log = root / "_delta_log"
    # Same file lines as before but reconciled (one line per key), txns still repeated.
    (log / compaction_name(1, 2)).write_bytes(
        _lines([_remove("a.parquet", 100), _add("b.parquet", 200), _txn(2), _txn(1)])
    )
    assert {k: t.version for k, t in load_snapshot(Storage.for_uri(str(root)), 2).txns.items()} \
        == {"stream-1": 2}
    last_line_wins(monkeypatch)
    snap = load_snapshot(Storage.for_uri(str(root)), 2)
    assert snap.txns["stream-1"].version == 1, "the test-only switch has no effect"
    before = listing(root)
    with pytest.raises(CrossCheckError, match="transaction identifiers"):
        write_checkpoint(str(root), version=2, now_ms=NOW)
    assert listing(root) == before


def test_cleaned_up_commits_leave_no_independent_path(tmp_path):
    """Commits a compaction covers are gone: recorded as unavailable, the checkpoint is
    still written (the issue asks for the check whenever the independent path exists)."""
    root = make_table(tmp_path / "t")
    (root / "_delta_log" / commit_name(1)).unlink()
    snap = load_snapshot(Storage.for_uri(str(root)), 2)
    path = independent_path(snap)
    assert not path.available
    assert path.note == "unavailable (commits 1 were cleaned up; only compaction files cover them)"
    result = write_checkpoint(str(root), version=2, now_ms=NOW)
    assert result.cross_check == path.note and result.num_add_files == 1


def test_size_difference_is_refused(tmp_path):
    """Same keys, a different size in the compaction: refused, naming the file and sizes."""
    root = make_table(tmp_path / "t")
    log = root / "_delta_log"
    (log / compaction_name(1, 2)).write_bytes(
        _lines([_remove("a.parquet", 100), _add("b.parquet", 201), _txn(2)])
    )
    before = listing(root)
    with pytest.raises(CrossCheckError, match=r"201 against 200 bytes.*b\.parquet"):
        write_checkpoint(str(root), version=2, now_ms=NOW)
    assert listing(root) == before


# ---- version checksums --------------------------------------------------------------------


@pytest.mark.parametrize("method", ["auto", "full"])
def test_crc_write_refuses_wrong_reconciliation(tmp_path, wrong_rule, method):
    root = make_table(tmp_path / "t")
    wrong_rule(root)
    before = listing(root)
    with pytest.raises(CrossCheckError, match=r"first differing file: a\.parquet") as info:
        write_checksum(str(root), version=2, method=method)
    assert info.value.version == 2
    assert (info.value.published_count, info.value.independent_count) == (2, 1)
    assert listing(root) == before  # no 2.crc
    # The backfill's full computation of version 2 (no earlier .crc) refuses the same way.
    with pytest.raises(CrossCheckError, match=r"a\.parquet"):
        write_checksums(str(root), start=2, end=2)
    assert listing(root) == before


def test_crc_incremental_never_reads_compactions(tmp_path, wrong_rule):
    """Derived from the previous .crc and the commit: the wrong rule cannot reach it."""
    root = make_table(tmp_path / "t")
    wrong_rule(root)
    result = write_checksums(str(root), start=0, end=2)
    assert result.written == (0, 1, 2) and result.incremental_computations == 2
    crc = read_checksum(Storage.for_uri(str(root)), 2)
    assert crc is not None
    assert (crc.num_files, crc.table_size_bytes) == (1, 200)
    assert [f["path"] for f in crc.all_files or ()] == ["b.parquet"]


def test_crc_right_rule_matches_commits(tmp_path):
    root = make_table(tmp_path / "t")
    result = write_checksum(str(root), version=2, method="full")
    assert result.written and result.cross_check is not None
    assert result.cross_check.startswith("passed: the deltas read through commits 0 + compaction")
    crc = read_checksum(Storage.for_uri(str(root)), 2)
    assert crc is not None and (crc.num_files, crc.table_size_bytes) == (1, 200)
    assert [t["version"] for t in crc.set_transactions or ()] == [2]
    # Without the compaction (commits only) the same checksum comes out.
    other = make_table(tmp_path / "plain")
    (other / "_delta_log" / compaction_name(1, 2)).unlink()
    plain = write_checksum(str(other), version=2, method="full")
    assert plain.cross_check is not None and plain.cross_check.startswith("commits-only segment")
    theirs = read_checksum(Storage.for_uri(str(other)), 2)
    assert theirs is not None and theirs.to_dict() == crc.to_dict()


# ---- log compaction -----------------------------------------------------------------------


def test_compaction_writer_output_unaffected_by_wrong_rule(tmp_path, wrong_rule):
    """The writer reconciles commits and its cross-check reads its own (reconciled) output:
    under the wrong rule it still writes the commits' reconciliation."""
    root = make_table(tmp_path / "t")
    wrong_rule(root)
    result = compact_log(str(root), start=0, end=2)
    assert not result.already_existed
    lines = [orjson.loads(x) for x in (root / result.file).read_bytes().splitlines()]
    adds = [a["add"]["path"] for a in lines if "add" in a]
    removes = [a["remove"]["path"] for a in lines if "remove" in a]
    txns = [a["txn"]["version"] for a in lines if "txn" in a]
    assert (adds, removes, txns) == (["b.parquet"], ["a.parquet"], [2])


def test_compaction_existing_databricks_form_matches(tmp_path):
    """An existing Databricks-form file for the range reconciles (first line wins) to the
    same actions as the commits: existing_matches is True (it was False before the reader's
    rule was applied to it: read as one commit, `add a` below `remove a` won)."""
    root = make_table(tmp_path / "t")
    result = compact_log(str(root), start=1, end=2)
    assert result.already_existed and result.existing_matches is True


def test_compaction_writer_refuses_wrong_reconciliation(tmp_path, monkeypatch):
    """A writer whose reconciliation is wrong (the oldest commit wins) is caught by reading
    its bytes back with the log reader; nothing is written."""
    root = make_table(tmp_path / "t")
    real = compaction_mod.reconcile_actions

    def oldest_wins(commits, *, root):
        return real(list(commits)[::-1], root=root)

    monkeypatch.setattr(compaction_mod, "reconcile_actions", oldest_wins)
    assert {a.get("add", {}).get("path") for a in oldest_wins(
        [[_add("a.parquet", 100)], [_remove("a.parquet", 100)]], root="file:///x")} == {
        "a.parquet"}, "the injected reconciliation is not wrong"
    before = listing(root)
    with pytest.raises(CrossCheckError, match=r"compaction refused.*first differing file: "
                       r"a\.parquet") as info:
        compact_log(str(root), start=0, end=2)
    assert info.value.version == 2
    assert listing(root) == before

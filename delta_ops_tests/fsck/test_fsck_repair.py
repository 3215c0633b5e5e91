"""`fsck --repair`: with `confirm`, one `FSCK` commit removes exactly the damaged live files
(missing data, missing or corrupt DV) and `deltalake` reads what is left; without it nothing
changes; a file the listing misses but a direct look finds is never removed; the CLI's
dry run, confirmation and exit codes."""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import unquote

import deltalake
import pytest

from delta_ops import DeltaTable
from delta_ops.cli import main
from delta_ops.log import load_snapshot
from delta_ops.maintenance.fsck import fsck
from delta_ops.protocol.deletion_vectors import DeletionVectorDescriptor
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import copy_corpus_table

PARTITIONED = "golden__dv-partitioned-with-checkpoint"
OLD_S = 1_600_000_000
SOON_MS = (OLD_S + 3600) * 1000


def _copy(name: str, tmp_path: Path) -> Path:
    root = copy_corpus_table(name, tmp_path / "t")
    for folder, _dirs, files in os.walk(root):
        for f in files:
            os.utime(os.path.join(folder, f), (OLD_S, OLD_S))
    return root


def _live(root: Path) -> dict[str, dict]:
    rows = load_snapshot(Storage.for_uri(str(root))).files.to_pylist()
    return {unquote(r["path"]): r for r in rows}


def _dv(row: dict) -> str | None:
    dv = row["deletionVector"]
    return DeletionVectorDescriptor.from_dict(dv).relative_path() if dv else None


def _rows(row: dict) -> int:
    return json.loads(row["stats"])["numRecords"] - ((row["deletionVector"] or {}).get(
        "cardinality") or 0)


def _log_state(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((root / "_delta_log").iterdir())
            if p.is_file()}


def _hurt(root: Path) -> set[str]:
    """Delete one data file (without a DV), delete one DV file, corrupt another: the live
    files that are then damaged."""
    live = _live(root)
    plain = sorted(k for k, r in live.items() if not r["deletionVector"])
    with_dv = sorted(k for k, r in live.items() if r["deletionVector"])
    (root / plain[0]).unlink()
    gone_dv = _dv(live[with_dv[0]])
    (root / gone_dv).unlink()
    corrupt_dv = next(_dv(live[k]) for k in with_dv if _dv(live[k]) != gone_dv)
    data = bytearray((root / corrupt_dv).read_bytes())
    data[-1] ^= 0xFF  # the last DV's CRC-32
    (root / corrupt_dv).write_bytes(bytes(data))
    damaged = {plain[0]}
    damaged |= {k for k in with_dv if _dv(live[k]) == gone_dv}
    dv_bytes = bytes(data)
    damaged |= {k for k in with_dv if _dv(live[k]) == corrupt_dv
                and live[k]["deletionVector"]["offset"] + 8
                + live[k]["deletionVector"]["sizeInBytes"] == len(dv_bytes)}
    return damaged


def test_repair_removes_exactly_the_damaged_files(tmp_path):
    root = _copy(PARTITIONED, tmp_path)
    before = _live(root)
    damaged = _hurt(root)
    assert len(damaged) >= 3
    result = fsck(str(root), repair=True, confirm=True, clock=lambda: SOON_MS)
    repair = result.repair
    assert repair is not None and not repair.dry_run and repair.version == result.version + 1
    assert {e.key for e in repair.entries} == damaged
    assert repair.rows_lost == sum(_rows(before[k]) for k in damaged) and repair.rows_lost_known
    assert repair.kept == ()
    after = _live(root)
    assert set(after) == set(before) - damaged
    for k in after:
        assert after[k] == before[k]
    # deltalake (whose reader refuses deletion vectors, so it reads the file list here;
    # the rows in the test below) sees the same live files.
    table = deltalake.DeltaTable(str(root))
    assert table.version() == repair.version
    assert {unquote(u.split(f"{root}/", 1)[1]) for u in table.file_uris()} == set(after)
    # The commit: operation FSCK, its metrics, removes as Spark writes them.
    lines = [json.loads(line) for line in (root / "_delta_log" / f"{repair.version:020d}.json")
             .read_text().splitlines()]
    info = lines[0]["commitInfo"]
    assert info["operation"] == "FSCK"
    assert info["operationMetrics"]["numRemovedFiles"] == str(len(damaged))
    assert info["operationMetrics"]["numMissingFiles"] == "1"
    assert info["operationMetrics"]["numRowsLost"] == str(repair.rows_lost)
    removes = {unquote(a["remove"]["path"]): a["remove"] for a in lines[1:]}
    assert set(removes) == damaged and len(lines) == 1 + len(damaged)
    for k, rm in removes.items():
        add = before[k]
        assert rm["dataChange"] is True and rm["extendedFileMetadata"] is True
        assert rm["size"] == add["size"] and rm["stats"] == add["stats"]
        assert rm["partitionValues"] == dict(add["partitionValues"])
        assert rm.get("deletionVector") == (
            {k2: v for k2, v in add["deletionVector"].items() if v is not None}
            if add["deletionVector"] else None)
        assert rm["deletionTimestamp"] == SOON_MS
    # And the table is whole again.
    again = fsck(str(root), clock=lambda: SOON_MS)
    assert again.ok and again.errors == ()


def test_repaired_table_reads_in_deltalake(tmp_path):
    """A table deltalake reads in full: after the repair it reads every surviving row."""
    root = _copy("basic_partitioned", tmp_path)
    before = _live(root)
    assert len(before) >= 3
    rows_before = deltalake.DeltaTable(str(root)).to_pyarrow_table().num_rows
    gone = sorted(before)[:2]
    for k in gone:
        (root / k).unlink()
    result = fsck(str(root), repair=True, confirm=True, clock=lambda: SOON_MS)
    assert {e.key for e in result.repair.entries} == set(gone)
    lost = sum(_rows(before[k]) for k in gone)
    assert result.repair.rows_lost == lost > 0
    table = deltalake.DeltaTable(str(root))
    assert table.version() == result.repair.version
    assert table.to_pyarrow_table().num_rows == rows_before - lost
    assert table.history(1)[0]["operation"] == "FSCK"
    assert set(_live(root)) == set(before) - set(gone)


def test_repair_without_confirm_changes_nothing(tmp_path):
    root = _copy(PARTITIONED, tmp_path)
    damaged = _hurt(root)
    log_before = _log_state(root)
    result = DeltaTable(str(root)).fsck(repair=True, clock=lambda: SOON_MS)
    assert result.repair is not None and result.repair.dry_run
    assert result.repair.version is None
    assert {e.key for e in result.repair.entries} == damaged
    assert result.repair.metrics["numRemovedFiles"] == len(damaged)
    assert _log_state(root) == log_before
    assert result.unrepaired_errors == result.errors and not result.ok


def test_healthy_table_repair_commits_nothing(tmp_path):
    root = _copy(PARTITIONED, tmp_path)
    log_before = _log_state(root)
    result = fsck(str(root), repair=True, confirm=True, clock=lambda: SOON_MS)
    assert result.ok and result.repair.entries == () and result.repair.version is None
    assert _log_state(root) == log_before


def test_file_behind_a_symlink_is_never_removed(tmp_path):
    """Listings never follow symbolic links, so files in a linked partition directory are
    not listed; the direct look finds them: a warning, and the repair keeps them."""
    root = _copy(PARTITIONED, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    (root / "part=3").rename(elsewhere)
    (root / "part=3").symlink_to(elsewhere, target_is_directory=True)
    in_part = sorted(k for k in _live(root) if k.startswith("part=3/"))
    log_before = _log_state(root)
    result = fsck(str(root), repair=True, confirm=True, clock=lambda: SOON_MS)
    assert result.ok
    assert sorted(p.file for p in result.problems if p.code == "unlisted_file") == in_part
    assert all(p.severity == "warning" for p in result.problems)
    assert result.repair.entries == ()
    assert _log_state(root) == log_before


def test_a_dangling_link_is_an_error_the_repair_keeps(tmp_path):
    """A live data file (and a DV file) that is a symbolic link to a target that is gone:
    readers fail on it, so it is an error, but the target may only be unmounted, so the
    repair does not remove it from the table. Before, it was `missing_file` and removed."""
    root = _copy(PARTITIONED, tmp_path)
    live = _live(root)
    plain = sorted(k for k, r in live.items() if not r["deletionVector"])[0]
    dv_file = sorted({_dv(r) for r in live.values() if r["deletionVector"]} - {None})[0]
    gone = tmp_path / "unmounted"
    for key in (plain, dv_file):
        (root / key).unlink()
        (root / key).symlink_to(gone / key.replace("/", "_"))
    log_before = _log_state(root)
    result = fsck(str(root), repair=True, confirm=True, clock=lambda: SOON_MS)
    assert {p.file for p in result.problems if p.code == "dangling_link"} == {plain, dv_file}
    assert all(p.severity == "error" for p in result.problems if p.code == "dangling_link")
    assert not [p for p in result.problems if p.code in ("missing_file", "missing_dv")]
    assert not result.ok
    assert result.repair.entries == ()
    assert _log_state(root) == log_before


def test_confirm_needs_repair(tmp_path):
    root = _copy(PARTITIONED, tmp_path)
    with pytest.raises(ValueError, match="repair=True"):
        fsck(str(root), confirm=True)


def test_cli_dry_run_confirm_and_exit_codes(tmp_path, capsys):
    root = _copy(PARTITIONED, tmp_path)
    assert main(["fsck", str(root), "--no-leftovers"]) == 0
    assert "found       0 errors, 0 warnings" in capsys.readouterr().out
    damaged = _hurt(root)
    log_before = _log_state(root)
    assert main(["fsck", str(root)]) == 3
    out = capsys.readouterr().out
    assert out.count("\nERROR ") == len(damaged)
    assert main(["fsck", str(root), "--repair"]) == 3
    out = capsys.readouterr().out
    assert f"DRY RUN: would remove {len(damaged)} files" in out
    for k in damaged:
        assert f"remove    {k} (" in out
    assert _log_state(root) == log_before
    assert main(["fsck", str(root), "--confirm"]) == 2
    assert "--repair" in capsys.readouterr().err
    assert main(["fsck", str(root), "--repair", "--confirm", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["repair"]["dry_run"] is False and data["repair"]["num_files"] == len(damaged)
    assert {e["key"] for e in data["repair"]["entries"]} == damaged
    assert {p["data_file"] or p["file"] for p in data["problems"]
            if p["severity"] == "error"} == damaged
    assert main(["fsck", str(root)]) == 0

"""VACUUM LITE's window, VACUUM in the table history, and progress.

Lite: it reads the removes of the commits since the last VACUUM (`_last_vacuum_info`,
delta-spark's file and bytes), so a tombstone a checkpoint dropped is still seen; when the
log no longer holds those commits it refuses with the reason (or lists the table once,
when asked), never skipping files silently. History: `VACUUM START` / `VACUUM END` commits
as delta-spark writes them (checked against a Spark-written pair in the corpus and read
back by `deltalake`); refused on catalog-managed tables. Progress: the listing, probe and
delete loops report pages, files and bytes; the CLI's `--json` object keeps its keys and
shows no bar; a terminal gets one; Dagster logs it at a bounded rate.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import shutil
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import orjson
import pytest

from delta_ops.engine.local import LocalEngine
from delta_ops.engine.progress import DELETE, LIST, PROBE, LogProgress, PhaseTotals, Tracker
from delta_ops.errors import (
    LiteVacuumUnavailableError,
    StorageError,
    UnsupportedFeatureError,
)
from delta_ops.log.replay.vacuum_info import read_last_vacuum_info, write_last_vacuum_info
from delta_ops.maintenance.checkpoint.writer import write_checkpoint
from delta_ops.maintenance.vacuum import vacuum
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import REPO_ROOT, copy_corpus_table
from delta_ops_tests.support.vacuum_tables import DAY_MS, generate, walk_local

NOW_MS = 1_750_000_000_000
LOG = "_delta_log"


def _table(tmp_path: Path, seed: int = 1, **kw) -> tuple[Path, object]:
    root = tmp_path / "t"
    opts = {"partitioned": False, "awkward": True, "dv": True, "orphans": False} | kw
    table = generate(seed, NOW_MS, **opts)
    table.write_local(root)
    return root, table


def _set_mtime(path: Path, ms: int) -> None:
    os.utime(path, ns=(ms * 1_000_000, ms * 1_000_000))


# --------------------------------------------------------------------------------------
# Lite
# --------------------------------------------------------------------------------------


def test_lite_sees_a_tombstone_a_checkpoint_dropped(tmp_path):
    """A checkpoint written after a tombstone expired drops it from the state; the commit
    that removed the file is still in the log, so lite must still delete the file (the
    full listing does). Lite mode used to read only the state and left it."""
    root, table = _table(tmp_path, seed=3)
    # Checkpoint at version 2, written "now": it drops the expired tombstones of commit 1.
    write_checkpoint(str(root), now_ms=NOW_MS)
    _set_mtime(root / LOG / "00000000000000000002.checkpoint.parquet", NOW_MS - DAY_MS)
    listing = vacuum(str(root), now_ms=NOW_MS, dry_run=True)
    assert set(listing.files) == table.garbage and listing.files
    lite = vacuum(str(root), now_ms=NOW_MS, dry_run=True, lite=True)
    assert lite.files == listing.files


def _truncate_log(root: Path, keep_from: int = 2) -> None:
    """Checkpoint version `keep_from` and remove the commits before it, as metadata cleanup
    does."""
    write_checkpoint(str(root), version=keep_from, now_ms=NOW_MS)
    for version in range(keep_from):
        (root / LOG / f"{version:020d}.json").unlink()


def test_lite_refuses_when_the_log_no_longer_covers_the_window(tmp_path):
    root, table = _table(tmp_path, seed=4, orphans=True)
    _truncate_log(root, keep_from=1)
    before = walk_local(root)
    with pytest.raises(LiteVacuumUnavailableError, match="starts at version 1, not 0") as info:
        vacuum(str(root), now_ms=NOW_MS, lite=True, dry_run=False)
    assert "Run a full VACUUM once" in str(info.value)
    assert walk_local(root) == before
    # Asked to, it lists the table once instead, and says so.
    fallback = vacuum(str(root), now_ms=NOW_MS, lite=True, lite_fallback=True, dry_run=True)
    full = vacuum(str(root), now_ms=NOW_MS, dry_run=True)
    assert fallback.files == full.files and set(full.files) == table.garbage
    assert not fallback.lite
    assert any("fell back to a full listing" in m for m in fallback.messages)
    # A real full run records where it got to; lite then starts there on its own.
    vacuum(str(root), now_ms=NOW_MS, dry_run=False)
    assert read_last_vacuum_info(Storage.for_uri(str(root))) == 1
    again = vacuum(str(root), now_ms=NOW_MS, lite=True, dry_run=True)
    assert again.lite and again.files == ()


def test_lite_refuses_when_commits_since_the_last_vacuum_were_cleaned_up(tmp_path):
    root, _ = _table(tmp_path, seed=5)
    storage = Storage.for_uri(str(root))
    write_last_vacuum_info(storage, 0)  # the last VACUUM saw commit 0 only
    _truncate_log(root, keep_from=2)  # commit 1's removes are gone unseen
    with pytest.raises(LiteVacuumUnavailableError, match="up to version 0, but the log now "
                                                         "starts at version 2"):
        vacuum(str(root), now_ms=NOW_MS, lite=True, dry_run=True)
    # Recorded up to version 1, every commit lite needs (2 on) is there: it runs.
    write_last_vacuum_info(storage, 1)
    assert vacuum(str(root), now_ms=NOW_MS, lite=True, dry_run=True).lite


def test_last_vacuum_info_has_sparks_bytes(tmp_path):
    root, _ = _table(tmp_path, seed=6)
    storage = Storage.for_uri(str(root))
    vacuum(str(root), now_ms=NOW_MS, dry_run=False)
    # What delta-spark 3.3 writes after a successful VACUUM LITE.
    assert (root / LOG / "_last_vacuum_info").read_bytes() == (
        b'{"latestCommitVersionOutsideOfRetentionWindow":1}\n'
    )
    # delta-spark's full VACUUM records no version: read as none.
    (root / LOG / "_last_vacuum_info").write_bytes(b"{}\n")
    assert read_last_vacuum_info(storage) is None
    # A dry run records nothing; the record never moves back.
    write_last_vacuum_info(storage, 5)
    vacuum(str(root), now_ms=NOW_MS, dry_run=False)
    assert read_last_vacuum_info(storage) == 5


def test_lite_on_a_spark_table_whose_log_was_pruned(tmp_path):
    root = copy_corpus_table("no_replay", tmp_path / "t")
    with pytest.raises(LiteVacuumUnavailableError, match="not 0"):
        vacuum(str(root), lite=True, dry_run=True, now_ms=NOW_MS)


# --------------------------------------------------------------------------------------
# History
# --------------------------------------------------------------------------------------


def _commit_info(path: Path) -> dict:
    for line in path.read_bytes().splitlines():
        obj = orjson.loads(line)
        if "commitInfo" in obj:
            return obj["commitInfo"]
    raise AssertionError(f"no commitInfo in {path}")


def test_history_commits_are_what_spark_writes_and_deltalake_reads_them(tmp_path):
    import deltalake

    root = copy_corpus_table("no_replay", tmp_path / "spark")
    spark_start = _commit_info(root / LOG / "00000000000000000004.json")
    spark_end = _commit_info(root / LOG / "00000000000000000005.json")
    assert spark_start["operation"] == "VACUUM START"

    table = copy_corpus_table("golden__basic-with-inserts-deletes-checkpoint", tmp_path / "t")
    now = int(time.time() * 1000) + 400 * DAY_MS
    for path in table.rglob("*"):
        if path.is_file() and LOG not in path.parts:
            _set_mtime(path, now - 300 * DAY_MS)
    before = deltalake.DeltaTable(str(table))
    version, rows = before.version(), before.to_pyarrow_table().num_rows
    result = vacuum(str(table), now_ms=now, retention_hours=0, force_retention=True,
                    record_history=True, dry_run=False)
    assert result.num_files > 0
    after = deltalake.DeltaTable(str(table))
    assert after.version() == version + 2
    assert after.to_pyarrow_table().num_rows == rows
    history = after.history(2)
    end, start = history[0], history[1]
    assert start["operation"] == "VACUUM START" and end["operation"] == "VACUUM END"
    assert start["operationMetrics"] == {
        "numFilesToDelete": str(result.num_files), "sizeOfDataToDelete": str(result.size_bytes)
    }
    assert end["operationParameters"] == {"status": "COMPLETED"}
    assert end["operationMetrics"]["numDeletedFiles"] == str(result.num_files)
    assert int(end["operationMetrics"]["numVacuumedDirectories"]) >= 1
    assert start["operationParameters"] == {
        "retentionCheckEnabled": False, "defaultRetentionMillis": 604800000,
        "specifiedRetentionMillis": 0,
    }
    ours_start = _commit_info(table / LOG / f"{version + 1:020d}.json")
    ours_end = _commit_info(table / LOG / f"{version + 2:020d}.json")
    for ours, spark in ((ours_start, spark_start), (ours_end, spark_end)):
        assert set(ours) - {"engineInfo", "txnId"} >= set(spark) - {"engineInfo", "txnId"}
        assert set(ours["operationParameters"]) == set(spark["operationParameters"])
        assert set(ours["operationMetrics"]) == set(spark["operationMetrics"])
        assert ours["isolationLevel"] == spark["isolationLevel"] == "SnapshotIsolation"
        assert ours["isBlindAppend"] is spark["isBlindAppend"] is True
        for key, value in spark["operationParameters"].items():
            assert type(ours["operationParameters"][key]) is type(value), key


def test_history_is_off_by_default_and_dry_runs_record_nothing(tmp_path):
    root, _ = _table(tmp_path, seed=7)
    vacuum(str(root), now_ms=NOW_MS, dry_run=True, record_history=True)
    vacuum(str(root), now_ms=NOW_MS, dry_run=False)
    commits = sorted(p.name for p in (root / LOG).glob("*.json"))
    assert commits[-1] == "00000000000000000002.json"


def test_failed_deletes_are_recorded_as_failed(tmp_path):
    root, _ = _table(tmp_path, seed=8)

    class Failing(LocalEngine):
        def delete_files(self, storage, paths):
            raise StorageError("disk on fire", file=paths[0])

    with pytest.raises(StorageError, match="disk on fire"):
        vacuum(str(root), now_ms=NOW_MS, record_history=True, engine=Failing(), dry_run=False)
    start = _commit_info(root / LOG / "00000000000000000003.json")
    end = _commit_info(root / LOG / "00000000000000000004.json")
    assert start["operation"] == "VACUUM START"
    assert end["operationParameters"] == {"status": "FAILED"}
    assert "operationMetrics" not in end


def test_history_is_refused_on_catalog_managed_tables(tmp_path):
    root, _ = _table(tmp_path, seed=9, dv=False)
    commit0 = root / LOG / "00000000000000000000.json"
    actions = [json.loads(line) for line in commit0.read_text().splitlines()]
    for a in actions:
        if "protocol" in a:
            a["protocol"] = {"minReaderVersion": 3, "minWriterVersion": 7,
                             "readerFeatures": ["catalogManaged"],
                             "writerFeatures": ["catalogManaged", "inCommitTimestamp"]}
    commit0.write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    before = walk_local(root)
    with pytest.raises(UnsupportedFeatureError, match="catalog-managed"):
        vacuum(str(root), now_ms=NOW_MS, allow_catalog_managed=True, record_history=True,
               dry_run=False)
    assert walk_local(root) == before
    # Without recording it, the permitted VACUUM runs (and leaves the log alone).
    done = vacuum(str(root), now_ms=NOW_MS, allow_catalog_managed=True, dry_run=False)
    assert done.num_files > 0
    assert not (root / LOG / "_last_vacuum_info").exists()


# --------------------------------------------------------------------------------------
# Progress
# --------------------------------------------------------------------------------------


class Recording(Tracker):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[PhaseTotals] = []

    def show(self, totals: PhaseTotals) -> None:
        self.seen.append(totals)

    def final(self, phase: str) -> PhaseTotals:
        return [t for t in self.seen if t.phase == phase and t.done][-1]


def test_listing_and_deletes_report_progress(tmp_path):
    root, table = _table(tmp_path, seed=10, orphans=True, partitioned=True)
    files_below = sum(1 for rel in walk_local(root) if not rel.startswith(LOG))
    progress = Recording()
    result = vacuum(str(root), now_ms=NOW_MS, progress=progress, dry_run=False)
    listed = progress.final(LIST)
    assert listed.pages >= 1 and 0 < listed.files <= files_below
    deleted = progress.final(DELETE)
    assert deleted.files == result.num_files == len(table.garbage)
    assert deleted.bytes == result.size_bytes
    assert deleted.total_files == result.num_files


def test_spilled_listing_reports_pages(tmp_path):
    from delta_ops.maintenance.vacuum import plan_vacuum

    root, _ = _table(tmp_path, seed=11, orphans=True)
    progress = Recording()
    plan = plan_vacuum(Storage.for_uri(str(root)), now_ms=NOW_MS, partition_files=0,
                       progress=progress)
    listed = progress.final(LIST)
    assert listed.pages >= 1 and listed.files >= len(plan.files)


def test_lite_and_inventory_probes_report_progress(tmp_path):
    root, table = _table(tmp_path, seed=12)
    progress = Recording()
    lite = vacuum(str(root), now_ms=NOW_MS, lite=True, dry_run=True, progress=progress)
    probed = progress.final(PROBE)
    assert probed.total_files >= len(lite.files) and probed.files == probed.total_files


def test_log_progress_is_rate_limited():
    now = [0.0]
    lines: list[str] = []
    progress = LogProgress(lines.append, every_s=10, clock=lambda: now[0])
    progress.begin(LIST)
    for _ in range(100):
        now[0] += 0.05  # 5 seconds in all: no line yet
        progress.advance(LIST, pages=1, files=10, bytes=100)
    assert lines == []
    now[0] += 6
    progress.advance(LIST, pages=1, files=10, bytes=100)
    assert len(lines) == 1 and "1,010 files" in lines[0] and "101 pages" in lines[0]
    progress.end(LIST)
    assert len(lines) == 2 and lines[1].startswith("vacuum list done")


def test_dagster_vacuum_logs_progress_and_records_history_by_policy(tmp_path):
    import yaml

    from delta_ops.defs.assets import TableRun, run_vacuum
    from delta_ops.defs.registry import load_registry
    from delta_ops.defs.resources import SparkResource

    # The asset runs at the real time: the table is generated around it.
    now = int(time.time() * 1000)
    root = tmp_path / "t"
    table = generate(13, now, partitioned=False, awkward=True, dv=True, orphans=True)
    table.write_local(root)
    reg = tmp_path / "tables.yaml"
    reg.write_text(yaml.safe_dump({"defaults": {"engine": "local"}, "tables": [{
        "name": "t", "uri": str(root), "vacuum": {"record_history": True},
    }]}))
    lines: list[str] = []
    run = TableRun(load_registry(reg).table("t"), "vacuum", SparkResource(),
                   int(time.time() * 1000))
    result = run_vacuum(run, lines.append)
    assert result.metadata["num_files"] == len(table.garbage)
    assert any(line.startswith("t: vacuum delete done") for line in lines)
    assert any(line.startswith("t: vacuum list done") for line in lines)
    end = _commit_info(root / LOG / "00000000000000000004.json")
    assert end["operation"] == "VACUUM END"
    assert load_registry(reg).table("t").policy.vacuum.record_history is True


# --------------------------------------------------------------------------------------
# The CLI
# --------------------------------------------------------------------------------------

#: The keys of `delta-ops vacuum --json` before this change.
JSON_KEYS = {"table", "version", "files", "num_files", "size_bytes", "directories", "dry_run",
             "retention_hours", "lite", "messages"}


def _cli(args: list[str], *, stderr_tty: bool) -> tuple[int, str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    cmd = [sys.executable, "-m", "delta_ops.cli", *args]
    if not stderr_tty:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
        return proc.returncode, proc.stdout, proc.stderr
    master, slave = pty.openpty()
    # A terminal of 120 columns (a fresh pty has none, and a bar would fit nothing).
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL,
                              env=env, timeout=120)
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
    return proc.returncode, proc.stdout.decode(), b"".join(chunks).decode(errors="replace")


def test_cli_json_keeps_its_keys_and_shows_no_progress(tmp_path):
    root, table = _table(tmp_path, seed=14, orphans=True)
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    code, out, err = _cli(["vacuum", str(root), "--json", "--retention-hours", "0",
                           "--force-retention", "--record-history"], stderr_tty=True)
    assert code == 0, err
    obj = json.loads(out)
    assert set(obj) == JSON_KEYS
    assert obj["num_files"] >= len(table.garbage)
    assert "vacuum delete" not in err and "files/s" not in err
    # On a terminal without --json: bars for the listing and the deletes.
    code, out, err = _cli(["vacuum", str(copy), "--retention-hours", "0",
                           "--force-retention"], stderr_tty=True)
    assert code == 0, err
    assert "vacuum list" in err and "vacuum delete" in err
    assert "deleted" in out


def test_cli_inventory_and_lite_refusal(tmp_path):
    from delta_ops_tests.support.vacuum_tables import spark_inventory, write_parquet

    root, table = _table(tmp_path, seed=15, orphans=True)
    now_iso = "2099-01-01T00:00:00Z"
    inv = write_parquet(spark_inventory(f"file:{root}", walk_local(root)),
                        tmp_path / "inv" / "x.parquet")
    code, out, err = _cli(["vacuum", str(root), "--dry-run", "--json", "--inventory",
                           str(inv), "--inventory-time", now_iso], stderr_tty=False)
    assert code == 1 and "after now" in err
    code, out, err = _cli(["vacuum", str(root), "--dry-run", "--json", "--inventory",
                           str(inv)], stderr_tty=False)
    # The real clock is years past these files: the inventory (dated by its file) is fresh.
    assert code == 0, err
    assert set(json.loads(out)) == JSON_KEYS
    _truncate_log(root)
    code, out, err = _cli(["vacuum", str(root), "--lite", "--dry-run"], stderr_tty=False)
    assert code == 1 and "VACUUM LITE cannot see every file" in err
    code, out, err = _cli(["vacuum", str(root), "--lite", "--dry-run", "--full-if-needed",
                           "--json"], stderr_tty=False)
    assert code == 0, err
    assert any("fell back" in m for m in json.loads(out)["messages"])


def test_an_unreadable_last_vacuum_info_stops_lite_only(tmp_path):
    from delta_ops.errors import CorruptLogError

    root, table = _table(tmp_path, seed=16)
    (root / LOG / "_last_vacuum_info").write_bytes(b"not json")
    with pytest.raises(CorruptLogError, match="_last_vacuum_info is not JSON"):
        vacuum(str(root), now_ms=NOW_MS, lite=True, dry_run=True)
    done = vacuum(str(root), now_ms=NOW_MS, dry_run=False)
    assert set(done.files) == table.garbage
    assert read_last_vacuum_info(Storage.for_uri(str(root))) == 1


def test_spark_engine_reports_progress_and_agrees_with_the_inventory(
    tmp_path, spark_engine  # noqa: F811
):
    from delta_ops_tests.support.vacuum_tables import spark_inventory, write_parquet

    root, table = _table(tmp_path, seed=17, orphans=True, partitioned=True)
    inv = write_parquet(spark_inventory(f"file:{root}", walk_local(root)),
                        tmp_path / "inv" / "x.parquet")
    from delta_ops.maintenance.vacuum import InventorySource

    source = InventorySource(str(inv), inventory_time_ms=NOW_MS - 3_600_000)
    from_inventory = vacuum(str(root), now_ms=NOW_MS, dry_run=True, inventory=source)
    progress = Recording()
    done = vacuum(str(root), now_ms=NOW_MS, engine=spark_engine, progress=progress, dry_run=False)
    assert done.files == from_inventory.files and set(done.files) == table.garbage
    assert progress.final(LIST).files >= len(done.files)  # hidden ones are left later
    assert progress.final(DELETE).files == len(done.files)
    assert progress.final(DELETE).bytes == done.size_bytes


class _Refusing(Storage):
    """The table's real storage, whose deletes of `refused` paths fail as an immutable
    file's do (a permission error from the file system)."""

    __slots__ = ("refused",)

    @classmethod
    def wrap(cls, plain: Storage, refused: set[str]) -> _Refusing:
        out = cls(plain.root, plain.scheme, plain.storage_options, plain._backend, plain._base)
        object.__setattr__(out, "refused", refused)
        return out

    def delete(self, path: str) -> bool:
        if path in self.refused:
            raise StorageError(f"could not delete file {path}: [Errno 1] Operation not "
                               "permitted", file=path)
        return super().delete(path)


def test_a_vacuum_stopped_by_failed_deletes_names_the_table_and_what_it_did(tmp_path):
    # A file that would not go stopped the deletes with the first error: no table, no
    # version, and nothing said how many of the others were deleted (27, 32 or 103 of 200).
    root, _ = _table(tmp_path, seed=8, orphans=True, files=40)
    plan = vacuum(str(root), now_ms=NOW_MS)
    assert len(plan.files) >= 4
    mains = [f for f in plan.files if not f.endswith(".crc")]  # deleted after the sides
    refused = set(mains[1:3])
    storage = _Refusing.wrap(Storage.for_uri(str(root)), refused)
    before = walk_local(root)
    with pytest.raises(StorageError) as info:
        vacuum(storage, now_ms=NOW_MS, dry_run=False)
    err = info.value
    gone = set(before) - set(walk_local(root))
    assert (err.table, err.version) == (plan.table, plan.version)
    sides = len(plan.files) - len(mains)
    assert err.reason.startswith(
        f"{sides} side checksum files were deleted, then 2 of {len(mains)} files were not "
        f"deleted ({len(gone) - sides} were; run again to finish): ")
    assert len(gone) == len(plan.files) - 2 and not gone & refused
    assert all(p in err.reason for p in refused)
    # A side file that will not go stops VACUUM before any data file is tried.
    root2, _ = _table(tmp_path / "2", seed=8, orphans=True, files=40)
    plan2 = vacuum(str(root2), now_ms=NOW_MS)
    side = next(f for f in plan2.files if f.endswith(".crc"))
    with pytest.raises(StorageError) as info:
        vacuum(_Refusing.wrap(Storage.for_uri(str(root2)), {side}), now_ms=NOW_MS,
               dry_run=False)
    untried = len([f for f in plan2.files if not f.endswith(".crc")])
    assert info.value.reason.endswith(
        f"; the plan's other {untried} files were not tried (side checksum files go first)")
    assert all(f in walk_local(root2) for f in plan2.files if not f.endswith(".crc"))
    again = vacuum(str(root), now_ms=NOW_MS, dry_run=False)  # the re-run finishes the job
    assert set(again.files) == refused
    assert not set(plan.files) & set(walk_local(root))

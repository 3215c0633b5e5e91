"""The row-tracking backfill of large tables (issue 15): the streamed path commits exactly
what the loaded path commits.

Every corpus table is backfilled twice from the same copy: once loaded
(`stream_threshold` beyond any table) and once streamed (`stream_threshold=0`, the way
`test_stream.py` forces the streamed state on the whole corpus). The commits (minus
timestamps, transaction ids and the random token of the materialized column names), the row
IDs of every file, the high-water mark and the result must be equal, on the local engine with
several batch sizes and on Spark `local[2]`; a table the loaded path refuses is refused by the
streamed one too, with nothing written. Then what only the streamed path does: its
checkpoints, concurrent writers during a pass, an interrupted run resumed. Memory is measured
by `benchmarks/bench_backfill.py`, never here.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import shutil
import signal
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest

from delta_ops.commit import Transaction, append_files
from delta_ops.commit.row_ids import high_water_mark
from delta_ops.engine.local import LocalEngine
from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
from delta_ops.maintenance.row_tracking import (
    BackfillProgress,
    backfill_row_tracking,
    plan_backfill,
    verify_row_tracking,
)
from delta_ops.maintenance.row_tracking import streamed as streamed_module
from delta_ops.storage import Storage
from delta_ops_tests.support import checkpoint_checks as tc
from delta_ops_tests.support.corpus import copy_corpus_table
from delta_ops_tests.support.engine_pairs import CountingEngine
from delta_ops_tests.support.histories import HistorySpec, StepClock, build_history, write_data_file
from delta_ops_tests.support.row_tracking_checks import assert_backfilled, file_state

LOG = "_delta_log"
LOADED = 10**15  # a stream threshold no table reaches: the loaded path
NO_WAIT = {"sleep": lambda _s: None}
#: What a backfill here takes: no waits, and the protocol upgrade confirmed.
BACKFILL = {**NO_WAIT, "confirm_protocol_upgrade": True}
_TOKEN = re.compile(r"_row-(id|commit-version)-col-[0-9a-f-]{36}")
#: commitInfo fields that differ between any two runs.
_VOLATILE = ("timestamp", "txnId", "inCommitTimestamp")


def _log_files(root: Path) -> list[str]:
    return sorted(p.name for p in (root / LOG).iterdir())


def _commits(root: Path, versions) -> list[list[dict]]:
    """The actions of `versions`, comparable across runs: volatile commitInfo fields dropped
    and the materialized column names' random token replaced."""
    out = []
    for v in versions:
        text = (root / LOG / f"{v:020d}.json").read_text()
        actions = [json.loads(_TOKEN.sub(r"_row-\1-col-TOKEN", line)) for line in text.splitlines()]
        for a in actions:
            for key in _VOLATILE:
                a.get("commitInfo", {}).pop(key, None)
        out.append(actions)
    return out


def _row_ids(storage: Storage) -> tuple[int, list[tuple], int]:
    snap = load_snapshot(storage)
    rows = snap.files.select(["path", "baseRowId", "defaultRowCommitVersion"]).to_pylist()
    ids = sorted((r["path"], r["baseRowId"], r["defaultRowCommitVersion"]) for r in rows)
    return snap.version, ids, high_water_mark(snap.domains)


def _backfill(root: Path, threshold: int, batch_size: int, engine=None, **kwargs):
    """Backfill `root`; the result, or the exception it raised."""
    try:
        return backfill_row_tracking(
            Storage.for_uri(str(root)),
            batch_size=batch_size,
            stream_threshold=threshold,
            engine=engine,
            clock=StepClock(tc.NOW),
            **BACKFILL,
            **kwargs,
        )
    except Exception as exc:  # noqa: BLE001 - compared with the other path's outcome
        return exc


def _same_outcome(a: Path, b: Path, want, got) -> bool:
    """Assert both runs did the same; True when the backfill ran (not refused)."""
    if isinstance(want, Exception):
        assert type(got) is type(want), (want, got)
        assert str(got).replace(str(b), "ROOT") == str(want).replace(str(a), "ROOT")
        assert _log_files(b) == _log_files(a)
        return False
    assert not isinstance(got, Exception), got
    assert got.streamed and not want.streamed
    plain = {"table", "streamed", "checkpoints"}
    assert {k: v for k, v in got.to_dict().items() if k not in plain} == {
        k: v for k, v in want.to_dict().items() if k not in plain
    }
    assert _commits(b, got.versions) == _commits(a, want.versions)
    assert _row_ids(Storage.for_uri(str(b))) == _row_ids(Storage.for_uri(str(a)))
    return True


def _pair(name: str, tmp_path: Path) -> tuple[Path, Path]:
    return (
        copy_corpus_table(name, tmp_path / "loaded"),
        copy_corpus_table(name, tmp_path / "streamed"),
    )


@pytest.mark.parametrize("batch_size", [1, 3, 10_000])
@pytest.mark.parametrize("name", tc.READABLE)
def test_streamed_backfill_equals_loaded_on_the_corpus(name, batch_size, tmp_path):
    a, b = _pair(name, tmp_path)
    deltalake_before = tc._rs_files(b)
    want = _backfill(a, LOADED, batch_size)
    got = _backfill(b, 0, batch_size)
    if not _same_outcome(a, b, want, got):
        return
    storage = Storage.for_uri(str(b))
    snap = load_snapshot(storage)
    if got.enabled and not got.already_enabled:
        assert_backfilled(snap)
    assert verify_row_tracking(snap) == []
    assert got.batches == -(-got.files_backfilled // batch_size)
    if deltalake_before is not None:  # deltalake reads the table after as it did before
        assert tc._rs_files(b) == deltalake_before
    again = _backfill(b, 0, batch_size)
    assert again.already_enabled and again.versions == ()


@pytest.mark.spark
@pytest.mark.parametrize("name", tc.READABLE)
def test_streamed_backfill_on_spark_equals_loaded_local(name, tmp_path, spark_engine):
    """Spark reads the footers (the tables without numRecords): same commits as the loaded
    path on the local engine."""
    a, b = _pair(name, tmp_path)
    engine = CountingEngine(spark_engine)
    want = _backfill(a, LOADED, 3, engine=LocalEngine())
    got = _backfill(b, 0, 3, engine=engine)
    if _same_outcome(a, b, want, got):
        counted = _without_num_records(load_snapshot(Storage.for_uri(str(a)), want.versions[0]))
        assert engine.items["parquet_row_counts"] == (counted if want.files_backfilled else 0)


def _without_num_records(snap) -> int:
    """Live files lacking row IDs whose stats lack numRecords (their footers are read)."""
    from delta_ops.maintenance.row_tracking.plan import lacking_num_records, missing_tables

    return sum(len(lacking_num_records(t)) for t in missing_tables(snap.files))


class _TaskCounter:
    """An engine passing everything through, counting `map_tasks` calls."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.tasks = 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def map_tasks(self, *args, **kwargs):
        self.tasks += 1
        return self.inner.map_tasks(*args, **kwargs)


@pytest.mark.spark
@pytest.mark.parametrize("name", ["spark__delta-0.1.0", "golden__dv-partitioned-with-checkpoint"])
def test_streamed_checkpoints_on_spark(name, tmp_path, spark_engine):
    """With a checkpoint every 2 files, Spark writes the checkpoints: the same commits and
    row IDs as the loaded path, and the table reads back from the last checkpoint."""
    a, b = _pair(name, tmp_path)
    want = _backfill(a, LOADED, 1, engine=LocalEngine())
    engine = _TaskCounter(spark_engine)
    got = _backfill(b, 0, 1, engine=engine, checkpoint_every=2)
    assert _same_outcome(a, b, want, got)
    assert len(got.checkpoints) == got.files_backfilled // 2 > 0
    assert engine.tasks == len(got.checkpoints)  # each written by a Spark task
    snap = load_snapshot(Storage.for_uri(str(b)))
    assert snap.checkpoint_version == got.checkpoints[-1]
    assert_backfilled(snap)


@pytest.mark.parametrize("batch_size", [1, 4])
@pytest.mark.parametrize(
    "name",
    [
        "golden__dv-partitioned-with-checkpoint",  # classic checkpoint, DVs
        "spark__delta-0.1.0",  # footer counts, classic checkpoint, writer version 1
        "golden__v2-checkpoint-parquet",  # V2: the checkpoints follow the table's kind
        "golden__multi-part-checkpoint",
    ],
)
def test_streamed_checkpoints_every_n_files(name, batch_size, tmp_path):
    a, b = _pair(name, tmp_path)
    want = _backfill(a, LOADED, batch_size)
    got = _backfill(b, 0, batch_size, checkpoint_every=3)
    assert _same_outcome(a, b, want, got)
    # A checkpoint once 3 or more files were recommitted since the last one, at that version.
    expected, since = [], 0
    batch_versions = got.versions[1:-1] if got.protocol_upgraded else got.versions[:-1]
    for v, adds in zip(batch_versions, _commits(b, batch_versions), strict=True):
        since += sum("add" in x for x in adds)
        if since >= 3:
            expected.append(v)
            since = 0
    assert list(got.checkpoints) == expected and expected
    storage = Storage.for_uri(str(b))
    for v in got.checkpoints:
        assert load_snapshot(storage, v).checkpoint_version == v
    snap = load_snapshot(storage)
    assert snap.checkpoint_version == got.checkpoints[-1]
    assert_backfilled(snap)
    assert file_state(snap) == file_state(load_snapshot(Storage.for_uri(str(a))))


def test_the_streamed_path_never_holds_the_files(tmp_path, monkeypatch):
    """Every snapshot it loads is streamed, and every transaction plans on a snapshot
    holding only its batch."""
    root = copy_corpus_table("spark__table-with-dv-large", tmp_path / "t")
    loads, planned = [], []
    real_load = streamed_module.load_snapshot
    real_commit = streamed_module.commit_batch

    def load(*args, **kwargs):
        snap = real_load(*args, **kwargs)
        loads.append(snap.streamed)
        return snap

    def commit(snap, rows, *args, **kwargs):
        planned.append((snap.files.num_rows, rows.num_rows))
        return real_commit(snap, rows, *args, **kwargs)

    monkeypatch.setattr(streamed_module, "load_snapshot", load)
    monkeypatch.setattr(streamed_module, "commit_batch", commit)
    result = _backfill(root, 0, 5)
    assert result.streamed and result.files_backfilled == 22
    assert loads == [True, True] and len(planned) == 5
    assert all(held == rows <= 5 for held, rows in planned)


def test_streamed_plan_equals_loaded_plan(tmp_path):
    storage = Storage.for_uri(str(copy_corpus_table("spark__table-with-dv-large", tmp_path / "t")))
    loaded = plan_backfill(load_snapshot(storage), batch_size=5, token="tok")
    streamed = plan_backfill(load_snapshot(storage, stream=True), batch_size=5, token="tok")
    assert streamed == loaded and loaded.files_missing == 22


def _history(root: Path, files: int = 6) -> Storage:
    storage = Storage.for_uri(str(root))
    build_history(storage, HistorySpec(steps=(("append", tuple([2] * files), True),)))
    return storage


def _delete(storage: Storage, path: str) -> None:
    snap = load_snapshot(storage)
    row = [r for r in snap.files.to_pylist() if r["path"] == path][0]
    Transaction(storage, operation="DELETE").remove_files(
        [{"path": path, "deletionTimestamp": 1, "dataChange": True, "size": row["size"],
          "baseRowId": row["baseRowId"]}]
    ).commit()


def test_batch_conflicting_with_a_concurrent_delete_is_replanned(tmp_path):
    """A delete of a file of the batch being committed lands first: the commit conflicts,
    the batch is filtered again and committed without it."""
    storage = _history(tmp_path / "t", files=4)
    victim = load_snapshot(storage).files.column("path")[0].as_py()
    calls = []

    def clock() -> int:
        calls.append(1)
        if len(calls) == 2:  # the first batch is about to commit
            _delete(storage, victim)
        return 1_700_000_000_000 + len(calls)

    result = backfill_row_tracking(
        storage, batch_size=3, clock=clock, stream_threshold=0, **BACKFILL
    )
    snap = load_snapshot(storage)
    assert result.streamed and result.conflicts == 1 and result.enabled
    assert victim not in snap.files.column("path").to_pylist()
    assert result.files_backfilled == 3 and result.batches == 2 and snap.num_files == 3
    assert_backfilled(snap)


def test_a_file_deleted_during_the_pass_leaves_its_later_batch(tmp_path):
    """A concurrent delete of a file of a later batch (after the pass read it): that batch
    goes without it, with no conflict, and the file is not brought back."""
    storage = _history(tmp_path / "t", files=6)
    order = load_snapshot(storage).files.column("path").to_pylist()
    victim = order[4]  # in the third batch of 2
    seen: list[BackfillProgress] = []

    def progress(p: BackfillProgress) -> None:
        seen.append(p)
        if p.step == "batch" and p.batches == 1:
            _delete(storage, victim)

    result = backfill_row_tracking(
        storage, batch_size=2, progress=progress, stream_threshold=0, **BACKFILL
    )
    snap = load_snapshot(storage)
    assert result.streamed and result.conflicts == 0 and result.enabled
    assert result.files_backfilled == 5 and result.batches == 3
    assert victim not in snap.files.column("path").to_pylist()
    assert snap.num_files == 5
    assert_backfilled(snap)


def test_concurrent_appends_during_a_streamed_backfill(tmp_path):
    """Appends between batches: two by a writer that assigns row IDs, one by a careless
    writer that commits an add without them after the upgrade. Every file ends with row
    IDs, none is lost, and the next round's survey picks up the careless one."""
    storage = _history(tmp_path / "t", files=5)
    appended: list[str] = []

    def progress(p: BackfillProgress) -> None:
        if len(appended) >= 3 or p.step != "batch":
            return
        add = write_data_file(storage, rows=2, start_id=1000 + len(appended), stats=False)
        if len(appended) == 1:
            version = load_snapshot(storage).version + 1
            lines = [{"commitInfo": {"operation": "WRITE"}}, {"add": add}]
            storage.put_if_absent(
                f"{LOG}/{version:020d}.json", b"\n".join(orjson.dumps(x) for x in lines) + b"\n"
            )
        else:
            append_files(storage, [add], **NO_WAIT)
        appended.append(add["path"])

    result = backfill_row_tracking(
        storage, batch_size=2, progress=progress, stream_threshold=0, **BACKFILL
    )
    snap = load_snapshot(storage)
    assert result.streamed and result.enabled
    assert set(appended) <= set(snap.files.column("path").to_pylist())
    assert snap.num_files == 8 and result.files_backfilled == 6
    assert_backfilled(snap)


def _interrupted(root: str, at: int) -> None:
    """Child process: a streamed backfill killed after its `at`-th commit."""
    done = [0]

    def progress(_p: BackfillProgress) -> None:
        done[0] += 1
        if done[0] == at:
            os.kill(os.getpid(), signal.SIGKILL)

    backfill_row_tracking(
        Storage.for_uri(root), batch_size=2, progress=progress, stream_threshold=0,
        checkpoint_every=3, clock=StepClock(tc.NOW), **BACKFILL,
    )


@pytest.mark.parametrize("at", [1, 2, 3, 4])
def test_an_interrupted_streamed_backfill_resumes(tmp_path, at):
    """Killed after the upgrade or a batch (and around its checkpoints), a re-run ends in the
    row IDs an uninterrupted run gives."""
    template = tmp_path / "template"
    _history(template, files=7)
    reference = tmp_path / "reference"
    shutil.copytree(template, reference)
    _backfill(reference, LOADED, 2)
    root = tmp_path / "t"
    shutil.copytree(template, root)
    child = multiprocessing.get_context("fork").Process(target=_interrupted, args=(str(root), at))
    child.start()
    child.join(60)
    assert child.exitcode == -signal.SIGKILL
    result = _backfill(root, 0, 2, checkpoint_every=3)
    assert result.streamed and result.enabled
    assert _row_ids(Storage.for_uri(str(root))) == _row_ids(Storage.for_uri(str(reference)))
    assert_backfilled(load_snapshot(Storage.for_uri(str(root))))


def test_footer_counts_are_read_before_anything_is_written(tmp_path, monkeypatch):
    """Streamed, a table whose stats lack numRecords has its footers read in chunks during
    the survey (here 2 per Engine call) and recorded in the recommits' stats."""
    monkeypatch.setattr(streamed_module, "FOOTER_CHUNK", 2)
    storage = Storage.for_uri(str(tmp_path / "t"))
    build_history(storage, HistorySpec(steps=(("append", (5, 0, 7, 3, 1), False),)))
    engine = CountingEngine(LocalEngine())
    result = backfill_row_tracking(
        storage, batch_size=2, engine=engine, stream_threshold=0, **BACKFILL
    )
    assert result.streamed and result.files_backfilled == 5
    assert engine.calls["parquet_row_counts"] == 3 and engine.items["parquet_row_counts"] == 5
    snap = load_snapshot(storage)
    for row in snap.files.to_pylist():
        with storage.open_input(row["path"]) as fh:
            real = pq.ParquetFile(fh).metadata.num_rows
        assert orjson.loads(row["stats"])["numRecords"] == real
    assert result.high_water_mark == 15
    assert_backfilled(snap)


@pytest.mark.parametrize("checkpoint_every", [None, 2])
@pytest.mark.parametrize("name", ["golden__dv-partitioned-with-checkpoint", "spark__delta-0.1.0"])
def test_cli_streamed_backfill(name, checkpoint_every, tmp_path, monkeypatch):
    """`delta-ops row-tracking backfill` with the threshold at 0, in a fresh process:
    streamed, with stats or footers; without checkpoints it imports no pandas, Spark or
    Dagster. (`--checkpoint-every 2`: checkpointed; the checkpoint writer's read-back digest
    imports pandas, which this test does not judge.)"""
    from delta_ops.log.read_options import STREAM_THRESHOLD_ENV as THRESHOLD_ENV
    from delta_ops_tests.support.fresh_interpreter import _run

    root = copy_corpus_table(name, tmp_path / "t")
    monkeypatch.setenv(THRESHOLD_ENV, "0")
    extra = [] if checkpoint_every is None else ["--checkpoint-every", str(checkpoint_every)]
    out = _run(
        "import contextlib, io, json\n"
        "from delta_ops.cli import main\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        "    code = main(['row-tracking', 'backfill', sys.argv[1], '--json', '--quiet',\n"
        "                 '--batch-size', '2', '--confirm-protocol-upgrade', *sys.argv[2:]])\n"
        "print(code, json.dumps(json.loads(buf.getvalue())))\n"
        "print(loaded(('pandas', 'pyspark', 'dagster')))\n",
        str(root),
        *extra,
    )
    code, text = out[0].split(" ", 1)
    obj = json.loads(text)
    assert code == "0" and obj["streamed"] and obj["enabled"] and obj["files_backfilled"]
    snap = load_snapshot(Storage.for_uri(str(root)))
    assert_backfilled(snap)
    if checkpoint_every is None:
        assert obj["checkpoints"] == [] and out[1] == "[]"
    else:
        assert len(obj["checkpoints"]) == obj["files_backfilled"] // 2 > 0
        assert snap.checkpoint_version == obj["checkpoints"][-1]

"""The COMPUTE STATS operation: what it plans, what it commits (as Spark writes it), batches,
concurrent writers (a removed file is never resurrected, a changed deletion vector is
kept), the `delta-ops stats` command, the `DeltaTable` verb, and end to end on corpus
copies (`deltalake` reads the same rows; our snapshot and checksum agree with the
reference replay)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

import delta_ops
from delta_ops.cli import main
from delta_ops.commit import Transaction, append_files
from delta_ops.layout.stats import _paths_and_stats, compute_stats
from delta_ops.log import load_snapshot
from delta_ops.maintenance.checksum import compute_checksum
from delta_ops.storage import Storage
from delta_ops_tests.support.dv_writer import inline_descriptor
from delta_ops_tests.support.histories import StepClock, new_table, write_data_file
from delta_ops_tests.support.oracle import oracle_replay
from delta_ops_tests.support.stats_compare import strip_stats


def _table(tmp_path: Path, *, files: int = 5, stats: bool = False, **features) -> Storage:
    storage = Storage.for_uri(str(tmp_path / "t"))
    new_table(storage, clock=StepClock(), **features)
    for i in range(files):
        add = write_data_file(storage, rows=3, start_id=10 * i, stats=stats)
        append_files(storage, [add], clock=StepClock())
    return storage


def _log(storage: Storage, version: int) -> list[dict]:
    text = storage.read_text(f"_delta_log/{version:020d}.json")
    return [json.loads(line) for line in text.splitlines()]


def _live(storage: Storage) -> dict[str, dict]:
    return {r["path"]: r for r in load_snapshot(storage).files.to_pylist()}


def test_a_dry_run_plans_and_writes_nothing(tmp_path):
    storage = _table(tmp_path)
    version = load_snapshot(storage).version
    result = compute_stats(storage)
    assert result.dry_run and result.files_planned == result.files_missing_stats == 5
    assert result.versions == () and result.files_updated == 0
    assert load_snapshot(storage).version == version


def test_the_commit_is_sparks_compute_stats_with_re_adds_kept_as_they_were(tmp_path):
    storage = _table(tmp_path, files=2, row_tracking=True, deletion_vectors=True)
    before = _live(storage)
    result = compute_stats(storage, dry_run=False)
    assert result.files_updated == 2 and len(result.versions) == 1
    actions = _log(storage, result.versions[0])
    info = actions[0]["commitInfo"]
    assert info["operation"] == "COMPUTE STATS"
    assert info["operationParameters"] == {"predicate": '["true"]'}
    assert info["isolationLevel"] == "SnapshotIsolation"
    assert not info.get("operationMetrics")
    adds = [a["add"] for a in actions if "add" in a]
    assert len(adds) == 2 and not [a for a in actions if "remove" in a]
    for add in adds:
        old = before[add["path"]]
        assert add["dataChange"] is False
        assert add["partitionValues"] == dict(old["partitionValues"])  # Arrow: pairs
        for key in ("size", "modificationTime", "baseRowId", "defaultRowCommitVersion"):
            assert add[key] == old[key], key
        stats = json.loads(add["stats"])
        assert stats["numRecords"] == 3 and stats["tightBounds"] is True
        assert stats["nullCount"] == {"id": 0, "value": 0}


def test_the_plan_reads_paths_and_stats_a_slice_at_a_time_in_order(tmp_path):
    storage = _table(tmp_path, files=5, stats=True)
    files = load_snapshot(storage).files
    whole = list(zip(files.column("path").to_pylist(), files.column("stats").to_pylist(),
                     strict=True))
    assert len(whole) == 5 and all(text for _, text in whole)
    for rows in (1, 2, 5, 7):
        assert list(_paths_and_stats(files, rows)) == whole


def test_batches_commit_separately_and_a_rerun_has_nothing_left(tmp_path):
    storage = _table(tmp_path, files=5)
    seen = []
    result = compute_stats(storage, dry_run=False, batch_size=2, progress=seen.append)
    assert len(result.versions) == 3 and result.files_updated == 5
    assert [p.files_updated for p in seen] == [2, 4, 5]
    assert [p.version for p in seen] == list(result.versions)
    again = compute_stats(storage, dry_run=False)
    assert again.files_planned == 0 and again.versions == ()


def test_files_with_fewer_columns_than_the_table_asks_for_are_stale(tmp_path):
    storage = _table(tmp_path, files=2, configuration={"delta.dataSkippingNumIndexedCols": "1"})
    compute_stats(storage, dry_run=False)
    assert all(json.loads(a["stats"])["nullCount"] == {"id": 0} for a in _live(storage).values())
    txn = Transaction(storage, operation="SET TBLPROPERTIES")
    txn.update_configuration({"delta.dataSkippingNumIndexedCols": "32"})
    txn.commit()
    plan = compute_stats(storage)
    assert plan.files_stale_stats == 2 and plan.files_missing_stats == 0
    compute_stats(storage, dry_run=False)
    for add in _live(storage).values():
        assert json.loads(add["stats"])["nullCount"] == {"id": 0, "value": 0}
    assert compute_stats(storage).files_planned == 0
    assert compute_stats(storage, recompute_all=True).files_planned == 2


def test_a_file_removed_before_its_batch_is_not_resurrected(tmp_path):
    storage = _table(tmp_path, files=4)
    paths = sorted(_live(storage))
    victim = compute_stats(storage).paths[-1]

    def remove_victim(progress):
        if progress.files_updated == 2:  # after the first batch: remove a later file
            snap = load_snapshot(storage)
            add = _live(storage)[victim]
            txn = Transaction(storage, snapshot=snap, operation="DELETE")
            txn.remove_files([{"path": victim, "dataChange": True, "size": add["size"],
                               "partitionValues": {}, "deletionTimestamp": 1}])
            txn.commit()

    result = compute_stats(storage, dry_run=False, batch_size=2, progress=remove_victim)
    assert result.files_updated == 3 and result.files_skipped == 1
    assert sorted(_live(storage)) == sorted(p for p in paths if p != victim)


class _RacingClock:
    """A commit clock that lets a concurrent writer commit first, once: the race between
    our refreshed plan and our put-if-absent."""

    def __init__(self, race):
        self.race = race
        self.raced = False
        self.ms = 1_800_000_000_000

    def __call__(self) -> int:
        if not self.raced:
            self.raced = True
            self.race()
        self.ms += 1000
        return self.ms


def test_a_concurrent_remove_during_the_commit_conflicts_and_wins(tmp_path):
    storage = _table(tmp_path, files=3)
    victim = sorted(_live(storage))[1]

    def remove():
        add = _live(storage)[victim]
        txn = Transaction(storage, operation="DELETE")
        txn.remove_files([{"path": victim, "dataChange": True, "size": add["size"],
                           "partitionValues": {}, "deletionTimestamp": 1}])
        txn.commit()

    result = compute_stats(storage, dry_run=False, clock=_RacingClock(remove))
    assert result.conflicts == 1 and result.files_skipped == 1 and result.files_updated == 2
    live = _live(storage)
    assert victim not in live and len(live) == 2
    assert all(json.loads(a["stats"])["numRecords"] == 3 for a in live.values())


def test_a_concurrent_deletion_vector_is_kept_and_the_stats_follow_it(tmp_path):
    storage = _table(tmp_path, files=2, deletion_vectors=True)
    target = sorted(_live(storage))[0]

    def delete_rows():
        add = dict(_live(storage)[target])
        add = {k: v for k, v in add.items() if v is not None}
        dv = inline_descriptor([0, 1]).to_dict()
        txn = Transaction(storage, operation="DELETE")
        txn.remove_files([{"path": target, "dataChange": True, "size": add["size"],
                           "partitionValues": {}, "deletionTimestamp": 1}])
        txn.add_files([{**add, "partitionValues": {}, "deletionVector": dv,
                        "dataChange": True}])
        txn.commit()

    result = compute_stats(storage, dry_run=False, clock=_RacingClock(delete_rows))
    assert result.conflicts == 1 and result.files_updated == 2
    add = _live(storage)[target]
    assert add["deletionVector"]["cardinality"] == 2  # the DELETE's DV, not the old state
    stats = json.loads(add["stats"])
    assert stats["numRecords"] == 3 and stats["tightBounds"] is True  # physical count
    # Rows 0 and 1 are deleted: the bounds are those of the one valid row left.
    assert stats["minValues"]["id"] == stats["maxValues"]["id"]
    assert stats["minValues"]["id"] % 10 == 2


def test_the_deltatable_verb_is_the_operation(tmp_path):
    storage = _table(tmp_path, files=1)
    table = delta_ops.DeltaTable(str(tmp_path / "t"))
    assert table.compute_stats().files_planned == 1
    result = table.compute_stats(dry_run=False)
    assert isinstance(result, delta_ops.StatsResult) and result.files_updated == 1
    assert delta_ops.compute_stats(storage).files_planned == 0


def test_the_command_line(tmp_path, capsys):
    _table(tmp_path, files=3)
    root = str(tmp_path / "t")
    assert main(["stats", root, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "3 without statistics" in out and "would compute statistics for 3 files" in out
    assert main(["stats", root, "--json", "--batch-size", "2"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["files_updated"] == 3 and len(obj["versions"]) == 2 and not obj["dry_run"]
    assert main(["stats", root, "--all"]) == 0
    assert "computed statistics for 3 files" in capsys.readouterr().out
    assert main(["stats", root]) == 0
    assert "nothing to do" in capsys.readouterr().out


# ---- end to end on corpus copies -------------------------------------------------------------

E2E_TABLES = (
    "basic_append", "basic_partitioned", "column_mapping", "deletion_vectors", "nested_types",
    "timestamp_ntz", "cdf", "check_constraints", "generated_columns", "multi_partitioned",
    "partitioned_with_null", "with_checkpoint", "all_primitive_types", "no_stats",
    "golden__dv-with-columnmapping", "golden__dv-partitioned-with-checkpoint",
    "golden__table-with-columnmapping-mode-id", "golden__v2-checkpoint-parquet",
    "golden__basic-with-inserts-deletes-checkpoint", "golden__data-skipping-basic-stats-all-types",
)


def _deltalake_rows(root: Path) -> list[str]:
    import deltalake

    dt_ = deltalake.DeltaTable(str(root))
    data = pa.table(
        deltalake.QueryBuilder().register("t", dt_).execute("select * from t").read_all()
    )
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in data.to_pylist())


@pytest.mark.parametrize("name", E2E_TABLES)
def test_end_to_end_on_a_corpus_copy(table_copy, name):
    root = table_copy(name)
    storage = Storage.for_uri(str(root))
    rows = _deltalake_rows(root)
    strip_stats(storage)
    result = compute_stats(storage, dry_run=False, recompute_all=True)
    assert result.files_updated == result.files_total > 0
    assert _deltalake_rows(root) == rows
    ours = load_snapshot(storage)
    reference = oracle_replay(root)
    assert ours.version == reference.version
    mine = {r["path"]: r for r in ours.files.to_pylist()}
    theirs = {a["path"]: a for a in reference.files.values()}
    assert set(mine) == set(theirs)
    for path, add in mine.items():
        assert json.loads(add["stats"]) == json.loads(theirs[path]["stats"])
        assert add["size"] == theirs[path]["size"]
    checksum = compute_checksum(storage)
    assert checksum["numFiles"] == len(theirs)
    assert checksum["tableSizeBytes"] == sum(a["size"] for a in theirs.values())
    assert checksum["metadata"]["id"] == reference.metadata["id"]


@pytest.mark.s3
def test_compute_stats_on_s3(s3_server):
    from delta_ops_tests.support.histories import HistorySpec, build_history, table_rows

    storage = Storage.for_uri(s3_server.fresh_uri("stats"), s3_server.storage_options)
    spec = HistorySpec(partitioned=True, deletion_vectors=True,
                       steps=(("append", (2, 3, 4), False), ("dv", 1, (0,)), ("remove", 0)))
    build_history(storage, spec)
    rows = table_rows(storage)
    result = compute_stats(storage, dry_run=False, batch_size=1)
    assert result.files_updated == result.files_planned == 2 and len(result.versions) == 2
    assert table_rows(storage) == rows
    for add in _live(storage).values():
        stats = json.loads(add["stats"])
        assert stats["tightBounds"] is True and stats["numRecords"] in (2, 3, 4)


@pytest.mark.parametrize("value", [
    "a" * 32 + "\U0001F600",           # a character beyond U+FFFF right after the cut
    "0" * 27 + "\U00010000" * 3,       # a cut through a surrogate pair
    "b" * 40,
], ids=["beyond the BMP", "surrogate pair", "ascii"])
def test_recomputed_string_bounds_keep_deltalake_finding_the_row(tmp_path, value):
    """deltalake skips a file whose string max is below the value it looks for. With
    delta-spark's earlier max (32 units, then U+FFFD) `stats` made the first two
    values' rows disappear from `where s = value` through deltalake (1 row before, 0 after:
    found by a probe comparing deltalake before and after)."""
    import deltalake

    root = str(tmp_path / "t")
    deltalake.write_deltalake(root, pa.table({"s": [value]}))

    def matching() -> int:
        query = deltalake.QueryBuilder().register("t", deltalake.DeltaTable(root))
        escaped = value.replace("'", "''")
        return query.execute(f"select count(*) as n from t where s = '{escaped}'").read_all(
        ).column("n")[0].as_py()

    assert matching() == 1
    compute_stats(Storage.for_uri(root), recompute_all=True, dry_run=False)
    assert matching() == 1
    (add,) = [a["add"] for a in _log(Storage.for_uri(root), 1) if "add" in a]
    bounds = json.loads(add["stats"])
    assert bounds["minValues"]["s"].encode() <= value.encode() <= (
        bounds["maxValues"]["s"].encode())

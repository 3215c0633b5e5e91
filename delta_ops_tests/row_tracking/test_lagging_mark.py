"""Fresh row IDs on a table whose recorded high-water mark lags its own files.

The spec ("Row Tracking"): "Writers must never commit duplicate Row IDs in the table in any
version", and the `delta.rowTracking` domain's `rowIdHighWaterMark` "must always be equal to
or greater than the highest fresh Row ID committed so far". Another writer may have broken
the second rule: its files hold IDs above the mark it recorded, or it recorded none, or
removed the domain. Before the fix the backfill (loaded and streamed) and OPTIMIZE started
fresh IDs above that mark and committed IDs a live file already held. Now every commit
starts above the highest ID a live file or tombstone holds as well.
"""

from __future__ import annotations

import json

import orjson
import pytest

from delta_ops.commit.row_ids import ROW_TRACKING_DOMAIN, max_assigned_row_id, row_id_problems
from delta_ops.commit.transaction import Transaction
from delta_ops.errors import InvalidCommitError
from delta_ops.layout.optimize import optimize
from delta_ops.log import load_snapshot
from delta_ops.maintenance.fsck import fsck
from delta_ops.maintenance.row_tracking import backfill_row_tracking
from delta_ops.storage import Storage
from delta_ops_tests.support.histories import HistorySpec, build_history, write_data_file

NO_WAIT = {"sleep": lambda _s: None}
#: What a backfill here takes: no waits, and the protocol upgrade confirmed.
BACKFILL = {**NO_WAIT, "confirm_protocol_upgrade": True}
LOADED, STREAMED = 10**15, 0  # stream thresholds: never, always


def _commit(storage: Storage, *actions: dict) -> None:
    version = load_snapshot(storage).version + 1
    lines = [{"commitInfo": {"operation": "WRITE", "timestamp": 1}}, *actions]
    storage.put_if_absent(f"_delta_log/{version:020d}.json",
                          b"".join(orjson.dumps(a) + b"\n" for a in lines))


def _mark(value: int | None, *, removed: bool = False) -> dict:
    config = "" if value is None else json.dumps({"rowIdHighWaterMark": value})
    return {"domainMetadata": {"domain": ROW_TRACKING_DOMAIN, "configuration": config,
                               "removed": removed}}


def _careless_table(storage: Storage, shape: str) -> None:
    """rowTracking supported; a file `[100, 105)` with IDs, one file without; the mark
    recorded as 2 (`lagging`), tombstoned (`removed`) or never (`absent`)."""
    build_history(storage, HistorySpec(steps=()))
    Transaction(storage).add_features(["rowTracking"]).commit()
    held = write_data_file(storage, rows=5)
    held.update(baseRowId=100, defaultRowCommitVersion=1)
    bare = write_data_file(storage, rows=4, start_id=5)
    marks = {"lagging": [_mark(2)], "removed": [_mark(2, removed=True)], "absent": []}
    _commit(storage, {"add": held}, {"add": bare}, *marks[shape])


def _assert_valid(storage: Storage, at_least: int = 104) -> None:
    snap = load_snapshot(storage)
    mark = json.loads(snap.domains[ROW_TRACKING_DOMAIN].configuration)["rowIdHighWaterMark"]
    assert row_id_problems(snap.files, high_water_mark=mark) == []
    assert mark >= max_assigned_row_id(snap.files) >= at_least


@pytest.mark.parametrize("threshold", [LOADED, STREAMED], ids=["loaded", "streamed"])
@pytest.mark.parametrize("shape", ["lagging", "removed", "absent"])
def test_backfill_starts_above_the_ids_files_hold(tmp_path, shape, threshold):
    storage = Storage.for_uri(str(tmp_path / "t"))
    _careless_table(storage, shape)
    result = backfill_row_tracking(storage, stream_threshold=threshold, **BACKFILL)
    assert result.enabled and result.files_backfilled == 1
    snap = load_snapshot(storage)
    assert sorted(snap.files.column("baseRowId").to_pylist()) == [100, 105]
    assert result.high_water_mark == 108
    _assert_valid(storage)


def test_optimize_starts_above_the_ids_files_hold(tmp_path):
    """OPTIMIZE on a row-tracked table whose mark lags: the rewritten file's fresh IDs
    must not overlap the file it leaves alone (a large one, above the target size)."""
    storage = Storage.for_uri(str(tmp_path / "t"))
    build_history(storage, HistorySpec(steps=()))
    Transaction(storage).add_features(["rowTracking"]).commit()
    big = write_data_file(storage, rows=20_000)
    big.update(baseRowId=0, defaultRowCommitVersion=1)
    small = [write_data_file(storage, rows=2, start_id=30_000 + 2 * i) for i in range(2)]
    for i, add in enumerate(small):
        add.update(baseRowId=20_000 + 2 * i, defaultRowCommitVersion=1)
    _commit(storage, {"add": big}, *({"add": a} for a in small), _mark(3))
    optimize(str(storage.root), target_size=big["size"] - 1, min_files=2,
             dry_run=False)
    snap = load_snapshot(storage)
    assert snap.files.num_rows == 2
    _assert_valid(storage)


def test_fsck_reports_ids_above_the_mark_and_overlaps(tmp_path):
    """The careless writer's table itself: fsck says what is wrong (before, nothing)."""
    storage = Storage.for_uri(str(tmp_path / "t"))
    _careless_table(storage, "lagging")
    found = [p for p in fsck(str(storage.root)).problems if p.code == "row_ids"]
    assert [(p.severity, p.file) for p in found] == [("error", found[0].file)]
    assert "exceed the high-water mark 2" in found[0].reason
    # Another writer's file reusing the IDs 100..101: both problems, each named.
    twin = write_data_file(storage, rows=2, start_id=20)
    twin.update(baseRowId=101, defaultRowCommitVersion=3)
    _commit(storage, {"add": twin})
    reasons = [p.reason for p in fsck(str(storage.root)).problems if p.code == "row_ids"]
    assert any("overlaps" in r and twin["path"] in r for r in reasons), reasons
    # The backfill never adds to it (its fresh IDs start above every held one), and does
    # not enable row tracking over the overlap.
    with pytest.raises(InvalidCommitError, match="overlaps"):
        backfill_row_tracking(storage, **BACKFILL)
    bare = [r for r in load_snapshot(storage).files.to_pylist() if r["baseRowId"] > 101]
    assert [r["baseRowId"] for r in bare] == [105]


def _two_files(storage: Storage, held: dict, *, feature: bool) -> None:
    """Two files: one without row IDs, one holding `held` (baseRowId and maybe
    defaultRowCommitVersion); the rowTracking feature supported or not, no mark."""
    build_history(storage, HistorySpec(steps=()))
    if feature:
        Transaction(storage).add_features(["rowTracking"]).commit()
    bare = write_data_file(storage, rows=5)
    other = write_data_file(storage, rows=5, start_id=5)
    other.update(held)
    _commit(storage, {"add": bare}, {"add": other})


@pytest.mark.parametrize(("held", "feature"), [
    ({"baseRowId": 0}, True),  # IDs without a commit version: recommitted in the batch
    ({"baseRowId": 0, "defaultRowCommitVersion": 0}, False),  # fields without the feature
])
def test_ids_files_hold_count_whatever_else_they_lack(tmp_path, held, feature):
    storage = Storage.for_uri(str(tmp_path / "t"))
    _two_files(storage, held, feature=feature)
    result = backfill_row_tracking(storage, **BACKFILL)
    assert result.enabled
    assert sorted(load_snapshot(storage).files.column("baseRowId").to_pylist()) == [0, 5]
    _assert_valid(storage, at_least=9)


def test_enabling_is_refused_when_held_ids_overlap(tmp_path):
    """Two files already holding the same IDs (another writer's, before the feature):
    row tracking is not enabled over them, and the refusal names both."""
    storage = Storage.for_uri(str(tmp_path / "t"))
    build_history(storage, HistorySpec(steps=()))
    files = [write_data_file(storage, rows=5, start_id=5 * i) for i in range(2)]
    for f in files:
        f.update(baseRowId=0, defaultRowCommitVersion=0)
    _commit(storage, *({"add": f} for f in files))
    with pytest.raises(InvalidCommitError, match="overlaps") as raised:
        backfill_row_tracking(storage, **BACKFILL)
    assert all(f["path"] in str(raised.value) for f in files)
    assert not load_snapshot(storage).table_configuration.is_row_tracking_enabled


def test_a_suspended_table_is_refused_with_nothing_written(tmp_path):
    storage = Storage.for_uri(str(tmp_path / "t"))
    build_history(storage, HistorySpec(steps=(("append", (2,), True),)))
    txn = Transaction(storage).add_features(["rowTracking"])
    md = dict(txn.snapshot.metadata.raw)
    md["configuration"] = {**md.get("configuration", {}), "delta.rowTrackingSuspended": "true"}
    txn.set_metadata(md).commit()
    version = load_snapshot(storage).version
    with pytest.raises(InvalidCommitError, match="suspended"):
        backfill_row_tracking(storage, **BACKFILL)
    assert load_snapshot(storage).version == version


def test_a_commit_on_a_lagging_table_records_the_mark_it_used(tmp_path):
    """A commit that assigns no fresh ID still records the mark the files' IDs reach when
    the recorded one lags, so the next writer does not start below them."""
    storage = Storage.for_uri(str(tmp_path / "t"))
    _careless_table(storage, "lagging")
    snap = load_snapshot(storage)
    bare = next(r for r in snap.files.to_pylist() if r["baseRowId"] is None)
    Transaction(storage, operation="DELETE").remove_files(
        [{"path": bare["path"], "deletionTimestamp": 1, "dataChange": True}]).commit()
    assert json.loads(load_snapshot(storage).domains[ROW_TRACKING_DOMAIN].configuration) \
        == {"rowIdHighWaterMark": 104}

"""Databricks-form log compactions read like their commits on every path (issue 13,
first acceptance point): VACUUM's referenced set and its plan, checkpoints of every kind
(and deltalake reading them), the `.crc` writer and the row-tracking backfill.

The table is `compaction_fixtures.build_compaction_table` (removes and re-adds of one path
with and without deletion vectors, OPTIMIZE, a file removed at v7 and re-added at v9,
superseded txns and domains). Two copies are compared: one read from its commits alone
(the reference) and one with Databricks' unreconciled, newest-first compactions 1..5 and
6..12. In the window 6..12 the re-added file E has the lines `add E` (v9) above
`remove E` (v7): read last-line-wins, E is a tombstone, and a VACUUM past its retention
deletes a live file. The wrong rule (the test-only switch) is run too, to show that each
path really reads the compaction files.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pyarrow as pa
import pytest
from deltalake import DeltaTable as RsTable

from delta_ops.commit import Transaction
from delta_ops.errors import CrossCheckError
from delta_ops.log.replay.references import (
    _commit_rows_columnar,
    _commit_rows_python,
    reference_rows,
)
from delta_ops.log.replay.references import read_deltas as _read_deltas
from delta_ops.log.segment.log_segment import build_log_segment
from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
from delta_ops.maintenance.checkpoint import write_checkpoint
from delta_ops.maintenance.checksum import read_checksum, write_checksum
from delta_ops.maintenance.row_tracking import backfill_row_tracking
from delta_ops.maintenance.vacuum import (
    file_references,
    plan_vacuum,
)
from delta_ops.protocol.filenames import commit_name, compaction_name
from delta_ops.storage import Storage
from delta_ops_tests.support.compaction_fixtures import (
    CompactionTable,
    snapshot_state,
    write_databricks_compaction,
)
from delta_ops_tests.support.compaction_rule import last_line_wins
from delta_ops_tests.support.histories import START_MS

WINDOWS = [(1, 5), (6, 12)]
LATEST = 12
FAR_FUTURE = START_MS + 10 * 365 * 86_400_000  # every tombstone and file is old by then


def _copy(template: CompactionTable, dest: Path, *, compactions: bool) -> Storage:
    shutil.copytree(template.root, dest)
    storage = Storage.for_uri(str(dest))
    if compactions:
        for start, end in WINDOWS:
            write_databricks_compaction(storage, start, end)
    return storage


@pytest.fixture
def pair(template, tmp_path) -> tuple[Storage, Storage]:
    """(commits only, with Databricks compactions) copies of the generated table."""
    return (
        _copy(template, tmp_path / "commits", compactions=False),
        _copy(template, tmp_path / "compacted", compactions=True),
    )


@pytest.fixture
def wrong_rule(monkeypatch):
    def on() -> None:
        last_line_wins(monkeypatch)

    return on


def _segment_uses_compactions(storage: Storage) -> None:
    segment = build_log_segment(storage, LATEST)
    got = [(d.start, d.end) for d in segment.deltas if d.is_compaction]
    assert got == WINDOWS, f"the segment does not read the compactions: {segment.deltas}"


def _names(values) -> list[str]:
    return sorted(Path(str(v)).name for v in values)


# ---- VACUUM ---------------------------------------------------------------------------------


@pytest.mark.parametrize("delete_before", [0, FAR_FUTURE])
@pytest.mark.parametrize("reader", ["columnar", "python"])
def test_vacuum_referenced_set_reads_like_the_commits(pair, monkeypatch, delete_before, reader):
    commits, compacted = pair
    _segment_uses_compactions(compacted)
    if reader == "python":
        # The action-by-action reconciler, as for logs Arrow's JSON reader refuses.
        import delta_ops.log.replay.references as vacuum_module

        monkeypatch.setattr(vacuum_module, "_commit_rows_columnar", _commit_rows_python)

    def refs(storage: Storage):
        segment = build_log_segment(storage, LATEST)
        got = file_references(storage, segment, _read_deltas(storage, segment), delete_before)
        return (
            sorted(got.keep.to_pylist()), sorted(got.expired.to_pylist()),
            sorted(got.written.to_pylist()),
        )

    want, got = refs(commits), refs(compacted)
    assert [_names(x) for x in got] == [_names(x) for x in want]
    keep = _names(got[0])
    live = _names(load_snapshot(commits).files.column("path").to_pylist())
    assert set(live) <= set(keep) and live  # every live data file is kept


def test_vacuum_reconcilers_agree_on_each_compaction(pair):
    """The columnar and the action-by-action reconcilers give the same newest action per
    key for the compacted segment (rows compared whole, newest first)."""
    _, compacted = pair
    segment = build_log_segment(compacted, LATEST)
    blobs = _read_deltas(compacted, segment)
    columnar = _commit_rows_columnar(segment, blobs, compacted.root).sort_by("key")
    python = _commit_rows_python(segment, blobs, compacted.root).sort_by("key")
    assert columnar.to_pylist() == python.to_pylist()
    assert columnar.num_rows > 0


def _plan_names(storage: Storage) -> list[str]:
    plan = plan_vacuum(storage, now_ms=FAR_FUTURE, retention_hours=0, force_retention=True)
    return sorted(plan.files)


def test_vacuum_plan_equals_the_commits_plan_and_keeps_every_live_file(pair):
    commits, compacted = pair
    want = _plan_names(commits)
    got = _plan_names(compacted)
    assert got == want
    live = set(load_snapshot(commits).files.column("path").to_pylist())
    assert not live & set(got)
    # The removed originals of the OPTIMIZE (B, C, D) are what goes; E (re-added) stays.
    assert len(want) >= 3


def test_vacuum_keeps_live_files_even_when_the_compaction_reading_is_wrong(pair, wrong_rule):
    """What this file guards against: last-line-wins makes E a tombstone when the compaction
    files alone are read. VACUUM does not rely on that reading alone: it also reads the
    commits the compactions cover and protects what either reading references, so its plan
    keeps every live file even with the wrong rule. (Only the plan is computed.)"""
    commits, compacted = pair
    live = set(load_snapshot(commits).files.column("path").to_pylist())
    wrong_rule()
    segment = build_log_segment(compacted, LATEST)
    rows = reference_rows(compacted, segment)
    removed = {
        p.rsplit("/", 1)[-1]
        for p, is_add in zip(rows.column("path").to_pylist(), rows.column("is_add").to_pylist(),
                             strict=True)
        if not is_add
    }
    assert removed & {p.rsplit("/", 1)[-1] for p in live}, (
        "the switch did not change the compaction reading: the test proves nothing"
    )
    assert not set(_plan_names(compacted)) & live


# ---- checkpoints of every kind --------------------------------------------------------------

KINDS = [
    ("classic", {}),
    ("multi-part", {"parts": 3}),
    ("v2-classic", {"sidecar_actions": 2}),
    ("v2-uuid", {"sidecar_actions": 2}),
    ("v2-uuid", {"fmt": "json", "sidecar_actions": 0}),
]


def _with_v2(storage: Storage) -> int:
    """Commit support for v2Checkpoint (version 13); the compactions still cover 1..12."""
    return Transaction(storage, operation="UPGRADE PROTOCOL").add_features(
        ["v2Checkpoint"]
    ).commit().version


def _comparable(state: dict) -> dict:
    """What a checkpoint must keep of a state: live files whole, metadata, txns, live
    domains, and the tombstones' paths (a checkpoint's removes may drop stats, and removed
    domains may be left out: spec "Checkpoints")."""
    return {
        "files": state["files"],
        "metadata": state["metadata"],
        "txns": state["txns"],
        "domains": {k: d for k, d in state["domains"].items() if not d["removed"]},
        "tombstones": sorted(orjson.loads(t)["path"] for t in state["tombstones"]),
    }


@pytest.mark.parametrize(("kind", "options"), KINDS)
def test_checkpoint_from_compactions_reads_like_the_commits(pair, tmp_path, kind, options):
    commits, compacted = pair
    version = LATEST
    if kind.startswith("v2"):
        version = _with_v2(commits)
        assert _with_v2(compacted) == version
    _segment_uses_compactions(compacted)
    result = write_checkpoint(compacted, version=version, kind=kind, now_ms=START_MS, **options)
    assert result.cross_check.startswith("passed"), result.cross_check
    want = snapshot_state(load_snapshot(commits, version))
    # The checkpoint alone: compactions and commits up to the checkpoint moved away.
    log = Path(compacted.root.removeprefix("file://")) / "_delta_log"
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    for start, end in WINDOWS:
        (log / compaction_name(start, end)).rename(hidden / compaction_name(start, end))
    for v in range(version):
        (log / commit_name(v)).rename(hidden / commit_name(v))
    snap = load_snapshot(compacted, version)
    assert snap.checkpoint_version == version
    assert _comparable(snapshot_state(snap)) == _comparable(want)
    # deltalake reads the same live files (paths, row counts) from our checkpoint (its
    # metadata only: this deltalake cannot read rows through deletion vectors).
    rs = RsTable(str(log.parent))
    assert rs.version() == version
    actions = pa.table(rs.get_add_actions(flatten=True))
    rs_files = sorted(
        (Path(p).name, n)
        for p, n in zip(
            actions.column("path").to_pylist(), actions.column("num_records").to_pylist(),
            strict=True,
        )
    )
    ours = sorted(
        (Path(r["path"]).name, orjson.loads(r["stats"])["numRecords"])
        for r in snap.files.select(["path", "stats"]).to_pylist()
    )
    assert rs_files == ours


def test_checkpoint_with_the_wrong_rule_is_refused(pair, wrong_rule):
    _, compacted = pair
    log = Path(compacted.root.removeprefix("file://")) / "_delta_log"
    before = sorted(p.name for p in log.iterdir())
    wrong_rule()
    with pytest.raises(CrossCheckError):
        write_checkpoint(compacted, version=LATEST, now_ms=START_MS)
    assert sorted(p.name for p in log.iterdir()) == before


# ---- version checksum -----------------------------------------------------------------------


@pytest.mark.parametrize("method", ["full", "auto"])
def test_checksum_from_compactions_equals_the_commits(pair, method):
    commits, compacted = pair
    _segment_uses_compactions(compacted)
    write_checksum(commits, version=LATEST, method="full")
    result = write_checksum(compacted, version=LATEST, method=method)
    assert not result.already_existed
    want = read_checksum(commits, LATEST).to_dict()
    got = read_checksum(compacted, LATEST).to_dict()
    assert orjson.dumps(got, option=orjson.OPT_SORT_KEYS) == orjson.dumps(
        want, option=orjson.OPT_SORT_KEYS
    )
    assert got["numFiles"] == load_snapshot(commits).files.num_rows


# ---- row-tracking backfill ------------------------------------------------------------------


def _row_ids(storage: Storage) -> list[tuple]:
    snap = load_snapshot(storage)
    rows = snap.files.select(["path", "baseRowId", "defaultRowCommitVersion"]).to_pylist()
    return sorted((Path(r["path"]).name, r["baseRowId"], r["defaultRowCommitVersion"])
                  for r in rows)


def test_backfill_from_compactions_assigns_what_the_commits_would(pair):
    commits, compacted = pair
    _segment_uses_compactions(compacted)
    want = backfill_row_tracking(commits, confirm_protocol_upgrade=True)
    got = backfill_row_tracking(compacted, confirm_protocol_upgrade=True)
    live = load_snapshot(commits, LATEST).files.num_rows
    assert got.files_backfilled == want.files_backfilled == live
    assert got.high_water_mark == want.high_water_mark
    assert _row_ids(compacted) == _row_ids(commits)
    assert all(base is not None for _, base, _ in _row_ids(compacted))


# ---- the Dagster sensor's settings cache ----------------------------------------------------


def test_sensor_settings_from_a_compaction_are_the_newest(pair):
    """The sensor caches protocol and configuration per version and, on the next tick,
    reads only the deltas after the cached version: through compaction 6..12 it must find
    v11's metaData (the first one in Databricks' file), not v8's (the last one)."""
    from delta_ops.log.segment.log_state import TableSettings, inspect_log, read_settings

    commits, compacted = pair
    at5 = load_snapshot(commits, 5)
    previous = TableSettings(5, at5.protocol, dict(at5.metadata.configuration))
    state = inspect_log(compacted)
    assert [(d.start, d.end) for d in state.segment.deltas if d.end > 5] == [(6, 12)]
    got = read_settings(compacted, state, previous)
    want = load_snapshot(commits, LATEST)
    assert got.version == LATEST
    assert got.configuration == dict(want.metadata.configuration)
    assert got.configuration["fixture.step"] == "11"
    assert got.protocol == want.protocol

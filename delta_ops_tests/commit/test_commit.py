"""Optimistic commits: protocol upgrades, row IDs, conflicts, retries, in-commit timestamps.

Against real tables: corpus copies and tables built by `histories` through the commit API,
on the local file system (and S3 through moto for the conditional put).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delta_ops.commit import (
    ENGINE_INFO,
    AppendOnlyError,
    CommitRetriesExhaustedError,
    InvalidCommitError,
    TableExistsError,
    Transaction,
    append_files,
    check_winning_commit,
    protocol_with_features,
)
from delta_ops.commit.conflicts import Footprint, footprint_of
from delta_ops.commit.row_ids import (
    NO_ROW_IDS,
    ROW_TRACKING_DOMAIN,
    assign_row_ids,
    high_water_mark,
    high_water_mark_domain,
    max_assigned_row_id,
    num_records_from_stats,
    parse_high_water_mark,
    row_id_problems,
)
from delta_ops.errors import (
    AtomicityUnsupportedError,
    CommitConflictError,
    CorruptLogError,
    UnsupportedFeatureError,
)
from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
from delta_ops.maintenance.row_tracking import verify_row_tracking
from delta_ops.protocol import features
from delta_ops.protocol.actions import DomainMetadata
from delta_ops.storage import Storage
from delta_ops_tests.support.histories import (
    HistorySpec,
    StepClock,
    build_history,
    histories,
    new_table,
    table_rows,
    write_data_file,
)

ROOT = "file:///t"


def log_files(root: Path) -> dict[str, bytes]:
    log = root / "_delta_log"
    return {p.name: p.read_bytes() for p in sorted(log.iterdir()) if p.is_file()}


def commit_actions(storage: Storage, version: int) -> list[dict]:
    data = storage.read(f"_delta_log/{version:020d}.json")
    return [orjson.loads(line) for line in data.splitlines() if line.strip()]


@pytest.fixture
def table(tmp_path) -> Storage:
    storage = Storage.for_uri(str(tmp_path / "t"))
    new_table(storage)
    return storage


@pytest.fixture
def rt_table(tmp_path) -> Storage:
    storage = Storage.for_uri(str(tmp_path / "rt"))
    new_table(storage, row_tracking=True)
    return storage


# ---- protocol upgrades (pure) --------------------------------------------------------------


def test_legacy_writer_versions_list_every_implied_feature():
    up = protocol_with_features({"minReaderVersion": 1, "minWriterVersion": 2}, ["rowTracking"])
    assert up == {
        "minReaderVersion": 1,
        "minWriterVersion": 7,
        "writerFeatures": ["appendOnly", "domainMetadata", "invariants", "rowTracking"],
    }
    up = protocol_with_features({"minReaderVersion": 1, "minWriterVersion": 4}, ["domainMetadata"])
    assert up["writerFeatures"] == [
        "appendOnly",
        "changeDataFeed",
        "checkConstraints",
        "domainMetadata",
        "generatedColumns",
        "invariants",
    ]
    up = protocol_with_features({"minReaderVersion": 2, "minWriterVersion": 6}, ["rowTracking"])
    assert up["minReaderVersion"] == 2 and "readerFeatures" not in up
    assert {"columnMapping", "identityColumns", "rowTracking", "domainMetadata"} <= set(
        up["writerFeatures"]
    )


def test_reader_writer_feature_moves_reader_to_table_features():
    up = protocol_with_features({"minReaderVersion": 2, "minWriterVersion": 5}, ["deletionVectors"])
    assert up["minReaderVersion"] == 3 and up["minWriterVersion"] == 7
    assert up["readerFeatures"] == ["columnMapping", "deletionVectors"]
    assert {"columnMapping", "deletionVectors"} <= set(up["writerFeatures"])


def test_table_features_protocol_gets_names_appended_and_noop_when_supported():
    proto = {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": ["deletionVectors"],
        "writerFeatures": ["deletionVectors"],
    }
    up = protocol_with_features(proto, ["rowTracking"])
    assert up["readerFeatures"] == ["deletionVectors"]
    assert up["writerFeatures"] == ["deletionVectors", "domainMetadata", "rowTracking"]
    assert protocol_with_features(up, ["rowTracking", "domainMetadata"]) is None
    with pytest.raises(ValueError, match="unknown table feature 'noSuchFeature'"):
        protocol_with_features(proto, ["noSuchFeature"])


@given(
    reader=st.integers(1, 2),
    writer=st.integers(1, 6),
    names=st.sets(
        st.sampled_from(
            [
                "rowTracking",
                "domainMetadata",
                "deletionVectors",
                "inCommitTimestamp",
                "v2Checkpoint",
                "columnMapping",
                "appendOnly",
            ]
        ),
        min_size=1,
    ),
)
def test_upgrade_keeps_every_supported_feature(reader, writer, names):
    old = {"minReaderVersion": reader, "minWriterVersion": writer}
    new = protocol_with_features(old, names)
    assert new is not None or all(features.is_feature_supported(old, n) for n in names)
    new = new or old
    for f in features.FEATURES:
        if features.is_feature_supported(old, f.name):
            assert features.is_feature_supported(new, f.name), f.name
    for n in names:
        assert features.is_feature_supported(new, n), n
    assert set(new.get("readerFeatures", [])) <= set(new.get("writerFeatures", []))
    features.ensure_supported(new, "commit")


# ---- row IDs (pure) ------------------------------------------------------------------------


def test_high_water_mark_reads_both_spellings_and_writes_sparks():
    assert parse_high_water_mark('{"rowIdHighWaterMark": 41}') == 41
    assert parse_high_water_mark('{"highWaterMark": 7}') == 7
    assert high_water_mark({}) == NO_ROW_IDS
    removed = {
        ROW_TRACKING_DOMAIN: DomainMetadata(ROW_TRACKING_DOMAIN, '{"rowIdHighWaterMark":3}', True)
    }
    assert high_water_mark(removed) == NO_ROW_IDS
    assert high_water_mark_domain(12).configuration == '{"rowIdHighWaterMark":12}'
    with pytest.raises(CorruptLogError, match="no integer rowIdHighWaterMark"):
        parse_high_water_mark('{"other": 1}')
    with pytest.raises(CorruptLogError, match="not JSON"):
        parse_high_water_mark("nope")


def test_num_records_from_stats():
    assert num_records_from_stats('{"numRecords": 5, "minValues": {"numRecords": 9}}') == 5
    assert num_records_from_stats('{"minValues": {}}') is None
    assert num_records_from_stats("{broken") is None
    assert num_records_from_stats(None) is None


@given(
    counts=st.lists(st.integers(0, 50), max_size=20),
    preset=st.lists(st.booleans(), max_size=20),
    mark=st.integers(-1, 1000),
    version=st.integers(0, 100),
)
def test_assign_row_ids_gives_disjoint_ranges_above_the_mark(counts, preset, mark, version):
    adds = []
    preserved_end = 0  # preserved (recommitted) IDs come first, from 0
    for i, n in enumerate(counts):
        add = {"path": f"f{i}", "stats": json.dumps({"numRecords": n})}
        if i < len(preset) and preset[i]:
            add["baseRowId"] = preserved_end
            add["defaultRowCommitVersion"] = 1
            preserved_end += n
        adds.append(add)
    mark = max(mark, preserved_end - 1)
    result = assign_row_ids(
        adds,
        high_water_mark=mark,
        version=version,
        num_records=lambda a: num_records_from_stats(a["stats"]),
    )
    fresh = [a for a, old in zip(result.adds, adds, strict=True) if "baseRowId" not in old]
    assert result.assigned == len(fresh)
    ranges = sorted(
        (a["baseRowId"], a["baseRowId"] + n) for a, n in zip(result.adds, counts, strict=True) if n
    )
    assert all(e1 <= b2 for (_, e1), (b2, _) in zip(ranges, ranges[1:], strict=False))
    for a, old in zip(result.adds, adds, strict=True):
        if "baseRowId" in old:
            assert (a["baseRowId"], a["defaultRowCommitVersion"]) == (old["baseRowId"], 1)
    for a in fresh:
        assert a["baseRowId"] > mark
        assert a["defaultRowCommitVersion"] == version
    assert result.high_water_mark == mark + sum(
        n for a, n in zip(adds, counts, strict=True) if "baseRowId" not in a
    )


def test_assign_row_ids_needs_counts():
    with pytest.raises(ValueError, match="row count is unknown"):
        assign_row_ids([{"path": "x"}], high_water_mark=-1, version=0, num_records=lambda a: None)


def test_row_id_problems_finds_overlaps_and_marks(tmp_path):
    storage = Storage.for_uri(str(tmp_path / "p"))
    build = build_history(
        storage, HistorySpec(row_tracking=True, steps=(("append", (3, 2), True),))
    )
    snap = load_snapshot(storage, build.versions[-1])
    assert row_id_problems(snap.files, high_water_mark=high_water_mark(snap.domains)) == []
    assert max_assigned_row_id(snap.files) == 4
    assert row_id_problems(snap.files, high_water_mark=3)[0].endswith(
        "exceed the high-water mark 3"
    )
    import pyarrow as pa

    files = snap.files.set_column(
        snap.files.schema.get_field_index("baseRowId"), "baseRowId", pa.array([0, 1], pa.int64())
    )
    assert any("overlaps" in p for p in row_id_problems(files, high_water_mark=10))


# ---- conflicts (pure) ----------------------------------------------------------------------


def _fp(**kw) -> Footprint:
    return Footprint(**kw)


@pytest.mark.parametrize(
    ("footprint", "winning", "match"),
    [
        (
            _fp(),
            [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 7}}],
            "changed the protocol",
        ),
        (_fp(), [{"metaData": {"id": "x"}}], "changed the table metadata"),
        (
            _fp(touched_paths=frozenset({"a.parquet"})),
            [{"remove": {"path": "a.parquet", "dataChange": True}}],
            "removed file a.parquet",
        ),
        (
            _fp(touched_paths=frozenset({"a b.parquet"})),
            [{"add": {"path": "a%20b.parquet", "dataChange": False}}],
            "re-added file a b.parquet",
        ),
        (
            _fp(app_ids=frozenset({"app"})),
            [{"txn": {"appId": "app", "version": 3}}],
            "transaction identifier 'app'",
        ),
        (
            _fp(domains=frozenset({"com.x"})),
            [{"domainMetadata": {"domain": "com.x", "configuration": "{}", "removed": False}}],
            "domain 'com.x'",
        ),
        (
            _fp(reads_whole_table=True),
            [{"add": {"path": "n.parquet", "dataChange": True}}],
            "read whole",
        ),
        (
            _fp(requires_row_ids=True),
            [{"add": {"path": "n.parquet", "dataChange": True}}],
            "without row IDs",
        ),
    ],
)
def test_conflicting_winners(footprint, winning, match):
    with pytest.raises(CommitConflictError, match=match):
        check_winning_commit(footprint, winning, version=4, table=ROOT)


def test_rebasable_winner_reports_mark_and_timestamp():
    fp = footprint_of(
        [
            {"add": {"path": "new.parquet", "dataChange": True}},
            {"txn": {"appId": "a", "version": 1}},
        ],
        root=ROOT,
    )
    winner = [
        {"commitInfo": {"inCommitTimestamp": 1234}},
        {
            "domainMetadata": {
                "domain": ROW_TRACKING_DOMAIN,
                "configuration": '{"rowIdHighWaterMark": 99}',
                "removed": False,
            }
        },
        {
            "add": {
                "path": "other.parquet",
                "dataChange": True,
                "baseRowId": 100,
                "stats": '{"numRecords": 5}',
            }
        },
        {"remove": {"path": "old.parquet", "dataChange": True}},
        {"txn": {"appId": "b", "version": 1}},
    ]
    facts = check_winning_commit(fp, winner, version=7, table=ROOT)
    assert (facts.version, facts.high_water_mark, facts.in_commit_timestamp) == (7, 104, 1234)


# ---- transactions on real tables -----------------------------------------------------------


def test_commit_info_on_every_commit(table):
    clock = StepClock(1_700_000_000_000)
    add = write_data_file(table, rows=3)
    result = append_files(table, [add], clock=clock)
    assert (result.version, result.attempts, result.read_version) == (1, 1, 0)
    first = commit_actions(table, 1)[0]["commitInfo"]
    assert first["timestamp"] == 1_700_000_000_000
    assert first["operation"] == "WRITE"
    assert first["operationParameters"] == {"mode": "Append", "partitionBy": "[]"}
    assert first["engineInfo"] == ENGINE_INFO and ENGINE_INFO.startswith("delta-ops/")
    assert first["txnId"] == result.txn_id and first["readVersion"] == 0
    assert first["isBlindAppend"] is True and "inCommitTimestamp" not in first
    created = commit_actions(table, 0)
    assert list(created[0]) == ["commitInfo"] and "readVersion" not in created[0]["commitInfo"]
    assert load_snapshot(table).files.column("path").to_pylist() == [add["path"]]


def test_in_commit_timestamps_are_first_and_monotonic(tmp_path):
    storage = Storage.for_uri(str(tmp_path / "ict"))
    new_table(storage, in_commit_timestamps=True, clock=StepClock(5_000, 0))
    behind = StepClock(1_000, 0)  # a clock behind the previous commit
    r1 = append_files(storage, [write_data_file(storage, rows=1)], clock=behind)
    r2 = append_files(storage, [write_data_file(storage, rows=1)], clock=StepClock(9_000))
    c0, c1, c2 = (commit_actions(storage, v)[0]["commitInfo"] for v in (0, 1, 2))
    assert c0["inCommitTimestamp"] == 5_000
    assert r1.in_commit_timestamp == c1["inCommitTimestamp"] == 5_001 == c1["timestamp"]
    assert r2.in_commit_timestamp == c2["inCommitTimestamp"] == 9_000
    snap = load_snapshot(storage)
    assert snap.timestamp == 9_000
    assert load_snapshot(storage, timestamp=5_001).version == 1


def test_enabling_in_commit_timestamps_records_enablement(table):
    log0 = Path(table.root.removeprefix("file://")) / "_delta_log" / f"{0:020d}.json"
    os.utime(log0, (50, 50))  # previous commit file written at 50 s
    txn = Transaction(table, operation="SET TBLPROPERTIES", clock=lambda: 10_000)
    txn.add_features(["inCommitTimestamp"]).update_configuration(
        {"delta.enableInCommitTimestamps": "true"}
    )
    result = txn.commit()
    assert result.in_commit_timestamp == 50_001  # > mtime of the preceding commit
    actions = commit_actions(table, 1)
    assert actions[0]["commitInfo"]["inCommitTimestamp"] == 50_001
    config = next(a["metaData"] for a in actions if "metaData" in a)["configuration"]
    assert config["delta.inCommitTimestampEnablementVersion"] == "1"
    assert config["delta.inCommitTimestampEnablementTimestamp"] == "50001"
    proto = next(a["protocol"] for a in actions if "protocol" in a)
    assert proto["writerFeatures"] == ["appendOnly", "inCommitTimestamp", "invariants"]
    assert load_snapshot(table).timestamp == 50_001


def test_lost_race_is_rebased_and_retried(rt_table):
    early = Transaction(rt_table, sleep=lambda s: None)
    early.add_files([write_data_file(rt_table, rows=4)])
    assert early.read_version == 0
    winner = append_files(rt_table, [write_data_file(rt_table, rows=3)])
    result = early.commit()
    assert (winner.version, result.version, result.attempts) == (1, 2, 2)
    snap = load_snapshot(rt_table)
    assert snap.num_files == 2
    assert row_id_problems(snap.files, high_water_mark=high_water_mark(snap.domains)) == []
    assert high_water_mark(snap.domains) == 6 == result.row_id_high_water_mark
    rebased = [a["add"] for a in result.actions if "add" in a][0]
    assert (rebased["baseRowId"], rebased["defaultRowCommitVersion"]) == (3, 2)


def test_recommits_and_removes_carry_the_last_committed_row_ids(rt_table):
    add = write_data_file(rt_table, rows=3)
    first = append_files(rt_table, [add])
    assigned = [a["add"] for a in first.actions if "add" in a][0]
    recommit = Transaction(rt_table, operation="OPTIMIZE").add_files([{**add, "dataChange": False}])
    again = [a["add"] for a in recommit.commit().actions if "add" in a][0]
    assert (again["baseRowId"], again["defaultRowCommitVersion"]) == (
        assigned["baseRowId"],
        assigned["defaultRowCommitVersion"],
    )
    rm = {"path": add["path"], "deletionTimestamp": 1, "dataChange": True}
    removed = Transaction(rt_table, operation="DELETE").remove_files([rm]).commit()
    body = [a["remove"] for a in removed.actions if "remove" in a][0]
    assert (body["baseRowId"], body["defaultRowCommitVersion"]) == (0, first.version)
    assert not any("domainMetadata" in a for a in removed.actions)  # no fresh IDs, no mark


def test_concurrent_removal_of_the_same_file_conflicts(table):
    add = write_data_file(table, rows=2)
    append_files(table, [add])
    rm = {"path": add["path"], "deletionTimestamp": 1, "dataChange": True}
    first = Transaction(table, operation="DELETE").remove_files([rm])
    second = Transaction(table, operation="DELETE").remove_files([rm])
    assert first.read_version == second.read_version == 1
    first.commit()
    before = log_files(Path(table.root.removeprefix("file://")))
    with pytest.raises(
        CommitConflictError, match=f"concurrent commit 2 removed file {add['path']}"
    ):
        second.commit()
    assert log_files(Path(table.root.removeprefix("file://"))) == before


@pytest.mark.parametrize("kind", ["metadata", "protocol", "txn", "domain"])
def test_concurrent_logical_changes_conflict(table, kind):
    def plan() -> Transaction:
        t = Transaction(table)
        if kind == "metadata":
            t.update_configuration({"k": "v"})
        elif kind == "protocol":
            t.add_features(["domainMetadata"])
        elif kind == "txn":
            t.set_txn("app", 1)
        else:
            t.add_features(["domainMetadata"]).set_domain("com.example", "{}")
        return t

    if kind == "domain":
        Transaction(table).add_features(["domainMetadata"]).commit()
    mine, theirs = plan(), plan()
    assert mine.read_version == theirs.read_version  # both plan on the same version
    theirs.commit()
    with pytest.raises(CommitConflictError, match="concurrent commit"):
        mine.commit()


def test_retries_are_bounded(rt_table):
    # Each attempt's clock call lets a real concurrent writer take the version first.
    def racing_clock() -> int:
        append_files(rt_table, [write_data_file(rt_table, rows=1)])
        return 1_700_000_000_000

    loser = Transaction(rt_table, max_retries=2, clock=racing_clock, sleep=lambda s: None)
    loser.add_files([write_data_file(rt_table, rows=1)])
    with pytest.raises(CommitRetriesExhaustedError, match="gave up after 3 attempts"):
        loser.commit()
    snap = load_snapshot(rt_table)
    assert snap.version == 3 and snap.num_files == 3


def test_writer_threads_never_lose_commits_or_duplicate_row_ids(rt_table):
    per_thread, threads = 6, 4
    results: list = []
    lock = threading.Lock()

    def writer(k: int) -> None:
        for i in range(per_thread):
            add = write_data_file(rt_table, rows=1 + (k + i) % 4)
            r = append_files(rt_table, [add], sleep=lambda s: None)
            with lock:
                results.append(r)

    pool = [threading.Thread(target=writer, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    versions = sorted(r.version for r in results)
    assert versions == list(range(1, per_thread * threads + 1))
    snap = load_snapshot(rt_table)
    assert snap.num_files == per_thread * threads
    mark = high_water_mark(snap.domains)
    assert row_id_problems(snap.files, high_water_mark=mark) == []
    assert mark == sum(1 + (k + i) % 4 for k in range(threads) for i in range(per_thread)) - 1


def test_unsupported_writer_feature_is_refused_with_nothing_written(table_copy):
    root = table_copy("kernel-benchmarks__basic_catalog_managed/delta")
    storage = Storage.for_uri(str(root))
    before = log_files(root)
    with pytest.raises(UnsupportedFeatureError, match="catalogManaged"):
        append_files(storage, [write_data_file(storage, rows=1)])
    assert log_files(root) == before


def test_append_only_allows_rearranging_only(tmp_path):
    storage = Storage.for_uri(str(tmp_path / "ao"))
    new_table(storage, append_only=True)
    add = write_data_file(storage, rows=2)
    append_files(storage, [add])
    rm = {"path": add["path"], "deletionTimestamp": 1, "dataChange": True}
    with pytest.raises(AppendOnlyError, match="append-only"):
        Transaction(storage, operation="DELETE").remove_files([rm]).commit()
    assert load_snapshot(storage).version == 1
    compacted = write_data_file(storage, rows=2)
    t = Transaction(storage, operation="OPTIMIZE")
    t.remove_files([{**rm, "dataChange": False}]).add_files([{**compacted, "dataChange": False}])
    assert t.commit().version == 2
    assert load_snapshot(storage).files.column("path").to_pylist() == [compacted["path"]]


def test_invalid_transactions_are_refused(table):
    add = write_data_file(table, rows=1)
    with pytest.raises(InvalidCommitError, match="two add actions"):
        Transaction(table).add_files([add, add]).commit()
    with pytest.raises(InvalidCommitError, match="drops features"):
        Transaction(table).set_protocol({"minReaderVersion": 1, "minWriterVersion": 1}).commit()
    with pytest.raises(InvalidCommitError, match="system-controlled"):
        Transaction(table).set_domain("delta.rowTracking", "{}")
    with pytest.raises(UnsupportedFeatureError, match="domainMetadata"):
        Transaction(table).set_domain("com.example", "{}").commit()
    with pytest.raises(InvalidCommitError, match="cannot enable row tracking"):
        Transaction(table).add_features(["rowTracking"]).update_configuration(
            {"delta.enableRowTracking": "true"}
        ).commit()
    with pytest.raises(InvalidCommitError, match="add_actions takes"):
        Transaction(table).add_actions([{"metaData": {}}])
    assert load_snapshot(table).version == 0


def test_create_table_refuses_an_existing_table(table, tmp_path):
    with pytest.raises(TableExistsError, match="already exists"):
        new_table(table)
    fresh = Storage.for_uri(str(tmp_path / "fresh"))
    result = new_table(fresh, partitioned=True, column_mapping=True)
    snap = load_snapshot(fresh)
    assert result.version == 0 and snap.partition_columns == ["part"]
    assert snap.protocol == {
        "minReaderVersion": 2,
        "minWriterVersion": 7,
        "writerFeatures": ["appendOnly", "columnMapping", "invariants"],
    }


def test_non_atomic_storage_is_refused_unless_accepted(tmp_path):
    local = Storage.for_uri(str(tmp_path / "na"))
    new_table(local)
    generic = Storage.for_uri(f"local://{tmp_path / 'na'}")
    assert not generic.supports_atomic_put_if_absent
    add = write_data_file(local, rows=1)
    with pytest.raises(AtomicityUnsupportedError, match="accept_non_atomic"):
        Transaction(generic).add_files([add]).commit()
    assert load_snapshot(local).version == 0
    result = Transaction(generic, accept_non_atomic=True).add_files([add]).commit()
    assert result.version == 1 and load_snapshot(local).num_files == 1


def test_legacy_corpus_table_upgrade_lists_implied_features(table_copy):
    root = table_copy("cdf")
    storage = Storage.for_uri(str(root))
    before = load_snapshot(storage)
    assert (before.protocol["minReaderVersion"], before.protocol["minWriterVersion"]) == (1, 4)
    Transaction(storage, operation="UPGRADE PROTOCOL").add_features(["domainMetadata"]).commit()
    after = load_snapshot(storage)
    assert after.protocol["writerFeatures"] == [
        "appendOnly",
        "changeDataFeed",
        "checkConstraints",
        "domainMetadata",
        "generatedColumns",
        "invariants",
    ]
    assert after.metadata.raw == before.metadata.raw  # untouched
    assert table_rows(storage) == table_rows(storage, before.version)


def test_recommit_keeps_row_ids_and_commits_into_checkpointed_tables(table_copy):
    # A corpus table whose state comes from a Parquet checkpoint (maps read back as pairs).
    root = table_copy("with_checkpoint")
    storage = Storage.for_uri(str(root))
    snap = load_snapshot(storage)
    assert snap.checkpoint_version == 2
    Transaction(storage).update_configuration({"x": "1"}).commit()
    written = [a for a in commit_actions(storage, snap.version + 1) if "metaData" in a][0]
    assert written["metaData"]["format"] == {"provider": "parquet", "options": {}}
    assert written["metaData"]["configuration"]["x"] == "1"


@pytest.mark.s3
def test_commits_on_s3_use_the_conditional_put(s3_server):
    storage = Storage.for_uri(s3_server.fresh_uri("commit"), s3_server.storage_options)
    new_table(storage, row_tracking=True)
    early = Transaction(storage, sleep=lambda s: None).add_files([write_data_file(storage, rows=2)])
    assert early.read_version == 0
    append_files(storage, [write_data_file(storage, rows=5)])
    result = early.commit()
    assert (result.version, result.attempts) == (2, 2)
    snap = load_snapshot(storage)
    assert row_id_problems(snap.files, high_water_mark=high_water_mark(snap.domains)) == []
    with pytest.raises(TableExistsError):
        new_table(storage)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(spec=histories(row_tracking=None))
def test_generated_histories_keep_protocol_rules(tmp_path_factory, spec):
    storage = Storage.for_uri(str(tmp_path_factory.mktemp("h")))
    built = build_history(storage, spec)
    assert built.versions == list(range(len(built.versions)))
    snap = load_snapshot(storage)
    ict_values = [
        c["commitInfo"].get("inCommitTimestamp")
        for c in (commit_actions(storage, v)[0] for v in built.versions)
    ]
    ict = [v for v in ict_values if v is not None]
    assert ict == sorted(set(ict))  # strictly increasing
    if snap.ict.enabled:
        assert all(v is not None for v in ict_values[snap.ict.version or 0 :])
    if features.is_feature_supported(snap.protocol, "rowTracking"):
        assert verify_row_tracking(snap) == []
    rows = table_rows(storage)
    ids = [r[0] for r in rows]
    assert len(ids) == len(set(ids)) and all(0 <= i < built.next_id for i in ids)

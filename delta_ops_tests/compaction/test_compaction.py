"""Log compaction: reconciliation, atomic never-overwriting writes, the log segment's choice
among overlapping compactions, and reading with compactions (covered commits deleted or not,
in the spec's reconciled form or Databricks' newest-first unreconciled one) equals reading the
commits, on random histories and every corpus table. The two forms on a table made to tell
them apart: test_compaction_forms."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import delta_ops.cli as cli
from delta_ops.errors import (
    CorruptLogError,
    DeltaOpsError,
    UnsupportedFeatureError,
    VersionNotFoundError,
)
from delta_ops.log.segment.log_segment import build_log_segment, list_log
from delta_ops.log.snapshot.loaded_snapshot import Snapshot, load_snapshot
from delta_ops.maintenance.checksum import (
    compute_checksum,
    compute_version_checksum,
    verify_checksum,
    write_checksum,
    write_checksums,
)
from delta_ops.maintenance.compaction import (
    compact_by_policy,
    compact_log,
    compaction_interval,
    compaction_plan,
    reconcile_actions,
)
from delta_ops.protocol.filenames import compaction_name
from delta_ops.storage import Storage
from delta_ops_tests.support.checksum_histories import histories, write_history
from delta_ops_tests.support.corpus import all_corpus_tables, corpus_path
from delta_ops_tests.support.histories import COMPACTION_FORMS, write_compaction

PROTOCOL = {"minReaderVersion": 1, "minWriterVersion": 2}
METADATA = {
    "id": "t",
    "format": {"provider": "parquet", "options": {}},
    "schemaString": '{"type":"struct","fields":[]}',
    "partitionColumns": [],
    "configuration": {},
}


def _add(path: str, size: int = 10) -> dict:
    return {"add": {"path": path, "partitionValues": {}, "size": size, "modificationTime": 1,
                    "dataChange": True}}


def _remove(path: str) -> dict:
    return {"remove": {"path": path, "deletionTimestamp": 2, "dataChange": True, "size": 10}}


def state(snap: Snapshot) -> dict:
    """Everything reconciliation decides, in a comparable form."""

    def rows(table):
        return sorted(orjson.dumps(r, default=str, option=orjson.OPT_SORT_KEYS)
                      for r in table.to_pylist())

    return {
        "version": snap.version,
        "protocol": snap.protocol,
        "metadata": orjson.loads(orjson.dumps(snap.metadata.raw, default=str)),
        "files": rows(snap.files),
        "tombstones": rows(snap.tombstones),
        "txns": {k: t.to_dict() for k, t in snap.txns.items()},
        "domains": {k: d.to_dict() for k, d in snap.all_domains.items()},
    }


# ---- reconciliation -----------------------------------------------------------------------


def test_spec_example():
    """The example of the spec's "Log Compaction Files" section."""
    app = "3ae45b72-24e1-865a-a211-34987ae02f2a"
    commits = [
        [{"commitInfo": {}}, {"add": {"path": "f2"}}, {"remove": {"path": "f1"}}],
        [{"commitInfo": {}}, {"add": {"path": "f3"}}, {"add": {"path": "f4"}},
         {"txn": {"appId": app, "version": 4389}}],
        [{"commitInfo": {}}, {"remove": {"path": "f3"}}, {"txn": {"appId": app, "version": 4390}}],
    ]
    out = reconcile_actions(commits, root="file:///t")
    assert out == [
        {"txn": {"appId": app, "version": 4390}},
        {"add": {"path": "f2"}},
        {"add": {"path": "f4"}},
        {"remove": {"path": "f1"}},
        {"remove": {"path": "f3"}},
    ]


def test_reconciliation_keeps_latest_and_tombstones():
    dv = {"storageType": "u", "pathOrInlineDv": "abc", "offset": 1, "sizeInBytes": 4,
          "cardinality": 1}
    commits = [
        [{"protocol": PROTOCOL}, {"metaData": METADATA}, _add("a"), _add("b"),
         {"domainMetadata": {"domain": "d", "configuration": "1", "removed": False}},
         {"cdc": {"path": "_change_data/x", "size": 1}}],
        [{"commitInfo": {"operation": "DELETE"}}, _remove("a"),
         {"add": {"path": "b", "size": 10, "deletionVector": dv}},
         {"domainMetadata": {"domain": "d", "configuration": "", "removed": True}},
         {"protocol": {"minReaderVersion": 1, "minWriterVersion": 3}}],
        # The same file key written twice in a commit: the later line wins, as for readers.
        [{"add": {"path": "file:///t/c%20d", "size": 1}}, {"remove": {"path": "c d"}}],
    ]
    out = reconcile_actions(commits, root="file:///t")
    kinds = [next(iter(a)) for a in out]
    assert "commitInfo" not in kinds and "cdc" not in kinds
    assert out[0] == {"protocol": {"minReaderVersion": 1, "minWriterVersion": 3}}
    assert out[1] == {"metaData": METADATA}
    assert {"domainMetadata": {"domain": "d", "configuration": "", "removed": True}} in out
    adds = [a["add"] for a in out if "add" in a]
    removes = [a["remove"] for a in out if "remove" in a]
    # b without a DV and b with one are different keys: both survive (the add of b is live).
    assert [a["path"] for a in adds] == ["b", "b"]
    assert sorted(r["path"] for r in removes) == ["a", "c d"]


def test_reconciliation_rejects_file_action_without_path():
    with pytest.raises(CorruptLogError, match="add action without a path"):
        reconcile_actions([[{"add": {"size": 1}}]], root="file:///t")


# ---- writing ------------------------------------------------------------------------------


def _simple_table(root: Path, versions: int = 21) -> Storage:
    log = root / "_delta_log"
    log.mkdir(parents=True)
    for v in range(versions):
        actions = [{"commitInfo": {"timestamp": v}}]
        if v == 0:
            actions += [{"protocol": PROTOCOL}, {"metaData": METADATA}]
        actions.append(_add(f"f{v}"))
        if v % 3 == 2:
            actions.append(_remove(f"f{v - 1}"))
        if v % 4 == 1:
            actions.append({"txn": {"appId": "app", "version": v}})
        (log / f"{v:020d}.json").write_text("\n".join(json.dumps(a) for a in actions))
    return Storage.for_uri(str(root))


def test_compact_writes_once_and_checks_existing(tmp_path):
    storage = _simple_table(tmp_path / "t")
    first = compact_log(storage, start=3, end=9)
    assert not first.already_existed and first.file.endswith(compaction_name(3, 9))
    data = (tmp_path / "t" / first.file).read_bytes()
    lines = [orjson.loads(x) for x in data.splitlines()]
    assert len(lines) == first.num_actions
    assert not any("commitInfo" in a for a in lines)
    again = compact_log(storage, start=3, end=9)
    assert again.already_existed and again.existing_matches is True
    # A different file under the same name is never replaced, and reported as wrong.
    (tmp_path / "t" / first.file).write_bytes(data.splitlines()[0] + b"\n")
    wrong = compact_log(storage, start=3, end=9)
    assert wrong.already_existed and wrong.existing_matches is False
    assert (tmp_path / "t" / first.file).read_bytes() == data.splitlines()[0] + b"\n"


@pytest.mark.parametrize("start,end,err,match", [
    (5, 5, ValueError, "at least two commits"),
    (-1, 3, ValueError, "at least two commits"),
    (19, 25, VersionNotFoundError, "does not exist"),
])
def test_compact_rejects_bad_ranges(tmp_path, start, end, err, match):
    storage = _simple_table(tmp_path / "t")
    with pytest.raises(err, match=match):
        compact_log(storage, start=start, end=end)


def test_compact_checks_the_protocol(table_copy):
    # variantType does not change the log's mechanics: compaction works and reads the same.
    root = table_copy("spark__variant-stats-no-checkpoint")
    before = load_snapshot(Storage.for_uri(str(root)))
    compact_log(str(root), start=0, end=1)
    assert (root / "_delta_log" / compaction_name(0, 1)).exists()
    assert load_snapshot(Storage.for_uri(str(root))).files.column("path").to_pylist() == (
        before.files.column("path").to_pylist()
    )
    # collations (Spark's, not in the spec): refused, nothing written.
    root = table_copy("golden__collations-table")
    info = {"commitInfo": {"timestamp": 1, "operation": "SET TBLPROPERTIES"}}
    (root / "_delta_log" / "00000000000000000001.json").write_bytes(orjson.dumps(info) + b"\n")
    with pytest.raises(UnsupportedFeatureError, match="collations"):
        compact_log(str(root), start=0, end=1)
    assert not list((root / "_delta_log").glob("*.compacted.json"))


# ---- the log segment's choice -------------------------------------------------------------


def _ranges(storage: Storage, version: int) -> list[tuple[int, int]]:
    """The (start, end) of each delta of the segment, checked to cover 0..version exactly."""
    segment = build_log_segment(storage, version)
    ranges = [(d.start, d.end) for d in segment.deltas]
    first = 0 if segment.checkpoint is None else segment.checkpoint.version + 1
    assert [s for s, _ in ranges] == [first] + [e + 1 for _, e in ranges[:-1]], ranges
    assert not ranges or ranges[-1][1] == version
    return ranges


def test_segment_choice_with_overlapping_compactions(tmp_path):
    storage = _simple_table(tmp_path / "t")
    reference = {v: state(load_snapshot(storage, v)) for v in range(21)}
    for s, e in [(6, 10), (6, 15), (2, 4), (3, 7), (16, 20)]:
        compact_log(storage, start=s, end=e)
    assert _ranges(storage, 20) == [(0, 0), (1, 1), (2, 4), (5, 5), (6, 15), (16, 20)]
    assert _ranges(storage, 15) == [(0, 0), (1, 1), (2, 4), (5, 5), (6, 15)]
    assert _ranges(storage, 12) == [(0, 0), (1, 1), (2, 4), (5, 5), (6, 10), (11, 11), (12, 12)]
    assert _ranges(storage, 10)[-1] == (6, 10)
    assert all(e <= 9 for _, e in _ranges(storage, 9))
    assert _ranges(storage, 3) == [(0, 0), (1, 1), (2, 2), (3, 3)]
    for v in range(21):
        assert state(load_snapshot(storage, v)) == reference[v], v


def test_segment_ignores_compactions_before_the_checkpoint(table_copy):
    root = table_copy("kernel-defaults__basic-dv-with-checkpoint")
    storage = Storage.for_uri(str(root))
    reference = state(load_snapshot(storage))
    compact_log(storage, start=38, end=44)  # straddles the checkpoint at 40
    compact_log(storage, start=41, end=46)
    assert _ranges(storage, 46) == [(41, 46)]
    assert _ranges(storage, 44) == [(41, 41), (42, 42), (43, 43), (44, 44)]
    assert state(load_snapshot(storage)) == reference
    assert state(load_snapshot(storage, 39))["version"] == 39  # uses 30 + commits 31..39


def test_single_version_compaction_prefers_the_commit(tmp_path):
    storage = _simple_table(tmp_path / "t", versions=5)
    name = compaction_name(2, 2)
    (tmp_path / "t" / "_delta_log" / name).write_text(json.dumps(_add("bogus")) + "\n")
    assert _ranges(storage, 4) == [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)]
    assert build_log_segment(storage, 4).deltas[2].file.path.endswith("02.json")


def test_compactions_replace_deleted_commits(tmp_path):
    storage = _simple_table(tmp_path / "t")
    reference = state(load_snapshot(storage))
    compact_log(storage, start=0, end=9)
    compact_log(storage, start=10, end=20)
    for v in range(21):
        (tmp_path / "t" / "_delta_log" / f"{v:020d}.json").unlink()
    assert _ranges(storage, 20) == [(0, 9), (10, 20)]
    assert state(load_snapshot(storage)) == reference
    assert state(load_snapshot(storage, 9))["version"] == 9
    with pytest.raises(CorruptLogError, match="commit 10 is missing"):
        load_snapshot(storage, 12)


def test_segment_finds_a_cover_when_greedy_choice_strands(tmp_path):
    storage = _simple_table(tmp_path / "t", versions=16)
    reference = state(load_snapshot(storage))
    for s, e in [(0, 10), (0, 4), (5, 15)]:
        compact_log(storage, start=s, end=e)
    for v in range(16):
        (tmp_path / "t" / "_delta_log" / f"{v:020d}.json").unlink()
    assert state(load_snapshot(storage)) == reference


def test_segment_reads_the_fewest_files(tmp_path):
    storage = _simple_table(tmp_path / "t")
    compact_log(storage, start=0, end=5)
    compact_log(storage, start=1, end=20)
    assert _ranges(storage, 20) == [(0, 0), (1, 20)]


# ---- reading with compactions equals reading commits -----------------------------------------


@st.composite
def compaction_ranges(draw, n: int):
    if n < 2:
        return []
    pairs = st.tuples(st.integers(0, n - 2), st.integers(1, n - 1)).filter(lambda p: p[0] < p[1])
    return draw(st.lists(pairs, max_size=5, unique=True))


@st.composite
def partitions(draw, n: int):
    """Non-overlapping windows covering some of 0..n-1."""
    out, pos = [], 0
    while pos < n - 1:
        length = draw(st.integers(1, 4))
        if draw(st.booleans()) and pos + length < n:
            out.append((pos, pos + length))
        pos += length + 1
    return out


def _one_per_key(commits: list[list[dict]]) -> list[list[dict]]:
    """The commits with one txn per appId and one domainMetadata per domain (the last one),
    as valid commits hold (Spark and delta_ops refuse duplicates; inside one commit the
    order of actions carries no meaning, so a duplicate has no defined winner)."""
    out = []
    for actions in commits:
        last: dict[tuple, int] = {}
        for i, a in enumerate(actions):
            if "txn" in a:
                last[("txn", a["txn"]["appId"])] = i
            elif "domainMetadata" in a:
                last[("dm", a["domainMetadata"]["domain"])] = i
        keep = set(last.values())
        out.append([
            a for i, a in enumerate(actions)
            if i in keep or ("txn" not in a and "domainMetadata" not in a)
        ])
    return out


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data(), commits=histories(max_commits=10))
def test_random_histories_read_the_same_with_compactions(tmp_path_factory, data, commits):
    commits = _one_per_key(commits)
    n = len(commits)
    root = tmp_path_factory.mktemp("cmp")
    write_history(root, commits)
    storage = Storage.for_uri(str(root))
    reference = {v: state(load_snapshot(storage, v)) for v in range(n)}
    # Each compaction in either form a reader meets: the spec's (reconciled, our writer) or
    # Databricks' (unreconciled, newest commit first, the first line for a key wins).
    for s, e in data.draw(compaction_ranges(n)):
        write_compaction(storage, s, e, form=data.draw(st.sampled_from(COMPACTION_FORMS)))
    for v in range(n):
        assert state(load_snapshot(storage, v)) == reference[v], v

    # With the covered commits deleted (non-overlapping compactions, fresh copy).
    root2 = tmp_path_factory.mktemp("cmp-del")
    write_history(root2, commits)
    storage2 = Storage.for_uri(str(root2))
    windows = data.draw(partitions(n))
    for s, e in windows:
        write_compaction(storage2, s, e, form=data.draw(st.sampled_from(COMPACTION_FORMS)))
    # An empty compaction (a range of commitInfo-only commits) keeps its commits: without
    # them it is refused, as a lost write would look the same (`log/test_lost_content.py`).
    windows = [(s, e) for s, e in windows
               if (root2 / "_delta_log" / f"{s:020d}.{e:020d}.compacted.json").stat().st_size]
    for s, e in windows:
        for v in range(s, e + 1):
            (root2 / "_delta_log" / f"{v:020d}.json").unlink()
    inside = {v for s, e in windows for v in range(s, e)}
    for v in range(n):
        if v not in inside:
            assert state(load_snapshot(storage2, v)) == reference[v], (v, windows)


def _log_copy(name: str, dest: Path) -> Path:
    shutil.copytree(corpus_path(name) / "_delta_log", dest / "_delta_log")
    return dest


def _write_compaction(storage: Storage, start: int, end: int) -> None:
    """compact_log, or for tables whose features delta_ops may not write, the same content
    written directly (the reader is what is tested then)."""
    try:
        compact_log(storage, start=start, end=end)
    except UnsupportedFeatureError:
        from delta_ops.log.replay.full_replay import read_commit

        actions = reconcile_actions(
            [read_commit(storage, v) for v in range(start, end + 1)], root=storage.root
        )
        storage.put_if_absent(
            f"_delta_log/{compaction_name(start, end)}",
            b"".join(orjson.dumps(a) + b"\n" for a in actions),
        )


def test_every_corpus_table_reads_the_same_with_compactions(tmp_path):
    tested = 0
    for name in all_corpus_tables():
        root = _log_copy(name, tmp_path / name.replace("/", "__"))
        storage = Storage.for_uri(str(root))
        try:
            latest = load_snapshot(storage)
        except DeltaOpsError:
            continue  # tables a reader must refuse (see test_snapshot_corpus)
        commits = [d.start for d in latest.segment.deltas]
        if len(commits) < 2:
            continue
        first, last = commits[0], commits[-1]
        reference = {v: state(load_snapshot(storage, v)) for v in commits}
        mid = first + (last - first) // 2
        if mid > first:
            _write_compaction(storage, first, mid)  # overlaps the next one (6-10 and 6-15)
        _write_compaction(storage, first, last)
        for v in commits:
            assert state(load_snapshot(storage, v)) == reference[v], (name, v)
        for v in commits:
            (root / "_delta_log" / f"{v:020d}.json").unlink()
        assert state(load_snapshot(storage)) == reference[last], name
        if mid > first:
            assert state(load_snapshot(storage, mid)) == reference[mid], name
        tested += 1
    assert tested >= 60, tested


# ---- policy -------------------------------------------------------------------------------


def test_plan_windows_after_the_checkpoint(table_copy, tmp_path):
    storage = _simple_table(tmp_path / "t", versions=23)
    assert compaction_plan(list_log(storage), None) == []
    assert compaction_plan(list_log(storage), 10) == [(0, 9), (10, 19)]
    results = compact_by_policy(storage, interval=10)
    assert [(r.start, r.end) for r in results] == [(0, 9), (10, 19)]
    assert compaction_plan(list_log(storage), 10) == []
    assert compaction_plan(load_snapshot(storage), 10) == []

    root = table_copy("kernel-defaults__basic-dv-with-checkpoint")  # checkpoint at 40, latest 46
    dv_storage = Storage.for_uri(str(root))
    assert compaction_plan(list_log(dv_storage), 3) == [(41, 43), (44, 46)]
    assert compaction_plan(load_snapshot(dv_storage), 3) == [(41, 43), (44, 46)]
    assert compaction_plan(list_log(dv_storage), 7) == []


@pytest.mark.parametrize("cfg,override,expected", [
    ({}, None, None),
    ({"delta.logCompactionInterval": "10"}, None, 10),
    ({"delta.logCompactionInterval": "0"}, None, None),
    ({"delta.logCompactionInterval": "10"}, 5, 5),
])
def test_compaction_interval(cfg, override, expected):
    assert compaction_interval(cfg, override=override) == expected


def test_compaction_interval_rejects_garbage():
    with pytest.raises(ValueError, match="must be an integer"):
        compaction_interval({"delta.logCompactionInterval": "often"})


# ---- CLI ----------------------------------------------------------------------------------


def test_cli_compact(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(
        cli, "COMMAND_MODULES", tuple(dict.fromkeys((*cli.COMMAND_MODULES, "crc", "compact")))
    )
    _simple_table(tmp_path / "t")
    code = cli.main(["compact", str(tmp_path / "t"), "--start", "2", "--end", "6", "--json"])
    obj = json.loads(capsys.readouterr().out)
    assert code == 0
    assert obj["file"] == f"_delta_log/{compaction_name(2, 6)}"
    assert obj["already_existed"] is False and obj["num_actions"] > 0
    code = cli.main(["compact", str(tmp_path / "t"), "--start", "2", "--end", "6"])
    assert code == 0 and "already exists and matches" in capsys.readouterr().out
    code = cli.main(["compact", str(tmp_path / "t"), "--start", "6", "--end", "6"])
    captured = capsys.readouterr()
    assert code == 2 and "at least two commits" in captured.err




@pytest.mark.s3
def test_operations_open_a_uri_with_storage_options(tmp_path, s3_server):
    """compact_log, compact_by_policy and the checksum operations take `storage_options`
    for a table given by URI, like vacuum and cleanup_metadata: here the credentials and
    endpoint of an S3 server, without which the URI cannot be reached."""
    local = tmp_path / "t"
    _simple_table(local, versions=6)
    uri = s3_server.fresh_uri("ops")
    options = s3_server.storage_options
    remote = Storage.for_uri(uri, options)
    for path in sorted((local / "_delta_log").iterdir()):
        assert remote.put_if_absent(f"_delta_log/{path.name}", path.read_bytes())

    done = compact_log(uri, start=0, end=2, storage_options=options)
    assert done.file.endswith(compaction_name(0, 2)) and remote.exists(done.file)
    by_policy = compact_by_policy(uri, interval=3, storage_options=options)
    assert [(r.start, r.end) for r in by_policy] == [(3, 5)]

    assert compute_checksum(uri, version=1, storage_options=options)["numFiles"] == 2
    assert compute_version_checksum(uri, storage_options=options).version == 5
    assert write_checksum(uri, version=0, storage_options=options).written
    backfill = write_checksums(uri, start=1, end=5, storage_options=options)
    assert backfill.written == (1, 2, 3, 4, 5)
    verified = verify_checksum(uri, all_versions=True, storage_options=options)
    assert verified.ok and verified.versions == (0, 1, 2, 3, 4, 5)

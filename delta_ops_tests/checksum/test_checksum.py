"""Version checksums: Spark's bins, parsing legacy files, every corpus `.crc` recomputed,
tampering detected, writes that never overwrite, and incremental == full on random
histories (deletion vectors, txns, domain tombstones, in-commit timestamps)."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import delta_ops.cli as cli
from delta_ops.engine.local import LocalEngine
from delta_ops.errors import ChecksumMismatchError, UnsupportedFeatureError, VersionNotFoundError
from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
from delta_ops.maintenance.checksum import (
    ChecksumPolicy,
    IncrementalChecksumUnavailableError,
    checksum_from_snapshot,
    compute_checksum,
    compute_version_checksum,
    derive_checksum,
    read_commit,
    verify_checksum,
    write_checksum,
    write_checksums,
)
from delta_ops.protocol.crc import (
    FILE_SIZE_BIN_BOUNDARIES,
    INT_MAX,
    DeletedRecordCountsHistogram,
    FileSizeHistogram,
    InvalidChecksumError,
    compare_checksums,
    deleted_records_bin,
    file_size_bin,
    parse_checksum,
)
from delta_ops.storage import Storage
from delta_ops_tests.support.checksum_histories import (
    SCHEMA,
    histories,
    write_history,
)
from delta_ops_tests.support.corpus import CORPUS

CRC_FILES = sorted(
    p for p in CORPUS.rglob("_delta_log/*.crc") if not p.name.startswith(".")
)
CRC_TABLES = sorted({p.parent.parent for p in CRC_FILES})


def _rel(p: Path) -> str:
    return str(p.relative_to(CORPUS))


# ---- bins ---------------------------------------------------------------------------------


def test_corpus_has_spark_checksums():
    assert len(CRC_FILES) >= 20
    assert any("histogramOpt" in p.read_text() for p in CRC_FILES)
    assert any("numTransactions" in p.read_text() for p in CRC_FILES)


def test_file_size_bins_are_sparks():
    recorded = set()
    for p in CRC_FILES:
        obj = json.loads(p.read_text())
        for key in ("histogramOpt", "fileSizeHistogram"):
            if key in obj:
                recorded.add(tuple(obj[key]["sortedBinBoundaries"]))
    assert recorded == {FILE_SIZE_BIN_BOUNDARIES}
    b = FILE_SIZE_BIN_BOUNDARIES
    assert len(b) == 95 and b[:3] == (0, 8192, 16384) and b[-1] == 256 * 1024**3
    assert 124 * 1024**2 in b and 4 * 1024**3 in b


@pytest.mark.parametrize(
    "size,expected",
    [(-1, -1), (0, 0), (8191, 0), (8192, 1), (8193, 1), (4 * 1024**2, 10), (2**62, 94)],
)
def test_file_size_bin(size, expected):
    assert file_size_bin(size) == expected


@pytest.mark.parametrize(
    "card,expected",
    [(0, 0), (1, 1), (9, 1), (10, 2), (99, 2), (10**7, 8), (INT_MAX - 1, 8), (INT_MAX, 9),
     (2**63 - 1, 9)],
)
def test_deleted_records_bin(card, expected):
    assert deleted_records_bin(card) == expected


def test_deleted_records_bin_rejects_negative():
    with pytest.raises(ValueError, match="cannot be negative"):
        deleted_records_bin(-1)


def test_histogram_insert_remove_and_engine_agree():
    sizes = [0, 1, 8191, 8192, 5 * 1024**2, 300 * 1024**3, 130 * 1024**2]
    h = FileSizeHistogram.from_sizes(sizes)
    counts, totals = LocalEngine().size_histogram(
        pa.array(sizes, pa.int64()), FILE_SIZE_BIN_BOUNDARIES
    )
    assert (list(h.file_counts), list(h.total_bytes)) == (counts, totals)
    assert sum(h.file_counts) == len(sizes) and sum(h.total_bytes) == sum(sizes)
    assert h.updated(removed=sizes) == FileSizeHistogram.empty()
    assert not h.updated(removed=[8192, 8192]).is_valid


def test_deleted_record_histogram_update():
    h = DeletedRecordCountsHistogram.empty().updated(added=[0, 5, 5, INT_MAX])
    assert h.deleted_record_counts == (1, 2, 0, 0, 0, 0, 0, 0, 0, 1)
    assert h.updated(removed=[0, 5, 5, INT_MAX]) == DeletedRecordCountsHistogram.empty()


# ---- parsing ------------------------------------------------------------------------------


def test_every_corpus_crc_parses_and_round_trips():
    for p in CRC_FILES:
        obj = json.loads(p.read_text())
        assert parse_checksum(p.read_bytes()).to_dict() == obj, _rel(p)


def test_legacy_and_spec_histogram_names():
    base = {"tableSizeBytes": 10, "numFiles": 1, "numMetadata": 1, "numProtocol": 1}
    hist = FileSizeHistogram.from_sizes([10]).to_dict()
    legacy = parse_checksum(orjson.dumps({**base, "histogramOpt": hist}))
    spec = parse_checksum(orjson.dumps({**base, "fileSizeHistogram": hist}))
    assert legacy.file_size_histogram == spec.file_size_histogram
    assert legacy.histogram_field == "histogramOpt"
    assert "fileSizeHistogram" in spec.to_dict() and "histogramOpt" not in spec.to_dict()
    old = parse_checksum(orjson.dumps({**base, "numTransactions": 3}))
    assert old.metadata is None and old.protocol is None and old.num_transactions == 3
    assert old.to_dict()["numTransactions"] == 3


@pytest.mark.parametrize(
    "content,match",
    [
        (b"", "empty"),
        (b"{not json", "not valid JSON"),
        (b'{"numFiles": 1}', "tableSizeBytes"),
        (b'{"tableSizeBytes": 1, "numFiles": "x"}', "numFiles must be an integer"),
        (
            b'{"tableSizeBytes":1,"numFiles":1,"histogramOpt":{"sortedBinBoundaries":[0,5],'
            b'"fileCounts":[1],"totalBytes":[1,0]}}',
            "2 boundaries but 1 file counts",
        ),
        (
            b'{"tableSizeBytes":1,"numFiles":1,"deletedRecordCountsHistogramOpt":'
            b'{"deletedRecordCounts":[1]}}',
            "10 bins",
        ),
    ],
)
def test_invalid_checksum_files(content, match):
    with pytest.raises(InvalidChecksumError, match=match):
        parse_checksum(content)


# ---- corpus: compute and verify -------------------------------------------------------------


def _expected_fields(recorded: dict, computed: dict) -> list[str]:
    """Fields of the recorded file whose value our computation reproduces differently."""
    bad = []
    for key, value in recorded.items():
        if key == "numTransactions":
            ours = len(computed["setTransactions"])
        elif key == "allFiles":
            def k(a):
                return (a["path"], json.dumps(a.get("deletionVector"), sort_keys=True))

            ours = sorted(computed.get("allFiles", []), key=k)
            value = sorted(value, key=k)
            for a in value + ours:  # stats compared as JSON values
                a["stats"] = json.loads(a["stats"]) if a.get("stats") else None
        elif key in ("setTransactions", "domainMetadata"):
            ours = sorted(computed.get(key, []), key=json.dumps)
            value = sorted(value, key=json.dumps)
        elif key == "protocol":
            ours = {k: sorted(v) if isinstance(v, list) else v for k, v in computed[key].items()}
            value = {k: sorted(v) if isinstance(v, list) else v for k, v in value.items()}
        else:
            ours = computed.get(key)
        if ours != value:
            bad.append(key)
    return bad


@pytest.mark.parametrize("crc", CRC_FILES, ids=_rel)
def test_compute_reproduces_every_corpus_crc(crc):
    root = crc.parent.parent
    version = int(crc.name[:20])
    recorded = json.loads(crc.read_text())
    for method in ("full", "auto"):
        computed = compute_checksum(str(root), version=version, method=method)
        assert _expected_fields(json.loads(crc.read_text()), computed) == [], method
        # Nothing Spark wrote is missing from ours (numTransactions became setTransactions).
        assert set(recorded) - {"numTransactions"} <= set(computed)


@pytest.mark.parametrize("root", CRC_TABLES, ids=_rel)
def test_verify_passes_on_every_corpus_table(root):
    result = verify_checksum(str(root), all_versions=True)
    assert result.ok, result.mismatches
    on_disk = sorted(int(p.name[:20]) for p in root.glob("_delta_log/[0-9]*.crc"))
    assert sorted(result.versions) == on_disk


def _append_line(path: Path, obj: dict) -> None:
    text = path.read_text()
    path.write_text(text.rstrip("\n") + "\n" + json.dumps(obj) + "\n")


def test_extra_add_in_a_commit_fails_verify_naming_fields(table_copy):
    root = table_copy("golden__commit-info-containing-arbitrary-operationParams-types")
    _append_line(
        root / "_delta_log" / "00000000000000000002.json",
        {"add": {"path": "month=3/extra.parquet", "partitionValues": {"month": "3"},
                 "size": 9999, "modificationTime": 1, "dataChange": True}},
    )
    result = verify_checksum(str(root), version=2)
    assert not result.ok
    by_field = {m.field: m for m in result.mismatches}
    assert {"numFiles", "tableSizeBytes", "allFiles"} <= set(by_field)
    assert (by_field["numFiles"].recorded, by_field["numFiles"].computed) == (2, 3)
    size = by_field["tableSizeBytes"]
    assert (size.recorded, size.computed) == (904, 904 + 9999)
    assert by_field["allFiles"].computed[0]["path"] == "month=3/extra.parquet"
    assert verify_checksum(str(root), version=1).ok  # earlier versions are untouched
    with pytest.raises(ChecksumMismatchError, match="numFiles") as info:
        result.raise_for_mismatch()
    assert info.value.version == 2


def test_tampered_histogram_and_crc_fields(table_copy):
    root = table_copy("spark__variant-stats-with-struct-no-checkpoint")
    crc = root / "_delta_log" / "00000000000000000001.crc"
    obj = json.loads(crc.read_text())
    obj["histogramOpt"]["fileCounts"][0] = 7
    obj["numDeletionVectorsOpt"] = 5
    obj["metadata"]["configuration"]["x"] = "y"
    crc.write_text(json.dumps(obj))
    result = verify_checksum(str(root), version=1)
    fields = {m.field for m in result.mismatches}
    assert fields == {"histogramOpt", "numDeletionVectorsOpt", "metadata"}
    hist = next(m for m in result.mismatches if m.field == "histogramOpt")
    assert hist.recorded["fileCounts"][0] == 7 and hist.computed["fileCounts"][0] == 2


def test_unparsable_crc_is_a_mismatch(table_copy):
    root = table_copy("spark__variant-stats-no-checkpoint")
    (root / "_delta_log" / "00000000000000000000.crc").write_text("{oops")
    result = verify_checksum(str(root), all_versions=True)
    assert [(m.version, m.field) for m in result.mismatches] == [(0, "file")]
    assert result.versions == (0, 1)


def test_verify_without_crc_names_the_version(table_copy, run):
    root = table_copy("spark__delta-1.2.1")
    with pytest.raises(VersionNotFoundError, match="no version checksum file"):
        verify_checksum(str(root), version=2)
    # --all with no .crc at all checked nothing: not a pass (it printed "ok", exit 0).
    with pytest.raises(VersionNotFoundError, match="the log holds no .crc file") as info:
        verify_checksum(str(root), all_versions=True)
    assert info.value.version is None and info.value.table.endswith(root.name)
    code, out, err = run("crc", "verify", str(root), "--all", "--json")
    assert code == 1 and "the log holds no .crc file" in err
    assert json.loads(out)["error"]["type"] == "VersionNotFoundError"


# ---- writing ------------------------------------------------------------------------------


def test_write_never_overwrites(table_copy):
    root = table_copy("spark__variant-stats-no-checkpoint")
    crc = root / "_delta_log" / "00000000000000000001.crc"
    before = crc.read_bytes()
    result = write_checksum(str(root), version=1)
    assert (result.written, result.already_existed) == (False, True)
    assert crc.read_bytes() == before


def test_write_on_newer_features(table_copy):
    # variantType (current protocol) does not change the log's mechanics: the checksum is
    # written and equals the one Spark wrote for the same version.
    root = table_copy("spark__variant-stats-no-checkpoint")
    crc = root / "_delta_log" / "00000000000000000001.crc"
    spark = orjson.loads(crc.read_bytes())
    crc.unlink()
    assert write_checksum(str(root), version=1).written
    ours = orjson.loads(crc.read_bytes())
    for key in ("numFiles", "tableSizeBytes", "numMetadata", "numProtocol"):
        assert ours[key] == spark[key], key
    assert verify_checksum(str(root), version=1).ok
    # collations is Spark's and not in the spec: writes are refused, naming it.
    root = table_copy("golden__collations-table")
    crc = root / "_delta_log" / "00000000000000000000.crc"
    crc.unlink()
    with pytest.raises(UnsupportedFeatureError, match="collations"):
        write_checksum(str(root), version=0)
    assert not crc.exists()


def test_write_requires_the_commit(table_copy):
    root = table_copy("spark__delta-1.2.1")
    with pytest.raises(VersionNotFoundError, match="does not exist"):
        write_checksum(str(root), version=9)
    result = write_checksum(str(root))  # the latest version
    assert result.written and result.version == 4 and result.method == "full"
    assert verify_checksum(str(root)).ok


def test_backfill_uses_the_incremental_path(table_copy):
    root = table_copy("kernel-defaults__basic-dv-with-checkpoint")
    result = write_checksums(str(root), start=38, end=46)
    assert result.written == tuple(range(38, 47))
    assert (result.full_computations, result.incremental_computations) == (1, 8)
    check = verify_checksum(str(root), all_versions=True)
    assert check.ok and check.versions == tuple(range(38, 47))
    again = write_checksums(str(root), start=38, end=46)
    assert again.written == () and again.already_existed == tuple(range(38, 47))
    # A single write after the range derives from the previous .crc alone.
    crc46 = root / "_delta_log" / "00000000000000000046.crc"
    obj = json.loads(crc46.read_text())
    assert obj["numDeletionVectorsOpt"] == 2 and obj["numDeletedRecordsOpt"] == 46
    assert obj["deletedRecordCountsHistogramOpt"]["deletedRecordCounts"][2] == 2


def test_incremental_only_reads_the_commit(table_copy):
    """With N-1.crc present, N.crc is derived without reading the checkpoint or older commits."""
    root = table_copy("kernel-defaults__basic-dv-with-checkpoint")
    write_checksum(str(root), version=45)
    log = root / "_delta_log"
    for p in log.glob("*.checkpoint.parquet"):
        p.unlink()
    for v in range(0, 45):
        (log / f"{v:020d}.json").unlink()
    (log / "_last_checkpoint").unlink()
    computed = compute_version_checksum(str(root), version=46)
    assert computed.method == "incremental"
    assert computed.checksum.num_files == 2


LIVE = "part-00000-87eec267-9acd-4e9a-a216-ec596132203d-c000.snappy.parquet"


@pytest.mark.parametrize(
    "extra,reason",
    [
        ({"remove": {"path": LIVE, "deletionTimestamp": 1, "dataChange": True}}, "no size"),
        (None, "twice"),  # commit 46's add line again: the same file key twice
    ],
)
def test_unsound_commits_fall_back_to_full(table_copy, extra, reason):
    root = table_copy("kernel-defaults__basic-dv-with-checkpoint")
    policy = ChecksumPolicy(all_files_threshold=None)  # counters only, no exact file list
    write_checksum(str(root), version=45, policy=policy)
    commit = root / "_delta_log" / "00000000000000000046.json"
    if extra is None:
        extra = next(a for a in map(json.loads, commit.read_text().splitlines()) if "add" in a)
    _append_line(commit, extra)
    computed = compute_version_checksum(str(root), version=46, policy=policy)
    assert computed.method == "full" and reason in computed.fallback_reason
    with pytest.raises(IncrementalChecksumUnavailableError, match=reason):
        compute_version_checksum(str(root), version=46, method="incremental", policy=policy)


def test_exact_path_ignores_a_remove_of_a_file_not_live(table_copy):
    """With allFiles in N-1.crc the commit is reconciled against the real file list."""
    root = table_copy("kernel-defaults__basic-dv-with-checkpoint")
    write_checksum(str(root), version=45)
    _append_line(
        root / "_delta_log" / "00000000000000000046.json",
        {"remove": {"path": "never-added.parquet", "deletionTimestamp": 1, "dataChange": True,
                    "size": 10}},
    )
    incremental = compute_version_checksum(str(root), version=46)
    full = compute_version_checksum(str(root), version=46, method="full")
    assert incremental.method == "incremental"
    assert compare_checksums(full.checksum, incremental.checksum) == []
    assert incremental.checksum.num_files == 2


def test_compute_stats_operation_falls_back(table_copy):
    root = table_copy("kernel-defaults__basic-dv-with-checkpoint")
    write_checksum(str(root), version=45)
    storage = Storage.for_uri(str(root))
    actions = read_commit(storage, 46)
    for a in actions:
        if "commitInfo" in a:
            a["commitInfo"]["operation"] = "COMPUTE STATS"
    previous = parse_checksum((root / "_delta_log" / "00000000000000000045.crc").read_bytes())
    checksum, reason = derive_checksum(previous, actions, version=46, table=storage.root)
    assert checksum is None and "COMPUTE STATS" in reason


# ---- CLI ----------------------------------------------------------------------------------


MONTH1_FILE = "month=1/part-00000-22d25ea7-a383-44df-ad22-6b06d871b547.c000.snappy.parquet"


@pytest.fixture
def run(monkeypatch, capsys):
    monkeypatch.setattr(
        cli, "COMMAND_MODULES", tuple(dict.fromkeys((*cli.COMMAND_MODULES, "crc", "compact")))
    )

    def go(*argv):
        code = cli.main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return go


def test_cli_compute_prints_the_checksum(run):
    root = CRC_TABLES[0]
    code, out, err = run("crc", "compute", str(root), "--version", "0", "--json")
    assert code == 0, err
    assert json.loads(out) == compute_checksum(str(root), version=0)


def test_cli_verify_and_write(run, table_copy):
    root = table_copy("golden__commit-info-containing-arbitrary-operationParams-types")
    code, out, _ = run("crc", "verify", str(root), "--all", "--json")
    assert code == 0 and json.loads(out)["ok"] is True
    _append_line(
        root / "_delta_log" / "00000000000000000001.json",
        {"remove": {"path": MONTH1_FILE, "deletionTimestamp": 1, "dataChange": True,
                    "size": 452}},
    )
    code, out, _ = run("crc", "verify", str(root), "--all", "--json")
    obj = json.loads(out)
    assert code == 1 and obj["ok"] is False
    # Version 2 overwrote both files, so only version 1's state changed.
    assert {(m["version"], m["field"]) for m in obj["mismatches"]} == {
        (1, "numFiles"), (1, "tableSizeBytes"), (1, "allFiles")
    }
    code, out, _ = run("crc", "verify", str(root), "--version", "1")
    assert code == 1 and "version 1 numFiles: recorded 2, computed 1" in out
    (root / "_delta_log" / "00000000000000000002.crc").unlink()
    code, out, _ = run("crc", "write", str(root), "--json")
    assert code == 0 and json.loads(out)["written"] is True
    code, out, _ = run("crc", "write", str(root), "--from", "0", "--to", "2", "--json")
    assert code == 0 and json.loads(out)["already_existed"] == [0, 1, 2]


def test_cli_errors_are_one_line(run, tmp_path):
    code, _, err = run("crc", "verify", str(tmp_path))
    assert code == 1 and err.count("\n") == 1 and "no Delta log" in err


# ---- random histories: incremental == full -------------------------------------------------


def _canon(d: dict) -> dict:
    d = dict(d)
    if "allFiles" in d:
        d["allFiles"] = sorted(
            d["allFiles"], key=lambda a: (a["path"], json.dumps(a.get("deletionVector")))
        )
    return d


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(commits=histories(), threshold=st.sampled_from([None, 2, 50]))
def test_incremental_equals_full(tmp_path_factory, commits, threshold):
    root = tmp_path_factory.mktemp("hist")
    write_history(root, commits)
    storage = Storage.for_uri(str(root))
    policy = ChecksumPolicy(all_files_threshold=threshold)
    full = [
        checksum_from_snapshot(load_snapshot(storage, v), policy=policy)
        for v in range(len(commits))
    ]
    for v in range(1, len(commits)):
        derived, reason = derive_checksum(
            full[v - 1], read_commit(storage, v), version=v, table=storage.root, policy=policy
        )
        if derived is not None:
            assert _canon(derived.to_dict()) == _canon(full[v].to_dict()), v
            assert compare_checksums(full[v], derived) == []
        else:  # only allFiles can be missing from the previous checksum here
            assert "allFiles" in reason, reason
    # The backfill chain (incremental from its own output) writes exactly the full result.
    result = write_checksums(storage, start=0, end=len(commits) - 1, policy=policy)
    assert result.written == tuple(range(len(commits)))
    for v, expected in enumerate(full):
        on_disk = orjson.loads((root / "_delta_log" / f"{v:020d}.crc").read_bytes())
        assert _canon(on_disk) == _canon(expected.to_dict()), v
        ict = commits[v][0]["commitInfo"].get("inCommitTimestamp")
        assert on_disk.get("inCommitTimestampOpt") == ict
        assert on_disk["txnId"] == f"txn-{v}"
    assert verify_checksum(storage, all_versions=True).ok


# ---- other engines' histograms, the spec's field name, other storage ------------------------


def _spark_compress(h: dict) -> dict:
    """Spark's FileStatsHistogram.compress: empty bins merged into the bin before them."""
    keep = [0] + [
        i for i in range(1, len(h["fileCounts"]))
        if h["fileCounts"][i] or h["fileCounts"][i - 1]
    ]
    return {k: [h[k][i] for i in keep] for k in ("sortedBinBoundaries", "fileCounts", "totalBytes")}


def test_verify_uses_the_recorded_bin_boundaries(table_copy):
    root = table_copy("kernel-defaults__spark-variant-stable-feature-checkpoint")
    crc = root / "_delta_log" / "00000000000000000001.crc"
    obj = json.loads(crc.read_text())
    obj["histogramOpt"] = _spark_compress(obj["histogramOpt"])
    assert len(obj["histogramOpt"]["sortedBinBoundaries"]) < 10
    crc.write_text(json.dumps(obj))
    assert verify_checksum(str(root), version=1).ok
    obj["histogramOpt"]["totalBytes"][-1] += 1
    crc.write_text(json.dumps(obj))
    assert [m.field for m in verify_checksum(str(root), version=1).mismatches] == ["histogramOpt"]


def test_spec_field_name_and_memory_storage(tmp_path):
    storage = Storage.for_uri(f"memory://crc-{tmp_path.name}")
    commits = [
        [{"commitInfo": {"txnId": "a"}},
         {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
         {"metaData": {"id": "m", "format": {"provider": "parquet", "options": {}},
                       "schemaString": SCHEMA, "partitionColumns": [], "configuration": {}}},
         {"add": {"path": "a.parquet", "partitionValues": {}, "size": 5, "modificationTime": 1,
                  "dataChange": True}}],
        [{"commitInfo": {"txnId": "b"}}, {"txn": {"appId": "s", "version": 3}},
         {"add": {"path": "b.parquet", "partitionValues": {}, "size": 7, "modificationTime": 2,
                  "dataChange": True}}],
    ]
    for v, actions in enumerate(commits):
        storage.put_if_absent(
            f"_delta_log/{v:020d}.json", b"\n".join(orjson.dumps(a) for a in actions)
        )
    policy = ChecksumPolicy(histogram_field="fileSizeHistogram")
    assert write_checksum(storage, version=0, policy=policy).method == "full"
    second = write_checksum(storage, version=1, policy=policy)
    assert second.written and second.method == "incremental"
    obj = orjson.loads(storage.read("_delta_log/00000000000000000001.crc"))
    assert "fileSizeHistogram" in obj and "histogramOpt" not in obj
    assert obj["txnId"] == "b" and obj["setTransactions"] == [{"appId": "s", "version": 3}]
    assert (obj["numFiles"], obj["tableSizeBytes"]) == (2, 12)
    assert "numDeletedRecordsOpt" not in obj  # no deletionVectors feature
    assert verify_checksum(storage, all_versions=True).ok

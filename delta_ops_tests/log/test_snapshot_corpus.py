"""Every corpus table, at every version, reads like the independent oracle replay."""

from __future__ import annotations

import json

import orjson
import pytest

from delta_ops.errors import (
    CorruptLogError,
    DeltaOpsError,
    UnsupportedFeatureError,
    VersionNotFoundError,
)
from delta_ops.table import DeltaTable
from delta_ops_tests.support.broken_tables import (
    BROKEN,
)
from delta_ops_tests.support.corpus import CORPUS, all_corpus_tables, corpus_path
from delta_ops_tests.support.oracle import _abs_key, _dv, oracle_replay

READABLE = [t for t in all_corpus_tables() if t not in BROKEN]


def _versions(root) -> list[int]:
    log = root / "_delta_log"
    commits = sorted(int(p.name[:20]) for p in log.glob("[0-9]*.json") if len(p.name) == 25)
    cps = {int(p.name[:20]) for p in log.glob("[0-9]*.checkpoint*")}
    earliest = 0 if commits and commits[0] == 0 else min(c for c in cps if c >= 0)
    return [v for v in commits if v >= earliest]


def _ours(snapshot, root):
    files = {}
    for row in snapshot.files.select(["path", "size", "deletionVector"]).to_pylist():
        files[(_abs_key(row["path"], root), _dv(row["deletionVector"]))] = row["size"]
    return files


@pytest.mark.parametrize("name", READABLE)
def test_every_version_matches_oracle(name):
    root = corpus_path(name)
    table = DeltaTable(str(root))
    versions = _versions(root)
    assert versions, f"{name}: no versions found"
    for v in versions:
        snap = table.snapshot(v)
        expected = oracle_replay(root, v)
        assert snap.version == v
        assert snap.protocol == expected.protocol, f"{name}@{v}: protocol"
        assert snap.metadata.raw == expected.metadata, f"{name}@{v}: metadata"
        want = {k: a["size"] for k, a in expected.files.items()}
        assert _ours(snap, root) == want, f"{name}@{v}: live files"
        assert {a: t.version for a, t in snap.txns.items()} == expected.txns, f"{name}@{v}: txns"
        assert {d: m.configuration for d, m in snap.domains.items()} == expected.domains
        assert snap.tombstones.num_rows >= 0
    latest = table.snapshot()
    assert latest.version == versions[-1]


@pytest.mark.parametrize("name,expected", sorted(BROKEN.items()))
def test_broken_tables_are_refused(name, expected):
    err, text = expected
    with pytest.raises(err, match=text) as info:
        DeltaTable(str(corpus_path(name))).snapshot()
    assert str(corpus_path(name).name) in str(info.value)


def test_not_contiguous_table_still_reads_before_the_gap():
    snap = DeltaTable(str(corpus_path("golden__versions-not-contiguous"))).snapshot(0)
    assert snap.version == 0


@pytest.mark.parametrize(
    "name", ["golden__corrupted-last-checkpoint", "golden__corrupted-last-checkpoint-kernel"]
)
def test_corrupted_last_checkpoint_falls_back_to_listing(name):
    root = corpus_path(name)
    snap = DeltaTable(str(root)).snapshot()
    expected = oracle_replay(root)
    assert snap.version == expected.version
    assert _ours(snap, root) == {k: a["size"] for k, a in expected.files.items()}
    if name.endswith("-kernel"):  # an empty _last_checkpoint: the hint is reported unusable
        assert "not valid JSON" in snap.segment.last_checkpoint_problem


def test_checkpoint_is_used_when_present():
    snap = DeltaTable(str(corpus_path("kernel-defaults__basic-dv-with-checkpoint"))).snapshot()
    assert snap.checkpoint_version == 40
    snap30 = DeltaTable(str(corpus_path("kernel-defaults__basic-dv-with-checkpoint"))).snapshot(35)
    assert snap30.checkpoint_version == 30


def test_v2_checkpoint_with_missing_sidecar_falls_back(table_copy):
    root = table_copy("kernel-defaults__kernel-pagination-v2-checkpoint-parquet")
    before = DeltaTable(str(root)).snapshot()
    sidecars = sorted((root / "_delta_log" / "_sidecars").iterdir())
    # Sidecars of the newest checkpoint (v4) go missing: the reader must fall back.
    cp4 = [
        p
        for p in (root / "_delta_log").iterdir()
        if p.name.startswith("00000000000000000004.checkpoint")
    ]
    assert cp4
    referenced = [s for s in sidecars if s.name in cp4[0].read_text(errors="ignore")] or sidecars[
        -1:
    ]
    for s in referenced:
        s.unlink()
    after = DeltaTable(str(root)).snapshot()
    assert after.checkpoint_version != 4
    assert _ours(after, root) == _ours(before, root)


def test_missing_version_is_a_clear_error():
    root = corpus_path("basic_append")
    with pytest.raises(
        VersionNotFoundError, match="version 7 does not exist; the latest version is 1"
    ):
        DeltaTable(str(root)).snapshot(7)


def test_truncated_log_refuses_versions_before_checkpoint():
    root = corpus_path("no_replay")
    with pytest.raises(VersionNotFoundError, match="cannot be reconstructed"):
        DeltaTable(str(root)).snapshot(1)


@pytest.mark.parametrize(
    "dat", sorted(p.name for p in (CORPUS / "dat").iterdir() if (p / "expected").is_dir())
)
def test_dat_expected_metadata(dat):
    base = CORPUS / "dat" / dat
    table = DeltaTable(str(base / "delta"))
    checked = 0
    for exp_dir in sorted((base / "expected").iterdir()):
        meta_file = exp_dir / "table_version_metadata.json"
        if not meta_file.exists():
            continue
        expected = json.loads(meta_file.read_text())
        version = None if exp_dir.name == "latest" else int(exp_dir.name[1:])
        snap = table.snapshot(version)
        assert snap.version == expected["version"]
        assert snap.protocol["minReaderVersion"] == expected["min_reader_version"]
        assert snap.protocol["minWriterVersion"] == expected["min_writer_version"]
        assert snap.metadata.configuration == expected["properties"]
        checked += 1
    assert checked >= 1


def test_restricting_features_are_reported_not_fatal_for_inspection():
    snap = DeltaTable(str(corpus_path("kernel-benchmarks__basic_catalog_managed/delta"))).snapshot()
    assert "catalogManaged" in snap.reader_features & snap.writer_features
    snap.ensure_supported("checkpoint")  # allowed on published versions
    with pytest.raises(UnsupportedFeatureError, match="catalogManaged"):
        snap.ensure_supported("vacuum")
    snap = DeltaTable(str(corpus_path("golden__collations-table"))).snapshot()
    assert snap.unsupported_features("checkpoint")["write"] == ["collations"]
    with pytest.raises(UnsupportedFeatureError, match="collations"):
        snap.ensure_supported("checkpoint")


def test_unknown_reader_feature_refuses_the_read(table_copy):
    # The one gate: a reader feature delta_ops does not know refuses reading; an unknown
    # writer feature or writer version only refuses writing.
    root = table_copy("basic_append")
    log = root / "_delta_log"
    protocol = {"minReaderVersion": 3, "minWriterVersion": 7,
                "readerFeatures": ["futureFeature"], "writerFeatures": ["futureFeature"]}
    (log / "00000000000000000002.json").write_bytes(orjson.dumps({"protocol": protocol}) + b"\n")
    with pytest.raises(UnsupportedFeatureError, match="futureFeature") as info:
        DeltaTable(str(root)).snapshot()
    assert info.value.version == 2
    protocol = {"minReaderVersion": 1, "minWriterVersion": 8}
    (log / "00000000000000000002.json").write_bytes(orjson.dumps({"protocol": protocol}) + b"\n")
    snap = DeltaTable(str(root)).snapshot()
    assert snap.version == 2
    with pytest.raises(UnsupportedFeatureError, match="writer version 8"):
        snap.ensure_supported("checkpoint")


def test_errors_name_table_version_and_file(table_copy):
    root = table_copy("basic_append")
    (root / "_delta_log" / "00000000000000000001.json").write_text('{"add": {"path": \n')
    with pytest.raises(CorruptLogError) as info:
        DeltaTable(str(root)).snapshot()
    msg = str(info.value)
    assert "version 1" in msg and "00000000000000000001.json" in msg and root.name in msg
    assert isinstance(info.value, DeltaOpsError)


def test_corrupt_checkpoint_falls_back_to_commits(table_copy):
    root = table_copy("kernel-defaults__basic-with-checkpoint")
    before = DeltaTable(str(root)).snapshot()
    assert before.checkpoint_version == 10
    (root / "_delta_log" / "00000000000000000010.checkpoint.parquet").write_bytes(b"not parquet")
    after = DeltaTable(str(root)).snapshot()
    assert after.checkpoint_version is None
    assert _ours(after, root) == _ours(before, root)


def test_corrupt_checkpoint_without_commits_to_fall_back_on(table_copy):
    root = table_copy("no_replay")  # the log starts at its checkpoint (v2)
    for cp in (root / "_delta_log").glob("*.checkpoint.parquet"):
        cp.write_bytes(b"not parquet")
    with pytest.raises(CorruptLogError, match="cannot be read as Parquet") as info:
        DeltaTable(str(root)).snapshot()
    assert "checkpoint.parquet" in str(info.value)


@pytest.mark.parametrize("name", ["basic_append", "basic_partitioned", "deletion_vectors"])
def test_reads_checkpoints_written_by_deltalake(table_copy, name):
    from deltalake import DeltaTable as RsTable

    root = table_copy(name)
    before = DeltaTable(str(root)).snapshot()
    RsTable(str(root)).create_checkpoint()
    after = DeltaTable(str(root)).snapshot()
    assert after.checkpoint_version == before.version
    assert _ours(after, root) == _ours(before, root)
    assert after.tombstones.num_rows <= before.tombstones.num_rows


def test_arrow_schema_logical_and_physical():
    import pyarrow.parquet as pq

    root = corpus_path("column_mapping")
    snap = DeltaTable(str(root)).snapshot()
    logical = snap.arrow_schema()
    physical = snap.arrow_schema(physical=True)
    assert logical.names == [f.name for f in snap.schema.fields]
    assert physical.names != logical.names  # name mode: physical names differ
    data_file = root / snap.files.column("path")[0].as_py()
    file_names = set(pq.read_schema(data_file).names)
    assert set(physical.names) - set(snap.partition_columns) <= file_names

"""VACUUM's partitioned path (issue 15) plans exactly what the in-memory path plans.

With the threshold at 0 (`partition_files=0`, or `$DELTA_OPS_VACUUM_PARTITION_FILES=0`)
every table goes through the spilled references (`log.replay.reference_buckets`) and the
bucket-by-bucket anti-join of the listing (`engine.local.find_unreferenced_in_buckets`).
Checked here, against the in-memory path as the reference:

* the references themselves (kept keys, paths as written, expired keys) on every corpus
  table and on the compaction fixture in both forms, with the covered commits present and
  gone; each bucket holds only keys of its bucket; the spill files are gone afterwards;
* the plan (files, sizes, side files, directories, messages), full and lite, on every
  corpus table VACUUM runs on (copied, files aged), with 1, 2 and 7 buckets (one bucket
  holding everything, several keys per bucket, empty buckets), and on generated
  histories with junk, orphans and random ages;
* the safety properties of `test_vacuum.py` and `test_vacuum_paths_property.py` (awkward
  spellings: `:`, `%`, spaces, `//`, `file:` forms, links out of the root), run again
  through the partitioned path;
* errors half-way (a bad deletion vector while spilling, a listing that fails) leave no
  spill file behind; on Spark and on S3 (moto) the partitioned plan is the same too.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import delta_ops_tests.support.awkward_paths as paths_property
import delta_ops_tests.support.vacuum_checks as vacuum_tests
from delta_ops.engine.local import LocalEngine
from delta_ops.engine.spill import BucketSpill, bucket_ids
from delta_ops.errors import DeletionVectorError, DeltaOpsError, StorageError
from delta_ops.log.read_options import VACUUM_BUCKETS_ENV as BUCKETS_ENV
from delta_ops.log.read_options import VACUUM_PARTITION_FILES_ENV as THRESHOLD_ENV
from delta_ops.log.read_options import ReadOptions
from delta_ops.log.replay import reference_buckets
from delta_ops.log.replay.checkpoint_fallback import read_with_usable_checkpoint
from delta_ops.log.replay.reference_buckets import (
    CHECKPOINT_BATCH_ROWS,
    SpilledReferences,
    bucket_count,
    read_references,
    spilled_file_references,
)
from delta_ops.log.replay.references import FileReferences, file_references, read_deltas
from delta_ops.log.segment.log_segment import build_log_segment
from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
from delta_ops.maintenance.cleanup import DAY_MS
from delta_ops.maintenance.vacuum import plan_vacuum, vacuum
from delta_ops.protocol.arrays import string_array
from delta_ops.storage import Storage
from delta_ops.storage.local import _LocalBackend
from delta_ops_tests.support.compaction_fixtures import (
    build_compaction_table,
    write_databricks_compaction,
    write_spec_compaction,
)
from delta_ops_tests.support.corpus import all_corpus_tables, copy_corpus_table, corpus_path
from delta_ops_tests.support.raw_histories import BASE_MS, HOUR_MS, build_raw, raw_specs
from delta_ops_tests.support.vacuum_checks import JUNK, _add_junk, _age_table

IN_MEMORY = 10**15  # a threshold no table reaches
BUCKETS = (1, 2, 7)
FAR_FUTURE = 1 << 60


@pytest.fixture
def spill_dir(tmp_path, monkeypatch) -> Path:
    """Spill files go here (and must be gone when a run ends)."""
    d = tmp_path / "spill"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


def _all(chunks) -> set[str]:
    return {p for chunk in chunks for p in chunk.to_pylist()}


def _assert_same_references(want: FileReferences, got: SpilledReferences) -> None:
    assert _all(got.keep_chunks()) == set(want.keep.to_pylist())
    assert _all(got.written_chunks()) == set(want.written.to_pylist())
    assert got.expired_keys().to_pylist() == want.expired.to_pylist()
    for b in range(got.buckets):
        keys = got.keep.bucket(b)
        assert set(bucket_ids(keys, got.buckets).tolist()) <= {b}


# ---- the spill itself ---------------------------------------------------------------------


def test_bucket_ids_are_sparks_pmod_of_hash():
    from delta_ops.protocol.checkpoint_schema import spark_hash

    keys = string_array([f"part={i % 7}/f-{i}.parquet" for i in range(500)] + ["", "é:%20"])
    hashes = spark_hash(keys).tolist()
    assert any(h < 0 for h in hashes)  # pmod, not a plain remainder, matters
    for buckets in (1, 2, 7, 256):
        ids = bucket_ids(keys, buckets).tolist()
        assert ids == [((h % buckets) + buckets) % buckets for h in hashes]
        assert all(0 <= i < buckets for i in ids)


def test_bucket_spill_round_trip_and_cleanup(spill_dir):
    schema = pa.schema([("key", pa.string()), ("n", pa.int64())])
    rows = [f"k{i % 50}" for i in range(1000)]
    table = pa.table({"key": rows, "n": list(range(1000))}, schema=schema)
    with BucketSpill(schema, "key", 64) as spill:
        spill.append(table.slice(0, 400))
        spill.append(table.slice(400))
        assert len(os.listdir(spill_dir)) == 1
        seen = []
        for b in range(64):
            part = spill.bucket(b)
            assert set(bucket_ids(part.column("key"), 64).tolist()) <= {b}
            assert part.num_rows == spill.rows[b]
            seen += part.column("n").to_pylist()
        assert sorted(seen) == list(range(1000))
        assert 0 in spill.rows  # 50 keys over 64 buckets: some are empty, and read so
        with pytest.raises(ValueError, match="being read"):
            spill.append(table)
    assert os.listdir(spill_dir) == []
    with pytest.raises(RuntimeError, match="boom"), BucketSpill(schema, "key", 3) as spill:
        spill.append(table)
        raise RuntimeError("boom")
    assert os.listdir(spill_dir) == []


def test_bucket_count_rule(monkeypatch):
    monkeypatch.delenv(BUCKETS_ENV, raising=False)
    assert bucket_count(0) == 1
    assert bucket_count(500_000) == 1
    assert bucket_count(500_001) == 2
    assert bucket_count(3_100_000) == 7
    assert bucket_count(10**12) == 256
    assert bucket_count(10**6, 5) == 5
    monkeypatch.setenv(BUCKETS_ENV, "3")
    assert bucket_count(10**9, options=ReadOptions.from_env()) == 3


# ---- the references -----------------------------------------------------------------------


@pytest.mark.parametrize("name", all_corpus_tables())
def test_corpus_spilled_references_equal_the_in_memory_ones(name, spill_dir, monkeypatch):
    storage = Storage.for_uri(str(corpus_path(name)))
    for delete_before in (0, FAR_FUTURE):
        try:
            segment, want = read_with_usable_checkpoint(
                storage, lambda s: file_references(storage, s, None, delete_before)  # noqa: B023
            )
        except DeltaOpsError as exc:
            with pytest.raises(type(exc)):
                read_with_usable_checkpoint(
                    storage,
                    lambda s: spilled_file_references(storage, s, None, delete_before,  # noqa: B023
                                                      buckets=3),
                )
            assert os.listdir(spill_dir) == []
            return
        for buckets, batch_rows in ((1, CHECKPOINT_BATCH_ROWS), (3, 2)):
            # Three buckets read the checkpoint two rows at a time.
            monkeypatch.setattr(reference_buckets, "CHECKPOINT_BATCH_ROWS", batch_rows)
            got_segment, got = read_with_usable_checkpoint(
                storage,
                lambda s: spilled_file_references(storage, s, None, delete_before,  # noqa: B023
                                                  buckets=buckets),  # noqa: B023
            )
            with got:
                assert got_segment.version == segment.version
                assert os.listdir(spill_dir)  # it really spilled
                _assert_same_references(want, got)
            assert os.listdir(spill_dir) == []


def test_read_references_takes_the_partitioned_path_from_the_threshold(spill_dir, monkeypatch):
    storage = Storage.for_uri(str(corpus_path("golden__dv-partitioned-with-checkpoint")))
    segment = build_log_segment(storage, None)
    blobs = read_deltas(storage, segment)
    small = read_references(storage, segment, blobs, 0, threshold=IN_MEMORY)
    assert isinstance(small, FileReferences)
    with read_references(storage, segment, blobs, 0, threshold=0, buckets=4) as big:
        assert isinstance(big, SpilledReferences) and big.buckets == 4
        _assert_same_references(small, big)
    monkeypatch.setenv(THRESHOLD_ENV, "0")
    with read_references(storage, segment, blobs, 0, options=ReadOptions.from_env()) as by_env:
        assert isinstance(by_env, SpilledReferences)
    monkeypatch.setenv(THRESHOLD_ENV, "many")
    with pytest.raises(ValueError, match=THRESHOLD_ENV):
        read_references(storage, segment, blobs, 0, options=ReadOptions.from_env())
    assert os.listdir(spill_dir) == []


@pytest.mark.parametrize("form", ["databricks", "spec"])
@pytest.mark.parametrize("commits_kept", [True, False])
def test_compaction_fixture_references(tmp_path, spill_dir, form, commits_kept):
    """Both readings are spilled and united; without the covered commits the second
    reading fails and is dropped whole, and the compactions read the other way stand in."""
    template = build_compaction_table(tmp_path / "template")
    root = tmp_path / "t"
    shutil.copytree(template.root, root)
    storage = Storage.for_uri(str(root))
    write = write_databricks_compaction if form == "databricks" else write_spec_compaction
    for start, end in [(1, 5), (6, 12)]:
        write(storage, start, end)
    segment = load_snapshot(storage).segment
    assert any(d.is_compaction for d in segment.deltas)
    if not commits_kept:
        for v in range(1, 13):
            (root / "_delta_log" / f"{v:020d}.json").unlink()
        with pytest.raises(DeltaOpsError):
            build_log_segment(storage, segment.version, use_compactions=False)
    for delete_before in (0, FAR_FUTURE):
        want = file_references(storage, segment, None, delete_before)
        with spilled_file_references(storage, segment, None, delete_before, buckets=3) as got:
            assert len(got._readings) == 2
            _assert_same_references(want, got)
    assert os.listdir(spill_dir) == []


# ---- the plan -----------------------------------------------------------------------------


def _cutoff(root: Path) -> tuple[int, int]:
    """(now, retention hours) that expire about half the tombstones."""
    try:
        stamps = sorted(
            t or 0 for t in load_snapshot(Storage.for_uri(str(root)))
            .tombstones.column("deletionTimestamp").to_pylist()
        )
    except DeltaOpsError:
        stamps = []
    now = (stamps[-1] if stamps else BASE_MS) + 30 * DAY_MS
    median = stamps[len(stamps) // 2] if stamps else now - 10 * DAY_MS
    return now, -(-(now - median) // HOUR_MS)


@pytest.mark.parametrize("name", all_corpus_tables())
def test_corpus_partitioned_plan_equals_the_in_memory_plan(table_copy, spill_dir, name):
    root = table_copy(name)
    now, hours = _cutoff(root)
    _age_table(root, now - hours * HOUR_MS - DAY_MS, now - hours * HOUR_MS + HOUR_MS)
    storage = Storage.for_uri(str(root))
    for lite in (False, True):
        args = {"now_ms": now, "retention_hours": hours, "force_retention": True, "lite": lite}
        try:
            want = plan_vacuum(storage, partition_files=IN_MEMORY, **args)
        except DeltaOpsError as exc:
            for buckets in BUCKETS:
                with pytest.raises(type(exc)) as refused:
                    plan_vacuum(storage, partition_files=0, buckets=buckets, **args)
                assert str(refused.value) == str(exc)
            assert os.listdir(spill_dir) == []
            return
        for buckets in BUCKETS:
            got = plan_vacuum(storage, partition_files=0, buckets=buckets, **args)
            assert got == want, (name, lite, buckets)
        assert os.listdir(spill_dir) == []


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    spec=raw_specs(),
    junk=st.lists(st.tuples(st.integers(0, len(JUNK) - 1), st.integers(0, 400)), max_size=8),
    retention_h=st.integers(0, 300),
    extra_h=st.integers(0, 300),
    buckets=st.sampled_from(BUCKETS),
)
def test_generated_histories_plan_the_same(tmp_path_factory, spec, junk, retention_h,
                                           extra_h, buckets):
    """V1/V2 checkpoints of every kind, compactions, absolute paths, DVs, junk files."""
    base = tmp_path_factory.mktemp("part")
    hist = build_raw(base / "t", {**spec, "outside": True}, data_files=True)
    now = hist.commit_ms[-1] + extra_h * HOUR_MS
    _add_junk(hist.root, hist.partition_column, junk, now)
    storage = Storage.for_uri(str(hist.root))
    for lite in (False, True):
        args = {"now_ms": now, "retention_hours": retention_h, "force_retention": True,
                "lite": lite}
        want = plan_vacuum(storage, partition_files=IN_MEMORY, **args)
        assert plan_vacuum(storage, partition_files=0, buckets=buckets, **args) == want


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=paths_property.tables(), buckets=st.sampled_from(BUCKETS))
def test_awkward_paths_plan_the_same(spec, buckets):
    """The spellings of `test_vacuum_paths_property` (`%`, `:`, spaces, `//`, `file:`
    forms, links out of the root): the same plan, or the same refusal."""
    with tempfile.TemporaryDirectory() as tmp:
        root, _must_stay, _may_go, _outside = paths_property.build(Path(tmp), spec)
        storage = Storage.for_uri(str(root))
        args = {"now_ms": paths_property.NOW_MS}
        try:
            want = plan_vacuum(storage, partition_files=IN_MEMORY, **args)
        except DeltaOpsError as exc:
            with pytest.raises(type(exc)):
                plan_vacuum(storage, partition_files=0, buckets=buckets, **args)
            return
        assert plan_vacuum(storage, partition_files=0, buckets=buckets, **args) == want


@pytest.fixture
def partitioned(monkeypatch):
    """Every VACUUM in the test partitions its references, into 3 buckets."""
    monkeypatch.setenv(THRESHOLD_ENV, "0")
    monkeypatch.setenv(BUCKETS_ENV, "3")


def test_safety_property_of_test_vacuum_through_the_partitioned_path(
    tmp_path_factory, partitioned
):
    vacuum_tests.property_no_file_of_a_version_in_the_window_is_deleted(tmp_path_factory)


def _with_examples(prop, examples: int):  # type: ignore[no-untyped-def]
    """`prop` (an awkward-path property) as a new Hypothesis test with `examples` examples.

    `test_vacuum_paths_property.py` runs them at full size (500 and 300) through the default
    path; here they run again through the partitioned one, which costs more than twice as
    much per example, with a third of the examples. A new test, so the shared one keeps its
    own settings."""
    return settings(deadline=None, max_examples=examples,
                    suppress_health_check=[HealthCheck.too_slow])(
        given(paths_property.tables())(prop.hypothesis.inner_test))


def test_awkward_path_properties_through_the_partitioned_path(partitioned):
    _with_examples(
        paths_property.vacuum_never_lists_a_referenced_file_nor_touches_outside_the_root, 170)()
    _with_examples(paths_property.files_deltalake_reads_survive_vacuum, 100)()


def test_corpus_vacuum_matches_the_rules_through_the_partitioned_path(
    table_copy, partitioned, spill_dir
):
    for name in vacuum_tests.VACUUM_TABLES:
        vacuum_tests.corpus_vacuum_matches_the_rules_file_for_file(table_copy, name)
    assert os.listdir(spill_dir) == []


def test_partitioned_dry_run_does_not_import_pandas(table_copy, partitioned):
    vacuum_tests.vacuum_dry_run_does_not_import_pandas(table_copy)


# ---- errors half-way leave nothing behind -------------------------------------------------


def test_a_bad_deletion_vector_while_spilling_leaves_no_spill(tmp_path, spill_dir):
    root = copy_corpus_table("golden__dv-partitioned-with-checkpoint", tmp_path / "t")
    log = root / "_delta_log"
    latest = max(int(p.name[:20]) for p in log.glob("*.json") if p.name[:20].isdigit())
    bad = {"add": {"path": "x.parquet", "partitionValues": {}, "size": 1,
                   "modificationTime": 1, "dataChange": True,
                   "deletionVector": {"storageType": "u", "pathOrInlineDv": "??",
                                      "offset": 1, "sizeInBytes": 1, "cardinality": 1}}}
    (log / f"{latest + 1:020d}.json").write_text(json.dumps(bad) + "\n")
    storage = Storage.for_uri(str(root))
    with pytest.raises(DeletionVectorError) as in_memory:
        plan_vacuum(storage, now_ms=FAR_FUTURE, partition_files=IN_MEMORY)
    with pytest.raises(DeletionVectorError) as spilled:
        plan_vacuum(storage, now_ms=FAR_FUTURE, partition_files=0, buckets=5)
    assert str(spilled.value) == str(in_memory.value)
    assert os.listdir(spill_dir) == []


class _StatFails(_LocalBackend):
    """The real local backend, except that reading listed files' sizes fails (after the
    listing has been spilled)."""

    def without_links(self) -> _StatFails:
        return _StatFails(follow_symlinks=False)

    def stat_files(self, native_dir, names):
        raise OSError("injected failure reading file sizes")


def _stat_fails(root: Path) -> Storage:
    plain = Storage.for_uri(str(root))
    return Storage(plain.root, plain.scheme, plain.storage_options, _StatFails(), plain._base)


def test_a_failing_listing_leaves_no_spill_and_deletes_nothing(
    tmp_path, spill_dir, partitioned
):
    root = copy_corpus_table("golden__dv-partitioned-with-checkpoint", tmp_path / "t")
    (root / "orphan.parquet").write_bytes(b"x")
    before = sorted(p for p in root.rglob("*"))
    assert "orphan.parquet" in plan_vacuum(Storage.for_uri(str(root)), now_ms=FAR_FUTURE).files
    with pytest.raises(StorageError, match="injected"):
        vacuum(_stat_fails(root), now_ms=FAR_FUTURE, engine=LocalEngine(), dry_run=False)
    with pytest.raises(StorageError, match="injected"):
        plan_vacuum(_stat_fails(root), now_ms=FAR_FUTURE, buckets=2)
    assert sorted(p for p in root.rglob("*")) == before
    assert os.listdir(spill_dir) == []


# ---- other engines and stores -------------------------------------------------------------


@pytest.mark.spark
def test_spark_engine_joins_bucketed_keys(spark_engine, table_copy, spill_dir):  # noqa: F811
    for name in ("golden__dv-partitioned-with-checkpoint", "golden__v2-checkpoint-parquet",
                 "golden__canonicalized-paths-special-b"):
        root = table_copy(name)
        now, hours = _cutoff(root)
        _age_table(root, now - hours * HOUR_MS - DAY_MS, now - hours * HOUR_MS + HOUR_MS)
        storage = Storage.for_uri(str(root))
        args = {"now_ms": now, "retention_hours": hours, "force_retention": True}
        want = plan_vacuum(storage, partition_files=IN_MEMORY, **args)
        got = plan_vacuum(storage, partition_files=0, buckets=3, engine=spark_engine, **args)
        assert got == want, name
    assert os.listdir(spill_dir) == []


@pytest.mark.spark
def test_spark_sql_bucket_of_a_path_is_bucket_ids(spark_engine):  # noqa: F811
    # The Spark engine anti-joins one bucket at a time and finds a listed path's bucket
    # with Spark's `pmod(hash(path), B)`: it must be the bucket the keys were spilled to.
    keys = [f"part={i % 7}/f-{i}.parquet" for i in range(300)] + [
        "", "é:%20", "a b/c%3Ad.parquet", "x//y.parquet", "日本/ü.parquet",
    ]
    frame = spark_engine.session.createDataFrame(pa.table({"path": string_array(keys)}))
    for buckets in (2, 7, 256):
        got = frame.selectExpr("path", f"pmod(hash(path), {buckets}) AS b").toArrow()
        by_path = dict(zip(got.column("path").to_pylist(), got.column("b").to_pylist(),
                           strict=True))
        want = bucket_ids(string_array(keys), buckets).tolist()
        assert [by_path[k] for k in keys] == want, buckets


@pytest.mark.s3
def test_s3_partitioned_plan_equals_in_memory_plan(s3_server, spill_dir):
    name = "golden__dv-partitioned-with-checkpoint"
    s3 = Storage.for_uri(s3_server.fresh_uri("vacuum-partitioned"), s3_server.storage_options)
    src = corpus_path(name)
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        s3.put_atomic(path.relative_to(src).as_posix(), path.read_bytes())
    s3.put_atomic("orphan.parquet", b"x")
    now = max(f.modification_time for f in s3.walk("")) + 30 * DAY_MS
    want = plan_vacuum(s3, now_ms=now, partition_files=IN_MEMORY)
    assert "orphan.parquet" in want.files
    for buckets in BUCKETS:
        assert plan_vacuum(s3, now_ms=now, partition_files=0, buckets=buckets) == want
    assert os.listdir(spill_dir) == []

"""The Spark engine gives the local engine's results: engine methods and whole operations.

Every test taking `spark_engine_each` runs twice: on Spark `local[2]` and on
`local-cluster[2,1,1024]`, whose two executors are JVMs of their own with their own Python
workers (what a task needs, storage options included, must be pickled and rebuilt there).
`LocalEngine` is the reference. Tables are corpus tables (copied before any write) and
histories generated with hypothesis; file ages are set with `os.utime`, clocks are fixed.

The S3 tests run the Spark engine against moto's S3 server on 127.0.0.1 and compare with
the same table on local files. Import laziness and the CLI's engine flags are tested here
too (they start no Spark).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delta_ops.commands.engine_args import add_engine_arguments, engine_from_args
from delta_ops.commit import Transaction
from delta_ops.engine.local import LocalEngine
from delta_ops.engine.session import EngineError, SparkSessionConfig, make_engine
from delta_ops.engine.spark import SparkEngine
from delta_ops.errors import StorageError
from delta_ops.log.read_options import VACUUM_BUCKETS_ENV, VACUUM_PARTITION_FILES_ENV
from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
from delta_ops.maintenance.checkpoint import write_checkpoint
from delta_ops.maintenance.checksum import compute_version_checksum, write_checksum
from delta_ops.maintenance.vacuum import vacuum
from delta_ops.protocol.crc import FILE_SIZE_BIN_BOUNDARIES
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import REPO_ROOT, copy_corpus_table, corpus_path
from delta_ops_tests.support.engine_pairs import (
    BACKFILL_TABLES,
    NOW_MS,
    OLD_MS,
    ROW_ID_COLUMNS,
    V2_TABLES,
    CountingEngine,
    _backfill,
    _v2_result_view,
    copy_pair,
    set_mtimes,
    sidecar_digests,
    sorted_files,
    tree,
    without,
)
from delta_ops_tests.support.histories import HistorySpec, StepClock, build_history, histories
from delta_ops_tests.support.s3_proxy import S3Proxy
from delta_ops_tests.support.spark_fixtures import spark_test_config

# Fixtures shared with other modules (module scope: one Spark session per master).

DAY_MS = 86_400_000

VACUUM_TABLES = (
    "golden__data-skipping-partition-and-data-column",  # orphans, partitioned
    "golden__dv-partitioned-with-checkpoint",  # DVs, checkpoint, orphans, partitioned
    "golden__data-reader-escaped-chars",  # special characters in partition directories
)
#: Tables VACUUM finds something to delete in (orphans, expired tombstones).
VACUUM_FINDS_FILES = frozenset(VACUUM_TABLES[:2])
CHECKSUM_TABLES = (
    "golden__dv-partitioned-with-checkpoint",
    "golden__data-reader-partition-values",
    "golden__time-travel-partition-changes-a",
)


# ---- helpers ---------------------------------------------------------------------------------


def data_dirs(storage: Storage) -> list[str]:
    return ["", *storage.list_subdirs("")]


# ---- import laziness and CLI flags (no Spark) ------------------------------------------------


def test_import_starts_no_jvm_and_imports_no_pyspark():
    code = (
        "import os, sys\n"
        "import delta_ops, delta_ops.engine, delta_ops.engine.session, delta_ops.engine.spark\n"
        "from delta_ops.engine.session import make_engine\n"
        "engine = make_engine('spark', spark_master='local[2]')\n"
        "assert not engine.started\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j'))\n"
        "children = []\n"
        "if os.path.isdir('/proc'):\n"
        "    me = str(os.getpid())\n"
        "    for pid in filter(str.isdigit, os.listdir('/proc')):\n"
        "        try:\n"
        "            stat = open(f'/proc/{pid}/stat').read()\n"
        "        except OSError:\n"
        "            continue\n"
        "        if stat.rsplit(')', 1)[1].split()[1] == me:\n"
        "            children.append(pid)\n"
        "print(repr((loaded, children)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO_ROOT
    )
    loaded, children = eval(out.stdout.strip().splitlines()[-1])
    assert loaded == []
    assert children == []


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_engine_arguments(parser)
    return parser.parse_args(argv)


def test_cli_engine_flags_choose_the_engine():
    assert isinstance(engine_from_args(_parse()), LocalEngine)
    assert isinstance(engine_from_args(_parse("--engine", "local")), LocalEngine)
    spark = engine_from_args(_parse("--engine", "spark"))
    assert isinstance(spark, SparkEngine) and spark.config.effective_master == "local[*]"
    implied = engine_from_args(_parse("--spark-master", "spark://127.0.0.1:7077"))
    assert isinstance(implied, SparkEngine)
    assert implied.config.master == "spark://127.0.0.1:7077"
    remote = engine_from_args(
        _parse("--spark-remote", "sc://127.0.0.1:15002", "--spark-conf", "spark.x=1")
    )
    assert remote.config.remote == "sc://127.0.0.1:15002" and remote.config.conf == {"spark.x": "1"}
    assert remote.config.is_connect and not remote.started
    with pytest.raises(argparse.ArgumentTypeError,
                       match="^--spark-master needs --engine spark"):
        engine_from_args(_parse("--engine", "local", "--spark-master", "local[2]"))
    with pytest.raises(argparse.ArgumentTypeError,
                       match="^--spark-master and --spark-conf need --engine spark"):
        engine_from_args(_parse("--engine", "local", "--spark-master", "local[2]",
                                "--spark-conf", "spark.x=1"))
    with pytest.raises(argparse.ArgumentTypeError, match="not both"):
        engine_from_args(_parse("--spark-master", "local[2]", "--spark-remote", "sc://h:1"))
    with pytest.raises(argparse.ArgumentTypeError, match="KEY=VALUE"):
        engine_from_args(_parse("--engine", "spark", "--spark-conf", "novalue"))


def test_session_config_validation():
    with pytest.raises(ValueError, match="not both"):
        SparkSessionConfig(master="local[2]", remote="sc://h:1")
    with pytest.raises(ValueError, match="sc://"):
        SparkSessionConfig(remote="http://h:1")
    with pytest.raises(ValueError, match="unknown engine"):
        make_engine("dask")
    with pytest.raises(ValueError, match="only apply to the spark engine"):
        make_engine("local", spark_master="local[2]")
    config = SparkSessionConfig(conf={"spark.hadoop.fs.s3a.secret.key": "s3cr3t"})
    assert "s3cr3t" not in config.describe() and "s3cr3t" not in repr(SparkEngine(config))
    assert SparkSessionConfig().effective_master == "local[*]"
    assert SparkSessionConfig().executor_python == sys.executable


def test_memory_storage_is_refused_before_spark_starts():
    engine = SparkEngine(spark_test_config())
    storage = Storage.for_uri("memory://engine-equivalence")
    storage.put_atomic("a/x.parquet", b"x")
    with pytest.raises(StorageError, match="memory:// store"):
        engine.list_files(storage, ["", "a"])
    assert not engine.started


# ---- engine methods --------------------------------------------------------------------------


@pytest.mark.spark
@pytest.mark.parametrize("name", VACUUM_TABLES)
def test_list_files(spark_engine_each, name):
    root = corpus_path(name)
    storage = Storage.for_uri(str(root))
    dirs = data_dirs(storage)
    got = spark_engine_each.list_files(storage, dirs)
    want = LocalEngine().list_files(storage, dirs).sort_by("path")
    assert got.schema == want.schema
    assert got.equals(want)
    assert set(got.column("path").to_pylist()) == set(tree(root))
    assert got.num_rows > 3


@pytest.mark.spark
def test_find_unreferenced(spark_engine_each, table_copy):
    root = table_copy("golden__dv-partitioned-with-checkpoint")
    paths = sorted(tree(root))
    for i, p in enumerate(paths):  # half old, half recent
        ms = OLD_MS if i % 2 == 0 else NOW_MS
        os.utime(root / p, ns=(ms * 1_000_000, ms * 1_000_000))
    # A recent file of a table nested in a partition directory comes back too, whatever
    # its age: VACUUM's plan learns of the nested table from it.
    nested = f"{next(p for p in paths if '/' in p).rpartition('/')[0]}/_delta_log/{0:020}.json"
    (root / nested).parent.mkdir()
    (root / nested).write_text("{}\n")
    storage = Storage.for_uri(str(root))
    keep = pa.array(paths[::3] + ["not/there.parquet"], pa.string())
    cutoff = NOW_MS - DAY_MS
    dirs = data_dirs(storage)
    got = spark_engine_each.find_unreferenced(storage, dirs, keep, cutoff)
    want = LocalEngine().find_unreferenced(storage, dirs, keep, cutoff)
    assert got.equals(want)
    expected = sorted(
        [p for i, p in enumerate(paths) if i % 2 == 0 and p not in set(paths[::3])] + [nested]
    )
    assert got.column("path").to_pylist() == expected
    assert len(expected) > 5
    # An empty keep set: every old file, and the nested log's.
    no_keep = pa.array([], pa.string())
    everything = spark_engine_each.find_unreferenced(storage, dirs, no_keep, cutoff)
    assert everything.num_rows == len(paths[::2]) + 1


@pytest.mark.spark
def test_delete_files(spark_engine_each, tmp_path):
    a, b = copy_pair("golden__data-skipping-partition-and-data-column", tmp_path)
    files = sorted(p for p in tree(a) if p.endswith(".parquet"))
    doomed = files[::2] + files[:2] + ["missing/none.parquet", "gone.parquet"]
    n_local = LocalEngine().delete_files(Storage.for_uri(str(a)), doomed)
    n_spark = spark_engine_each.delete_files(Storage.for_uri(str(b)), doomed)
    assert n_spark == n_local == len(set(doomed) & set(files)) > 2
    assert tree(a) == tree(b)
    # Idempotent: a second run finds nothing to delete.
    assert spark_engine_each.delete_files(Storage.for_uri(str(b)), doomed) == 0
    assert spark_engine_each.delete_files(Storage.for_uri(str(b)), []) == 0


@pytest.mark.spark
def test_delete_files_in_several_jobs(spark_engine_each, tmp_path, monkeypatch):
    # Many paths are deleted by several jobs, one after the other (the driver JVM holds
    # one job's paths at a time): the same files go, each once.
    from delta_ops.engine.spark import engine as spark_module

    monkeypatch.setattr(spark_module, "_PATHS_PER_JOB", 2)
    a, b = copy_pair("golden__data-skipping-partition-and-data-column", tmp_path)
    files = sorted(p for p in tree(a) if p.endswith(".parquet"))
    doomed = files[::2] + ["missing/none.parquet"]
    assert len(doomed) > 2 * 2  # at least three jobs
    n_local = LocalEngine().delete_files(Storage.for_uri(str(a)), doomed)
    assert spark_engine_each.delete_files(Storage.for_uri(str(b)), doomed) == n_local
    assert n_local == len(files[::2])
    assert tree(a) == tree(b)


@pytest.mark.spark
@pytest.mark.parametrize("name", ["golden__dv-partitioned-with-checkpoint", "spark__delta-0.1.0"])
def test_parquet_row_counts(spark_engine_each, name):
    root = corpus_path(name)
    storage = Storage.for_uri(str(root))
    paths = sorted(p for p in tree(root) if p.endswith(".parquet"))
    paths = list(reversed(paths)) + paths[:1]  # input order kept, duplicates allowed
    got = spark_engine_each.parquet_row_counts(storage, paths)
    want = LocalEngine().parquet_row_counts(storage, paths)
    assert got.equals(want)
    assert got.column("path").to_pylist() == paths
    assert sum(got.column("num_records").to_pylist()) > 0
    assert spark_engine_each.parquet_row_counts(storage, []).num_rows == 0


@pytest.mark.spark
def test_footer_errors_are_the_local_engines(spark_engine_each):
    root = corpus_path("spark__delta-0.1.0")
    storage = Storage.for_uri(str(root))
    missing = ["no/such-file.parquet"]
    with pytest.raises(StorageError, match="file not found") as local_err:
        LocalEngine().parquet_row_counts(storage, missing)
    with pytest.raises(StorageError, match="file not found") as spark_err:
        spark_engine_each.parquet_row_counts(storage, missing)
    assert str(spark_err.value) == str(local_err.value)
    not_parquet = ["_delta_log/00000000000000000000.json"]
    with pytest.raises(pa.ArrowInvalid) as local_bad:
        LocalEngine().parquet_row_counts(storage, not_parquet)
    with pytest.raises(pa.ArrowInvalid) as spark_bad:
        spark_engine_each.parquet_row_counts(storage, not_parquet)
    assert str(spark_bad.value).split(".")[0] == str(local_bad.value).split(".")[0]


def _nested_table(n: int) -> pa.Table:
    return pa.table(
        {
            "add": pa.array(
                [
                    {
                        "path": f"part={i % 3}/f{i}.parquet",
                        "partitionValues": [("part", str(i % 3))],
                        "size": 1000 + i,
                        "stats": json.dumps({"numRecords": i}),
                    }
                    for i in range(n)
                ],
                pa.struct(
                    [
                        ("path", pa.string()),
                        ("partitionValues", pa.map_(pa.string(), pa.string())),
                        ("size", pa.int64()),
                        ("stats", pa.string()),
                    ]
                ),
            ),
            "tags": pa.array([[f"t{i}"] * (i % 3) for i in range(n)], pa.list_(pa.string())),
        }
    ).replace_schema_metadata({"origin": "delta-ops-test"})


@pytest.mark.spark
def test_write_parquet_files(spark_engine_each, tmp_path):
    files = [
        ("_delta_log/_sidecars/a.parquet", _nested_table(50)),
        ("_delta_log/_sidecars/b.parquet", _nested_table(0)),
        ("nested/dir/c.parquet", _nested_table(3)),
    ]
    a, b = tmp_path / "local", tmp_path / "spark"
    sizes_local = LocalEngine().write_parquet_files(Storage.for_uri(str(a)), files)
    sizes_spark = spark_engine_each.write_parquet_files(Storage.for_uri(str(b)), files)
    assert sizes_spark == sizes_local
    assert tree(a) == tree(b)  # no temporary files left behind either
    for path, table in files:
        assert (b / path).read_bytes() == (a / path).read_bytes()
        assert pq.read_table(b / path).equals(table)
    assert spark_engine_each.write_parquet_files(Storage.for_uri(str(b)), []) == []


@pytest.mark.spark
def test_size_histogram_fixed_cases(spark_engine_each):
    rng = random.Random(7)
    bounds = list(FILE_SIZE_BIN_BOUNDARIES)
    cases = [
        pa.array([], pa.int64()),
        pa.array([None, None], pa.int64()),
        pa.array([0, 1, bounds[1] - 1, bounds[1], bounds[-1], bounds[-1] * 4], pa.int64()),
        pa.array([rng.randrange(0, 2**40) for _ in range(5000)], pa.int64()),
        pa.chunked_array([[5, 6], [2**62]], pa.int64()),
    ]
    for sizes in cases:
        got = spark_engine_each.size_histogram(sizes, bounds)
        want = LocalEngine().size_histogram(sizes, bounds)
        assert got == want
        assert sum(got[0]) == len(sizes)
    with pytest.raises(ValueError, match="increase strictly"):
        spark_engine_each.size_histogram(pa.array([1]), [0, 10, 5])


@pytest.mark.spark
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.one_of(st.none(), st.integers(0, 2**45)), max_size=200),
    bounds=st.lists(st.integers(0, 2**40), min_size=1, max_size=30, unique=True).map(sorted),
)
def test_size_histogram_generated(spark_engine_each, sizes, bounds):
    arr = pa.array(sizes, pa.int64())
    want = LocalEngine().size_histogram(arr, bounds)
    assert spark_engine_each.size_histogram(arr, bounds) == want


# ---- operations: corpus tables ---------------------------------------------------------------


@pytest.mark.spark
@pytest.mark.parametrize("name", VACUUM_TABLES)
def test_vacuum_dry_run(spark_engine_each, table_copy, name):
    root = table_copy(name)
    set_mtimes(root, OLD_MS)
    storage = Storage.for_uri(str(root))
    before = tree(root)
    engine = CountingEngine(spark_engine_each)
    want = vacuum(storage, dry_run=True, now_ms=NOW_MS, engine=LocalEngine())
    got = vacuum(storage, dry_run=True, now_ms=NOW_MS, engine=engine)
    assert got == want
    assert engine.calls["find_unreferenced"] == 1 and engine.calls["delete_files"] == 0
    assert tree(root) == before
    assert (want.num_files > 0) == (name in VACUUM_FINDS_FILES)


@pytest.mark.spark
@pytest.mark.parametrize("name", VACUUM_TABLES)
def test_vacuum(spark_engine_each, tmp_path, name):
    a, b = copy_pair(name, tmp_path)
    engine = CountingEngine(spark_engine_each)
    want = vacuum(Storage.for_uri(str(a)), now_ms=NOW_MS, engine=LocalEngine(), dry_run=False)
    got = vacuum(Storage.for_uri(str(b)), now_ms=NOW_MS, engine=engine, dry_run=False)
    assert without(got.to_dict(), "table") == without(want.to_dict(), "table")
    assert tree(a) == tree(b)
    assert engine.items["delete_files"] == want.num_files
    assert (want.num_files > 0) == (name in VACUUM_FINDS_FILES)
    assert not set(want.files) & set(tree(b))
    # Idempotent: nothing left to delete.
    again = vacuum(Storage.for_uri(str(b)), now_ms=NOW_MS, engine=engine, dry_run=False)
    assert again.num_files == 0


@pytest.mark.spark
@pytest.mark.parametrize(("name", "version"), V2_TABLES)
def test_checkpoint_v2_with_sidecars(spark_engine_each, tmp_path, name, version):
    a, b = copy_pair(name, tmp_path)
    engine = CountingEngine(spark_engine_each)
    kwargs = {"version": version, "kind": "v2-uuid", "sidecar_actions": 2, "now_ms": NOW_MS}
    want = write_checkpoint(Storage.for_uri(str(a)), engine=LocalEngine(), **kwargs)
    got = write_checkpoint(Storage.for_uri(str(b)), engine=engine, **kwargs)
    assert _v2_result_view(got) == _v2_result_view(want)
    assert not got.already_existed
    assert engine.items["write_parquet_files"] >= 2  # sidecars written by executors
    assert sidecar_digests(b) == sidecar_digests(a) != []
    for root in (a, b):
        snap = load_snapshot(Storage.for_uri(str(root)), version)
        assert snap.checkpoint_version == version
    files_a = load_snapshot(Storage.for_uri(str(a)), version).files.sort_by("path")
    files_b = load_snapshot(Storage.for_uri(str(b)), version).files.sort_by("path")
    assert files_b.equals(files_a)
    assert files_b.num_rows == want.num_add_files


@pytest.mark.spark
@pytest.mark.parametrize("name", CHECKSUM_TABLES)
def test_checksum_full(spark_engine_each, tmp_path, name):
    a, b = copy_pair(name, tmp_path)
    engine = CountingEngine(spark_engine_each)
    want = compute_version_checksum(Storage.for_uri(str(a)), engine=LocalEngine(), method="full")
    got = compute_version_checksum(Storage.for_uri(str(b)), engine=engine, method="full")
    assert got.checksum.to_dict() == want.checksum.to_dict()
    assert engine.items["size_histogram"] == want.checksum.num_files > 0
    version = want.version
    for root in (a, b):
        (root / "_delta_log" / f"{version:020d}.crc").unlink(missing_ok=True)
    wa = write_checksum(Storage.for_uri(str(a)), engine=LocalEngine(), method="full")
    wb = write_checksum(Storage.for_uri(str(b)), engine=engine, method="full")
    assert wa.written and wb.written
    crc = f"_delta_log/{version:020d}.crc"
    assert (b / crc).read_bytes() == (a / crc).read_bytes()


@pytest.mark.spark
@pytest.mark.parametrize("name", BACKFILL_TABLES)
def test_row_tracking_backfill(spark_engine_each, tmp_path, name):
    a, b = copy_pair(name, tmp_path)
    engine = CountingEngine(spark_engine_each)
    want = _backfill(a, LocalEngine())
    got = _backfill(b, engine)
    assert without(got.to_dict(), "table") == without(want.to_dict(), "table")
    assert engine.items["parquet_row_counts"] > 0  # footers read by executors
    files_a = sorted_files(Storage.for_uri(str(a)), ROW_ID_COLUMNS)
    files_b = sorted_files(Storage.for_uri(str(b)), ROW_ID_COLUMNS)
    assert files_b.equals(files_a)
    assert files_b.column("baseRowId").null_count == 0
    assert want.files_backfilled == files_a.num_rows > 0


@pytest.mark.spark
def test_backfill_with_missing_data_files_fails_alike(spark_engine_each, tmp_path):
    a, b = copy_pair("golden__update-deleted-directory", tmp_path)
    with pytest.raises(StorageError, match="cannot assign row IDs") as local_err:
        _backfill(a, LocalEngine())
    with pytest.raises(StorageError, match="cannot assign row IDs") as spark_err:
        _backfill(b, spark_engine_each)
    assert str(spark_err.value).replace(str(b), "ROOT") == str(local_err.value).replace(
        str(a), "ROOT"
    )
    assert spark_err.value.file is not None and spark_err.value.file.startswith(b.as_uri())
    assert tree(a) == tree(b)  # nothing written by either


# ---- operations: generated histories ---------------------------------------------------------


def _add_strays(root: Path, partitioned: bool) -> None:
    """Files no commit names: an aborted write's data files, hidden and temporary files."""
    strays = ["part-aborted-0001.parquet", ".hidden-file", "_tmp_dir/x.parquet"]
    if partitioned:
        strays += ["part=a/part-aborted-0002.parquet", "part=z/part-aborted-0003.parquet"]
    for rel in strays:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        pq.write_table(pa.table({"id": [1, 2, 3]}), buf)
        path.write_bytes(buf.getvalue())


def _enable_v2_checkpoints(storage: Storage) -> None:
    txn = Transaction(storage, operation="SET TBLPROPERTIES", clock=StepClock(NOW_MS - DAY_MS))
    txn.add_features(["v2Checkpoint"])
    txn.update_configuration({"delta.checkpointPolicy": "v2"})
    txn.commit()


@pytest.mark.spark
@settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(spec=histories(max_steps=6, features=("partitioned", "deletion_vectors", "column_mapping")))
def test_generated_history_all_operations(spark_engine_each, spec: HistorySpec):
    """Checksum, V2 checkpoint with sidecars, backfill and VACUUM on a generated table, on
    two identical copies: each step gives the same result and leaves the same files."""
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp) / "local", Path(tmp) / "spark"
        build_history(Storage.for_uri(str(a)), spec)
        _enable_v2_checkpoints(Storage.for_uri(str(a)))
        _add_strays(a, spec.partitioned)
        set_mtimes(a, OLD_MS)
        shutil.copytree(a, b)
        sa, sb = Storage.for_uri(str(a)), Storage.for_uri(str(b))
        local, spark = LocalEngine(), CountingEngine(spark_engine_each)

        ca = compute_version_checksum(sa, engine=local, method="full").checksum.to_dict()
        cb = compute_version_checksum(sb, engine=spark, method="full").checksum.to_dict()
        assert cb == ca

        kwargs = {"kind": "v2-uuid", "sidecar_actions": 1, "now_ms": NOW_MS}
        ka = write_checkpoint(sa, engine=local, **kwargs)
        kb = write_checkpoint(sb, engine=spark, **kwargs)
        assert _v2_result_view(kb) == _v2_result_view(ka)
        assert sidecar_digests(b) == sidecar_digests(a)

        ra = _backfill(a, local)
        rb = _backfill(b, spark)
        assert without(rb.to_dict(), "table") == without(ra.to_dict(), "table")
        assert sorted_files(sb, ROW_ID_COLUMNS).equals(sorted_files(sa, ROW_ID_COLUMNS))

        dry_b = vacuum(sb, dry_run=True, now_ms=NOW_MS, engine=spark)
        dry_a = vacuum(sa, dry_run=True, now_ms=NOW_MS, engine=local)
        assert without(dry_b.to_dict(), "table") == without(dry_a.to_dict(), "table")
        va = vacuum(sa, now_ms=NOW_MS, engine=local, dry_run=False)
        vb = vacuum(sb, now_ms=NOW_MS, engine=spark, dry_run=False)
        assert without(vb.to_dict(), "table") == without(va.to_dict(), "table")
        assert "part-aborted-0001.parquet" in vb.files
        assert ".hidden-file" not in vb.files and "_tmp_dir/x.parquet" not in vb.files

        def data_files(root: Path) -> dict[str, int]:
            return {p: s for p, s in tree(root).items() if not p.startswith("_delta_log/")}

        assert data_files(b) == data_files(a)
        assert spark.calls["find_unreferenced"] == 2 and spark.calls["size_histogram"] == 1


# ---- S3 (moto on 127.0.0.1) ------------------------------------------------------------------


def _upload(local_root: Path, storage: Storage) -> None:
    for rel in sorted(tree(local_root)):
        storage.put_atomic(rel, (local_root / rel).read_bytes())


def _s3_tree(storage: Storage) -> dict[str, int]:
    return {f.path: f.size for f in storage.walk("")}


@pytest.mark.spark
@pytest.mark.s3
def test_s3_ranges_are_shared_between_tasks(spark_engine_each, s3_server, monkeypatch):
    """On an object store the executors list one directory's key ranges in windows, each
    task its own share (`windows_of`): the same unreferenced files as the local engine."""
    import time

    import delta_ops.engine.local as local
    import delta_ops.engine.spark.engine as spark_module

    monkeypatch.setattr(local, "KEYS_PER_RANGE", 2)  # many ranges on a small table
    windows = []
    real = spark_module.windows_of
    monkeypatch.setattr(spark_module, "windows_of",
                        lambda bounds, per: windows.append(real(bounds, per)) or windows[-1])
    s3 = Storage.for_uri(s3_server.fresh_uri("windows"), s3_server.storage_options)
    _upload(corpus_path("golden__dv-partitioned-with-checkpoint"), s3)
    for i in range(24):  # unreferenced files in a partition and in the root
        s3.put_atomic(f"part=3/part-{i:03d}-junk.parquet", b"x" * i)
        s3.put_atomic(f"{i:03d}-junk.parquet", b"x" * i)
    paths = sorted(f.path for f in s3.walk("") if not f.path.startswith("_delta_log/"))
    keep = pa.array(paths[::3], pa.string())
    later = int(time.time() * 1000) + DAY_MS
    dirs = data_dirs(s3)
    got = spark_engine_each.find_unreferenced(s3, dirs, keep, later)
    want = LocalEngine().find_unreferenced(s3, dirs, keep, later)
    assert got.equals(want)
    found = set(got.column("path").to_pylist())
    assert not found & set(paths[::3])
    assert {p for p in paths if p not in set(paths[::3])} <= found
    assert sum(p.endswith("-junk.parquet") for p in found) >= 32
    assert max(len(w) for w in windows) > 1  # a directory's ranges went to several tasks


@pytest.mark.spark
@pytest.mark.s3
@pytest.mark.parametrize("spilled", [False, True], ids=["in-memory", "spilled"])
@pytest.mark.parametrize("name", ["golden__dv-partitioned-with-checkpoint",
                                  "kernel-defaults__basic-with-checkpoint"])
def test_s3_spark_vacuum_lists_the_root_once(spark_engine_each, s3_server, monkeypatch,
                                             spilled, name):
    """The root's files come with the driver's listing of its subdirectories: no executor
    lists them again (the local engine's requests, the local engine's plan), whether the
    referenced set is held in memory or spilled in buckets, partitioned or not."""
    if spilled:
        monkeypatch.setenv(VACUUM_PARTITION_FILES_ENV, "0")
        monkeypatch.setenv(VACUUM_BUCKETS_ENV, "3")
    uri = s3_server.fresh_uri("root-once")
    s3 = Storage.for_uri(uri, s3_server.storage_options)
    _upload(corpus_path(name), s3)
    for i in range(12):
        s3.put_atomic(f"{i:03d}-junk.parquet", b"x" * i)
    later = max(f.modification_time for f in s3.walk("")) + 8 * DAY_MS
    plans, root_lists = [], []
    with S3Proxy(s3_server.endpoint_url, latency=0.0) as proxy:
        for engine in (LocalEngine(), spark_engine_each):
            proxy.reset()
            storage = Storage.for_uri(uri, proxy.storage_options())
            plans.append(vacuum(storage, dry_run=True, now_ms=later, engine=engine))
            root_lists.append(sum(1 for kind, path in proxy.requests if kind == "LIST"
                                  and "delimiter=%2F" in path and "_delta_log" not in path))
    assert plans[1].files == plans[0].files and len(plans[0].files) >= 12
    assert root_lists[1] == root_lists[0] >= 1


@pytest.mark.spark
@pytest.mark.s3
def test_s3_vacuum_matches_local_files(spark_engine_each, s3_server, tmp_path):
    name = "golden__dv-partitioned-with-checkpoint"
    local_root = copy_corpus_table(name, tmp_path / "t")
    set_mtimes(local_root, OLD_MS)
    s3 = Storage.for_uri(s3_server.fresh_uri("vacuum"), s3_server.storage_options)
    _upload(corpus_path(name), s3)
    # Object mtimes are the upload time: run "later" by the same margin as on local files.
    s3_now = max(f.modification_time for f in s3.walk("")) + (NOW_MS - OLD_MS)
    engine = CountingEngine(spark_engine_each)

    want_dry = vacuum(Storage.for_uri(str(local_root)), dry_run=True, now_ms=NOW_MS,
                      engine=LocalEngine())
    got_dry = vacuum(s3, dry_run=True, now_ms=s3_now, engine=engine)
    assert without(got_dry.to_dict(), "table") == without(want_dry.to_dict(), "table")

    want = vacuum(Storage.for_uri(str(local_root)), now_ms=NOW_MS, engine=LocalEngine(),
                  dry_run=False)
    got = vacuum(s3, now_ms=s3_now, engine=engine, dry_run=False)
    fields = ("files", "num_files", "size_bytes", "version", "dry_run")
    assert {k: got.to_dict()[k] for k in fields} == {k: want.to_dict()[k] for k in fields}
    assert want.num_files > 0 and engine.items["delete_files"] == want.num_files
    assert _s3_tree(s3) == tree(local_root)


@pytest.mark.spark
@pytest.mark.s3
def test_s3_checkpoint_matches_local_files(spark_engine_each, s3_server, tmp_path):
    name, version = V2_TABLES[0]
    local_root = copy_corpus_table(name, tmp_path / "t")
    s3 = Storage.for_uri(s3_server.fresh_uri("checkpoint"), s3_server.storage_options)
    _upload(corpus_path(name), s3)
    engine = CountingEngine(spark_engine_each)
    kwargs = {"version": version, "kind": "v2-uuid", "sidecar_actions": 2, "now_ms": NOW_MS}
    want = write_checkpoint(Storage.for_uri(str(local_root)), engine=LocalEngine(), **kwargs)
    got = write_checkpoint(s3, engine=engine, **kwargs)
    assert _v2_result_view(got) == _v2_result_view(want)
    assert engine.items["write_parquet_files"] >= 2
    side = "_delta_log/_sidecars/"
    s3_sidecars = sorted(
        hashlib.sha256(s3.read(p)).hexdigest() for p in _s3_tree(s3) if p.startswith(side)
    )
    assert s3_sidecars == sidecar_digests(local_root) != []
    got_files = load_snapshot(s3, version).files.sort_by("path")
    want_files = load_snapshot(Storage.for_uri(str(local_root)), version).files.sort_by("path")
    assert load_snapshot(s3, version).checkpoint_version == version
    assert got_files.equals(want_files)


@pytest.mark.spark
def test_a_given_session_is_used_and_left_running(spark_engine_each):
    storage = Storage.for_uri(str(corpus_path("spark__delta-0.1.0")))
    session = spark_engine_each.session
    with SparkEngine(session=session) as borrowed:
        assert borrowed.started and borrowed.session is session
        assert borrowed.list_files(storage, [""]).equals(
            LocalEngine().list_files(storage, [""]).sort_by("path")
        )
    assert not borrowed.started
    # Still usable: closing the borrowing engine did not stop the session.
    assert spark_engine_each.session is session
    assert spark_engine_each.list_files(storage, ["_delta_log"]).num_rows > 0
    # One SparkContext per process: a config naming another master is refused.
    with pytest.raises(EngineError, match="already running"):
        _ = SparkEngine(spark_test_config("local[3]")).session


@pytest.mark.spark
def test_write_errors_are_the_local_engines(spark_engine_each, tmp_path):
    """A task's failure reaches the caller as the exception the local engine raises."""
    storage = Storage.for_uri(str(tmp_path))
    bad = [("x.parquet", pa.table({"a": [1]}))]
    (tmp_path / "x.parquet").mkdir()  # a directory where the file should go
    with pytest.raises((OSError, StorageError, EngineError)) as local_err:
        LocalEngine().write_parquet_files(storage, bad)
    with pytest.raises((OSError, StorageError, EngineError)) as spark_err:
        spark_engine_each.write_parquet_files(storage, bad)
    assert type(spark_err.value) is type(local_err.value)


def test_an_error_a_task_raises_comes_back_under_its_class_even_when_built_otherwise():
    """`_translate` (no Spark needed: it reads the text Spark's exception carries) raises a
    task's delta_ops error again with its class and fields, and one whose constructor takes
    other arguments (moved into delta_ops.errors) becomes an EngineError, not a TypeError."""
    from delta_ops import errors
    from delta_ops.engine.spark.tasks import _guarded, _translate

    def failing(exc: Exception):
        @_guarded
        def task():
            raise exc
            yield  # a generator, like every task

        try:
            list(task())
        except RuntimeError as wrapped:
            return RuntimeError(f"Python worker failed:\n{wrapped}")
        raise AssertionError("the task did not fail")

    back = _translate(
        failing(errors.InvalidChecksumError("bad crc", table="t", version=3)), "crc", "t", "here"
    )
    assert type(back) is errors.InvalidChecksumError and (back.table, back.version) == ("t", 3)
    odd = failing(errors.InvalidTablePropertyError("delta.appendOnly", "maybe", "not a boolean"))
    back = _translate(odd, "props", "t", "here")
    assert type(back) is EngineError and "Spark job 'props' failed on here" in str(back)

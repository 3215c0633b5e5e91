"""`delta-ops snapshot`: the JSON shape later work depends on, and one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from delta_ops.cli import main
from delta_ops_tests.support.corpus import corpus_path
from delta_ops_tests.support.oracle import oracle_replay

KEYS = {
    "version",
    "timestamp",
    "protocol",
    "metadata",
    "num_files",
    "size_bytes",
    "num_tombstones",
    "txns",
    "domains",
    "checkpoint_version",
    "unsupported_features",
    "warnings",
}


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_snapshot_json_shape(capsys):
    root = corpus_path("spark__delta-0.1.0")
    code, out, err = run(capsys, "snapshot", str(root), "--json", "--files")
    assert code == 0, err
    obj = json.loads(out)
    assert KEYS <= set(obj)
    expected = oracle_replay(root)
    assert obj["version"] == expected.version
    assert obj["protocol"] == expected.protocol
    assert set(obj["metadata"]) == {
        "id",
        "name",
        "description",
        "partitionColumns",
        "configuration",
        "createdTime",
        "schemaString",
    }
    assert obj["metadata"]["partitionColumns"] == ["id"]
    assert obj["num_files"] == len(expected.files) == len(obj["files"])
    assert obj["size_bytes"] == sum(a["size"] for a in expected.files.values())
    assert obj["txns"] == expected.txns and obj["txns"]
    assert obj["checkpoint_version"] == 3
    assert obj["unsupported_features"] == {"read": [], "write": []}
    assert {f["path"] for f in obj["files"]} == {a["path"] for a in expected.files.values()}
    assert all(set(f) == {"path", "size", "deletion_vector"} for f in obj["files"])


def test_snapshot_json_reports_dvs_domains_and_unknown_features(capsys):
    code, out, _ = run(
        capsys, "snapshot", str(corpus_path("deletion_vectors")), "--json", "--files"
    )
    obj = json.loads(out)
    assert code == 0 and any(f["deletion_vector"] for f in obj["files"])
    code, out, _ = run(
        capsys,
        "snapshot",
        str(corpus_path("kernel-benchmarks__basic_catalog_managed/delta")),
        "--json",
    )
    obj = json.loads(out)
    assert code == 0
    # Catalog-managed: readable; cleanup, VACUUM and commits refused, and the report says so.
    assert "catalogManaged" in obj["features"]
    assert obj["unsupported_features"] == {"read": [], "write": []}
    assert obj["refused_operations"] == {
        op: ["catalogManaged"] for op in ("cleanup", "vacuum", "commit", "row_tracking_backfill")
    }
    code, out, _ = run(capsys, "snapshot", str(corpus_path("golden__collations-table")))
    assert code == 0 and "refuses     checkpoint (collations)" in out


def test_snapshot_version_and_text(capsys):
    code, out, _ = run(capsys, "snapshot", str(corpus_path("basic_append")), "--version", "0")
    assert code == 0 and "version     0" in out


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["snapshot", "{root}", "--version", "9"], "version 9 does not exist"),
        (["snapshot", "{broken}"], "commit 1 is missing"),
    ],
)
def test_errors_are_one_line_without_traceback(capsys, argv, needle):
    argv = [
        a.format(
            root=corpus_path("basic_append"), broken=corpus_path("golden__versions-not-contiguous")
        )
        for a in argv
    ]
    code, out, err = run(capsys, *argv)
    assert code != 0 and out == ""
    assert needle in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_console_script_runs_without_traceback(tmp_path):
    exe = [sys.executable, "-m", "delta_ops.cli"]
    proc = subprocess.run([*exe, "snapshot", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "no Delta log" in proc.stderr and "Traceback" not in proc.stderr
    assert str(tmp_path.name) in proc.stderr


def test_import_is_light():
    code = (
        "import sys, delta_ops, delta_ops.table, delta_ops.cli;"
        "bad=[m for m in ('pyspark','dagster') if m in sys.modules];"
        "print(','.join(bad))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == ""


def test_spark_flags_conflicting_with_local_engine_are_refused(capsys):
    code, out, err = run(
        capsys,
        "vacuum",
        str(corpus_path("basic_append")),
        "--dry-run",
        "--engine",
        "local",
        "--spark-master",
        "local[1]",
    )
    assert code == 2 and out == ""
    assert "spark" in err and "Traceback" not in err


@pytest.mark.spark
def test_vacuum_dry_run_on_spark_from_the_cli(table_copy):
    root = table_copy("golden__data-skipping-change-stats-collected-across-versions")
    old = 1_600_000_000
    for p in root.rglob("*.parquet"):
        os.utime(p, (old, old))
    base = [sys.executable, "-m", "delta_ops.cli", "vacuum", str(root), "--dry-run", "--json"]
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    local = subprocess.run(base, capture_output=True, text=True, env=env, check=True)
    spark = subprocess.run(
        [*base, "--engine", "spark", "--spark-master", "local[1]"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert spark.returncode == 0, spark.stderr[-2000:]
    want = json.loads(local.stdout)
    got = json.loads(spark.stdout)
    assert got["files"] == want["files"] and want["num_files"] > 0

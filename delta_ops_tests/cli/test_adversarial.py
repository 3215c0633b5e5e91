"""Issue 12, one test per class of what an adversarial user found: tables written by hand as
other engines write them, run through the public entry points only (`vacuum`,
`cleanup_metadata`, `load_snapshot`, the `delta-ops` command), so the same module also runs
against older code and shows each class failing there.

Every table here is written from the spec, not by delta_ops: JSON commits with protocol,
metaData and file actions, Parquet data files from pyarrow, ages set with os.utime. A class
passes when nothing a reader needs is deleted, nothing outside the table is touched, and a
bad input gets one line that names what is wrong (and never a secret).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from delta_ops import cli
from delta_ops.errors import DeltaOpsError, RetentionError
from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
from delta_ops.maintenance.cleanup import cleanup_metadata
from delta_ops.maintenance.vacuum import vacuum
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import CORPUS

DAY_MS = 86_400_000
T0 = 1_700_000_000_000
NOW = T0 + 100 * DAY_MS
SECRET = "hunter2-do-not-print"
SCHEMA = json.dumps(
    {"type": "struct", "fields": [{"name": "x", "type": "long", "nullable": True, "metadata": {}}]}
)


def _age(path: Path, ms: int) -> None:
    os.utime(path, ns=(ms * 1_000_000, ms * 1_000_000), follow_symlinks=False)


def _data(path: Path, ms: int = T0) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"x": pa.array([1, 2], pa.int64())}), path)
    _age(path, ms)
    return path.stat().st_size


def _commit(root: Path, version: int, actions: list[dict], ms: int) -> None:
    log = root / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    path = log / f"{version:020d}.json"
    info = {"commitInfo": {"timestamp": ms, "operation": "WRITE"}}
    path.write_text("\n".join(json.dumps(a) for a in [info, *actions]) + "\n")
    _age(path, ms)


def _first(configuration: dict | None = None) -> list[dict]:
    return [
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {
            "metaData": {
                "id": "adversarial",
                "format": {"provider": "parquet", "options": {}},
                "schemaString": SCHEMA,
                "partitionColumns": [],
                "configuration": configuration or {},
                "createdTime": T0,
            }
        },
    ]


def _add(path: str, size: int) -> dict:
    return {
        "add": {
            "path": path,
            "partitionValues": {},
            "size": size,
            "modificationTime": T0,
            "dataChange": True,
        }
    }


def _one_line(capsys, argv: list[str]) -> tuple[int, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    text = (out + err).strip()
    assert "Traceback" not in text, text
    return code, text


# ---- 1. a colon in a relative path is not a URI scheme ----------------------------------


@pytest.mark.parametrize(
    "rel",
    [
        "time=1971-07-22T03:06:40.000000Z/part-00000.parquet",  # delta-kernel-rs, timestamps
        "ts=2024-01-01 10:00:00/a.parquet",
        "C:d.parquet",
    ],
)
def test_1_relative_paths_with_a_colon_are_live_files(tmp_path, rel):
    root = tmp_path / "t"
    size = _data(root / rel)
    _commit(root, 0, [*_first(), _add(rel, size)], T0)
    # default: 7 days, the file is 100 days old
    result = vacuum(str(root), now_ms=NOW, dry_run=False)
    assert (root / rel).exists(), f"{rel} is the table's live file and was deleted"
    assert rel not in result.files


# ---- 2. absolute URIs in every form name the file they name ------------------------------


@pytest.mark.parametrize("form", ["double-slash", "localhost", "percent-root"])
def test_2_absolute_uri_forms_are_protected(tmp_path, form):
    base = tmp_path / ("tbl%41x" if form == "percent-root" else "t")
    size = _data(base / "a.parquet")
    encoded_root = quote(str(base))  # the % of the directory name encoded once
    uri = {
        "double-slash": f"file://{encoded_root}//a.parquet",
        "localhost": f"file://localhost{encoded_root}/a.parquet",
        "percent-root": f"file://{encoded_root}/a.parquet",
    }[form]
    _commit(base, 0, [*_first(), _add(uri, size)], T0)
    vacuum(str(base), now_ms=NOW, dry_run=False)
    assert (base / "a.parquet").exists(), f"live file referenced as {uri} was deleted"


# ---- 3. a symlinked directory inside the table is not followed ---------------------------


def test_3_vacuum_never_touches_what_a_symlink_points_at(tmp_path):
    root = tmp_path / "t"
    outside = tmp_path / "outside"
    size = _data(root / "live.parquet")
    _data(outside / "precious.parquet")
    _data(outside / "sub" / "deeper.parquet")
    (root / "linked").symlink_to(outside, target_is_directory=True)
    _commit(root, 0, [*_first(), _add("live.parquet", size)], T0)
    vacuum(str(root), now_ms=NOW, dry_run=False)
    assert (outside / "precious.parquet").exists()
    assert (outside / "sub" / "deeper.parquet").exists()
    assert (root / "linked").is_symlink()
    assert (root / "live.parquet").exists()


# ---- 4. cleanup never cuts the log off behind a checkpoint it could not read -------------


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_4_cleanup_keeps_the_log_behind_an_unreadable_checkpoint_part(tmp_path, damage):
    # Spark's two-part checkpoint at version 1 over commits 0 and 1; part 2 damaged, every
    # log file 100 days old, so version 0 is past the default 30-day log retention.
    root = tmp_path / "t"
    shutil.copytree(CORPUS / "delta" / "golden__multi-part-checkpoint", root)
    log = root / "_delta_log"
    expected = sorted(load_snapshot(Storage.for_uri(str(root))).files.column("path").to_pylist())
    bad = log / "00000000000000000001.checkpoint.0000000002.0000000002.parquet"
    bad.write_bytes(b"not parquet at all" if damage == "garbage" else bad.read_bytes()[:40])
    for p in log.iterdir():
        _age(p, T0)
    try:
        cleanup_metadata(str(root), now_ms=NOW, dry_run=False)
    except DeltaOpsError:
        pass  # refusing is fine; deleting what the table needs is not
    snap = load_snapshot(Storage.for_uri(str(root)))
    assert sorted(snap.files.column("path").to_pylist()) == expected
    assert (log / "00000000000000000000.json").exists()


# ---- 5. a stray file with a huge version number is a gap, found at once ------------------


@pytest.mark.parametrize(
    "stray",
    ["99999999999999999999.json", "00000000000000000001.99999999999999999999.compacted.json"],
)
@pytest.mark.parametrize("command", ["snapshot", "vacuum", "cleanup"])
def test_5_huge_version_numbers_never_spin(tmp_path, stray, command):
    root = tmp_path / "t"
    size = _data(root / "a.parquet")
    _commit(root, 0, [*_first(), _add("a.parquet", size)], T0)
    _commit(root, 1, [], T0 + DAY_MS)
    (root / "_delta_log" / stray).write_text("{}\n")
    argv = [sys.executable, "-m", "delta_ops.cli", command, str(root)]
    if command != "snapshot":
        argv.append("--dry-run")
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert time.monotonic() - start < 60
    assert "Traceback" not in done.stderr
    assert (root / "a.parquet").exists()


# ---- 6. a bad _last_checkpoint only means "list" ----------------------------------------


@pytest.mark.parametrize("hint", ['{"version": -1, "size": 3}', '{"version": "x"}', "{"])
def test_6_bad_last_checkpoint_hint_leaves_the_table_readable(tmp_path, hint):
    root = tmp_path / "t"
    size = _data(root / "a.parquet")
    _commit(root, 0, [*_first(), _add("a.parquet", size)], T0)
    (root / "_delta_log" / "_last_checkpoint").write_text(hint)
    snap = load_snapshot(Storage.for_uri(str(root)))
    assert snap.version == 0 and snap.files.num_rows == 1


# ---- 7. secrets are never echoed --------------------------------------------------------


def test_7_a_malformed_storage_option_never_prints_its_value(tmp_path, capsys):
    root = tmp_path / "t"
    _commit(root, 0, _first(), T0)
    try:
        code = cli.main(["snapshot", str(root), "--storage-option", f"secret:{SECRET}"])
    except SystemExit as exc:  # argparse's way out
        code = exc.code
    out, err = capsys.readouterr()
    assert code != 0
    assert SECRET not in out + err
    assert "--storage-option" in err


@pytest.mark.parametrize("value", [f"{{env: S3_SECRET, extra: {SECRET}}}", f"[{SECRET}]"])
def test_7_registry_errors_never_print_a_spark_conf_value(tmp_path, value):
    from delta_ops.defs.registry import RegistryError, load_registry

    path = tmp_path / "tables.yaml"
    path.write_text(f"spark:\n  conf:\n    spark.hadoop.fs.s3a.secret.key: {value}\n")
    with pytest.raises(RegistryError) as info:
        load_registry(path)
    assert SECRET not in str(info.value)


# ---- 8. cleanup never shortens the table's retention without being told -----------------


def test_8_cleanup_refuses_a_retention_shorter_than_the_tables(tmp_path):
    root = tmp_path / "t"
    config = {"delta.logRetentionDuration": "interval 60 days"}
    for v in range(25):
        _commit(root, v, _first(config) if v == 0 else [], T0 + v * DAY_MS)
    log_before = sorted(p.name for p in (root / "_delta_log").iterdir())
    with pytest.raises(RetentionError, match="60 days|logRetentionDuration"):
        cleanup_metadata(str(root), retention=timedelta(days=1), now_ms=NOW, dry_run=False)
    assert sorted(p.name for p in (root / "_delta_log").iterdir()) == log_before


# ---- 9. errors a user can act on: one line, naming what is wrong -------------------------


@pytest.mark.parametrize("hours", ["inf", "1e12", "nan"])
def test_9_impossible_vacuum_retentions_are_one_line(tmp_path, capsys, hours):
    root = tmp_path / "t"
    _commit(root, 0, _first(), T0)
    try:
        code, text = _one_line(capsys, ["vacuum", str(root), "--retention-hours", hours])
    except SystemExit as exc:
        code, text = exc.code, capsys.readouterr().err.strip()
        assert "Traceback" not in text
    assert code != 0
    assert len(text.splitlines()) == 1 and "retention" in text.lower()


def test_9_hdfs_is_one_clear_line(capfd):
    done = subprocess.run(
        [sys.executable, "-m", "delta_ops.cli", "snapshot", "hdfs://nn/x"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode != 0
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert len(lines) == 1 and "hdfs" in lines[0], lines[:5]


def test_9_killed_writers_temp_files_are_cleaned_up_after_the_retention(tmp_path):
    root = tmp_path / "t"
    _commit(root, 0, _first(), T0)
    log = root / "_delta_log"
    leftover = log / ".00000000000000000001.json.0b8d5c2e-6a4f-4bde-9f3c-7d1e2f3a4b5c.tmp"
    leftover.write_text("{}")
    _age(leftover, T0)
    cleanup_metadata(str(root), now_ms=NOW, dry_run=False)
    assert not leftover.exists()
    assert (log / f"{0:020d}.json").exists()


# ---- found on the way: a compaction file in an order VACUUM does not expect --------------


@pytest.mark.parametrize("commits_kept", [True, False])
def test_compaction_in_an_unexpected_line_order_never_costs_a_live_file(tmp_path, commits_kept):
    # a.parquet is added, removed (spelt as an absolute URI), and added again. A writer that
    # neither reconciles nor reverses writes the compaction of versions 1-2 oldest first, so
    # the remove comes first: read first-line-wins (Databricks' form), the live file looks
    # removed. VACUUM must keep it, through the commits while they are there and by reading
    # the compaction both ways once they are gone.
    root = tmp_path / "t"
    size = _data(root / "a.parquet")
    remove = {"remove": {"path": f"file://{quote(str(root))}/a.parquet",
                         "deletionTimestamp": T0, "dataChange": True}}
    _commit(root, 0, [*_first(), _add("a.parquet", size)], T0)
    _commit(root, 1, [remove], T0 + DAY_MS)
    _commit(root, 2, [_add("a.parquet", size)], T0 + 2 * DAY_MS)
    log = root / "_delta_log"
    compaction = log / f"{1:020d}.{2:020d}.compacted.json"
    compaction.write_text(json.dumps(remove) + "\n" + json.dumps(_add("a.parquet", size)) + "\n")
    if not commits_kept:
        (log / f"{1:020d}.json").unlink()
        (log / f"{2:020d}.json").unlink()
    dry = vacuum(str(root), now_ms=NOW, dry_run=True)
    vacuum(str(root), now_ms=NOW, dry_run=False)
    assert "a.parquet" not in dry.files
    assert (root / "a.parquet").exists(), "the table's live file was deleted"

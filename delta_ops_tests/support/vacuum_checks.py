"""VACUUM checks run on more than one path (in memory and partitioned): junk added to corpus
tables, aged tables, the corpus rules file for file, and the window property."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delta_ops.maintenance.cleanup import DAY_MS
from delta_ops.maintenance.vacuum import vacuum
from delta_ops.protocol.deletion_vectors import DeletionVectorDescriptor
from delta_ops.table import DeltaTable
from delta_ops_tests.support.oracle import oracle_replay
from delta_ops_tests.support.raw_histories import (
    BASE_MS,
    HOUR_MS,
    build_raw,
    raw_specs,
    set_mtime,
)


def walk(root: Path) -> dict[str, tuple[int, int]]:
    """Every file below root: relative path -> (size, mtime ms)."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            st_ = p.stat()
            out[p.relative_to(root).as_posix()] = (st_.st_size, st_.st_mtime_ns // 1_000_000)
    return out


VACUUM_TABLES = [
    "golden__dv-partitioned-with-checkpoint",
    "golden__dv-with-columnmapping",
    "kernel-defaults__basic-dv-with-checkpoint",
    "spark__table-with-dv-large",
    "spark__partitioned-table-with-dv-large",
    "golden__data-skipping-partition-and-data-column",
    "cdf",  # _change_data
    "golden__data-reader-escaped-chars",  # partition column `_2`: `_2=...` directories
    "golden__canonicalized-paths-normal-a",  # absolute paths in the log
    "golden__canonicalized-paths-special-b",
    "golden__snapshot-repartitioned",
    "golden__basic-with-vacuum-protocol-check-feature",
    "golden__v2-checkpoint-parquet",
    "golden__delete-re-add-same-file-different-transactions",
    "multi_partitioned",
    "spark__table-with-dv-special-char",  # a `p` deletion vector
]


def _age_table(root: Path, old_ms: int, young_ms: int) -> None:
    """Every file outside _delta_log gets `old_ms`, except every third one (by sorted path)
    which gets `young_ms`."""
    data = sorted(p for p in walk(root) if not p.startswith("_delta_log/"))
    for i, rel in enumerate(data):
        set_mtime(root / rel, young_ms if i % 3 == 2 else old_ms)


JUNK = (
    "orphan.parquet",
    "data/x.parquet",
    "_tmp/x.parquet",
    ".hidden.parquet",
    "{p}=1/_staging/x.parquet",
    "{p}=1/.dangling.crc",
    "_change_data/cdc-1.parquet",
    "_change_data/{p}=1/cdc-2.parquet",
    "metadata/v1.metadata.json",
    "_delta_index/idx.bin",
    "{p}=9/deep/z.parquet",
)


def _add_junk(root: Path, pcol: str, items, now: int) -> None:
    for index, age_h in items:
        rel = JUNK[index].format(p=pcol)
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"j" * (index + 1))
        set_mtime(p, now - age_h * HOUR_MS)


def corpus_vacuum_matches_the_rules_file_for_file(table_copy, name):
    root = table_copy(name)
    state = oracle_replay(root)
    stamps = sorted((r.get("deletionTimestamp") or 0) for r in state.tombstones.values())
    now = (stamps[-1] if stamps else BASE_MS) + 30 * DAY_MS
    # Cut the tombstones in half: the older ones expire.
    median = stamps[len(stamps) // 2] if stamps else now - 10 * DAY_MS
    hours = -(-(now - median) // HOUR_MS)
    delete_before = now - hours * HOUR_MS
    _age_table(root, delete_before - DAY_MS, delete_before + HOUR_MS)
    before = walk(root)
    expected = naive_vacuum(root, delete_before)

    dry = vacuum(str(root), retention_hours=hours, force_retention=True, now_ms=now, dry_run=True)
    assert set(dry.files) == expected
    assert dry.size_bytes == sum(before[f][0] for f in expected)
    assert walk(root) == before
    result = vacuum(str(root), retention_hours=hours, force_retention=True, now_ms=now,
                    dry_run=False)
    assert result.files == dry.files and result.num_files == len(expected)
    assert result.retention_hours == hours
    after = walk(root)
    assert set(after) == set(before) - expected
    _assert_live_files_exist(root, set(before))
    again = vacuum(str(root), retention_hours=hours, force_retention=True, now_ms=now,
                   dry_run=False)
    assert again.files == ()


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    spec=raw_specs(),
    junk=st.lists(st.tuples(st.integers(0, len(JUNK) - 1), st.integers(0, 400)), max_size=8),
    retention_h=st.integers(0, 300),
    extra_h=st.integers(0, 300),
    lite=st.booleans(),
)
def property_no_file_of_a_version_in_the_window_is_deleted(
    tmp_path_factory, spec, junk, retention_h, extra_h, lite
):
    base = tmp_path_factory.mktemp("vac")
    hist = build_raw(base / "t", {**spec, "outside": True}, data_files=True)
    root = hist.root
    now = hist.commit_ms[-1] + extra_h * HOUR_MS
    _add_junk(root, hist.partition_column, junk, now)
    delete_before = now - retention_h * HOUR_MS
    protected = set()
    for v in _window_versions(hist.commit_ms, delete_before):
        # Tombstones expired at any time protect nothing: only live adds (and DVs) count.
        protected |= referenced(root, v, delete_before=2**62)
    before = walk(root)
    young = {rel for rel, (_, mtime) in before.items() if mtime >= delete_before}
    outside_before = walk(base / "outside")
    expected = naive_vacuum(root, delete_before)

    dry = vacuum(str(root), retention_hours=retention_h, force_retention=True, lite=lite,
                 now_ms=now, dry_run=True)
    result = vacuum(str(root), retention_hours=retention_h, force_retention=True, lite=lite,
                    now_ms=now, dry_run=False)
    assert result.files == dry.files
    after = walk(root)
    for path in protected:
        rel = os.path.relpath(path, root)
        if not rel.startswith("..") and rel in before:
            assert rel in after, f"{rel} is referenced by a version in the window but was deleted"
    assert young <= set(after), "a file younger than the retention was deleted"
    assert {p for p in before if p.startswith("_delta_log/")} <= set(after)
    assert walk(base / "outside") == outside_before
    assert set(before) - set(after) == set(result.files)
    if lite:
        assert set(result.files) <= expected
        assert result.messages and "lite mode" in result.messages[0]
    else:
        assert set(result.files) == expected


def vacuum_dry_run_does_not_import_pandas(table_copy):
    """pyarrow imports pandas (a third of a second in a cold process) the first time it
    converts Python objects; the dry run builds its arrays from buffers instead."""
    root = table_copy("golden__data-skipping-partition-and-data-column")
    code = (
        "import sys\n"
        "from delta_ops.maintenance.vacuum import vacuum\n"
        "r = vacuum(sys.argv[1], retention_hours=0, force_retention=True, dry_run=True)\n"
        "print(r.num_files, 'pandas' in sys.modules)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(root)], capture_output=True, text=True, check=True
    )
    num_files, imported = proc.stdout.split()
    assert int(num_files) > 0
    assert imported == "False"


def _hidden(name: str, partition_columns: list[str]) -> bool:
    """Spark's DeltaTableUtils.isHiddenDirectory, written out again (plus _delta_index)."""
    if name == "metadata":
        return True
    if not (name.startswith("_") or name.startswith(".")):
        return False
    if name.startswith("_change_data"):
        return False
    return not any(name.startswith(f"{c}=") for c in partition_columns)


def _dv_abs(dv: dict | None, root: Path) -> str | None:
    if not dv or dv.get("storageType") not in ("u", "p"):
        return None
    path = DeletionVectorDescriptor.from_dict(dv).absolute_path(str(root))
    if dv["storageType"] == "p":
        path = unquote(path.removeprefix("file://").removeprefix("file:"))
    return os.path.normpath(path)


def referenced(root: Path, version: int | None, delete_before: int | None) -> set[str]:
    """Absolute paths of the files and DV files the state at `version` keeps (live adds,
    and tombstones not expired at `delete_before`; all tombstones when None)."""
    state = oracle_replay(root, version)
    out = set()
    for (key, _), add in state.files.items():
        out.add(key)
        if (d := _dv_abs(add.get("deletionVector"), root)) is not None:
            out.add(d)
    for (key, _), rm in state.tombstones.items():
        if delete_before is not None and (rm.get("deletionTimestamp") or 0) < delete_before:
            continue
        out.add(key)
        if (d := _dv_abs(rm.get("deletionVector"), root)) is not None:
            out.add(d)
    return out


def naive_vacuum(root: Path, delete_before: int) -> set[str]:
    state = oracle_replay(root)
    parts = list((state.metadata or {}).get("partitionColumns") or [])
    keep = referenced(root, None, delete_before)
    doomed = set()
    files = walk(root)
    for rel, (_size, mtime) in files.items():
        comps = rel.split("/")
        if comps[0] == "_delta_log" or any(_hidden(c, parts) for c in comps):
            continue
        if os.path.normpath(str(root / rel)) in keep or mtime >= delete_before:
            continue
        doomed.add(rel)
    for rel, (_size, mtime) in files.items():  # Hadoop side checksums go with their file
        head, _, name = rel.rpartition("/")
        if name.startswith(".") and name.endswith(".crc") and mtime < delete_before:
            main = f"{head}/{name[1:-4]}" if head else name[1:-4]
            if main in doomed:
                doomed.add(rel)
    return doomed


def _assert_live_files_exist(root: Path, existed: set[str] | None = None) -> None:
    """Every live file of the latest version (that existed in `existed`, when given) is
    still there."""
    snap = DeltaTable(str(root)).snapshot()
    for path in snap.files.column("path").to_pylist():
        if "://" in path or path.startswith("/"):
            continue
        rel = unquote(path)
        if existed is None or rel in existed:
            assert (root / rel).exists(), f"live file {path} is gone"


def _window_versions(commit_ms: list[int], delete_before: int) -> list[int]:
    """Versions that were current at some time inside the retention window."""
    n = len(commit_ms)
    return [v for v in range(n) if v == n - 1 or commit_ms[v + 1] >= delete_before]

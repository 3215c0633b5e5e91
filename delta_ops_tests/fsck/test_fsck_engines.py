"""fsck beyond the local engine and the corpus' own DVs: inline deletion vectors decode (and a
wrong cardinality is named), the Spark engine finds what the local one finds, and, over
random choices of deleted files (hypothesis), the missing set and the repair are exactly
the deleted files."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from urllib.parse import unquote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delta_ops.engine.local import LocalEngine
from delta_ops.log import load_snapshot
from delta_ops.maintenance.fsck import fsck
from delta_ops.protocol.deletion_vectors import DeletionVectorDescriptor, z85_encode
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import copy_corpus_table, corpus_path

OLD_S = 1_600_000_000
SOON_MS = (OLD_S + 3600) * 1000
PARTITIONED = "golden__dv-partitioned-with-checkpoint"


def _copy(name: str, dest: Path) -> Path:
    root = copy_corpus_table(name, dest)
    for folder, _dirs, files in os.walk(root):
        for f in files:
            os.utime(os.path.join(folder, f), (OLD_S, OLD_S))
    return root


def _inline(root: Path, cardinality_delta: int = 0) -> None:
    """Rewrite the commit that adds DAT `deletion_vectors`' one DV so the DV is inline (the
    same bitmap, Z85 in the descriptor)."""
    for commit in sorted((root / "_delta_log").glob("*.json")):
        lines = commit.read_text().splitlines()
        changed = False
        for n, line in enumerate(lines):
            action = json.loads(line)
            dv = (action.get("add") or {}).get("deletionVector")
            if not dv:
                continue
            d = DeletionVectorDescriptor.from_dict(dv)
            data = (root / d.relative_path()).read_bytes()
            payload = data[d.offset + 4: d.offset + 4 + d.size_in_bytes]
            padded = payload + b"\0" * (-len(payload) % 4)
            action["add"]["deletionVector"] = {
                "storageType": "i", "pathOrInlineDv": z85_encode(padded),
                "sizeInBytes": d.size_in_bytes, "cardinality": d.cardinality + cardinality_delta,
            }
            lines[n] = json.dumps(action)
            changed = True
        if changed:
            commit.write_text("\n".join(lines) + "\n")
            os.utime(commit, (OLD_S, OLD_S))
            return
    raise AssertionError("no add with a deletion vector")


def test_inline_deletion_vector_decodes(tmp_path):
    root = _copy("deletion_vectors", tmp_path / "t")
    _inline(root)
    result = fsck(str(root), clock=lambda: SOON_MS)
    assert result.num_deletion_vectors == 1 and result.problems == ()
    dv = load_snapshot(Storage.for_uri(str(root))).files.column("deletionVector").to_pylist()
    assert [d["storageType"] for d in dv if d] == ["i"]


def test_inline_deletion_vector_with_a_wrong_cardinality(tmp_path):
    """The bitmap decodes; only its descriptor's count is wrong. An error, but the repair
    keeps the file: a reader applies the bitmap and reads the file's rows right (before,
    the repair removed the file and its rows)."""
    root = _copy("deletion_vectors", tmp_path / "t")
    _inline(root, cardinality_delta=1)
    result = fsck(str(root), clock=lambda: SOON_MS)
    (problem,) = result.problems
    assert problem.code == "dv_mismatch" and problem.severity == "error"
    assert "cardinality" in problem.reason
    version = load_snapshot(Storage.for_uri(str(root))).version
    repaired = fsck(str(root), clock=lambda: SOON_MS, repair=True, confirm=True)
    assert repaired.repair.entries == () and repaired.repair.version is None
    assert load_snapshot(Storage.for_uri(str(root))).version == version


@pytest.mark.spark
def test_spark_engine_finds_what_the_local_one_finds(tmp_path, spark_engine):
    root = _copy(PARTITIONED, tmp_path / "t")
    rows = load_snapshot(Storage.for_uri(str(root))).files.to_pylist()
    plain = sorted(unquote(r["path"]) for r in rows if not r["deletionVector"])
    (root / plain[0]).unlink()
    dv = DeletionVectorDescriptor.from_dict(
        next(r for r in rows if r["deletionVector"])["deletionVector"]).relative_path()
    (root / dv).unlink()
    local = fsck(str(root), clock=lambda: SOON_MS, verify_data=True)
    on_spark = fsck(str(root), clock=lambda: SOON_MS, verify_data=True, engine=spark_engine)
    assert on_spark.problems == local.problems
    assert {p.code for p in local.problems} == {"missing_file", "missing_dv"}
    repaired = fsck(str(root), clock=lambda: SOON_MS, engine=spark_engine, repair=True,
                    confirm=True)
    assert {e.key for e in repaired.repair.entries} == {
        p.data_file or p.file for p in local.problems}
    assert fsck(str(root), clock=lambda: SOON_MS, engine=spark_engine).ok


#: The live files of DAT's `basic_partitioned` (read from the corpus, never written).
_LIVE = sorted(
    unquote(r["path"]) for r in load_snapshot(
        Storage.for_uri(str(corpus_path("basic_partitioned")))).files.to_pylist()
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sets(st.sampled_from(_LIVE), max_size=len(_LIVE)))
def test_missing_and_repaired_are_exactly_the_deleted_files(deleted):
    with tempfile.TemporaryDirectory() as tmp:
        root = _copy("basic_partitioned", Path(tmp) / "t")
        for key in deleted:
            (root / key).unlink()
        result = fsck(str(root), clock=lambda: SOON_MS)
        assert {p.file for p in result.problems if p.code == "missing_file"} == deleted
        assert result.ok is (not deleted)
        repaired = fsck(str(root), clock=lambda: SOON_MS, repair=True, confirm=True)
        assert {e.key for e in repaired.repair.entries} == deleted
        assert (repaired.repair.version is None) is (not deleted)
        live = {unquote(r["path"]) for r in
                load_snapshot(Storage.for_uri(str(root))).files.to_pylist()}
        assert live == set(_LIVE) - deleted


def test_streamed_state_finds_and_repairs_what_the_loaded_one_does(tmp_path, monkeypatch):
    """A table whose checkpoint passes the stream threshold (0 here: every table) is read
    streamed; the problems and the repair are the loaded state's."""
    from delta_ops.log.read_options import STREAM_THRESHOLD_ENV

    roots = []
    for name in ("loaded", "streamed"):
        root = _copy(PARTITIONED, tmp_path / name)
        rows = load_snapshot(Storage.for_uri(str(root))).files.to_pylist()
        (root / unquote(sorted(r["path"] for r in rows if not r["deletionVector"])[0])).unlink()
        dv = DeletionVectorDescriptor.from_dict(
            next(r for r in rows if r["deletionVector"])["deletionVector"]).relative_path()
        (root / dv).unlink()
        roots.append(root)
    loaded = fsck(str(roots[0]), clock=lambda: SOON_MS, repair=True, confirm=True)
    monkeypatch.setenv(STREAM_THRESHOLD_ENV, "0")
    streamed = fsck(str(roots[1]), clock=lambda: SOON_MS, repair=True, confirm=True)
    assert streamed.problems == loaded.problems and len(loaded.problems) >= 2
    assert streamed.repair.entries == loaded.repair.entries
    assert streamed.repair.metrics == loaded.repair.metrics
    for root in roots:
        assert fsck(str(root), clock=lambda: SOON_MS).ok
    assert [json.loads(line) for line in
            (roots[1] / "_delta_log" / f"{streamed.repair.version:020d}.json")
            .read_text().splitlines()][1:] == [
        json.loads(line) for line in
        (roots[0] / "_delta_log" / f"{loaded.repair.version:020d}.json")
        .read_text().splitlines()][1:]


def test_listing_by_groups_of_directories_finds_the_same(tmp_path, monkeypatch):
    """One directory per listing (a group of at most one live file) finds what one listing
    of every directory finds."""
    import delta_ops.maintenance.fsck.data_files as data_files

    root = _copy(PARTITIONED, tmp_path / "t")
    rows = load_snapshot(Storage.for_uri(str(root))).files.to_pylist()
    for r in sorted(rows, key=lambda r: r["path"])[::4]:
        (root / unquote(r["path"])).unlink()
    dv = DeletionVectorDescriptor.from_dict(
        next(r for r in rows if r["deletionVector"])["deletionVector"]).relative_path()
    (root / dv).unlink()
    whole = fsck(str(root), clock=lambda: SOON_MS)
    calls = []

    original = LocalEngine.list_files

    def counting(self, storage, directories):
        calls.append(list(directories))
        return original(self, storage, directories)

    monkeypatch.setattr(LocalEngine, "list_files", counting)
    monkeypatch.setattr(data_files, "LISTING_GROUP", 1)
    grouped = fsck(str(root), clock=lambda: SOON_MS, leftovers=False)
    assert grouped.problems == whole.problems
    assert {p.code for p in whole.problems} == {"missing_file", "missing_dv"}
    # Buckets of directories (by hash): several listings, each directory in exactly one.
    assert len(calls) > 1
    assert sorted(d for c in calls for d in c) == ["", *(f"part={i}" for i in range(10))]

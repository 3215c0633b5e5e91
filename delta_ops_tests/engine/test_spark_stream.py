"""The streamed (large-table) paths on the Spark engine give what the local engine gives.

Every test forces the streamed path with the threshold at 0 (`$DELTA_OPS_STREAM_THRESHOLD_BYTES`)
so the whole corpus goes through it: the full checksum with the checkpoint's row groups read on
executors (one task per row group, partial aggregates added up on the driver), and the
checkpoint written by the streamed writer inside one executor task, `_last_checkpoint`
advanced by the driver.
"""

from __future__ import annotations

import pytest

from delta_ops.log.read_options import STREAM_THRESHOLD_ENV as THRESHOLD_ENV
from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
from delta_ops.maintenance.checkpoint.writer import write_checkpoint
from delta_ops.maintenance.checksum.operations import compute_version_checksum
from delta_ops.protocol.last_checkpoint import parse_last_checkpoint
from delta_ops.storage import Storage
from delta_ops_tests.support import checkpoint_checks as tc
from delta_ops_tests.support.corpus import corpus_path

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("name", tc.SUPPORTED)
def test_full_checksum_on_spark_equals_local(name, monkeypatch, spark_engine):  # noqa: F811
    storage = Storage.for_uri(str(corpus_path(name)))
    local = compute_version_checksum(storage, method="full")
    monkeypatch.setenv(THRESHOLD_ENV, "0")
    assert load_snapshot(storage, stream=True).streamed
    calls = []
    real = spark_engine.map_tasks

    def spy(storage_, fn, items):
        calls.append(len(items))
        return real(storage_, fn, items)

    monkeypatch.setattr(spark_engine, "map_tasks", spy)
    on_spark = compute_version_checksum(storage, method="full", engine=spark_engine)
    assert on_spark.checksum == local.checksum
    # The checkpoint's row groups went to the executors (tables with a checkpoint).
    snap = load_snapshot(storage, stream=True)
    if snap.checkpoint_version is not None:
        assert calls and calls[0] == len(snap.files.read_items())


def _kinds(name: str) -> list[tuple[str, dict]]:
    snap = load_snapshot(Storage.for_uri(str(corpus_path(name))))
    if "v2-uuid" in tc._allowed_kinds(snap):
        return [("classic", {}), ("v2-uuid", {"sidecar_actions": 2})]
    return [("classic", {}), ("multi-part", {"parts": 3})]


def _checkpoint_contents(root, result) -> dict:
    """What a checkpoint holds, independent of its UUID names: the state it makes alone
    (commits up to its version deleted) and `_last_checkpoint` without paths."""
    tc._delete_commits_upto(root, result.version)
    after = load_snapshot(Storage.for_uri(str(root)))
    assert after.checkpoint_version == result.version
    lc = parse_last_checkpoint((root / tc.LOG / "_last_checkpoint").read_bytes())
    assert lc.checksum_valid is True
    return {
        "state": tc._full_state(after),
        "last_checkpoint": (lc.version, lc.size, lc.parts, lc.num_of_add_files),
        "sidecars": len(list((root / tc.LOG / "_sidecars").glob("*")))
        if (root / tc.LOG / "_sidecars").is_dir()
        else 0,
    }


@pytest.mark.parametrize("name", tc.SUPPORTED)
def test_checkpoint_on_spark_equals_local(name, tmp_path, monkeypatch, spark_engine):  # noqa: F811
    """The checkpoint a Spark task writes from a streamed state is the local engine's: same
    files (byte for byte where the names are deterministic), same result, same state."""
    monkeypatch.setenv(THRESHOLD_ENV, "0")
    tasks = []
    real = spark_engine.map_tasks

    def spy(storage_, fn, items):
        tasks.append(fn)
        return real(storage_, fn, items)

    monkeypatch.setattr(spark_engine, "map_tasks", spy)
    for kind, options in _kinds(name):
        roots = {}
        results = {}
        for where, engine in (("local", None), ("spark", spark_engine)):
            root = tc._copy(name, tmp_path / kind / where)
            v = load_snapshot(Storage.for_uri(str(root))).version
            if (root / tc.LOG / f"{v:020d}.json").exists():
                tc._delete_checkpoints_at(root, v)
            results[where] = write_checkpoint(
                str(root), kind=kind, now_ms=tc.NOW, engine=engine, **options
            )
            roots[where] = root
        local, spark = results["local"], results["spark"]
        assert len(tasks) == 1, "the Spark checkpoint ran as one task"
        tasks.clear()
        # UUID names (V2 sidecars, UUID-named files) compress to sizes that differ by a
        # few bytes from one write to the next, on any engine.
        uuid_named = {"files": None, "size_in_bytes": None} if kind.startswith("v2") else {}
        assert spark.to_dict() | uuid_named == local.to_dict() | uuid_named
        if kind in ("classic", "multi-part") and not local.already_existed:
            assert spark.files == local.files
            for f in local.files:
                ours = (roots["spark"] / tc.LOG / f).read_bytes()
                assert ours == (roots["local"] / tc.LOG / f).read_bytes(), f
        assert _checkpoint_contents(roots["spark"], spark) == _checkpoint_contents(
            roots["local"], local
        )

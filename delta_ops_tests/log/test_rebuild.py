"""The full rebuild by bucket (issue 15): a state reconciled from scratch, its file actions
spilled by key into B buckets and reconciled one bucket at a time (`log.snapshot.rebuild`), gives
the checkpoint the in-memory path gives.

Every test forces the rebuild (`write_checkpoint(rebuild=True)`, or the threshold at 0)
with B in {1, 2, 7}: one bucket holding everything, several keys per bucket, empty
buckets. Memory is measured by `benchmarks/bench_scale.py`, never here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delta_ops.errors import (
    CheckpointVerificationError,
    InvalidCheckpointRequestError,
    RebuildCheckError,
)
from delta_ops.log.read_options import REBUILD_BUCKETS_ENV, REBUILD_THRESHOLD_ENV, ReadOptions
from delta_ops.log.snapshot import rebuild as rb
from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
from delta_ops.maintenance.checkpoint import actions as act
from delta_ops.maintenance.checkpoint.writer import write_checkpoint
from delta_ops.protocol import features
from delta_ops.storage import Storage
from delta_ops_tests.support import checkpoint_checks as tc
from delta_ops_tests.support import replay_histories as rp
from delta_ops_tests.support.corpus import corpus_path

LOG = "_delta_log"
BUCKETS = [1, 2, 7]


def _rows(actions) -> list[str]:
    """Actions as sorted JSON strings (a multiset, order left out)."""
    if isinstance(actions, pa.Table):
        rows = actions.to_pylist(maps_as_pydicts="strict")
    else:
        rows = [r for t in actions.tables() for r in t.to_pylist(maps_as_pydicts="strict")]
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)


# ---- the state ----------------------------------------------------------------------------


@pytest.mark.parametrize("buckets", BUCKETS)
@pytest.mark.parametrize("name", tc.READABLE)
def test_rebuilt_state_equals_the_loaded_one(name, buckets):
    """Same live files and tombstones (as sets of whole actions), same header, on every
    readable corpus table."""
    storage = Storage.for_uri(str(corpus_path(name)))
    loaded = load_snapshot(storage)
    with rb.rebuild_snapshot(storage, buckets=buckets) as rebuilt:
        snap = rebuilt.snapshot
        assert snap.streamed and rebuilt.summary.buckets == buckets
        assert snap.version == loaded.version
        assert _rows(snap.files) == _rows(loaded.files)
        assert _rows(snap.tombstones) == _rows(loaded.tombstones)
        assert snap.num_files == loaded.num_files == rebuilt.summary.live_files
        assert snap.size_bytes == loaded.size_bytes == rebuilt.summary.live_bytes
        assert snap.protocol == loaded.protocol
        assert snap.metadata.raw == loaded.metadata.raw
        assert snap.txns == loaded.txns and snap.all_domains == loaded.all_domains
        assert _rows(snap.unexpired_tombstones(tc.NOW)) == _rows(
            loaded.unexpired_tombstones(tc.NOW)
        )
    assert all(s._dir is None for s in rebuilt.spills)  # spill files removed


# ---- the checkpoint of every kind -------------------------------------------------------------

_LOADED: dict[tuple[str, str], list[str]] = {}


def _kinds(snap) -> list[tuple[str, dict[str, Any]]]:
    if features.is_feature_supported(snap.protocol, "v2Checkpoint"):
        return [
            ("classic", {}),
            ("v2-classic", {}),
            ("v2-uuid", {"sidecar_actions": 2}),
            ("v2-uuid", {"sidecar_actions": 0}),
            ("v2-uuid", {"fmt": "json", "sidecar_actions": 3}),
        ]
    return [("classic", {}), ("multi-part", {"parts": 3})]


def _fresh_copy(name: str, dest: Path, version: int) -> Path:
    root = tc._copy(name, dest)
    if (root / LOG / f"{version:020d}.json").exists():
        tc._delete_checkpoints_at(root, version)  # so that ours is written, not found
    return root


def _checkpoint_actions(root: Path, files: tuple[str, ...]) -> list[str]:
    top = [root / LOG / f for f in files if not f.startswith("_sidecars/")]
    normalized = (tc._normalize_action(a) for a in tc._actions_of_files(top))
    return sorted(a for a in normalized if a is not None)


@pytest.mark.parametrize("buckets", BUCKETS)
@pytest.mark.parametrize("name", tc.SUPPORTED)
def test_rebuilt_checkpoint_equals_the_loaded_one(name, buckets, tmp_path):
    """Every kind the table allows: the checkpoint rebuilt by bucket, read back as a set of
    actions, equals the one written from the loaded state, and deltalake reads it to the
    same live files as the original table."""
    base = load_snapshot(Storage.for_uri(str(corpus_path(name))))
    theirs = tc._rs_files(corpus_path(name))
    for i, (kind, options) in enumerate(_kinds(base)):
        label = f"{kind}-{i}"
        if (name, label) not in _LOADED:
            root = _fresh_copy(name, tmp_path / f"loaded-{label}", base.version)
            result = write_checkpoint(
                str(root), kind=kind, now_ms=tc.NOW, rebuild=False,
                stream_threshold=10**15, **options,
            )
            _LOADED[(name, label)] = _checkpoint_actions(root, result.files)
        root = _fresh_copy(name, tmp_path / f"rebuilt-{label}", base.version)
        result = write_checkpoint(
            str(root), kind=kind, now_ms=tc.NOW, rebuild=True, buckets=buckets, **options
        )
        assert result.rebuilt_buckets == buckets and not result.already_existed
        assert result.version == base.version and result.num_add_files == base.num_files
        assert _checkpoint_actions(root, result.files) == _LOADED[(name, label)], label
        if theirs is not None:
            tc._delete_commits_upto(root, base.version)
            assert tc._rs_files(root) == theirs, f"{name}: deltalake reads {label} differently"


def test_the_corpus_is_covered():
    assert len(tc.READABLE) >= 120 and len(tc.SUPPORTED) >= 120


# ---- when it is used ---------------------------------------------------------------------------


def _json_only_table(root: Path, commits: int, per_commit: int, *, dv_repeats: bool = True) -> int:
    """A log of commits only: adds spread over the commits, some removed and re-added
    later, and (with `dv_repeats`) one path under several deletion vectors."""
    log = root / LOG
    log.mkdir(parents=True)
    lines = [{"protocol": rp.PROTOCOL}, {"metaData": rp.METADATA}]
    (log / f"{0:020d}.json").write_bytes(b"\n".join(orjson.dumps(o) for o in lines) + b"\n")
    n = 0
    for v in range(1, commits + 1):
        objs = []
        for k in range(per_commit):
            objs.append({"add": {
                "path": f"p{n}.parquet", "partitionValues": {}, "size": n + 1,
                "modificationTime": v, "dataChange": True,
                "stats": json.dumps({"numRecords": n % 7}),
            }})
            n += 1
            if k == 0 and v > 2:
                objs.append({"remove": {"path": f"p{n - per_commit - 1}.parquet",
                                        "deletionTimestamp": v, "dataChange": True}})
        if dv_repeats and v % 3 == 0:
            objs.append({"add": {
                "path": "p0.parquet", "partitionValues": {}, "size": 1,
                "modificationTime": v, "dataChange": True, "deletionVector": rp.DVS[2 + v % 2],
            }})
        objs.append({"commitInfo": {"timestamp": v}})
        (log / f"{v:020d}.json").write_bytes(b"\n".join(orjson.dumps(o) for o in objs) + b"\n")
    return commits


def test_a_large_json_only_log_is_rebuilt_by_default(tmp_path, monkeypatch):
    """No checkpoint and commits above the threshold: rebuilt by bucket automatically;
    below it, reconciled in memory. Same checkpoint either way."""
    monkeypatch.setenv(REBUILD_BUCKETS_ENV, "3")
    monkeypatch.setattr(rb, "CHUNK_BYTES", 2_000)  # several chunks of commits
    src = tmp_path / "src"
    _json_only_table(src, 30, 20)
    size = sum(p.stat().st_size for p in (src / LOG).iterdir())
    got = {}
    for label, threshold in (("rebuilt", size // 2), ("loaded", size * 2)):
        root = tmp_path / label
        shutil.copytree(src, root)
        monkeypatch.setenv(REBUILD_THRESHOLD_ENV, str(threshold))
        result = write_checkpoint(str(root), now_ms=tc.NOW)
        assert result.rebuilt_buckets == (3 if label == "rebuilt" else 0)
        got[label] = _checkpoint_actions(root, result.files)
    assert got["rebuilt"] == got["loaded"] and len(got["loaded"]) > 500


def test_a_log_with_a_checkpoint_streams_unless_asked(tmp_path, monkeypatch):
    src = tmp_path / "t"
    _json_only_table(src, 12, 5)
    write_checkpoint(str(src), version=6, now_ms=tc.NOW, rebuild=False)
    monkeypatch.setenv(REBUILD_THRESHOLD_ENV, "1")
    assert write_checkpoint(str(src), now_ms=tc.NOW).rebuilt_buckets == 0
    assert write_checkpoint(str(src), now_ms=tc.NOW, rebuild=True).already_existed


def test_bucket_count_follows_the_log_size(tmp_path, monkeypatch):
    monkeypatch.delenv(REBUILD_BUCKETS_ENV, raising=False)
    src = tmp_path / "t"
    _json_only_table(src, 10, 10)
    segment = load_snapshot(Storage.for_uri(str(src))).segment
    assert rb.bucket_count(segment) == 1
    monkeypatch.setattr(rb, "ACTIONS_PER_BUCKET", 10)
    assert rb.bucket_count(segment) > 3
    assert rb.bucket_count(segment, 5) == 5
    # With a checkpoint, its own count of actions (from `_last_checkpoint`) is used.
    monkeypatch.setattr(rb, "ACTIONS_PER_BUCKET", 1)
    cp_segment = load_snapshot(
        Storage.for_uri(str(corpus_path("golden__basic-with-inserts-deletes-checkpoint")))
    ).segment
    assert cp_segment.last_checkpoint is not None and cp_segment.last_checkpoint.size
    commits = sum(d.file.size for d in cp_segment.deltas) // rb.COMMIT_BYTES_PER_ACTION
    assert rb.bucket_count(cp_segment) == cp_segment.last_checkpoint.size + commits
    monkeypatch.setenv(REBUILD_BUCKETS_ENV, "4")
    assert rb.bucket_count(segment, ReadOptions.from_env().rebuild_buckets) == 4
    monkeypatch.setenv(REBUILD_BUCKETS_ENV, "four")
    with pytest.raises(ValueError, match=REBUILD_BUCKETS_ENV):
        rb.bucket_count(segment, ReadOptions.from_env().rebuild_buckets)


def test_a_json_checkpoint_with_embedded_actions_is_not_rebuilt(tmp_path):
    src = tmp_path / "t"
    _json_only_table(src, 3, 2)
    with pytest.raises(InvalidCheckpointRequestError, match="JSON top-level"):
        write_checkpoint(str(src), kind="v2-uuid", fmt="json", sidecar_actions=0, rebuild=True)
    assert not list((src / LOG).glob("*.checkpoint*"))


# ---- faults ------------------------------------------------------------------------------------


def test_a_rebuilt_checkpoint_that_does_not_read_back_is_not_published(tmp_path, monkeypatch):
    """A fault between the reconciled buckets and the bytes (one size written wrong) is
    caught by the read-back digest fed from the buckets; nothing is published and the
    spill files are gone."""
    root = tmp_path / "t"
    _json_only_table(root, 10, 10)
    before = sorted(p.name for p in (root / LOG).iterdir())
    real = act.add_struct

    def wrong_size(batch, layout):
        arr = real(batch, layout)
        sizes = arr.field("size").to_pylist()
        sizes[-1] += 1
        return pa.StructArray.from_arrays(
            [pa.array(sizes, pa.int64()) if f.name == "size" else arr.field(f.name)
             for f in arr.type],
            fields=list(arr.type),
        )

    monkeypatch.setattr(act, "add_struct", wrong_size)
    spills = []
    real_spill = rb.BucketSpill

    def recording(*args, **kwargs):
        spills.append(real_spill(*args, **kwargs))
        return spills[-1]

    monkeypatch.setattr(rb, "BucketSpill", recording)
    with pytest.raises(CheckpointVerificationError, match="differ") as err:
        write_checkpoint(str(root), now_ms=tc.NOW, rebuild=True, buckets=2)
    assert "00000000000000000010.checkpoint.parquet" in str(err.value)
    assert sorted(p.name for p in (root / LOG).iterdir()) == before
    assert spills and all(s._dir is None for s in spills)


def test_a_reconciliation_that_disagrees_with_the_aggregation_is_refused(tmp_path, monkeypatch):
    """The independent aggregation catches a wrong winner (here: the oldest action per key
    chosen instead of the newest); nothing is written."""
    root = tmp_path / "t"
    _json_only_table(root, 10, 10)
    before = sorted(p.name for p in (root / LOG).iterdir())
    real = rb._newest_per_key

    def oldest(keys, orders):
        return real(keys, -orders)

    monkeypatch.setattr(rb, "_newest_per_key", oldest)
    monkeypatch.setattr(rb, "CHUNK_BYTES", 0)  # one chunk per commit: keys meet in buckets
    with pytest.raises(RebuildCheckError, match="independent aggregation"):
        write_checkpoint(str(root), now_ms=tc.NOW, rebuild=True, buckets=2)
    assert sorted(p.name for p in (root / LOG).iterdir()) == before


def test_lost_spilled_actions_are_refused(tmp_path, monkeypatch):
    root = tmp_path / "t"
    _json_only_table(root, 6, 10)
    real = rb.BucketSpill.bucket

    def lossy(self, b):
        t = real(self, b)
        return t.slice(1) if t.num_rows and "_order" in t.column_names else t

    monkeypatch.setattr(rb.BucketSpill, "bucket", lossy)
    with pytest.raises(RebuildCheckError, match="read back"):
        write_checkpoint(str(root), now_ms=tc.NOW, rebuild=True, buckets=2)
    assert not list((root / LOG).glob("*.checkpoint.*"))


# ---- generated histories -----------------------------------------------------------------------


def _file_set(actions, root: Path) -> dict:
    out = {}
    for r in _rows_dicts(actions):
        dv = r.get("deletionVector")
        if dv:
            dv = json.dumps({k: x for k, x in dv.items() if x is not None}, sort_keys=True)
        out[(rp._norm(r["path"], root), dv)] = json.dumps(r, sort_keys=True, default=str)
    return out


def _rows_dicts(actions) -> list[dict]:
    if isinstance(actions, pa.Table):
        return actions.to_pylist(maps_as_pydicts="strict")
    return [r for t in actions.tables() for r in t.to_pylist(maps_as_pydicts="strict")]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(history=rp.history, data=st.data())
def test_random_histories_rebuild_as_loaded(tmp_path_factory, history, data):
    """Random histories (deletion vectors with the same path under several DV ids, re-added
    paths, remove then add, txns and domains, a checkpoint or not, compactions of both
    forms with the covered commits deleted or not), read at random versions with random
    bucket counts and chunk sizes: the rebuilt state equals the loaded one, expired and
    unexpired tombstones alike, and so does a classic checkpoint of the latest version."""
    root = tmp_path_factory.mktemp("hist")
    commits, _, unreadable = rp.write_history(root, history, data)
    log = root / LOG
    latest = len(commits) - 1
    storage = Storage.for_uri(str(root))
    readable = [v for v in range(latest + 1) if v not in unreadable]
    chunk = data.draw(st.sampled_from([0, 300, rb.CHUNK_BYTES]), label="chunk bytes")
    saved = rb.CHUNK_BYTES
    rb.CHUNK_BYTES = chunk
    try:
        versions = data.draw(st.lists(st.sampled_from(readable), min_size=1, max_size=3))
        for v in sorted(set(versions)):
            loaded = load_snapshot(storage, v)
            buckets = data.draw(st.sampled_from(BUCKETS), label="buckets")
            # Tombstones carry their version as deletionTimestamp: some expire at `now`.
            now = 7 * 86_400_000 + data.draw(st.integers(0, latest + 1), label="now")
            with rb.rebuild_snapshot(storage, v, buckets=buckets) as rebuilt:
                snap = rebuilt.snapshot
                assert _file_set(snap.files, root) == _file_set(loaded.files, root)
                assert _file_set(snap.tombstones, root) == _file_set(loaded.tombstones, root)
                assert _file_set(snap.unexpired_tombstones(now), root) == _file_set(
                    loaded.unexpired_tombstones(now), root
                )
                assert snap.txns == loaded.txns and snap.all_domains == loaded.all_domains
        if latest not in unreadable:
            # Both written in place (absolute paths name this root), the log restored between.
            for p in log.glob(f"{latest:020d}.checkpoint*"):
                p.unlink()
            saved_log = tmp_path_factory.mktemp("saved") / LOG
            shutil.copytree(log, saved_log)
            written = {}
            for label, rebuild in (("loaded", False), ("rebuilt", True)):
                shutil.rmtree(log)
                shutil.copytree(saved_log, log)
                result = write_checkpoint(
                    str(root), kind="classic", now_ms=tc.NOW, rebuild=rebuild,
                    buckets=data.draw(st.sampled_from(BUCKETS), label="buckets"),
                    stream_threshold=10**15,
                )
                written[label] = _checkpoint_actions(root, result.files)
            assert written["rebuilt"] == written["loaded"]
    finally:
        rb.CHUNK_BYTES = saved


# ---- the command line --------------------------------------------------------------------------


def test_cli_checkpoint_rebuild(tmp_path, capsys):
    from delta_ops.cli import main

    root = tmp_path / "t"
    _json_only_table(root, 8, 10)
    assert main(["checkpoint", str(root), "--rebuild", "--buckets", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rebuilt_buckets"] == 3 and out["version"] == 8 and not out["already_existed"]
    assert out["num_add_files"] == load_snapshot(Storage.for_uri(str(root))).num_files
    with pytest.raises(SystemExit) as exit_:
        main(["checkpoint", str(root), "--rebuild", "--buckets", "0"])
    assert exit_.value.code == 2
    assert "must be >= 1" in capsys.readouterr().err


# ---- Spark ---------------------------------------------------------------------------------


SPARK_TABLES = [
    "golden__basic-with-inserts-deletes-checkpoint",
    "kernel-defaults__basic-dv-with-checkpoint",
    "spark__delta-0.1.0",
]


@pytest.mark.spark
def test_rebuild_on_spark_equals_local(tmp_path, monkeypatch, spark_engine):  # noqa: F811
    """On Spark (`local[2]`) the rebuild runs in one executor task (spill, buckets, write and
    verification there) and gives the local engine's checkpoint; the driver only advances
    `_last_checkpoint`."""
    tasks = []
    real = spark_engine.map_tasks

    def spy(storage_, fn, items):
        tasks.append(fn)
        return real(storage_, fn, items)

    monkeypatch.setattr(spark_engine, "map_tasks", spy)
    src = tmp_path / "json-only"
    _json_only_table(src, 12, 30)
    sources = [(str(src), None)] + [
        (str(corpus_path(n)), n) for n in SPARK_TABLES if corpus_path(n).exists()
    ]
    assert len(sources) == 1 + len(SPARK_TABLES)
    for path, name in sources:
        got = {}
        for where, engine in (("local", None), ("spark", spark_engine)):
            dest = tmp_path / f"{name or 'json-only'}-{where}"
            shutil.copytree(Path(path) / LOG, dest / LOG)
            v = load_snapshot(Storage.for_uri(str(dest))).version
            tc._delete_checkpoints_at(dest, v)
            result = write_checkpoint(
                str(dest), now_ms=tc.NOW, rebuild=True, buckets=2, engine=engine
            )
            assert result.rebuilt_buckets == 2 and result.last_checkpoint_updated
            got[where] = (_checkpoint_actions(dest, result.files), result.num_add_files)
        assert len(tasks) == 1, "the rebuild ran as one Spark task"
        tasks.clear()
        assert got["spark"] == got["local"], name


def test_the_latest_version_counts_compactions(tmp_path):
    """Commits 2 and 3 cleaned up after a compaction covers them: the latest version is 3
    and the rebuild reads the compaction (it must not rebuild version 1, the last commit
    left)."""
    root = tmp_path / "t"
    log = root / LOG
    log.mkdir(parents=True)
    commits = [[{"protocol": rp.PROTOCOL}, {"metaData": rp.METADATA}]]
    commits += [[rp._to_json(("add", "part-000.parquet", 0, v, False), root, v)] for v in (1, 2, 3)]
    for v, objs in enumerate(commits):
        (log / f"{v:020d}.json").write_text("\n".join(json.dumps(o) for o in objs) + "\n")
    lines = rp._spec_compaction(commits, 2, 3, root)
    (log / f"{2:020d}.{3:020d}.compacted.json").write_text(
        "".join(json.dumps(o) + "\n" for o in lines)
    )
    for v in (2, 3):
        (log / f"{v:020d}.json").unlink()
    with rb.rebuild_snapshot(Storage.for_uri(str(root)), buckets=2) as rebuilt:
        assert rebuilt.snapshot.version == 3
        assert _rows_dicts(rebuilt.snapshot.files)[0]["size"] == 3
    result = write_checkpoint(str(root), now_ms=tc.NOW, rebuild=True)
    assert result.version == 3 and result.cross_check.startswith("unavailable")
    # The streamed state (the incremental path) reads the same latest version.
    assert load_snapshot(Storage.for_uri(str(root)), stream=True).version == 3

"""The checkpoint writer: corpus round trips, Spark parity, generated histories, crashes.

Corpus tables are copied to a temporary directory before anything is written. Generated
tables are written commit by commit through `Storage.put_if_absent`.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delta_ops import cli
from delta_ops.engine.local import LocalEngine
from delta_ops.errors import StorageError
from delta_ops.log.files.existing_checkpoints import find_existing
from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
from delta_ops.maintenance.checkpoint import (
    CheckpointKind,
    CheckpointVerificationError,
    write_checkpoint,
)
from delta_ops.maintenance.checkpoint.verify import Expected, verify_file
from delta_ops.protocol.checkpoint_schema import (
    CHECKPOINT_REMOVE_TYPE,
    checkpoint_layout,
    hash_partition,
    spark_hash,
)
from delta_ops.protocol.last_checkpoint import parse_last_checkpoint
from delta_ops.protocol.table_configuration import TableConfiguration
from delta_ops.storage import Storage
from delta_ops.table import DeltaTable
from delta_ops_tests.support.checkpoint_checks import (
    LOG,
    NOW,
    PATHS,
    SUPPORTED,
    _actions_of_files,
    _copy,
    _delete_checkpoints_at,
    _delete_commits_upto,
    _full_state,
    _log_names,
    _normalize_action,
    _rs_files,
    _state,
    _write_history,
    round_trip_corpus,
)
from delta_ops_tests.support.corpus import corpus_path

# ---------------------------------------------------------------------------------------------
# helpers


# ---------------------------------------------------------------------------------------------
# protocol/checkpoint_schema.py


# Spark's values, from pyspark 4.3: df.select(hash("p"), expr("pmod(hash(p), 7)")).
SPARK_HASHES = [
    ("", 142593372, 5),
    ("a", 1485273170, 3),
    ("ab", -97053317, 3),
    ("abc", 1322437556, 6),
    ("abcd", -396302900, 0),
    ("abcde", 814637928, 6),
    ("part-00000-x.snappy.parquet", 2136450862, 0),
    ("é", 2119106806, 5),
    ("ü/日本語", -338438758, 0),
    (None, 42, 0),
    ("x" * 33, 156528433, 5),
]


def test_spark_hash_matches_pyspark():
    values = [v for v, _, _ in SPARK_HASHES]
    assert spark_hash(values).tolist() == [h for _, h, _ in SPARK_HASHES]
    assert hash_partition(pa.array(values), 7).tolist() == [p for _, _, p in SPARK_HASHES]
    # Sliced and chunked inputs hash the same as whole ones.
    arr = pa.array(values)
    assert spark_hash(arr.slice(3, 4)).tolist() == [h for _, h, _ in SPARK_HASHES[3:7]]
    chunked = pa.chunked_array([arr.slice(0, 5), arr.slice(5)])
    assert spark_hash(chunked).tolist() == [h for _, h, _ in SPARK_HASHES]


@pytest.mark.parametrize(
    "name",
    ["golden__multi-part-checkpoint", "kernel-defaults__kernel-pagination-multi-part-checkpoints"],
)
def test_hash_partitioning_reproduces_spark_parts(name):
    parts = sorted((corpus_path(name) / LOG).glob("[0-9]*.checkpoint.0*.parquet"))
    assert len(parts) >= 2
    for i, f in enumerate(parts):
        t = pq.read_table(f)
        key = pc.coalesce(
            pc.struct_field(t.column("add"), "path"), pc.struct_field(t.column("remove"), "path")
        )
        assert set(hash_partition(key, len(parts)).tolist()) == {i}, f.name


def test_layout_follows_table_properties_and_column_mapping():
    snap = DeltaTable(str(corpus_path("golden__dv-with-columnmapping"))).snapshot()
    md = snap.metadata
    layout = checkpoint_layout(snap.table_configuration)
    names = [f.name for f in layout.add]
    assert "stats" in names and "partitionValues_parsed" not in names  # struct stats off
    raw = dict(md.raw)
    raw["configuration"] = {
        **md.configuration,
        "delta.checkpoint.writeStatsAsStruct": "true",
        "delta.checkpoint.writeStatsAsJson": "false",
    }
    layout = checkpoint_layout(TableConfiguration(snap.protocol, type(md)(raw)))
    names = [f.name for f in layout.add]
    assert "stats" not in names
    physical = {f.name: f.physical_name for f in md.schema.fields}
    pv = layout.add.field("partitionValues_parsed").type
    assert [f.name for f in pv] == [physical["part"]]
    stats = layout.add.field("stats_parsed").type
    assert {f.name for f in stats.field("minValues").type} <= set(physical.values())
    assert "tightBounds" in [f.name for f in stats]  # deletion vectors supported
    assert layout.reader_features_required and layout.writer_features_required
    assert {f.name for f in CHECKPOINT_REMOVE_TYPE}.isdisjoint({"stats", "tags"})


# ---------------------------------------------------------------------------------------------
# corpus round trips


@pytest.mark.parametrize("name", SUPPORTED)
def test_round_trip_corpus(name, tmp_path):
    round_trip_corpus(name, tmp_path)


def test_round_trip_covers_the_corpus():
    assert len(SUPPORTED) >= 120
    loaded = [t for t in SUPPORTED if _rs_files(corpus_path(t)) is not None]
    assert len(loaded) >= 100
    v2 = [
        t
        for t in SUPPORTED
        if "v2Checkpoint" in DeltaTable(str(corpus_path(t))).snapshot().reader_features
    ]
    assert len(v2) >= 4


def test_checkpoint_at_an_older_version_keeps_last_checkpoint(tmp_path):
    root = _copy("kernel-defaults__basic-dv-with-checkpoint", tmp_path / "t")
    lc_before = (root / LOG / "_last_checkpoint").read_bytes()
    expected = _state(DeltaTable(str(root)).snapshot(25), root)
    result = write_checkpoint(str(root), version=25, now_ms=NOW)
    assert result.version == 25 and not result.last_checkpoint_updated
    assert (root / LOG / "_last_checkpoint").read_bytes() == lc_before  # never moves back
    _delete_commits_upto(root, 25)
    for p in (root / LOG).glob("000000000000000000[12]0.checkpoint.parquet"):
        p.unlink()
    snap = DeltaTable(str(root)).snapshot(25)
    assert snap.checkpoint_version == 25
    assert _state(snap, root) == expected
    assert DeltaTable(str(root)).snapshot().version == 46


# ---------------------------------------------------------------------------------------------
# parity with the checkpoints Spark wrote


def _spark_checkpoints() -> list[tuple[str, int]]:
    out = []
    for name in SUPPORTED:
        log = corpus_path(name) / LOG
        if not (log / f"{0:020d}.json").exists():
            continue  # the log must replay from version 0 without Spark's checkpoint
        versions = {int(p.name[:20]) for p in log.glob("[0-9]*.checkpoint.*")}
        out += [(name, v) for v in sorted(versions)]
    return out


SPARK_CHECKPOINTS = _spark_checkpoints()


def _normalized(rows: list[dict]) -> list[str]:
    """The actions that make the state, normalized, as a sorted list (duplicates count)."""
    return sorted(s for s in map(_normalize_action, rows) if s is not None)


def _ours_vs_spark(name: str, version: int, tmp: Path) -> tuple[list[str], list[str]]:
    log = corpus_path(name) / LOG
    theirs = sorted(
        p for p in log.glob(f"{version:020d}.checkpoint.*") if not p.name.endswith(".crc")
    )
    uuid_named = [p for p in theirs if p.name.count(".") == 3 and len(p.name.split(".")[2]) == 36]
    multipart = [p for p in theirs if p.name.count(".") == 4]
    if uuid_named:
        spark_files, kind = uuid_named[:1], "v2-uuid"
        fmt = uuid_named[0].suffix[1:]
    elif multipart:
        spark_files, kind, fmt = multipart, "multi-part", "parquet"
    else:
        spark_files, kind, fmt = theirs[:1], "classic", "parquet"
    root = _copy(name, tmp)
    for p in (root / LOG).iterdir():
        if ".checkpoint." in p.name or p.name == "_last_checkpoint":
            p.unlink()
    shutil.rmtree(root / LOG / "_sidecars", ignore_errors=True)
    commit = [json.loads(x) for x in (log / f"{version:020d}.json").read_text().splitlines() if x]
    # Spark checkpoints right after the commit: its clock is the commit's timestamp (the
    # newest file timestamp for logs older than commitInfo).
    stamps = [o["commitInfo"]["timestamp"] for o in commit if "commitInfo" in o] or [
        a.get("modificationTime") or a.get("deletionTimestamp") or 0
        for v in range(version + 1)
        for line in (log / f"{v:020d}.json").read_text().splitlines()
        if line
        for a in json.loads(line).values()
        if isinstance(a, dict)
    ]
    ts = max(stamps)
    options: dict[str, Any] = {"kind": kind, "now_ms": ts + 60_000}
    if kind == "v2-uuid":
        options["fmt"] = fmt
    if kind == "multi-part":
        options["parts"] = len(spark_files)
    result = write_checkpoint(str(root), version=version, **options)
    ours = _actions_of_files(sorted(root / LOG / f for f in result.files if "/" not in f))
    spark = _actions_of_files(spark_files)
    return _normalized(ours), _normalized(spark)


@pytest.mark.parametrize("name,version", SPARK_CHECKPOINTS)
def test_same_actions_as_spark(name, version, tmp_path):
    ours, spark = _ours_vs_spark(name, version, tmp_path / "t")
    assert ours, name
    assert ours == spark, (sorted(set(ours) - set(spark))[:3], sorted(set(spark) - set(ours))[:3])


def test_spark_parity_covers_every_kind():
    kinds = set()
    for name, v in SPARK_CHECKPOINTS:
        names = [p.name for p in (corpus_path(name) / LOG).glob(f"{v:020d}.checkpoint.*")]
        kinds |= {
            "multi"
            if n.count(".") == 4
            else "uuid"
            if n.count(".") == 3 and "-" in n
            else "classic"
            for n in names
        }
    assert kinds == {"classic", "multi", "uuid"}
    assert len(SPARK_CHECKPOINTS) >= 20


def test_multipart_parts_match_spark_byte_for_byte_in_content(tmp_path):
    """Ours and Spark's put every action in the same part."""
    name = "golden__multi-part-checkpoint"
    root = _copy(name, tmp_path / "t")
    spark_parts = sorted((corpus_path(name) / LOG).glob("[0-9]*.checkpoint.0*.parquet"))
    for p in (root / LOG).iterdir():
        if ".checkpoint." in p.name or p.name == "_last_checkpoint":
            p.unlink()
    result = write_checkpoint(str(root), version=1, parts=len(spark_parts), now_ms=NOW)
    assert result.kind == "multi-part" and len(result.files) == len(spark_parts)
    for ours, theirs in zip(sorted(result.files), spark_parts, strict=True):
        assert _normalized(_actions_of_files([root / LOG / ours])) == _normalized(
            _actions_of_files([theirs])
        )


# ---------------------------------------------------------------------------------------------
# idempotency, _last_checkpoint, verification


def test_rerun_is_a_no_op_and_repairs_last_checkpoint(tmp_path):
    root = _copy("basic_partitioned", tmp_path / "t")
    first = write_checkpoint(str(root), kind="multi-part", parts=3, now_ms=NOW)
    assert not first.already_existed and first.last_checkpoint_updated
    names = _log_names(root)
    again = write_checkpoint(str(root), kind="multi-part", now_ms=NOW)
    assert again.already_existed and not again.last_checkpoint_updated
    assert again.files == first.files and again.num_actions == first.num_actions
    assert _log_names(root) == names
    # A lost _last_checkpoint (crash before it was written) is restored by the re-run.
    (root / LOG / "_last_checkpoint").unlink()
    repaired = write_checkpoint(str(root), kind="multi-part", now_ms=NOW)
    assert repaired.already_existed and repaired.last_checkpoint_updated
    lc = parse_last_checkpoint((root / LOG / "_last_checkpoint").read_bytes())
    assert (lc.version, lc.parts, lc.size, lc.checksum_valid) == (1, 3, first.num_actions, True)
    # A missing part makes the checkpoint incomplete: it is written again.
    (root / LOG / first.files[1]).unlink()
    rewritten = write_checkpoint(str(root), kind="multi-part", parts=3, now_ms=NOW)
    assert not rewritten.already_existed and rewritten.files == first.files


def test_unreadable_or_incomplete_checkpoints_do_not_count(tmp_path):
    root = _copy("golden__v2-checkpoint-parquet", tmp_path / "t")
    storage = Storage.for_uri(str(root))
    found = find_existing(storage, 2, CheckpointKind.V2_UUID)
    assert found is not None and len(found.names) == 3 and found.num_add_files == 4
    assert find_existing(storage, 2, CheckpointKind.V2_CLASSIC) is None
    sidecar = root / LOG / found.names[1]
    sidecar.unlink()  # a V2 checkpoint missing a sidecar is unusable
    assert find_existing(storage, 2, CheckpointKind.V2_UUID) is None
    (root / LOG / f"{2:020d}.checkpoint.parquet").write_bytes(b"PAR1 not really")
    assert find_existing(storage, 2, CheckpointKind.CLASSIC) is None


class _DroppingEngine(LocalEngine):
    """An engine whose sidecar writes lose the last row of each file."""

    def write_parquet_files(self, storage, files):
        return super().write_parquet_files(
            storage, [(p, t.slice(0, t.num_rows - 1)) for p, t in files]
        )


def test_sidecars_that_do_not_verify_are_never_published(tmp_path):
    root = _copy("kernel-defaults__kernel-pagination-v2-checkpoint-json", tmp_path / "t")
    before = _log_names(root)
    lc_before = (root / LOG / "_last_checkpoint").read_bytes()
    _delete_checkpoints_at(root, 4)
    names = _log_names(root)
    with pytest.raises(CheckpointVerificationError, match="not published|expected"):
        write_checkpoint(
            str(root), kind="v2-uuid", sidecar_actions=3, now_ms=NOW, engine=_DroppingEngine()
        )
    assert _log_names(root) == names  # no top-level file, sidecars removed
    assert (root / LOG / "_last_checkpoint").read_bytes() == lc_before
    assert before >= names


def test_verify_file_catches_differences():
    import io

    snap = DeltaTable(str(corpus_path("basic_partitioned"))).snapshot()
    adds = snap.files.select(["path", "size", "deletionVector"])
    empty = snap.tombstones.select(["path", "deletionVector"]).slice(0, 0)
    table = pa.table(
        {
            "add": snap.files.to_struct_array(),
            "remove": pa.nulls(snap.num_files, CHECKPOINT_REMOVE_TYPE),
        }
    )
    buf = io.BytesIO()
    pq.write_table(table, buf)
    data = buf.getvalue()

    def check(expected: Expected) -> int:
        return verify_file(data, "parquet", expected, table="t", version=1, file="f")

    assert check(Expected(adds, empty)) == snap.num_files == 6
    wrong = adds.set_column(1, "size", pc.add(adds.column("size"), 1))
    with pytest.raises(CheckpointVerificationError, match="add sizes differ"):
        check(Expected(wrong, empty))
    with pytest.raises(CheckpointVerificationError, match="holds 6 add actions, expected 5"):
        check(Expected(adds.slice(1), empty))
    reordered = adds.take(pa.array([1, 0, 2, 3, 4, 5]))
    with pytest.raises(CheckpointVerificationError, match="add paths differ"):
        check(Expected(reordered, empty))
    with pytest.raises(CheckpointVerificationError, match="protocol actions differ"):
        check(Expected(adds, empty, {"protocol": [{"minReaderVersion": 1}]}))
    with pytest.raises(CheckpointVerificationError, match="cannot be read back"):
        verify_file(data[:-20], "parquet", Expected(adds, empty), table="t", version=1, file="f")


# ---------------------------------------------------------------------------------------------
# generated histories


step = st.one_of(
    st.tuples(
        st.just("add"),
        st.integers(0, len(PATHS) - 1),
        st.integers(0, 2),
        st.integers(1, 10_000),
        st.booleans(),
    ),
    st.tuples(st.just("remove"), st.integers(0, len(PATHS) - 1), st.integers(0, 2), st.booleans()),
    st.tuples(st.just("txn"), st.sampled_from(["app-a", "app-b"]), st.integers(0, 99)),
    st.tuples(st.just("domain"), st.sampled_from(["d1", "d2"]), st.booleans()),
    st.tuples(st.just("config"), st.booleans(), st.booleans()),
)


KIND_OPTIONS = {
    "classic": {},
    "multi-part": {"parts": 3},
    "v2-classic": {"sidecar_actions": 2},
    "v2-uuid": {"fmt": "json", "sidecar_actions": 3},
    "v2-uuid-embedded": {"sidecar_actions": 0},
    "v2-uuid-json-embedded": {"fmt": "json", "sidecar_actions": 0},
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    commits=st.lists(st.lists(step, min_size=1, max_size=8), min_size=1, max_size=8),
    v3=st.booleans(),
    pick=st.integers(0, 10_000),
    kind=st.sampled_from(sorted(KIND_OPTIONS)),
)
def test_generated_histories_read_back_equal_replay(commits, v3, pick, kind):
    if kind.startswith("v2") and not v3:
        kind = "classic"
    if kind == "multi-part" and v3:
        kind = "v2-uuid"
    with tempfile.TemporaryDirectory() as tmp:
        storage = Storage.for_uri(tmp)
        latest = _write_history(storage, commits, v3)
        version = pick % (latest + 1)
        at_version = load_snapshot(storage, version)
        expected = _full_state(at_version)
        # Statistics the checkpoint leaves out (writeStatsAsJson=false) stay out later on.
        stats = at_version.properties.checkpoint_write_stats_as_json
        expected_latest = _full_state(load_snapshot(storage), stats=stats)
        options = dict(KIND_OPTIONS[kind])
        result = write_checkpoint(
            storage,
            version=version,
            kind=kind.replace("-json", "").replace("-embedded", ""),
            now_ms=NOW,
            **options,
        )
        assert result.version == version and not result.already_existed
        _delete_commits_upto(Path(tmp), version)
        snap = load_snapshot(storage, version)
        assert snap.checkpoint_version == version
        assert _full_state(snap) == expected
        assert _full_state(load_snapshot(storage), stats=stats) == expected_latest
        again = write_checkpoint(
            storage,
            version=version,
            kind=kind.replace("-json", "").replace("-embedded", ""),
            now_ms=NOW,
            **options,
        )
        assert again.already_existed and again.num_actions == result.num_actions


# ---------------------------------------------------------------------------------------------
# crashes


class InjectedFailure(StorageError):
    """The k-th write failed on purpose."""


class FailingStorage:
    """A Storage whose k-th write (put_atomic, put_if_absent or delete) fails, either before
    touching storage or after the write went through ("lost acknowledgement")."""

    def __init__(self, inner: Storage, fail_at: int, *, after: bool = False) -> None:
        self._inner = inner
        self._fail_at = fail_at
        self._after = after
        self._count = 0
        self._lock = threading.Lock()
        self.writes: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _write(self, op: str, path: str, call) -> Any:
        with self._lock:
            self._count += 1
            fail = self._count == self._fail_at
            self.writes.append(f"{op} {path}")
        if fail and not self._after:
            raise InjectedFailure(f"injected failure of {op}", file=path)
        out = call()
        if fail:
            raise InjectedFailure(f"injected failure after {op}", file=path)
        return out

    def put_atomic(self, path: str, data: bytes) -> None:
        return self._write("put_atomic", path, lambda: self._inner.put_atomic(path, data))

    def put_if_absent(self, path: str, data: bytes, **kw: Any) -> bool:
        return self._write(
            "put_if_absent", path, lambda: self._inner.put_if_absent(path, data, **kw)
        )

    def delete(self, path: str) -> bool:
        return self._write("delete", path, lambda: self._inner.delete(path))


CRASH_HISTORY = [
    [("add", 0, 0, 100, True), ("add", 1, 1, 200, True), ("txn", "app-a", 1)],
    [("add", 2, 0, 300, False), ("remove", 0, 0, False), ("domain", "d1", False)],
    [("add", 3, 2, 400, True), ("remove", 1, 1, True), ("txn", "app-b", 7)],
    [("add", 4, 0, 500, True), ("add", 5, 0, 600, True), ("domain", "d2", False)],
]


@pytest.mark.parametrize(
    "kind,options",
    [
        ("classic", {}),
        ("multi-part", {"parts": 3}),
        ("v2-uuid", {"sidecar_actions": 2}),
        ("v2-classic", {"sidecar_actions": 3, "fmt": "parquet"}),
    ],
)
def test_crash_at_every_write_leaves_table_readable(kind, options, tmp_path):
    v3 = kind.startswith("v2")
    template = tmp_path / "template"
    _write_history(Storage.for_uri(str(template)), CRASH_HISTORY, v3)
    versions = range(len(CRASH_HISTORY) + 1)
    expected = {v: _full_state(load_snapshot(Storage.for_uri(str(template)), v)) for v in versions}
    probe_root = tmp_path / "probe"
    shutil.copytree(template, probe_root)
    probe = FailingStorage(Storage.for_uri(str(probe_root)), fail_at=0)
    write_checkpoint(probe, kind=kind, now_ms=NOW, **options)
    total = len(probe.writes)
    assert total >= 2  # the checkpoint file(s) and _last_checkpoint
    for after in (False, True):
        for k in range(1, total + 1):
            root = tmp_path / f"k{k}-{after}"
            shutil.copytree(template, root)
            failing = FailingStorage(Storage.for_uri(str(root)), fail_at=k, after=after)
            with pytest.raises(InjectedFailure):
                write_checkpoint(failing, kind=kind, now_ms=NOW, **options)
            storage = Storage.for_uri(str(root))
            for v in versions:
                assert _full_state(load_snapshot(storage, v)) == expected[v], (k, after, v)
            result = write_checkpoint(storage, kind=kind, now_ms=NOW, **options)
            lc = parse_last_checkpoint((root / LOG / "_last_checkpoint").read_bytes())
            assert lc.version == versions[-1] and lc.checksum_valid, (k, after)
            assert result.version == versions[-1]
            _delete_commits_upto(root, versions[-1])
            assert _full_state(load_snapshot(storage)) == expected[versions[-1]], (k, after)


# ---------------------------------------------------------------------------------------------
# CLI


def test_cli_checkpoint_json(tmp_path, monkeypatch, capsys):
    if "checkpoint" not in cli.COMMAND_MODULES:
        monkeypatch.setattr(cli, "COMMAND_MODULES", (*cli.COMMAND_MODULES, "checkpoint"))
    root = _copy("golden__v2-checkpoint-json", tmp_path / "t")
    _delete_checkpoints_at(root, 2)
    code = cli.main(
        [
            "checkpoint",
            str(root),
            "--kind",
            "v2-uuid",
            "--format",
            "json",
            "--sidecar-actions",
            "0",
            "--json",
        ]
    )
    assert code == 0
    obj = json.loads(capsys.readouterr().out)
    assert set(obj) == {
        "version",
        "kind",
        "files",
        "num_actions",
        "num_add_files",
        "size_in_bytes",
        "last_checkpoint_updated",
        "already_existed",
        "cross_check",
        "rebuilt_buckets",
    }
    # No compaction file in this log: the commits-only segment is the independent path.
    assert obj["cross_check"].startswith("commits-only segment (commits 0..2)")
    assert obj["kind"] == "v2-uuid" and obj["version"] == 2 and len(obj["files"]) == 1
    assert obj["files"][0].endswith(".json") and obj["num_add_files"] == 4
    # _last_checkpoint named Spark's checkpoint of version 2, deleted above: it now names ours.
    assert obj["already_existed"] is False and obj["last_checkpoint_updated"] is True
    code = cli.main(["checkpoint", str(root), "--kind", "multi-part"])
    assert code == 1
    assert "multi-part checkpoints are forbidden" in capsys.readouterr().err
    code = cli.main(["checkpoint", str(root), "--kind", "v2-classic", "--version", "1"])
    assert code == 0
    assert "v2-classic at version 1 (written)" in capsys.readouterr().out


def test_batches_row_groups_and_engine_calls(tmp_path, monkeypatch):
    """Many small batches, row groups and engine calls give the same checkpoint content."""
    from delta_ops.maintenance.checkpoint import actions as act
    from delta_ops.maintenance.checkpoint import v2

    monkeypatch.setattr(act, "BATCH_ROWS", 4)
    monkeypatch.setattr(v2, "SIDECARS_PER_ENGINE_CALL", 2)
    commits = [
        [("add", f, f % 3, 100 + 10 * v + f, True) for f in range(len(PATHS))] for v in range(3)
    ]
    commits.append([("remove", f, 0, False) for f in range(0, len(PATHS), 2)])
    storage = Storage.for_uri(str(tmp_path / "t"))
    latest = _write_history(storage, commits, v3=True)
    expected = _full_state(load_snapshot(storage))
    n_actions = len(expected["files"]) + len(expected["tombstones"])
    assert n_actions > 12
    classic = write_checkpoint(storage, kind="classic", now_ms=NOW)
    pf = pq.ParquetFile(tmp_path / "t" / LOG / classic.files[0])
    assert pf.metadata.num_row_groups >= n_actions // 4
    assert max(pf.metadata.row_group(i).num_rows for i in range(pf.metadata.num_row_groups)) <= 4
    v2 = write_checkpoint(storage, kind="v2-uuid", sidecar_actions=3, now_ms=NOW)
    assert len(v2.files) - 1 == -(-n_actions // 3) >= 5  # several engine calls of 2 sidecars
    for name in (classic.files[0], v2.files[0]):
        root = tmp_path / name
        shutil.copytree(tmp_path / "t", root)
        for other in (classic.files[0], v2.files[0]):
            if other != name:
                (root / LOG / other).unlink()
        _delete_commits_upto(root, latest)
        snap = load_snapshot(Storage.for_uri(str(root)))
        assert snap.checkpoint_version == latest and _full_state(snap) == expected


def test_parse_stats_types_and_malformed_rows():
    from delta_ops.maintenance.checkpoint.actions import parse_stats

    target = pa.struct(
        [
            ("numRecords", pa.int64()),
            (
                "minValues",
                pa.struct(
                    [
                        ("d", pa.date32()),
                        ("t", pa.timestamp("us", tz="UTC")),
                        ("x", pa.decimal128(10, 2)),
                        ("s", pa.string()),
                    ]
                ),
            ),
            ("nullCount", pa.struct([("d", pa.int64())])),
        ]
    )
    stats = pa.array(
        [
            '{"numRecords":3,"minValues":{"d":"2021-01-02","t":"2021-01-01T10:00:00.123+01:00",'
            '"x":1.25,"s":"a"},"nullCount":{"d":1},"other":{"q":1}}',
            None,
            "",
            '{"numRecords":"not a number"}',
            '{"numRecords":7}',
        ]
    )
    rows = parse_stats(stats, target).to_pylist()
    assert rows[0]["numRecords"] == 3 and rows[0]["nullCount"] == {"d": 1}
    mins = rows[0]["minValues"]
    assert str(mins["d"]) == "2021-01-02" and str(mins["x"]) == "1.25" and mins["s"] == "a"
    assert mins["t"].isoformat() == "2021-01-01T09:00:00.123000+00:00"
    assert rows[1] is None and rows[2] is None and rows[3] is None  # missing or malformed
    assert rows[4] == {"numRecords": 7, "minValues": None, "nullCount": None}


@pytest.mark.parametrize("kind", sorted(KIND_OPTIONS))
def test_every_kind_keeps_null_partition_values_and_row_ids(kind, tmp_path):
    v3 = kind.startswith("v2")
    hive = PATHS.index("p=__HIVE_DEFAULT_PARTITION__/n.parquet")
    commits = [
        [("add", hive, 1, 300, True), ("add", 0, 0, 400, False), ("txn", "app-a", 3)],
        [("remove", 0, 0, False), ("add", 1, 2, 501, True), ("domain", "d1", False)],
    ]
    storage = Storage.for_uri(str(tmp_path))
    latest = _write_history(storage, commits, v3)
    expected = _full_state(load_snapshot(storage))
    assert {"p": None} in [f["partitionValues"] for f in expected["files"]]
    name = kind.replace("-json", "").replace("-embedded", "")
    write_checkpoint(storage, kind=name, now_ms=NOW, **KIND_OPTIONS[kind])
    _delete_commits_upto(tmp_path, latest)
    snap = load_snapshot(storage)
    assert snap.checkpoint_version == latest
    assert _full_state(snap) == expected

"""The columnar commit reconciliation (log/replay/columnar_commits.py) equals the action-by-action
one.

Both run on the same commit files: every corpus table's commits, and generated commits
whose partition values and tags hold everything JSON allows (null values, omitted keys,
empty and absent maps, ISO dates Arrow would type as timestamps, numbers), deletion
vectors, non-file actions, blank lines and file actions written in unusual shapes. Where
the columnar path steps aside it must say so (None), never return something different.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delta_ops.log.replay import columnar_commits as commits
from delta_ops.log.replay.full_replay import _Reconciler, parse_json_actions, read_log_files
from delta_ops.log.segment.log_segment import build_log_segment
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import all_corpus_tables, corpus_path


def _copies(files: list[commits.CommitFile]) -> list[commits.CommitFile]:
    """`reconcile` takes the files' bytes; give it copies of the descriptors."""
    return [commits.CommitFile(f.version, f.path, f.data) for f in files]


def _slow(files: list[commits.CommitFile], root: str):
    rec = _Reconciler(root)
    for f in reversed(files):
        actions = parse_json_actions(f.data, table=root, version=f.version, file=f.path)
        rec.apply_newest_first(actions, table=root, version=f.version, file=f.path)
    adds, removes = rec.file_tables()
    return adds, removes, set(rec.seen), rec.state


def _norm_value(v):
    if isinstance(v, list) and v and isinstance(v[0], tuple):
        return sorted(v)  # map entries: order is not meaningful
    if isinstance(v, dict):
        return {k: _norm_value(x) for k, x in v.items()}
    return v


def _rows(table) -> list:
    rows = [{k: _norm_value(v) for k, v in r.items()} for r in table.to_pylist()]
    return sorted(rows, key=lambda r: orjson.dumps(r, option=orjson.OPT_SORT_KEYS))


def _state(state) -> tuple:
    return (
        state.protocol,
        None if state.metadata is None else dict(state.metadata.raw),
        {k: (v.version, v.last_updated) for k, v in state.txns.items()},
        {k: (v.configuration, v.removed) for k, v in state.domains.items()},
        {k: dict(v.raw) for k, v in state.commit_infos.items()},
    )


def _assert_same(files: list[commits.CommitFile], root: str, hint: tuple = ()) -> bool:
    """Assert both paths agree; True when the columnar path ran (did not step aside).
    `hint`: partition columns known beforehand (as from a checkpoint)."""
    adds, removes, seen, state = _slow(files, root)
    fast = commits.reconcile(_copies(files), root, partition_columns=hint)
    if fast is None:
        return False
    assert _rows(fast.adds) == _rows(adds)
    assert _rows(fast.removes) == _rows(removes)
    assert set(fast.keys.to_pylist()) == seen
    rec = _Reconciler(root)
    for version, file, obj in fast.others:
        rec.apply_other(obj, table=root, version=version, file=file)
    assert _state(rec.state) == _state(state)
    return True


def _corpus_commits(name: str) -> tuple[list[commits.CommitFile], str] | None:
    storage = Storage.for_uri(str(corpus_path(name)))
    try:
        segment = build_log_segment(storage)
    except Exception:  # the deliberately broken tables: other tests cover them
        return None
    if not segment.deltas:
        return None
    blobs = read_log_files(storage, [d.file.path for d in segment.deltas])
    files = [
        commits.CommitFile(d.end, d.file.path, b)
        for d, b in zip(segment.deltas, blobs, strict=True)
    ]
    return files, storage.root


def test_corpus_commits_reconcile_the_same_columnar():
    ran = stepped_aside = 0
    for name in all_corpus_tables():
        found = _corpus_commits(name)
        if found is None:
            continue
        if _assert_same(*found):
            ran += 1
        else:
            stepped_aside += 1
    # Every corpus table written by Spark, Databricks or Kernel takes the columnar path.
    assert ran >= 130
    assert stepped_aside == 0


# ---- generated commits --------------------------------------------------------------------

_PATHS = ["a.parquet", "p=1/b.parquet", "dir%20x/c.parquet", "/abs/d.parquet", "e.parquet"]
_DV = {"storageType": "i", "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L",
       "sizeInBytes": 40, "cardinality": 6}
_ABSENT = object()

map_value = st.one_of(
    st.just("x"), st.just("2024-01-31"), st.just("2024-01-31 10:00:00"), st.just(""),
    st.none(), st.just(_ABSENT),
)
string_map = st.one_of(
    st.just(_ABSENT),
    st.none(),
    st.dictionaries(st.sampled_from(["p", "q", "date"]), map_value, max_size=3).map(
        lambda d: {k: v for k, v in d.items() if v is not _ABSENT}
    ),
)
file_action = st.tuples(
    st.sampled_from(["add", "remove"]),
    st.sampled_from(_PATHS),
    st.booleans(),  # with a DV
    string_map,  # partitionValues
    string_map,  # tags
    st.integers(0, 10_000),
)
other_line = st.sampled_from(
    [
        b'{"commitInfo":{"operation":"WRITE","timestamp":1}}',
        b'{"txn":{"appId":"app","version":3}}',
        b'{"domainMetadata":{"domain":"d","configuration":"c","removed":false}}',
        b'{"protocol":{"minReaderVersion":1,"minWriterVersion":2}}',
        b'{"metaData":{"id":"t","partitionColumns":["p"],"configuration":{}}}',
        b"",
        b'{"unknownAction":{"x":[1,2]}}',
    ]
)
odd_line = st.sampled_from(
    [
        b'{ "add": {"path": "odd.parquet", "partitionValues": {}, "size": 1}}',
        b'{"add":{"path":"num.parquet","partitionValues":{"p":1},"size":1}}',
        b'{"add":{"size":1}}',
        b'{"add":',
    ]
)


def _action_line(a) -> bytes:
    kind, path, dv, pv, tags, size = a
    body: dict = {"path": path, "size": size, "dataChange": True}
    if pv is not _ABSENT:
        body["partitionValues"] = pv
    if tags is not _ABSENT:
        body["tags"] = tags
    if dv:
        body["deletionVector"] = _DV
    if kind == "remove":
        body["deletionTimestamp"] = size
    return orjson.dumps({kind: body})


commit = st.lists(
    st.one_of(file_action.map(_action_line), other_line), min_size=0, max_size=8
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    history=st.lists(commit, min_size=1, max_size=6),
    odd=st.one_of(st.none(), st.tuples(st.integers(0, 5), odd_line)),
    trailing_newline=st.booleans(),
    hint=st.sampled_from([(), ("p",), ("date", "q"), ("p", "q", "date", "absent")]),
    newline=st.sampled_from([b"\n", b"\r\n"]),
)
def test_generated_commits_reconcile_the_same_columnar(
    history, odd, trailing_newline, hint, newline
):
    root = "file:///tbl"
    files = []
    for v, lines in enumerate(history):
        # One action per file key and kind per commit, as writers must.
        seen, kept = set(), []
        for line in lines:
            if line.startswith((b'{"add"', b'{"remove"')):
                obj = orjson.loads(line)
                kind = next(iter(obj))
                key = (kind, obj[kind]["path"], "deletionVector" in obj[kind])
                if key in seen:
                    continue
                seen.add(key)
            kept.append(line)
        if odd is not None and odd[0] == v:
            kept.append(odd[1])
        data = newline.join(kept) + (newline if trailing_newline and kept else b"")
        files.append(commits.CommitFile(v, f"_delta_log/{v:020d}.json", data))
    try:
        _slow(files, root)
    except Exception:
        # Invalid input: the columnar path must step aside (the slow path reports it).
        assert commits.reconcile(_copies(files), root) is None
        return
    ran = _assert_same(files, root, hint)
    if odd is None:
        assert ran, "plain Spark-shaped commits must take the columnar path"


def test_numbers_in_partition_values_step_aside_and_load_the_same(tmp_path: Path):
    log = tmp_path / "_delta_log"
    log.mkdir()
    (log / f"{0:020d}.json").write_bytes(
        b'{"protocol":{"minReaderVersion":1,"minWriterVersion":2}}\n'
        b'{"metaData":{"id":"t","format":{"provider":"parquet","options":{}},'
        b'"partitionColumns":["p"],"configuration":{},"schemaString":'
        b'"{\\"type\\":\\"struct\\",\\"fields\\":[{\\"name\\":\\"p\\",\\"type\\":\\"long\\",'
        b'\\"nullable\\":true,\\"metadata\\":{}}]}"}}\n'
        b'{"add":{"path":"p=1/a.parquet","partitionValues":{"p":1},"size":3,'
        b'"modificationTime":0,"dataChange":true}}\n'
    )
    found = _corpus_commits_at(tmp_path)
    assert commits.reconcile(*found) is None
    from delta_ops.table import DeltaTable

    files = DeltaTable(str(tmp_path)).snapshot().files.to_pylist()
    assert [f["partitionValues"] for f in files] == [[("p", "1")]]


def _corpus_commits_at(path: Path):
    storage = Storage.for_uri(str(path))
    segment = build_log_segment(storage)
    blobs = read_log_files(storage, [d.file.path for d in segment.deltas])
    files = zip(segment.deltas, blobs, strict=True)
    return [commits.CommitFile(d.end, d.file.path, b) for d, b in files], storage.root


@pytest.mark.parametrize(
    "line",
    [b'{"add":{"path":"x","size":"not a number"}}', b'{"remove":{}}', b"not json"],
)
def test_bad_lines_step_aside(line: bytes):
    files = [commits.CommitFile(0, "_delta_log/0.json", b'{"add":{"path":"a"}}\n' + line)]
    assert commits.reconcile(files, "file:///tbl") is None


_NO_PANDAS = """
import sys
from delta_ops.table import DeltaTable
snap = DeltaTable(sys.argv[1]).snapshot()
if sys.argv[2] == "checkpoint":
    from delta_ops.maintenance.checkpoint import write_checkpoint
    write_checkpoint(sys.argv[1])
print(snap.num_files, 'pandas' in sys.modules)
"""


@pytest.mark.parametrize(
    "name", ["golden__dv-partitioned-with-checkpoint", "multi_partitioned", "basic_append"]
)
@pytest.mark.parametrize("operation", ["snapshot", "checkpoint"])
def test_snapshot_and_checkpoint_do_not_import_pandas(table_copy, name, operation):
    """pyarrow imports pandas (a third of a second and tens of MB in a cold process) on
    its first conversion of Python objects; loading a table and writing its checkpoint
    build every array from buffers instead."""
    import subprocess
    import sys

    root = table_copy(name)
    proc = subprocess.run(
        [sys.executable, "-c", _NO_PANDAS, str(root), operation],
        capture_output=True, text=True, check=True,
    )
    num_files, imported = proc.stdout.split()
    assert int(num_files) > 0
    assert imported == "False"


# ---- the same on S3 (moto on 127.0.0.1): threaded reads through s3fs handles ----------------

def _raw_table(root: Path) -> None:
    """Commits 0-6 of a partitioned table: 40 adds per commit, some removes, a DV."""
    log = root / "_delta_log"
    log.mkdir(parents=True)
    schema = orjson.dumps({"type": "struct", "fields": [
        {"name": "x", "type": "long", "nullable": True, "metadata": {}},
        {"name": "d", "type": "date", "nullable": True, "metadata": {}},
    ]}).decode()
    head = [
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {"metaData": {"id": "t", "format": {"provider": "parquet", "options": {}},
                      "schemaString": schema, "partitionColumns": ["d"],
                      "configuration": {}, "createdTime": 0}},
    ]
    for v in range(7):
        actions = list(head) if v == 0 else []
        actions.append({"commitInfo": {"operation": "WRITE", "timestamp": v}})
        for i in range(40):
            day = None if i % 7 == 0 else f"2024-01-{1 + i % 28:02d}"
            actions.append({"add": {
                "path": f"d={day or '__HIVE_DEFAULT_PARTITION__'}/f-{v}-{i}.parquet",
                "partitionValues": {"d": day}, "size": 100 + i, "modificationTime": v,
                "dataChange": True, "stats": f'{{"numRecords":{i}}}',
            }})
        if v >= 2:
            for i in range(0, 40, 3):
                day = None if i % 7 == 0 else f"2024-01-{1 + i % 28:02d}"
                actions.append({"remove": {
                    "path": f"d={day or '__HIVE_DEFAULT_PARTITION__'}/f-{v - 2}-{i}.parquet",
                    "deletionTimestamp": v, "dataChange": True,
                    "extendedFileMetadata": True, "partitionValues": {"d": day}, "size": 100 + i,
                }})
        (log / f"{v:020d}.json").write_bytes(b"\n".join(orjson.dumps(a) for a in actions))


def _files_view(snapshot) -> list:
    return _rows(snapshot.files)


@pytest.mark.s3
def test_s3_snapshot_of_multi_row_group_checkpoint_and_commits_matches_local(
    s3_server, tmp_path, monkeypatch
):
    import pyarrow.parquet as pq

    from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
    from delta_ops.maintenance.checkpoint import actions as checkpoint_actions
    from delta_ops.maintenance.checkpoint import write_checkpoint

    local_root = tmp_path / "t"
    _raw_table(local_root)
    local = Storage.for_uri(str(local_root))
    monkeypatch.setattr(checkpoint_actions, "BATCH_ROWS", 16)  # many row groups
    write_checkpoint(local, version=4, now_ms=10)
    checkpoint = local_root / "_delta_log" / f"{4:020d}.checkpoint.parquet"
    assert pq.ParquetFile(checkpoint).metadata.num_row_groups > 5
    s3 = Storage.for_uri(s3_server.fresh_uri("multi-row-group"), s3_server.storage_options)
    for path in sorted(p for p in local_root.rglob("*") if p.is_file()):
        s3.put_atomic(path.relative_to(local_root).as_posix(), path.read_bytes())

    for version in (3, 4, 6):
        want = load_snapshot(local, version)
        got = load_snapshot(s3, version)
        assert got.checkpoint_version == want.checkpoint_version == (4 if version >= 4 else None)
        assert _files_view(got) == _files_view(want)
        assert _rows(got.tombstones) == _rows(want.tombstones)
        assert got.num_files == want.num_files > 100
    # Null partition values stay null (not omitted) through commits and the checkpoint.
    values = {tuple(f["partitionValues"]) for f in load_snapshot(s3).files.to_pylist()}
    assert (("d", None),) in values

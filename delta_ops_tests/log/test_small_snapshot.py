"""`delta-ops snapshot` of a small log (issue 15, "no fixed cost on small ones"): the commits
are reconciled action by action in Python (`log.snapshot.small_snapshot`) without importing pyarrow,
and the command prints exactly what the Arrow path prints.

Every corpus table whose log is commits only is read at every version both ways through the
command line (`--json --files`), errors included; the small path must really have run, and
in a fresh process it must not have imported pyarrow or NumPy.
"""

from __future__ import annotations

import contextlib
import gc
import io
import os
import shutil
import subprocess
import sys

import orjson
import pyarrow as pa
import pytest

from delta_ops.cli import main
from delta_ops.errors import DeltaOpsError
from delta_ops.log.files.json_actions import parse_json_actions
from delta_ops.log.read_options import SMALL_LOG_BYTES_ENV, ReadOptions
from delta_ops.log.replay.columnar_commits import CommitFile
from delta_ops.log.replay.columnar_commits import reconcile as reconcile_commits
from delta_ops.log.replay.full_replay import _Reconciler
from delta_ops.log.segment.log_segment import build_log_segment
from delta_ops.log.snapshot.small_snapshot import (
    ADD_FIELDS,
    DEFAULT_SMALL_LOG_BYTES,
    DV_FIELDS,
    REMOVE_FIELDS,
    SmallSnapshot,
    load_small_snapshot,
)
from delta_ops.protocol.actions import ADD_TYPE, DELETION_VECTOR_TYPE, REMOVE_TYPE
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import REPO_ROOT, all_corpus_tables, corpus_path


def _commits_only(name: str) -> bool:
    log = corpus_path(name) / "_delta_log"
    names = [p.name for p in log.iterdir()] if log.is_dir() else []
    return not any(".checkpoint" in n or ".compacted." in n for n in names)


#: Corpus tables whose log is commits only: the small path applies at every version.
COMMITS_ONLY = [t for t in all_corpus_tables() if _commits_only(t)]
#: Tables with a checkpoint: the small path steps aside.
WITH_CHECKPOINT = [t for t in all_corpus_tables() if not _commits_only(t)]


def _versions(name: str) -> list[int]:
    log = corpus_path(name) / "_delta_log"
    return sorted(int(p.name[:20]) for p in log.glob("[0-9]*.json") if len(p.name) == 25)


def _cli(monkeypatch, argv: list[str], *, small: bool) -> tuple[int, str]:
    """`delta-ops` in this process: (exit code, stdout); `small` False turns the small-log
    path off, so the Arrow Snapshot is loaded."""
    if small:
        monkeypatch.delenv(SMALL_LOG_BYTES_ENV, raising=False)
    else:
        monkeypatch.setenv(SMALL_LOG_BYTES_ENV, "0")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(argv)
    return code, out.getvalue()


@pytest.mark.parametrize("name", COMMITS_ONLY)
def test_small_path_prints_what_the_arrow_path_prints(name, monkeypatch):
    root = str(corpus_path(name))
    storage = Storage.for_uri(root)
    versions = _versions(name)
    assert versions
    ran = 0
    for version in [None, *versions]:
        argv = ["snapshot", root, "--json", "--files"]
        if version is not None:
            argv += ["--version", str(version)]
        try:
            small = load_small_snapshot(storage, version, max_bytes=DEFAULT_SMALL_LOG_BYTES)
        except DeltaOpsError:
            small = None  # the table is refused at this version: both print the same error
        else:
            assert isinstance(small, SmallSnapshot), version  # commits only: it applies
            ran += 1
        ours = _cli(monkeypatch, argv, small=True)
        arrow = _cli(monkeypatch, argv, small=False)
        assert ours == arrow, (name, version)
        assert orjson.loads(ours[1]) and ours[0] in (0, 1)
    text = _cli(monkeypatch, ["snapshot", root], small=True)
    assert text == _cli(monkeypatch, ["snapshot", root], small=False)
    # Only the corpus's deliberately broken tables are refused at every version.
    assert ran or name.startswith("golden__deltalog-") or "versions-not-contiguous" in name or (
        name == "golden__data-reader-absolute-paths-escaped-chars"
    )


def test_the_small_path_ran_on_most_of_the_corpus():
    """The comparison above means something: the small path loads most corpus tables, and
    steps aside for every table read from a checkpoint."""
    loaded = 0
    for name in COMMITS_ONLY:
        with contextlib.suppress(DeltaOpsError):
            loaded += isinstance(load_small_snapshot(Storage.for_uri(str(corpus_path(name)))),
                                 SmallSnapshot)
    assert loaded >= 100
    assert len(WITH_CHECKPOINT) >= 10
    for name in WITH_CHECKPOINT:
        assert load_small_snapshot(Storage.for_uri(str(corpus_path(name)))) is None, name


@pytest.mark.parametrize("name", WITH_CHECKPOINT[:3])
def test_a_table_with_a_checkpoint_prints_the_same_either_way(name, monkeypatch):
    root = str(corpus_path(name))
    argv = ["snapshot", root, "--json", "--files"]
    ours = _cli(monkeypatch, argv, small=True)
    assert ours == _cli(monkeypatch, argv, small=False)
    assert orjson.loads(ours[1])["checkpoint_version"] is not None


def _fresh_process(argv: list[str], *, small: bool) -> tuple[str, list]:
    """`delta-ops` in a new interpreter: (stdout, the Arrow modules it imported)."""
    code = (
        "import contextlib, io, json, sys\n"
        "from delta_ops.cli import main\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        "    assert main(sys.argv[1:]) == 0\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('pyarrow', 'numpy'))\n"
        "print(json.dumps([buf.getvalue(), heavy]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop(SMALL_LOG_BYTES_ENV, None)
    if not small:
        env[SMALL_LOG_BYTES_ENV] = "0"
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          check=True, cwd=REPO_ROOT, env=env)
    text, heavy = orjson.loads(proc.stdout.strip().splitlines()[-1])
    return text, heavy


@pytest.mark.parametrize("name", [
    "golden__hive__deltatbl-map-types-correctly",  # the one-file table of the benchmark
    "golden__log-replay-dv-key-cases",  # removes, one path with several deletion vectors
    "kernel-defaults__basic-dv-no-checkpoint",  # deletion vectors
    "kernel-defaults__catalog-owned-preview",  # in-commit timestamps
    "kernel-benchmarks__basic_catalog_managed/delta",  # one missing: a warning is printed
])
def test_the_small_path_imports_no_pyarrow(name):
    """In a fresh process the small path prints the Arrow path's output and leaves pyarrow
    and NumPy unimported; with the small path off, the same command imports them."""
    argv = ["snapshot", str(corpus_path(name)), "--json", "--files"]
    text, heavy = _fresh_process(argv, small=True)
    assert heavy == []
    arrow_text, arrow_heavy = _fresh_process(argv, small=False)
    assert "pyarrow" in arrow_heavy  # the check can fail: the Arrow path does import it
    assert text == arrow_text
    obj = orjson.loads(text)
    assert obj["table"].endswith(name) and obj["num_files"] == len(obj["files"])


def test_the_field_kinds_are_the_arrow_types():
    """The types the small path accepts without conversion are the Arrow schema's: a field
    added to ADD_TYPE or REMOVE_TYPE must be added here too."""
    kinds = {
        pa.string(): "string", pa.int64(): "int64", pa.int32(): "int32", pa.bool_(): "bool",
        pa.map_(pa.string(), pa.string()): "map", DELETION_VECTOR_TYPE: "dv",
    }
    for fields, typ in ((ADD_FIELDS, ADD_TYPE), (REMOVE_FIELDS, REMOVE_TYPE),
                        (DV_FIELDS, DELETION_VECTOR_TYPE)):
        assert fields == {f.name: kinds[f.type] for f in typ}


def _write_log(root, commits: list[list[dict]]) -> str:
    log = root / "_delta_log"
    log.mkdir(parents=True)
    for v, actions in enumerate(commits):
        (log / f"{v:020d}.json").write_bytes(b"\n".join(orjson.dumps(a) for a in actions) + b"\n")
    return str(root)


_PROTOCOL = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}
_METADATA = {"metaData": {"id": "t", "format": {"provider": "parquet", "options": {}},
                          "schemaString": '{"type":"struct","fields":[]}',
                          "partitionColumns": ["p"], "configuration": {}}}


@pytest.mark.parametrize("odd", [
    {"partitionValues": {"p": 1}},  # a number where the map holds strings
    {"size": 1.0},
    {"size": 1 << 63},  # beyond a 64-bit integer
    {"dataChange": 1},
    {"stats": {"numRecords": 1}},  # an object where a string is expected
    {"deletionVector": {"storageType": "u", "pathOrInlineDv": "ab", "offset": 1 << 31}},
])
def test_an_action_arrow_would_convert_goes_the_arrow_way(tmp_path, odd, monkeypatch):
    """A winning action whose field is not exactly the type Arrow stores: the small path
    steps aside, and the command prints whatever the Arrow path prints (or fails alike)."""
    add = {"path": "p=1/a.parquet", "partitionValues": {"p": "1"}, "size": 10,
           "modificationTime": 1, "dataChange": True, **odd}
    root = _write_log(tmp_path / "t", [[_PROTOCOL, _METADATA, {"add": add}]])
    assert load_small_snapshot(Storage.for_uri(root)) is None
    # Superseded by a well-typed action for its key, it is no winner: nothing to convert,
    # the small path runs (the key of an odd deletion vector is only ever the odd one's).
    if "deletionVector" not in odd:
        removed = _write_log(tmp_path / "u", [[_PROTOCOL, _METADATA, {"add": add}], [
            {"remove": {"path": add["path"], "deletionTimestamp": 2, "dataChange": True}}]])
        assert isinstance(load_small_snapshot(Storage.for_uri(removed)), SmallSnapshot)
    argv = ["snapshot", root, "--json", "--files"]
    try:
        arrow = _cli(monkeypatch, argv, small=False)
    except (pa.ArrowException, OverflowError) as exc:
        with pytest.raises(type(exc)):
            _cli(monkeypatch, argv, small=True)
    else:
        assert _cli(monkeypatch, argv, small=True) == arrow


def test_budget_compactions_and_switch(tmp_path, monkeypatch):
    """Over the byte budget, with a compaction file, or switched off: None."""
    add = {"add": {"path": "a.parquet", "partitionValues": {}, "size": 1,
                   "modificationTime": 1, "dataChange": True}}
    remove = {"remove": {"path": "a.parquet", "deletionTimestamp": 2, "dataChange": True}}
    root = _write_log(tmp_path / "t", [[_PROTOCOL, _METADATA, add], [remove], [add]])
    storage = Storage.for_uri(root)
    log_bytes = sum(p.stat().st_size for p in (tmp_path / "t" / "_delta_log").iterdir())
    assert isinstance(load_small_snapshot(storage, max_bytes=log_bytes), SmallSnapshot)
    assert load_small_snapshot(storage, max_bytes=log_bytes - 1) is None
    monkeypatch.setenv(SMALL_LOG_BYTES_ENV, "0")
    assert load_small_snapshot(storage, max_bytes=ReadOptions.from_env().small_log_bytes) is None
    monkeypatch.setenv(SMALL_LOG_BYTES_ENV, str(log_bytes))
    assert isinstance(
        load_small_snapshot(storage, max_bytes=ReadOptions.from_env().small_log_bytes),
        SmallSnapshot,
    )
    monkeypatch.setenv(SMALL_LOG_BYTES_ENV, "lots")
    with pytest.raises(ValueError, match=SMALL_LOG_BYTES_ENV):
        load_small_snapshot(storage, max_bytes=ReadOptions.from_env().small_log_bytes)
    monkeypatch.delenv(SMALL_LOG_BYTES_ENV)
    log = tmp_path / "t" / "_delta_log"
    shutil.copy(log / f"{1:020d}.json", log / f"{1:020d}.{2:020d}.compacted.json")
    assert build_log_segment(storage).deltas[-1].is_compaction
    assert load_small_snapshot(storage) is None
    assert isinstance(load_small_snapshot(storage, 1), SmallSnapshot)  # v1: commits only


def test_state_and_collector(tmp_path):
    """Re-added after its removal, a file is live once, its tombstone gone; the collector is
    left as it was found, also when a commit does not parse."""
    add = {"add": {"path": "a.parquet", "partitionValues": {}, "size": 7,
                   "modificationTime": 1, "dataChange": True}}
    remove = {"remove": {"path": "a.parquet", "deletionTimestamp": 2, "dataChange": True}}
    other = {"add": {**add["add"], "path": "b%20c.parquet", "size": 5}}
    root = _write_log(tmp_path / "t", [[_PROTOCOL, _METADATA, add, other], [remove], [add]])
    snap = load_small_snapshot(Storage.for_uri(root))
    assert snap.num_files == 2 and snap.size_bytes == 12 and snap.num_tombstones == 0
    assert [p for p, _, _ in snap.file_rows()] == ["b%20c.parquet", "a.parquet"]
    v1 = load_small_snapshot(Storage.for_uri(root), 1)
    assert v1.num_files == 1 and v1.num_tombstones == 1 and gc.isenabled()
    (tmp_path / "t" / "_delta_log" / f"{3:020d}.json").write_bytes(b"{not json\n")
    with pytest.raises(DeltaOpsError, match="not valid JSON"):
        load_small_snapshot(Storage.for_uri(root))
    assert gc.isenabled()
    gc.disable()
    try:
        load_small_snapshot(Storage.for_uri(root), 2)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_action_by_action_winners_come_in_the_columnar_order():
    """The action-by-action reconciliation gives the winners in log order, as the columnar
    one does: the Arrow Snapshot's files keep one order whichever ran, and so does the small
    path's `--files`."""
    compared = reordered = 0
    for name in COMMITS_ONLY:
        storage = Storage.for_uri(str(corpus_path(name)))
        try:
            segment = build_log_segment(storage)
        except DeltaOpsError:
            continue  # refused tables: compared through the command line above
        files = [CommitFile(d.end, d.file.path, storage.read(d.file.path))
                 for d in segment.deltas]
        rec = _Reconciler(storage.root)
        for f in reversed(files):
            rec.apply_file(f.data, table=storage.root, version=f.version, file=f.path)
        adds, removes = rec.file_tables()
        fast = reconcile_commits([CommitFile(f.version, f.path, f.data) for f in files],
                                 storage.root)
        if fast is None:
            continue  # the columnar reader steps aside: there is only one order
        paths = adds.column("path").to_pylist()
        assert paths == fast.adds.column("path").to_pylist(), name
        assert removes.column("path").to_pylist() == fast.removes.column("path").to_pylist()
        compared += 1
        # Newest first, as the reconciler collects them, is another order for many tables.
        reordered += paths != [a["path"] for a in rec.adds]
    assert compared >= 100 and reordered >= 10


def test_the_module_keeps_its_promise_of_no_arrow():
    """`log.snapshot.small_snapshot`, the snapshot command and what they import load without
    pyarrow or NumPy."""
    code = (
        "import sys\nimport delta_ops.log.snapshot.small_snapshot, delta_ops.commands.snapshot\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyarrow', 'numpy')))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=REPO_ROOT, env=env).stdout.strip()
    assert out == "[]"
    assert DEFAULT_SMALL_LOG_BYTES > 0


@pytest.mark.parametrize("data", [
    b"", b"\n\n", b" \t\r\n", b'{"a":1}', b'{"a":1}\n', b'\n {"a":1}\n{"b":2}\n\n',
    b'{"a":1}\r\n{"b":"x"}\r\n', b'{"a":1}\r{"b":2}', b'{"a":1}\n\n{"b":2}\n',
    b'{"a":1}\n   \n{"b":[1,2]}\n', b'\x0c{"a":1}\x0b\n', b'{"a":1}\t\n{"b":{"c":null}}',
])
def test_json_actions_parse_as_lines_whatever_the_layout(data):
    """One parser call over the joined lines gives what parsing each line gives: blank
    lines, CR LF and lone CR endings, whitespace around the file."""
    lines = [orjson.loads(line.strip(b" \t\x0b\x0c")) for line in data.splitlines()
             if line.strip()]
    assert parse_json_actions(data, table="t", version=3, file="f.json") == lines


@pytest.mark.parametrize(("data", "line"), [
    (b'{"a":1}\n[1]\n', "line 2 is not a JSON object"),
    (b'{"a":1}\n\n{"a":', "line 3 is not valid JSON"),
    (b'{"a":1},\n', "line 1 is not valid JSON"),
])
def test_json_actions_errors_name_the_line(data, line):
    with pytest.raises(DeltaOpsError, match=line) as exc:
        parse_json_actions(data, table="t", version=3, file="f.json")
    assert (exc.value.version, exc.value.file) == (3, "f.json")

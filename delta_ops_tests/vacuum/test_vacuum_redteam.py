"""A hostile review of VACUUM's staged-commit and alias protection (issue 22) and of the log
it reads: every trial tries to make VACUUM delete a file a reader still needs.

What each trial asserts: the file a reader needs is still there after a real run (and a
dry run listed exactly what the real run deleted), or the run refused with a reason and
deleted nothing. Tables written by `deltalake` are read back by `deltalake` after every
VACUUM, at the latest version and at every version whose files the retention keeps, and
what VACUUM deleted is checked against what those versions reference (an oracle that
shares nothing with `delta_ops`).

Bugs this file found (each test failed before its fix):

* a symbolic link to a file inside the table, named by the log, read its target, which
  VACUUM deleted (`test_file_link_in_the_table_keeps_its_target`);
* a staged commit inside a subdirectory of `_delta_log/_staged_commits` was not read, and
  the file it adds was deleted (`test_staged_commits_subdirectory_refuses`);
* a commit written between the plan and the delete (staged or published) re-adding an old
  file that was removed long ago: the file was deleted
  (`test_commit_written_between_plan_and_delete_refuses`);
* a directory of the plan swapped for a link to another directory between the plan and
  the delete: the file of that name there was deleted
  (`test_directory_swapped_for_a_link_after_the_plan_refuses`);
* a path with an unencoded `?` or `#` (a URI's query or fragment): Spark and the Delta
  kernels open the path before it, which VACUUM deleted
  (`test_unencoded_query_or_fragment_keeps_the_file_a_uri_reader_opens`);
* a remove without a `deletionTimestamp` (optional) expired at once, and VACUUM
  deleted a file a version within the retention reads
  (`test_tombstone_without_deletion_timestamp_keeps_its_file`);
* a staged commit with a duplicate key (`path` twice, or two actions on one line):
  readers disagree which one wins (serde_json refuses it, Jackson and orjson take the
  last), and the first was deleted (`test_staged_commit_with_duplicate_keys_refuses`);
* an add and a remove of one file in one commit, the add first: deltalake reads the file
  as live, and VACUUM deleted it
  (`test_an_add_and_a_remove_of_one_file_in_one_commit_keep_the_file`);
* a log whose newest commits were missing from the listing while `_last_checkpoint`, a
  checksum or a checkpoint part showed the newer version: VACUUM took the older version
  as the latest and deleted the files the missing commits add
  (`test_a_log_missing_its_newest_versions_refuses`);
* a Delta table nested below the root: its live files, which the outer log never names,
  were deleted (`test_a_table_nested_in_the_root_keeps_its_files`, and on S3
  `test_s3_a_table_nested_in_the_root_keeps_its_files`).
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import delta_ops.maintenance.vacuum.apply as vacuum_apply
import delta_ops.maintenance.vacuum.plan as vacuum_plan
from delta_ops.errors import UnsafeDeletionError
from delta_ops.maintenance.vacuum import vacuum
from delta_ops.storage import Storage
from delta_ops_tests.support.dv_writer import encode_uuid_path
from delta_ops_tests.support.staged_tables import (
    CATALOG_PROTOCOL,
    NOW_MS,
    OLD_MS,
    PLAIN_PROTOCOL,
    SCHEMA,
    _add,
    _age,
    _aliased_table,
    _data,
    _files,
    _remove,
    _staged,
    _table,
    _write,
)

DAY_MS = 86_400_000


def _both(root: Path | str, **kwargs) -> tuple[str, ...]:
    """A dry run, then a real run; they must agree; the real run's files."""
    dry = vacuum(str(root), now_ms=NOW_MS, dry_run=True, **kwargs)
    real = vacuum(str(root), now_ms=NOW_MS, **kwargs, dry_run=False)
    assert real.files == dry.files
    return real.files


def _refuses(root: Path, match: str, **kwargs) -> UnsafeDeletionError:
    """Both a dry and a real run refuse; nothing is deleted."""
    before = _files(root)
    for dry_run in (True, False):
        with pytest.raises(UnsafeDeletionError, match=match) as info:
            vacuum(str(root), now_ms=NOW_MS, dry_run=dry_run, **kwargs)
    assert _files(root) == before
    return info.value


def _catalog(root: Path, *data: str) -> None:
    _table(root, [], protocol=CATALOG_PROTOCOL)
    _data(root, *data)


# ---- 1. staged commits -------------------------------------------------------------------


@pytest.mark.parametrize("spelling", [
    "a b/x y.parquet",
    "a%20b/x%20y.parquet",
    "./a%20b/./x%20y.parquet",
    "file://{root}/a%20b/x%20y.parquet",
    "file:{root}/a%20b/x%20y.parquet",
    "file://localhost{root}/a%20b/x%20y.parquet",
    "{root}/a b/x y.parquet",
    "file://{root}/zz/../a%20b/x%20y.parquet",
])
def test_staged_add_in_any_spelling_keeps_its_file(tmp_path, spelling):
    root = tmp_path / "t"
    _catalog(root, "a b/x y.parquet", "orphan.parquet")
    _staged(root, 3, [_add(spelling.format(root=root))])
    _age(root)
    assert _both(root, allow_catalog_managed=True) == ("orphan.parquet",)
    assert (root / "a b" / "x y.parquet").exists()


def test_staged_deletion_vectors_of_every_storage_type_keep_their_files(tmp_path):
    """`u` with a prefix (relative to the root), `p` absolute and encoded."""
    root = tmp_path / "t"
    u = uuid.UUID("12345678-1234-1234-1234-123456789abc")
    _catalog(root, "a.parquet", "b.parquet", f"ab/deletion_vector_{u}.bin", "x y/dv 1.bin",
             "orphan.parquet", "ab/orphan.bin")
    dv_u = {"storageType": "u", "pathOrInlineDv": encode_uuid_path(u, "ab"),
            "sizeInBytes": 4, "cardinality": 1}
    dv_p = {"storageType": "p", "pathOrInlineDv": f"file://{root}/x%20y/dv%201.bin",
            "sizeInBytes": 4, "cardinality": 1}
    _staged(root, 1, [{"add": {**_add("a.parquet")["add"], "deletionVector": dv_u}},
                      {"remove": {**_remove("b.parquet")["remove"], "deletionVector": dv_p}}])
    _age(root)
    assert set(_both(root, allow_catalog_managed=True)) == {"orphan.parquet", "ab/orphan.bin"}
    assert {"a.parquet", "b.parquet", f"ab/deletion_vector_{u}.bin", "x y/dv 1.bin"} <= (
        _files(root))


@pytest.mark.parametrize("layout", ["crlf", "no final newline", "blank lines"])
def test_staged_commit_line_ends_are_read(tmp_path, layout):
    root = tmp_path / "t"
    _catalog(root, "a.parquet", "b.parquet", "orphan.parquet")
    one, two = (json.dumps(_add(p)).encode() for p in ("a.parquet", "b.parquet"))
    data = {"crlf": one + b"\r\n" + two + b"\r\n",
            "no final newline": one + b"\n" + two,
            "blank lines": b"\n" + one + b"\n\n \n" + two + b"\n\n"}[layout]
    _staged(root, 1, []).write_bytes(data)
    _age(root)
    assert _both(root, allow_catalog_managed=True) == ("orphan.parquet",)


def test_staged_commit_with_a_byte_order_mark_refuses(tmp_path):
    """A BOM is not JSON: which files the commit names is unknown, so nothing goes."""
    root = tmp_path / "t"
    _catalog(root, "a.parquet", "orphan.parquet")
    bad = _staged(root, 1, [])
    bad.write_bytes(b"\xef\xbb\xbf" + json.dumps(_add("a.parquet")).encode() + b"\n")
    _age(root)
    err = _refuses(root, "staged commit", allow_catalog_managed=True)
    assert err.file is not None and bad.name in err.file


def test_staged_commits_subdirectory_refuses(tmp_path):
    """Before the fix `_staged_commits/sub/<v>.<uuid>.json` was not read and the file it
    adds was deleted: now a subdirectory there (the spec describes none) refuses."""
    root = tmp_path / "t"
    _catalog(root, "a.parquet", "orphan.parquet")
    _write(root / "_delta_log" / "_staged_commits" / "sub" / f"{1:020}.u.json",
           [_add("a.parquet")])
    _age(root)
    err = _refuses(root, "subdirector", allow_catalog_managed=True)
    assert err.file is not None and "_staged_commits/sub" in err.file
    with pytest.raises(UnsafeDeletionError, match="subdirector"):
        vacuum(str(root), now_ms=NOW_MS, lite=True, allow_catalog_managed=True, dry_run=False)


@pytest.mark.parametrize("line", [
    b'{"add": {"path": "a.parquet", "path": "b.parquet", "size": 4}}\n',
    b'{"add": {"path": "a.parquet", "size": 4}, "add": {"path": "b.parquet", "size": 4}}\n',
])
def test_staged_commit_with_duplicate_keys_refuses(tmp_path, line):
    """Readers disagree on a duplicate key (serde_json refuses, Jackson and orjson keep
    the last): before the fix `a.parquet` was deleted."""
    root = tmp_path / "t"
    _catalog(root, "a.parquet", "b.parquet", "orphan.parquet")
    bad = _staged(root, 1, [])
    bad.write_bytes(line)
    _age(root)
    err = _refuses(root, "duplicate", allow_catalog_managed=True)
    assert err.file is not None and bad.name in err.file


def test_huge_staged_commit_keeps_every_file(tmp_path):
    """100,000 adds in one staged commit, one of them a real file: it stays."""
    root = tmp_path / "t"
    _catalog(root, "p/f50000.parquet", "orphan.parquet")
    _staged(root, 1, [_add(f"p/f{i}.parquet") for i in range(100_000)])
    _age(root)
    start = time.monotonic()
    assert _both(root, allow_catalog_managed=True) == ("orphan.parquet",)
    assert time.monotonic() - start < 60
    assert (root / "p" / "f50000.parquet").exists()


def _between_plan_and_delete(monkeypatch, write) -> None:
    """Run `write` right after VACUUM planned (the plan is the real one)."""
    real = vacuum_apply.plan_vacuum

    def planned_then_written(*args, **kwargs):
        plan = real(*args, **kwargs)
        write()
        return plan

    monkeypatch.setattr(vacuum_apply, "plan_vacuum", planned_then_written)


@pytest.mark.parametrize("where", ["staged", "published"])
def test_commit_written_between_plan_and_delete_refuses(tmp_path, monkeypatch, where):
    """The dangerous race: a commit written after the plan that re-adds an OLD file,
    removed long ago (a RESTORE does that): its age does not protect it. Before the fix it
    was deleted; now VACUUM reads the commits written since the plan right before
    deleting, and refuses."""
    root = tmp_path / "t"
    _table(root, ["live.parquet"], protocol=CATALOG_PROTOCOL)
    _write(root / "_delta_log" / f"{1:020}.json",
           [{"commitInfo": {"inCommitTimestamp": OLD_MS + 1}}, _remove("old.parquet")])
    _data(root, "live.parquet", "old.parquet")
    _age(root)

    def restore() -> None:
        if where == "staged":
            _staged(root, 2, [_add("old.parquet")])
        else:
            _write(root / "_delta_log" / f"{2:020}.json",
                   [{"commitInfo": {"inCommitTimestamp": OLD_MS + 2}}, _add("old.parquet")])

    _between_plan_and_delete(monkeypatch, restore)
    with pytest.raises(UnsafeDeletionError, match="since the plan") as info:
        vacuum(str(root), now_ms=NOW_MS, allow_catalog_managed=True, dry_run=False)
    assert info.value.file == "old.parquet"
    assert (root / "old.parquet").exists() and (root / "live.parquet").exists()


def test_commit_written_between_plan_and_delete_naming_other_files_lets_it_run(
    tmp_path, monkeypatch
):
    """A concurrent commit adding new files (what a writer does) does not stop VACUUM."""
    root = tmp_path / "t"
    _catalog(root, "orphan.parquet")
    _age(root)
    _between_plan_and_delete(monkeypatch, lambda: _staged(root, 1, [_add("new.parquet")]))
    assert vacuum(str(root), now_ms=NOW_MS, allow_catalog_managed=True, dry_run=False).files == (
        "orphan.parquet",)
    assert not (root / "orphan.parquet").exists()


def test_directory_swapped_for_a_link_after_the_plan_refuses(tmp_path, monkeypatch):
    """Between plan and delete, `d` (holding the orphan) becomes a link to a directory
    outside the root holding a file of the same name. Before the fix VACUUM unlinked the
    OUTSIDE file through the link; now the links on the way are checked again right
    before deleting, and the run refuses."""
    root = tmp_path / "t"
    outside = tmp_path / "outside"
    _data(root, "live.parquet", "d/orphan.parquet")
    _data(outside, "orphan.parquet")
    _table(root, ["live.parquet"])
    _age(root)

    def swap() -> None:
        os.rename(root / "d", tmp_path / "moved")
        (root / "d").symlink_to(outside, target_is_directory=True)

    _between_plan_and_delete(monkeypatch, swap)
    with pytest.raises(UnsafeDeletionError, match="inside the table root") as info:
        vacuum(str(root), now_ms=NOW_MS, dry_run=False)
    assert info.value.file == "d/orphan.parquet"
    assert (outside / "orphan.parquet").exists()


def test_s3_staged_adds_in_every_scheme_spelling_keep_their_files(s3_server):
    """On the moto server: staged adds spelt `s3a://`, `s3://`, encoded and relative."""
    uri = s3_server.fresh_uri("vacuum-redteam")
    bucket_and_prefix = uri.split("://", 1)[1]
    storage = Storage.for_uri(uri, s3_server.storage_options)
    meta = {"metaData": {"id": "t", "format": {"provider": "parquet", "options": {}},
                         "schemaString": SCHEMA, "partitionColumns": [], "configuration": {},
                         "createdTime": OLD_MS}}
    storage.put_atomic(f"_delta_log/{0:020}.json", "".join(
        json.dumps(a) + "\n" for a in [CATALOG_PROTOCOL, meta]).encode())
    staged = [_add(f"s3a://{bucket_and_prefix}/a.parquet"),
              _add(f"S3://{bucket_and_prefix}/p%3D1/b%20c.parquet"),
              _add("d%20e.parquet")]
    storage.put_atomic(f"_delta_log/_staged_commits/{1:020}.u.json", "".join(
        json.dumps(a) + "\n" for a in staged).encode())
    kept = ["a.parquet", "p=1/b c.parquet", "d e.parquet"]
    for name in [*kept, "orphan.parquet"]:
        storage.put_atomic(name, b"data")
    later = int(time.time() * 1000) + 30 * DAY_MS  # moto's modification times are now
    for scheme in ("s3a", "s3"):
        dry = vacuum(f"{scheme}://{bucket_and_prefix}", now_ms=later, dry_run=True,
                     storage_options=s3_server.storage_options, allow_catalog_managed=True)
        assert dry.files == ("orphan.parquet",)
    real = vacuum(uri, now_ms=later, storage_options=s3_server.storage_options,
                  allow_catalog_managed=True, dry_run=False)
    assert real.files == ("orphan.parquet",)
    assert all(storage.exists(k) for k in kept) and not storage.exists("orphan.parquet")
    # A staged commit below a "subdirectory" (a key prefix) refuses there too.
    storage.put_atomic("orphan2.parquet", b"data")
    storage.put_atomic(f"_delta_log/_staged_commits/sub/{2:020}.u.json",
                       (json.dumps(_add("orphan2.parquet")) + "\n").encode())
    with pytest.raises(UnsafeDeletionError, match="subdirector"):
        vacuum(uri, now_ms=later, storage_options=s3_server.storage_options,
               allow_catalog_managed=True, dry_run=False)
    assert storage.exists("orphan2.parquet")


def test_tombstone_without_deletion_timestamp_keeps_its_file(tmp_path):
    """`deletionTimestamp` is optional (spec "Add File and Remove File"). A remove without
    one, committed yesterday: version 0, current until then, is within the retention and
    reads the file. Before the fix the missing time read as the epoch, the tombstone
    expired at once, and the file went (full and lite runs); now such a tombstone never
    expires by itself."""
    root = tmp_path / "t"
    _data(root, "a.parquet", "b.parquet", "orphan.parquet")
    _table(root, ["a.parquet", "b.parquet"])
    commit = root / "_delta_log" / f"{1:020}.json"
    _write(commit, [{"commitInfo": {"timestamp": NOW_MS - DAY_MS}},
                    {"remove": {"path": "a.parquet", "dataChange": True}}])
    _age(root)
    os.utime(commit, ns=((NOW_MS - DAY_MS) * 1_000_000,) * 2)
    assert _both(root) == ("orphan.parquet",)
    assert _both(root, lite=True) == ()
    assert (root / "a.parquet").exists()


# ---- 2. aliases --------------------------------------------------------------------------


@pytest.mark.parametrize("staged", [False, True])
def test_unencoded_query_or_fragment_keeps_the_file_a_uri_reader_opens(tmp_path, staged):
    """Paths are URIs (spec "Add File and Remove File"): an unencoded `?` starts a query
    and `#` a fragment, so Spark and the Delta kernels (`new Path(new URI(path))`, its
    path part) open `a` for `a?b.parquet` and `c` for `c#d.parquet`. Before the fix only
    the literal names were kept and `a`, `c` were deleted."""
    root = tmp_path / "t"
    adds = ["a?b.parquet", f"file://{root}/c#d.parquet", "p/e%20f?x=1#y"]
    if staged:
        _catalog(root)
        _staged(root, 1, [_add(a) for a in adds])
    else:
        _table(root, adds)
    _data(root, "a", "a?b.parquet", "c", "c#d.parquet", "p/e f", "orphan.parquet")
    _age(root)
    assert _both(root, allow_catalog_managed=True) == ("orphan.parquet",)
    assert {"a", "a?b.parquet", "c", "c#d.parquet", "p/e f"} <= _files(root)


@pytest.mark.parametrize("spelling", [
    "file:{base}/link/d/live.parquet",
    "file://localhost{base}/link/d/live.parquet",
    "file://{base}/l%69nk/d/live.parquet",
    "file://{base}/%6C%69%6E%6B/d/live%2Eparquet",
    "file://{base}/link/./d/./live.parquet",
    "file://{base}//link//d//live.parquet",
    "file://{base}/link/d/live.parquet/",
    "FILE://{base}/link/d/live.parquet",
    "{base}/link/d/live%2Eparquet",
    "../link/d/live.parquet",
    "d/../../link/d/live.parquet",
])
def test_absolute_and_encoded_spellings_through_a_link_keep_the_file(tmp_path, spelling):
    root, _base = _aliased_table(tmp_path, spelling)
    assert _both(root) == ("d/orphan.parquet",)
    assert (root / "d" / "live.parquet").exists()


@pytest.mark.parametrize("spelling", [
    "file://{encbase}%2Flink%2Fd%2Flive.parquet",  # every separator encoded
    "file://{base}/l%2569nk/d/live.parquet",  # encoded twice
])
def test_spellings_only_the_independent_check_decodes_refuse(tmp_path, spelling):
    """A spelling the plan does not read (an encoded authority, a double encoding) but the
    proof's full decoding reaches the live file through a link: refused, nothing goes."""
    encbase = str(tmp_path / "base").replace("/", "%2F")
    root, _base = _aliased_table(tmp_path, spelling.replace("{encbase}", encbase))
    _refuses(root, "another spelling")


def test_file_link_in_the_table_keeps_its_target(tmp_path):
    """Before the fix: the log names `lnk.parquet`, a symbolic link to `d/live.parquet`;
    the listing skips links, nothing names `d/live.parquet` by its text, and VACUUM
    deleted it (deltalake then failed to read the table). Relative, absolute (the root as
    the storage spells it) and through a linked directory."""
    pytest.importorskip("deltalake")
    import deltalake

    for n, form in enumerate(["lnk.parquet", "file://{root}/lnk.parquet",
                              "inner/lnk.parquet"]):
        root = tmp_path / f"t{n}"
        deltalake.write_deltalake(str(root), pa.table({"x": [1, 2, 3]}))
        (name,) = [p for p in os.listdir(root) if p.endswith(".parquet")]
        (root / "d").mkdir()
        os.rename(root / name, root / "d" / "live.parquet")
        (root / "d" / "lnk.parquet").symlink_to(root / "d" / "live.parquet")
        (root / "lnk.parquet").symlink_to(root / "d" / "live.parquet")
        (root / "inner").symlink_to(root / "d", target_is_directory=True)
        log = root / "_delta_log" / f"{0:020}.json"
        log.write_text(log.read_text().replace(name, form.format(root=root)))
        _data(root, "d/orphan.parquet")
        _age(root)
        assert _both(root) == ("d/orphan.parquet",), form
        assert (root / "d" / "live.parquet").exists()
        if "://" not in form:  # deltalake 1.6.6 joins an absolute path to the root
            assert deltalake.DeltaTable(str(root)).to_pyarrow_table().num_rows == 3


def test_lite_run_keeps_the_target_of_a_file_link(tmp_path):
    """Lite mode: an expired tombstone names `d/live.parquet`, which the live
    `lnk.parquet` (a link to it) still reads: kept; the other expired file goes."""
    root = tmp_path / "t"
    _data(root, "d/live.parquet", "gone.parquet")
    (root / "lnk.parquet").symlink_to(root / "d" / "live.parquet")
    _table(root, ["lnk.parquet"])
    _write(root / "_delta_log" / f"{1:020}.json",
           [{"commitInfo": {"timestamp": OLD_MS + 1}}, _remove("d/live.parquet"),
            _remove("gone.parquet")])
    _age(root)
    assert _both(root, lite=True) == ("gone.parquet",)
    assert (root / "d" / "live.parquet").exists()


def test_proof_catches_a_file_link_the_plan_misses(tmp_path, monkeypatch):
    """With the plan's alias resolution off, the device/inode check still refuses."""
    root = tmp_path / "t"
    _data(root, "d/live.parquet", "orphan.parquet")
    (root / "lnk.parquet").symlink_to(root / "d" / "live.parquet")
    _table(root, ["lnk.parquet"])
    _age(root)
    monkeypatch.setattr(vacuum_plan, "reached_through_aliases", lambda *_a: set())
    err = _refuses(root, "link")
    assert err.file == "d/live.parquet"


def test_hard_link_name_goes_the_referenced_name_stays(tmp_path):
    """An unreferenced hard link to a referenced file is only a name: deleting it loses
    nothing; the referenced name and its data stay."""
    root = tmp_path / "t"
    _data(root, "live.parquet")
    os.link(root / "live.parquet", root / "twin.parquet")
    _table(root, ["live.parquet"])
    _age(root)
    assert _both(root) == ("twin.parquet",)
    assert (root / "live.parquet").read_bytes() == b"data"


def test_link_outside_the_root_back_in_through_a_second_link_keeps_the_file(tmp_path):
    """`ext -> outside`, `outside/back -> root/d`: the log's `ext/back/live.parquet`
    reaches `d/live.parquet`; outside files are never touched."""
    root = tmp_path / "t"
    outside = tmp_path / "outside"
    _data(root, "d/live.parquet", "d/orphan.parquet")
    _data(outside, "live.parquet")
    (outside / "back").symlink_to(root / "d", target_is_directory=True)
    (root / "ext").symlink_to(outside, target_is_directory=True)
    _table(root, ["ext/back/live.parquet", "ext/live.parquet"])
    _age(root)
    _age(outside)
    assert _both(root) == ("d/orphan.parquet",)
    assert (root / "d" / "live.parquet").exists() and (outside / "live.parquet").exists()


@pytest.mark.parametrize("spelling", [
    "{root}/", "{root}/./", "{root}/.", "file://{root}/", "file://{root}/./",
    "{base}/link/../real", "{base}/up/real/", "cwd:real", "cwd:./real/", "cwd:up/real",
])
def test_root_spellings_agree(tmp_path, monkeypatch, spelling):
    """A trailing slash, `./`, `..` after a link, or a relative root from another working
    directory: the same plan as the plain root, the live file stays."""
    root, base = _aliased_table(tmp_path, "file://{root}/d/live.parquet")
    if spelling.startswith("cwd:"):
        monkeypatch.chdir(base)
        given_root = spelling[4:]
    else:
        given_root = spelling.format(root=root, base=base)
    assert _both(given_root) == ("d/orphan.parquet",)
    assert (root / "d" / "live.parquet").exists()


# ---- 3. both engines ---------------------------------------------------------------------


@pytest.mark.spark
def test_spark_engine_file_link_and_race(tmp_path, monkeypatch, spark_engine):  # noqa: F811
    root = tmp_path / "t"
    _data(root, "d/live.parquet", "orphan.parquet")
    (root / "lnk.parquet").symlink_to(root / "d" / "live.parquet")
    _table(root, ["lnk.parquet"])
    _age(root)
    assert _both(root, engine=spark_engine) == ("orphan.parquet",)
    assert (root / "d" / "live.parquet").exists()
    _data(root, "old.parquet")
    _age(root)
    _between_plan_and_delete(monkeypatch, lambda: _write(
        root / "_delta_log" / f"{1:020}.json",
        [{"commitInfo": {"timestamp": OLD_MS + 2}}, _add("old.parquet")]))
    with pytest.raises(UnsafeDeletionError, match="since the plan"):
        vacuum(str(root), now_ms=NOW_MS, engine=spark_engine, dry_run=False)
    assert (root / "old.parquet").exists()
    linked, _base = _aliased_table(tmp_path / "aliased", "file://{base}/link/d/live.parquet")
    assert _both(linked, engine=spark_engine) == ("d/orphan.parquet",)
    assert (linked / "d" / "live.parquet").exists()


# ---- 4. against deltalake ----------------------------------------------------------------


def _rel(uri: str, root: Path) -> str:
    """A deltalake file URI relative to the root."""
    return uri.removeprefix("file://").removeprefix(f"{root}/")


def _version_files(root: Path, now_ms: int, retention_ms: int) -> dict[int, set[str]]:
    """deltalake's files of the latest version and of every version a reader may still
    time travel to (committed within the retention, and the one current at its start)."""
    import deltalake

    latest = deltalake.DeltaTable(str(root))
    history = {h["version"]: h["timestamp"] for h in latest.history()}
    cutoff = now_ms - retention_ms
    versions = sorted(v for v, ts in history.items() if ts >= cutoff)
    older = [v for v, ts in history.items() if ts < cutoff]
    if older:
        versions.append(max(older))
    versions.append(latest.version())
    out = {}
    for v in set(versions):
        dt = deltalake.DeltaTable(str(root), version=v)
        out[v] = {_rel(u, root) for u in dt.file_uris()}
    return out


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.sampled_from(["append", "overwrite", "delete"]), min_size=1,
                    max_size=6),
       retention_days=st.sampled_from([0, 1, 8]),
       link=st.booleans())
def test_vacuum_against_deltalake(tmp_path_factory, ops, retention_days, link):
    """Random deltalake histories, aged a day per commit, optionally with the live files
    reached through symbolic links: every version the retention keeps still reads with
    deltalake, and nothing VACUUM deleted is one of their files."""
    import deltalake

    root = tmp_path_factory.mktemp("dl") / "t"
    deltalake.write_deltalake(str(root), pa.table({"x": [0, 1]}))
    for i, op in enumerate(ops, 1):
        if op == "delete":
            deltalake.DeltaTable(str(root)).delete(f"x = {i - 1}")
        else:
            deltalake.write_deltalake(str(root), pa.table({"x": [i, i + 1]}), mode=op)
    now = int(time.time() * 1000)
    n = deltalake.DeltaTable(str(root)).version() + 1  # a delete of no row commits nothing
    for v in range(n):  # commit v happened (n - v) days ago
        path = root / "_delta_log" / f"{v:020}.json"
        lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        ts = now - (n - v) * DAY_MS
        for a in lines:
            if "commitInfo" in a:
                a["commitInfo"]["timestamp"] = ts
            if "remove" in a:
                a["remove"]["deletionTimestamp"] = ts
        path.write_text("".join(json.dumps(a) + "\n" for a in lines))
        os.utime(path, ns=(ts * 1_000_000,) * 2)
    for p in root.glob("*.parquet"):
        os.utime(p, ns=((now - (n + 1) * DAY_MS) * 1_000_000,) * 2)
    if link:  # the latest files reached through a link to a file of another name
        for uri in deltalake.DeltaTable(str(root)).file_uris():
            rel = _rel(uri, root)
            (root / "d").mkdir(exist_ok=True)
            os.rename(root / rel, root / "d" / f"target-{rel}")
            (root / rel).symlink_to(root / "d" / f"target-{rel}")
    retention_ms = retention_days * DAY_MS
    before = _version_files(root, now, retention_ms)
    rows = {v: deltalake.DeltaTable(str(root), version=v).to_pyarrow_table().num_rows
            for v in before}
    dry = vacuum(str(root), now_ms=now, dry_run=True, retention_hours=retention_days * 24,
                 force_retention=True)
    real = vacuum(str(root), now_ms=now, retention_hours=retention_days * 24,
                  force_retention=True, dry_run=False)
    assert real.files == dry.files
    needed = set().union(*before.values())
    assert not set(real.files) & needed
    for v, files in before.items():
        assert deltalake.DeltaTable(str(root), version=v).to_pyarrow_table().num_rows == rows[v]
        assert all((root / f).exists() for f in files), v


# ---- 5. generated spellings of a staged add ----------------------------------------------

_NAME = st.text(alphabet=st.sampled_from(list("ab =+%#:é字~!$&'()")), min_size=1,
                max_size=6).filter(lambda n: n not in (".", "..") and not n.startswith("_")
                                   and not n.startswith("."))


def _spell(rel: str, root: Path, form: str, encode: list[bool]) -> str:
    """One spelling of `rel`: each segment percent-encoded or not (a `%` always is, so
    that the text decodes to the name), relative or an absolute URI."""
    from urllib.parse import quote

    segs = []
    for seg, enc in zip(rel.split("/"), encode + [True] * 8, strict=False):
        segs.append(quote(seg, safe="") if enc or "%" in seg else seg)
    path = "/".join(segs)
    if form == "relative":
        return path
    if form == "dotted":
        return "./" + path.replace("/", "/./")
    base = quote(str(root))
    return {"file:///": f"file://{base}/{path}", "file:/": f"file:{base}/{path}",
            "localhost": f"file://localhost{base}/{path}"}[form]


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(_NAME, min_size=1, max_size=3),
       form=st.sampled_from(["relative", "dotted", "file:///", "file:/", "localhost"]),
       encode=st.lists(st.booleans(), min_size=3, max_size=3))
def test_generated_staged_spellings_keep_their_file(tmp_path_factory, parts, form, encode):
    """Whatever the names (spaces, `%`, `+`, `=`, `:`, non-ASCII) and the spelling, the
    file a staged add names is kept; an orphan beside it goes (or the run refuses and
    nothing goes)."""
    root = tmp_path_factory.mktemp("gen") / "t"
    rel = "/".join([*parts[:-1], parts[-1] + ".parquet"])
    _catalog(root, rel, "orphan.parquet")
    _staged(root, 1, [_add(_spell(rel, root, form, encode))])
    _age(root)
    try:
        files = _both(root, allow_catalog_managed=True)
    except UnsafeDeletionError:
        assert (root / "orphan.parquet").exists()
    else:
        assert files == ("orphan.parquet",)
    assert (root / rel).exists()


# ---- 3. what one commit leaves open, and a log missing its newest files -----------------


@pytest.mark.parametrize("dv", [False, True], ids=["no DV", "DV"])
@pytest.mark.parametrize("add_first", [True, False], ids=["add first", "remove first"])
def test_an_add_and_a_remove_of_one_file_in_one_commit_keep_the_file(
    tmp_path, add_first, dv
):
    """A valid commit may hold one add and one remove of the same `(path, dvId)`, and the
    spec does not order a commit's actions ("Deletion Vectors"). Spark lets the last line
    win and deltalake the first, so with the add first deltalake reads the file as live.
    Before the fix VACUUM let the last line win, and deleted the file (and its DV file)
    that deltalake still read. Both commit readers now take the add."""
    from delta_ops.log import build_log_segment
    from delta_ops.log.replay.references import (
        _commit_rows_columnar,
        _commit_rows_python,
        read_deltas,
    )

    root = tmp_path / "t"
    u = uuid.UUID("12345678-1234-1234-1234-123456789abc")
    dv_file = f"ab/deletion_vector_{u}.bin"
    _data(root, "a.parquet", "orphan.parquet", *([dv_file] if dv else []))
    _table(root, [])
    extra = {"deletionVector": {"storageType": "u", "pathOrInlineDv": encode_uuid_path(u, "ab"),
                                "sizeInBytes": 4, "cardinality": 1}} if dv else {}
    add = {"add": {**_add("a.parquet")["add"], **extra}}
    remove = {"remove": {**_remove("a.parquet")["remove"], **extra}}
    _write(root / "_delta_log" / f"{1:020}.json", [add, remove] if add_first else [remove, add])
    _age(root)

    storage = Storage.for_uri(str(root))
    segment = build_log_segment(storage)
    blobs = read_deltas(storage, segment)
    for rows in (_commit_rows_columnar(segment, blobs, storage.root),
                 _commit_rows_python(segment, blobs, storage.root)):
        assert rows is not None and rows.column("is_add").to_pylist() == [True]
    assert _both(root) == ("orphan.parquet",)
    assert _both(root, lite=True) == ()
    assert {"a.parquet", *([dv_file] if dv else [])} <= _files(root)


@pytest.mark.parametrize("evidence", ["_last_checkpoint", "checksum", "checkpoint part"])
def test_a_log_missing_its_newest_versions_refuses(tmp_path, evidence):
    """Commits 2 and 3 are gone from the listing (lost, a partly restored log, a listing
    that does not show them yet), but another file shows that version 3 exists. Before
    the fix VACUUM took version 1 as the latest and deleted the files versions 2 and 3
    add (deltalake refuses such a log). Now it refuses, naming the file, and deletes
    nothing."""
    from delta_ops.errors import CorruptLogError

    root = tmp_path / "t"
    _data(root, "a.parquet", "b.parquet", "c.parquet", "orphan.parquet")
    _table(root, ["a.parquet"])
    log = root / "_delta_log"
    _write(log / f"{1:020}.json", [_add("b.parquet")])
    named = {
        "_last_checkpoint": "_last_checkpoint",
        "checksum": f"{3:020}.crc",
        "checkpoint part": f"{3:020}.checkpoint.{1:010}.{2:010}.parquet",
    }[evidence]
    (log / named).write_text(json.dumps({"version": 3, "size": 4}) if evidence ==
                             "_last_checkpoint" else "{}")
    # What versions 2 and 3 added; their commits are the missing files.
    _age(root)
    before = _files(root)
    for dry_run in (True, False):
        with pytest.raises(CorruptLogError, match=f"{re.escape(named)} shows version 3"):
            vacuum(str(root), now_ms=NOW_MS, dry_run=dry_run)
    assert _files(root) == before


def test_a_table_nested_in_the_root_keeps_its_files(tmp_path):
    """A Delta table stored below another's root: the outer log never names its files.
    Before the fix VACUUM of the outer table deleted the inner table's live files (as
    deltalake does, which also deletes its log). Now a directory holding a `_delta_log`
    of its own is left whole, and the plan says so; other unreferenced files still go."""
    root = tmp_path / "t"
    _data(root, "a.parquet", "orphan.parquet", "junk/old.parquet", "p=1/inner/x.parquet",
          "inner/y.parquet", "inner/sub/z.parquet")
    _table(root, ["a.parquet"])
    _table(root / "inner", ["y.parquet", "sub/z.parquet"])
    _table(root / "p=1" / "inner", ["x.parquet"])
    _age(root)
    dry = vacuum(str(root), now_ms=NOW_MS, dry_run=True)
    assert set(dry.files) == {"orphan.parquet", "junk/old.parquet"}
    assert any("nested in this one" in m and "inner/_delta_log" in m
               and "p=1/inner/_delta_log" in m for m in dry.messages), dry.messages
    assert set(_both(root)) == {"orphan.parquet", "junk/old.parquet"}
    assert {"inner/y.parquet", "inner/sub/z.parquet", "p=1/inner/x.parquet"} <= _files(root)


def test_s3_a_table_nested_in_the_root_keeps_its_files(s3_server):
    """On the moto server: the nested table is found through its `_delta_log/` prefix."""
    uri = s3_server.fresh_uri("vacuum-nested")
    storage = Storage.for_uri(uri, s3_server.storage_options)
    meta = {"metaData": {"id": "t", "format": {"provider": "parquet", "options": {}},
                         "schemaString": SCHEMA, "partitionColumns": [], "configuration": {},
                         "createdTime": OLD_MS}}
    for prefix, adds in (("", ["a.parquet"]), ("inner/", ["y.parquet"])):
        storage.put_atomic(f"{prefix}_delta_log/{0:020}.json", "".join(
            json.dumps(a) + "\n" for a in [PLAIN_PROTOCOL, meta, *map(_add, adds)]).encode())
    for name in ("a.parquet", "orphan.parquet", "junk/old.parquet", "inner/y.parquet"):
        storage.put_atomic(name, b"data")
    later = int(time.time() * 1000) + 30 * DAY_MS  # moto's modification times are now
    real = vacuum(uri, now_ms=later, storage_options=s3_server.storage_options,
                  dry_run=False)
    assert set(real.files) == {"orphan.parquet", "junk/old.parquet"}
    assert any("inner/_delta_log" in m for m in real.messages), real.messages
    assert storage.exists("inner/y.parquet")
    assert storage.exists(f"inner/_delta_log/{0:020}.json")

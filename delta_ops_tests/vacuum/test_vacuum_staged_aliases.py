"""VACUUM never deletes what a staged commit references, nor a live file reached through
another spelling of its directory (issue 22).

1. Catalog-managed tables: data files added by commits still in
   `_delta_log/_staged_commits` (ratified or not, above or at/below the latest published
   version) are kept; removes there un-protect nothing; a staged commit that cannot be
   read, or a `_staged_commits` that cannot be listed, refuses the run naming the file.
2. Aliases on local storage: an absolute add path reaching a file of the root through a
   symbolic link (a second link to the root, a linked ancestor, `..` after a link, a
   linked directory inside the root) keeps the file; a path whose identity cannot be
   established (a loop of links) refuses the run. S3's `s3a://`/`s3://` spellings of the
   bucket are one identity.

Each part has a proof test: with the plan's own protection switched off, the independent
check (`maintenance/vacuum/proof.py`) still refuses, so one bug cannot delete a live file.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

import delta_ops.maintenance.vacuum.plan as vacuum_plan
from delta_ops.errors import StorageError, UnsafeDeletionError
from delta_ops.log.replay.references import FileReferences
from delta_ops.maintenance.vacuum import vacuum
from delta_ops.protocol.arrays import string_array
from delta_ops.protocol.path_identity import canonical_path, reader_keys
from delta_ops.storage import Storage
from delta_ops_tests.support.staged_tables import (
    CATALOG_PROTOCOL,
    DAY_MS,
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


def _vacuum_both(root: Path | str, **kwargs) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(dry run's files, real run's files)."""
    dry = vacuum(str(root), now_ms=NOW_MS, dry_run=True, **kwargs)
    real = vacuum(str(root), now_ms=NOW_MS, **kwargs, dry_run=False)
    assert real.files == dry.files
    return dry.files, real.files


# ---- 1. staged commits --------------------------------------------------------------------


def test_catalog_owned_corpus_table_keeps_the_files_its_staged_commits_add(table_copy):
    """kernel-defaults__catalog-owned-preview: version 0 is published with no file, the two
    data files are added by staged commits 1 and 2 only. Aged 30 days, VACUUM deleted both
    (every data file of the table); now both stay, in a full run, a lite run and spilled."""
    root = table_copy("kernel-defaults__catalog-owned-preview")
    _age(root)
    data = {p for p in _files(root) if not p.startswith("_delta_log")}
    assert len(data) == 2
    for kwargs in ({}, {"lite": True}):
        dry, real = _vacuum_both(root, allow_catalog_managed=True, **kwargs)
        assert not set(real) & data
        assert data <= _files(root)
    plan = vacuum_plan.plan_vacuum(
        Storage.for_uri(str(root)), now_ms=NOW_MS, allow_catalog_managed=True,
        partition_files=0, buckets=3,
    )
    assert not set(plan.files) & data


def test_staged_removes_unprotect_nothing(table_copy):
    """kernel-benchmarks__basic_catalog_managed: staged commits 2 and 3 remove both live
    files; the published state still adds them, and they stay."""
    root = table_copy("kernel-benchmarks__basic_catalog_managed/delta")
    _age(root)
    data = {p for p in _files(root) if not p.startswith("_delta_log")}
    assert len(data) == 2
    dry, real = _vacuum_both(root, allow_catalog_managed=True)
    assert real == () and data <= _files(root)


def test_staged_commits_of_every_version_protect_their_adds_and_dv_files(tmp_path):
    """Staged commits at, below and above the latest published version (1) all protect the
    files and deletion vector files they name; orphans still go."""
    root = tmp_path / "t"
    _table(root, ["published.parquet"], protocol=CATALOG_PROTOCOL)
    _write(root / "_delta_log" / f"{1:020}.json", [{"commitInfo": {"inCommitTimestamp":
                                                                       OLD_MS + 1}}])
    _data(root, "published.parquet", "s0.parquet", "s1.parquet", "s2.parquet",
          "p/s9.parquet", "p/dv.bin", "orphan.parquet", "p/orphan.parquet")
    _staged(root, 0, [_add("s0.parquet")])
    _staged(root, 1, [_add("s1.parquet"), _remove("published.parquet")])
    _staged(root, 2, [_add("s2.parquet")], uuid="a")
    dv = {"storageType": "p", "pathOrInlineDv": "p/dv.bin", "sizeInBytes": 4,
          "cardinality": 1}
    _staged(root, 9, [{"add": {**_add("p/s9.parquet")["add"], "deletionVector": dv}}])
    _age(root)
    dry, real = _vacuum_both(root, allow_catalog_managed=True)
    assert set(real) == {"orphan.parquet", "p/orphan.parquet"}
    assert {"published.parquet", "s0.parquet", "s1.parquet", "s2.parquet",
            "p/s9.parquet", "p/dv.bin"} <= _files(root)


@pytest.mark.parametrize("content", [
    b'{"add": {"path": "x.parquet", "size": 4',  # a partial file
    b'{"add": {"size": 4}}\n',  # an add without a path
    b'[1, 2]\n',  # not an object
    b'{"add": "x.parquet"}\n',  # a file action that is not an object
])
def test_unreadable_staged_commit_refuses_naming_the_file(tmp_path, content):
    root = tmp_path / "t"
    _table(root, [], protocol=CATALOG_PROTOCOL)
    _data(root, "orphan.parquet")
    bad = _staged(root, 1, [])
    bad.write_bytes(content)
    _age(root)
    before = _files(root)
    for dry_run in (True, False):
        with pytest.raises(UnsafeDeletionError, match="staged commit") as info:
            vacuum(str(root), now_ms=NOW_MS, dry_run=dry_run, allow_catalog_managed=True)
        assert info.value.file is not None and bad.name in info.value.file
    with pytest.raises(UnsafeDeletionError, match="staged commit"):
        vacuum(str(root), now_ms=NOW_MS, lite=True, allow_catalog_managed=True, dry_run=False)
    assert _files(root) == before


class _StagedUnlistable:
    """A table's storage on which listing `_delta_log/_staged_commits` fails (as a
    permission error or a dropped connection would make it)."""

    def __init__(self, inner: Storage) -> None:
        self._inner = inner

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def list_dir(self, directory: str, *args, **kwargs):
        if directory.rstrip("/") == "_delta_log/_staged_commits":
            raise StorageError("cannot list directory: access denied", file=directory)
        return self._inner.list_dir(directory, *args, **kwargs)


def test_staged_commits_directory_that_cannot_be_listed_refuses(tmp_path):
    root = tmp_path / "t"
    _table(root, [], protocol=CATALOG_PROTOCOL)
    _data(root, "orphan.parquet")
    _age(root)
    storage = _StagedUnlistable(Storage.for_uri(str(root)))
    for dry_run in (True, False):
        with pytest.raises(UnsafeDeletionError, match="_staged_commits") as info:
            vacuum(storage, now_ms=NOW_MS, dry_run=dry_run, allow_catalog_managed=True)
        assert info.value.file == "_delta_log/_staged_commits"
    assert (root / "orphan.parquet").exists()


def test_proof_knows_staged_commits_when_the_plan_forgets_them(tmp_path, monkeypatch):
    """With the plan's reading of the staged commits switched off, the independent check
    still finds the staged add and refuses."""
    root = tmp_path / "t"
    _table(root, [], protocol=CATALOG_PROTOCOL)
    _data(root, "staged.parquet")
    _staged(root, 1, [_add("staged.parquet")])
    _age(root)
    empty = string_array([])
    monkeypatch.setattr(vacuum_plan, "_staged", lambda *_a: FileReferences(empty, empty, empty))
    with pytest.raises(UnsafeDeletionError, match="match a path the log references"):
        vacuum(str(root), now_ms=NOW_MS, allow_catalog_managed=True, dry_run=False)
    assert (root / "staged.parquet").exists()


@pytest.mark.spark
def test_spark_engine_keeps_staged_files(table_copy, spark_engine):  # noqa: F811
    root = table_copy("kernel-defaults__catalog-owned-preview")
    _age(root)
    data = {p for p in _files(root) if not p.startswith("_delta_log")}
    dry, real = _vacuum_both(root, allow_catalog_managed=True, engine=spark_engine)
    assert not set(real) & data and data <= _files(root)


# ---- 2. aliases of the root ---------------------------------------------------------------


SPELLINGS = {
    "second link to the root": "file://{base}/link/d/live.parquet",
    # The file system reads `deep/..` as `real`, the text as `base`.
    "link, then ..": "{base}/deep/../d/live.parquet",
    "linked ancestor": "file:{base}/up/up/real/d/live.parquet",
    "linked directory inside the root, absolute": "file://{root}/inner/live.parquet",
    "linked directory inside the root, relative": "inner/live.parquet",
    # `down/..` is `d` to the file system, the root to the text.
    "link to a directory, then ..": "down/../live.parquet",
}


@pytest.mark.parametrize("name", sorted(SPELLINGS))
def test_absolute_add_through_another_spelling_keeps_the_file(tmp_path, name):
    """Before the fix the live file was deleted: its key was the text of its spelling."""
    root, _base = _aliased_table(tmp_path, SPELLINGS[name])
    for lite in (False, True):
        dry, real = _vacuum_both(root, lite=lite)
        assert "d/live.parquet" not in real
    assert (root / "d" / "live.parquet").exists()
    assert not (root / "d" / "orphan.parquet").exists()  # the full run still cleans up


def test_root_given_through_a_linked_ancestor_keeps_files_added_by_the_real_path(tmp_path):
    """The root spelt `base/up/real` while the add spells `base/real`."""
    root, base = _aliased_table(tmp_path, "file://{root}/d/live.parquet")
    dry, real = _vacuum_both(base / "up" / "real")
    assert real == ("d/orphan.parquet",)
    assert (root / "d" / "live.parquet").exists()


def test_root_given_as_a_link_itself_deletes_nothing(tmp_path):
    """The root spelt `base/link` (a link to `real`): the listing never follows a link,
    so nothing is listed, and the live file (added by the real path) stays."""
    root, base = _aliased_table(tmp_path, "file://{root}/d/live.parquet")
    dry, real = _vacuum_both(base / "link")
    assert real == ()
    assert (root / "d" / "live.parquet").exists()


def test_proof_catches_an_alias_the_plan_misses(tmp_path, monkeypatch):
    """With the plan's alias resolution switched off, the independent check (device and
    inode of what each spelling reaches) refuses, and nothing is deleted."""
    root, _base = _aliased_table(tmp_path, SPELLINGS["second link to the root"])
    monkeypatch.setattr(vacuum_plan, "reached_through_aliases", lambda *_a: set())
    before = _files(root)
    with pytest.raises(UnsafeDeletionError, match="another spelling") as info:
        vacuum(str(root), now_ms=NOW_MS, dry_run=False)
    assert info.value.file == "d/live.parquet"
    assert _files(root) == before


def test_referenced_path_whose_identity_cannot_be_established_refuses(tmp_path):
    """An absolute add through a loop of links: no one can say what it reaches."""
    root, base = _aliased_table(tmp_path, "file://{base}/loop/live.parquet")
    (base / "loop").symlink_to(base / "loop2")
    (base / "loop2").symlink_to(base / "loop")
    with pytest.raises(UnsafeDeletionError, match="cannot tell which file"):
        vacuum(str(root), now_ms=NOW_MS, dry_run=False)
    assert (root / "d" / "orphan.parquet").exists()


def test_s3_scheme_spellings_are_one_identity():
    """`s3a://`, `s3n://` and `s3://` name one bucket (and a bucket's name its case-free
    host), whichever the root and the add use."""
    for root in ("s3://bucket/t", "s3a://bucket/t", "s3n://Bucket/t/"):
        for add in ("s3://bucket/t/x.parquet", "s3a://bucket/t/x.parquet",
                    "S3A://BUCKET/t//x.parquet", "s3n://bucket/t/./x.parquet"):
            assert canonical_path(add, root) == "x.parquet", (add, root)
            assert reader_keys(add, root)[0] == "x.parquet"
    assert canonical_path("s3://other/t/x.parquet", "s3a://bucket/t") != "x.parquet"


def test_s3_vacuum_keeps_files_added_with_another_scheme_spelling(s3_server):
    """On the moto server: a root opened as `s3a://` and adds spelt `s3://` (and the other
    way round) keep their files; the orphan goes."""
    uri = s3_server.fresh_uri("vacuum-aliases")
    bucket_and_prefix = uri.split("://", 1)[1]
    storage = Storage.for_uri(uri, s3_server.storage_options)
    meta = {"metaData": {"id": "t", "format": {"provider": "parquet", "options": {}},
                         "schemaString": SCHEMA, "partitionColumns": [], "configuration": {},
                         "createdTime": OLD_MS}}
    actions = [PLAIN_PROTOCOL, meta, _add(f"s3://{bucket_and_prefix}/a.parquet"),
               _add(f"s3a://{bucket_and_prefix}/b.parquet")]
    storage.put_atomic(f"_delta_log/{0:020}.json",
                       "".join(json.dumps(a) + "\n" for a in actions).encode())
    for name in ("a.parquet", "b.parquet", "orphan.parquet"):
        storage.put_atomic(name, b"data")
    later = int(time.time() * 1000) + 30 * DAY_MS  # moto's modification times are now
    for scheme in ("s3a", "s3"):
        dry = vacuum(f"{scheme}://{bucket_and_prefix}", now_ms=later, dry_run=True,
                     storage_options=s3_server.storage_options)
        assert dry.files == ("orphan.parquet",)
    vacuum(f"s3a://{bucket_and_prefix}", now_ms=later, storage_options=s3_server.storage_options,
           dry_run=False)
    assert storage.exists("a.parquet") and storage.exists("b.parquet")
    assert not storage.exists("orphan.parquet")


# ---- metadata cleanup on a catalog-managed table ------------------------------------------


def test_metadata_cleanup_never_touches_staged_commits_nor_what_they_build_on(tmp_path):
    """Cleanup deletes only published log files older than its cutoff checkpoint, and
    never lists `_staged_commits`: the staged commits (at, below and above the latest
    published version) all stay, the checkpoint and the published commits after it (what
    a ratified unpublished commit is published on top of) stay, and VACUUM afterwards
    still keeps what the staged commits add."""
    root = tmp_path / "t"
    meta = {"metaData": {"id": "t", "format": {"provider": "parquet", "options": {}},
                         "schemaString": SCHEMA, "partitionColumns": [],
                         "configuration": {"delta.enableInCommitTimestamps": "true"},
                         "createdTime": OLD_MS}}
    for v in range(5):
        info = {"commitInfo": {"inCommitTimestamp": OLD_MS + v * DAY_MS, "txnId": f"t{v}"}}
        head = [CATALOG_PROTOCOL, meta] if v == 0 else []
        _write(root / "_delta_log" / f"{v:020}.json", [info, *head, _add(f"p{v}.parquet")])
        _data(root, f"p{v}.parquet")
    staged = [_staged(root, 3, [_add("p3.parquet")]),
              _staged(root, 5, [_add("s5.parquet")]),
              _staged(root, 6, [_add("s6.parquet"), _remove("p0.parquet")])]
    _data(root, "s5.parquet", "s6.parquet")
    _age(root)
    from datetime import timedelta

    from delta_ops.maintenance.cleanup import cleanup_metadata

    result = cleanup_metadata(str(root), retention=timedelta(0), force_retention=True,
                              ensure_checkpoint=True, now_ms=NOW_MS,
                              allow_catalog_managed=True, dry_run=False)
    assert result.checkpoint_version == 4 and result.files  # it did clean up
    assert all(p.exists() for p in staged)
    assert not any("_staged_commits" in f for f in result.files)
    assert (root / "_delta_log" / f"{4:020}.json").exists()
    dry, real = _vacuum_both(root, allow_catalog_managed=True)
    assert real == ()
    assert {"s5.parquet", "s6.parquet", "p0.parquet"} <= _files(root)


def test_help_says_what_vacuum_keeps_on_a_catalog_managed_table():
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "delta_ops.cli", "vacuum", "--help"],
        capture_output=True, text=True, check=True,
        env={**os.environ, "COLUMNS": "400"},
    ).stdout
    assert "_delta_log/_staged_commits" in out
    assert "ratified or not" in out and "refuses" in out


def test_for_uri_refuses_a_link_before_dot_dot(tmp_path, monkeypatch):
    """`data/link/../t` is `data/t` as text and `<link's target>/../t` to the file system:
    two tables. Before, the text won silently; now the root is refused, naming both."""
    (tmp_path / "data" / "t").mkdir(parents=True)
    (tmp_path / "other" / "deep").mkdir(parents=True)
    (tmp_path / "other" / "t").mkdir()
    (tmp_path / "data" / "link").symlink_to(tmp_path / "other" / "deep")
    for form in (f"{tmp_path}/data/link/../t", f"file://{tmp_path}/data/link/../t"):
        with pytest.raises(StorageError, match="symbolic link before") as info:
            Storage.for_uri(form)
        assert str(tmp_path / "other" / "t") in str(info.value)
        assert str(tmp_path / "data" / "t") in str(info.value)
    monkeypatch.chdir(tmp_path / "data")
    with pytest.raises(StorageError, match="symbolic link before"):
        Storage.for_uri("link/../t")
    # `..` after a plain directory reads the same both ways.
    assert Storage.for_uri(f"{tmp_path}/data/t/../t").root == f"file://{tmp_path}/data/t"

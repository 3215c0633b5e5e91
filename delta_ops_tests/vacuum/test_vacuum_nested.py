"""VACUUM and Delta tables nested in a partitioned table's partition directories.

A directory named like a partition (`p=9/`) may hold a Delta table of its own
(`p=9/_delta_log/`). The outer log never names that table's files, so VACUUM of the outer
table must leave them. `test_vacuum_redteam` covers nested tables in other directories;
partition directories are not listed again (one LIST each would double VACUUM's requests
on a partitioned table), so here the nested log is found in the listing VACUUM already
makes: the engines keep every file below a nested `_delta_log/`, whatever its age. An
inventory may predate the nested log, so from an inventory each candidate directory is
listed, partition directories too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from delta_ops.log.read_options import VACUUM_PARTITION_FILES_ENV
from delta_ops.maintenance.vacuum import vacuum
from delta_ops.maintenance.vacuum.inventory import InventorySource
from delta_ops_tests.support.staged_tables import (
    NOW_MS,
    OLD_MS,
    PLAIN_PROTOCOL,
    _age,
    _data,
    _files,
    _table,
    _write,
)
from delta_ops_tests.support.vacuum_tables import spark_inventory, walk_local, write_parquet

PARTITIONED_SCHEMA = json.dumps({"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "p", "type": "string", "nullable": True, "metadata": {}},
]})


def _partitioned(root: Path, adds: dict[str, str]) -> None:
    """A table partitioned by `p` whose version 0 adds `adds` (path -> value of p)."""
    meta = {"metaData": {"id": "outer", "format": {"provider": "parquet", "options": {}},
                         "schemaString": PARTITIONED_SCHEMA, "partitionColumns": ["p"],
                         "configuration": {}, "createdTime": OLD_MS}}
    add_actions = [
        {"add": {"path": path, "partitionValues": {"p": value}, "size": 4,
                 "modificationTime": OLD_MS, "dataChange": True}}
        for path, value in adds.items()
    ]
    _write(root / "_delta_log" / f"{0:020}.json", [PLAIN_PROTOCOL, meta, *add_actions])


@pytest.mark.parametrize("inner_log_fresh", [False, True], ids=["old-log", "fresh-log"])
@pytest.mark.parametrize("source", ["in-memory", "spilled", "inventory"])
def test_a_table_in_a_partition_directory_keeps_its_files(
    tmp_path, monkeypatch, inner_log_fresh, source
):
    """`p=9/` holds a table of its own. Before the fix, VACUUM of the outer table deleted
    its live file `p=9/x.parquet` (and, at any age, deltalake would too). A fresh inner log
    (a table converted in place: old data, a new log) must protect the old data as well."""
    if source == "spilled":
        monkeypatch.setenv(VACUUM_PARTITION_FILES_ENV, "0")
    root = tmp_path / "t"
    _data(root, "p=1/a.parquet", "p=1/orphan.parquet", "p=9/x.parquet",
          "p=9/sub/y.parquet", "p=2/old.parquet")
    _partitioned(root, {"p=1/a.parquet": "1"})
    _table(root / "p=9", ["x.parquet", "sub/y.parquet"])
    _age(root)
    if inner_log_fresh:
        commit = root / "p=9" / "_delta_log" / f"{0:020}.json"
        os.utime(commit, ns=(NOW_MS * 1_000_000,) * 2)
    args = {}
    if source == "inventory":
        inventory = write_parquet(spark_inventory(f"file://{root}", walk_local(root)),
                                  tmp_path / "inventory" / "part-0.parquet")
        args["inventory"] = InventorySource(str(inventory.parent),
                                            inventory_time_ms=NOW_MS - 3_600_000)
    dry = vacuum(str(root), now_ms=NOW_MS, dry_run=True, **args)
    assert set(dry.files) == {"p=1/orphan.parquet", "p=2/old.parquet"}, dry.files
    assert any("nested in this one" in m and "p=9/_delta_log" in m for m in dry.messages), \
        dry.messages
    real = vacuum(str(root), now_ms=NOW_MS, dry_run=False, **args)
    assert real.files == dry.files
    assert {"p=9/x.parquet", "p=9/sub/y.parquet", f"p=9/_delta_log/{0:020}.json"} <= \
        _files(root)
    assert "p=1/orphan.parquet" not in _files(root)


def test_s3_a_table_in_a_partition_directory_keeps_its_files(s3_server):
    """On the moto server: the nested log comes in the partition's own listing."""
    from delta_ops.storage import Storage

    uri = s3_server.fresh_uri("vacuum-nested-partition")
    storage = Storage.for_uri(uri, s3_server.storage_options)
    meta = {"metaData": {"id": "outer", "format": {"provider": "parquet", "options": {}},
                         "schemaString": PARTITIONED_SCHEMA, "partitionColumns": ["p"],
                         "configuration": {}, "createdTime": OLD_MS}}
    outer_add = {"add": {"path": "p=1/a.parquet", "partitionValues": {"p": "1"}, "size": 4,
                         "modificationTime": OLD_MS, "dataChange": True}}
    storage.put_atomic(f"_delta_log/{0:020}.json", "".join(
        json.dumps(a) + "\n" for a in [PLAIN_PROTOCOL, meta, outer_add]).encode())
    inner_add = {"add": {"path": "x.parquet", "partitionValues": {}, "size": 4,
                         "modificationTime": OLD_MS, "dataChange": True}}
    inner_meta = {"metaData": {**meta["metaData"], "id": "inner", "partitionColumns": []}}
    storage.put_atomic(f"p=9/_delta_log/{0:020}.json", "".join(
        json.dumps(a) + "\n" for a in [PLAIN_PROTOCOL, inner_meta, inner_add]).encode())
    for name in ("p=1/a.parquet", "p=1/orphan.parquet", "p=9/x.parquet"):
        storage.put_atomic(name, b"data")
    later = NOW_MS + 10**13  # moto's modification times are now: be far past them
    real = vacuum(uri, now_ms=later, storage_options=s3_server.storage_options,
                  dry_run=False)
    assert set(real.files) == {"p=1/orphan.parquet"}
    assert any("p=9/_delta_log" in m for m in real.messages), real.messages
    assert storage.exists("p=9/x.parquet")


@pytest.mark.parametrize("spelling", ["file://{root}/f3.parquet", "{root}/f3.parquet"])
def test_files_a_nested_shallow_clone_names_by_absolute_path_are_kept(tmp_path, spelling):
    """A shallow clone at `clones/c1` adds the outer table's `f3.parquet` by its absolute
    path, after the outer table removed it. Before the fix VACUUM found the clone's log,
    said so, and deleted `f3.parquet` anyway: the clone's live file."""
    from delta_ops_tests.support.staged_tables import _add, _remove

    root = tmp_path / "t"
    _data(root, "f1.parquet", "f3.parquet", "orphan.parquet")
    _table(root, ["f1.parquet", "f3.parquet"])
    _write(root / "_delta_log" / f"{1:020}.json", [_remove("f3.parquet")])
    _write(root / "clones" / "c1" / "_delta_log" / f"{0:020}.json",
           [PLAIN_PROTOCOL, _inner_meta(), _add(spelling.format(root=root))])
    _age(root)
    dry = vacuum(str(root), now_ms=NOW_MS, dry_run=True)
    assert set(dry.files) == {"orphan.parquet"}, dry.files
    assert any("shallow clone" in m and "f3.parquet" in m for m in dry.messages), dry.messages
    real = vacuum(str(root), now_ms=NOW_MS, dry_run=False)
    assert real.files == dry.files
    assert (root / "f3.parquet").exists()


def test_a_nested_log_that_does_not_read_refuses(tmp_path):
    """A nested table whose log does not read may name any file of this table."""
    from delta_ops.errors import UnsafeDeletionError

    root = tmp_path / "t"
    _data(root, "f1.parquet", "orphan.parquet")
    _table(root, ["f1.parquet"])
    log = root / "clones" / "c1" / "_delta_log"
    _write(log / f"{0:020}.json", [PLAIN_PROTOCOL, _inner_meta()])
    (log / f"{1:020}.json").write_text("{not json\n")
    _age(root)
    before = _files(root)
    with pytest.raises(UnsafeDeletionError, match="nested at clones/c1/ does not read"):
        vacuum(str(root), now_ms=NOW_MS, dry_run=False)
    assert _files(root) == before


def _inner_meta() -> dict:
    from delta_ops_tests.support.staged_tables import SCHEMA

    return {"metaData": {"id": "clone", "format": {"provider": "parquet", "options": {}},
                         "schemaString": SCHEMA, "partitionColumns": [], "configuration": {},
                         "createdTime": OLD_MS}}

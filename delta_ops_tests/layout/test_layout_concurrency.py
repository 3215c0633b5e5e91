"""OPTIMIZE and PURGE beside another writer, run end to end through the operations, on local
files and on the moto S3 server.

The other writer commits between the rewrite of a batch and its commit: the seam is the
Engine the operation takes. `_WriterBetween` is a real `LocalEngine` that, after it has
rewritten the first batch of bins (its `map_tasks`), lets a second writer (its own Storage,
delta_ops' commit API) commit once, then hands the outputs back for the commit. Storage is
never replaced or wrapped. What must hold (Spark's isolation for a `dataChange=false`
rewrite):

- an append committed meanwhile is kept and nothing conflicts;
- a remove of an input file, or a new deletion vector on one, wins: that bin fails and is
  named, its rows stay deleted (the removed file's, the DV's rows), the other bins commit;
- in every case our reader (row IDs and row commit versions included) and deltalake read
  the same rows, and the failed bin's new files are unreferenced.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Callable
from typing import Any

import deltalake
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import QueryBuilder

from delta_ops.commit import Transaction, append_files
from delta_ops.engine.local import LocalEngine
from delta_ops.layout.optimize import optimize
from delta_ops.layout.purge import purge
from delta_ops.log import load_snapshot
from delta_ops.storage import Storage
from delta_ops_tests.support.dv_writer import inline_descriptor
from delta_ops_tests.support.layout_tables import LayoutSpec, build_layout_table, our_rows

#: Three partitions ("a b", "x=y", "50%") of three files each, row tracking on; with the
#: big target each partition is one bin. The deletes give two files a deletion vector.
SPEC = LayoutSpec(
    partitioned=True, row_tracking=True,
    appends=(((30, 0), (20, 1), (25, 2)), ((10, 0), (15, 1), (12, 2)),
             ((8, 0), (9, 1), (11, 2))),
    deletes=((0, (1, 2, 3)), (4, (0, 5))),
)
TARGET = 64 * 1024 * 1024


class _WriterBetween(LocalEngine):
    """A LocalEngine that runs `writer(tasks)` once, after its first `map_tasks` (the
    rewrite of the first batch) and before the operation commits that batch."""

    def __init__(self, writer: Callable[[list[Any]], None]) -> None:
        super().__init__(max_workers=2)
        self.writer = writer
        self.fired = False

    def map_tasks(self, storage, fn, items, **kwargs):  # type: ignore[no-untyped-def]
        out = super().map_tasks(storage, fn, items, **kwargs)
        if not self.fired:
            self.fired = True
            self.writer(list(items))
        return out


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def table(request, tmp_path):
    """(Storage the operation uses, a factory of the other writer's own Storage,
    deltalake storage options) of a SPEC table on local files or on moto S3."""
    if request.param == "local":
        root = tmp_path / "t"
        root.mkdir()
        uri, options, dl_options = str(root), None, None
    else:
        s3 = request.getfixturevalue("s3_server")
        uri, options, dl_options = s3.fresh_uri("t"), s3.storage_options, s3.object_store_options
    storage = Storage.for_uri(uri, options)
    build_layout_table(storage, SPEC)
    return storage, (lambda: Storage.for_uri(uri, options)), dl_options


def _deltalake_agrees(storage: Storage, options: dict | None, rows: list[tuple]) -> None:
    """deltalake reads the table as we do. Local files: the same rows (its DataFusion reader
    applies the deletion vectors). On moto S3 deltalake's Parquet reads do not get through
    (object_store's GETs of data files fail with "error sending request" against moto's
    server; its log reads work), so there it must list the same live files as our snapshot
    (the rows are then judged by our reader, which reads them through s3fs)."""
    from urllib.parse import unquote

    t = deltalake.DeltaTable(storage.root, storage_options=options)
    if options is None:
        got = pa.table(QueryBuilder().register("t", t).execute(
            'select "id", "value", "part" from t').read_all()).to_pydict()
        ours = _no_ids(rows)
        assert sorted(zip(got["id"], got["value"], got["part"], strict=True), key=repr) == ours
        return

    def plain(p: str) -> str:  # file_uris and the log escape differently: undo all of it
        while unquote(p) != p:
            p = unquote(p)
        return p

    prefix = storage.root.rstrip("/") + "/"
    theirs = sorted(plain(u.removeprefix(prefix)) for u in t.file_uris())
    assert theirs == sorted(plain(p) for p in _live(storage))


def _no_ids(rows: list[tuple]) -> list[tuple]:
    return sorted((r[:3] for r in rows), key=repr)


def _file_rows(storage: Storage, add: dict[str, Any]) -> set[int]:
    from urllib.parse import unquote

    return set(pq.read_table(storage.open_input(unquote(add["path"]))).column("id").to_pylist())


def _live(storage: Storage) -> dict[str, dict[str, Any]]:
    return {r["path"]: r for r in load_snapshot(storage).files.to_pylist()}


def _body(add: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in add.items() if v is not None}
    out["partitionValues"] = dict(out["partitionValues"])
    if "tags" in out:
        out["tags"] = dict(out["tags"])
    return out


def _remove(add: dict[str, Any]) -> dict[str, Any]:
    rm = {"path": add["path"], "deletionTimestamp": 1, "dataChange": True,
          "extendedFileMetadata": True, "partitionValues": dict(add["partitionValues"]),
          "size": add["size"]}
    if add.get("deletionVector") and add["deletionVector"].get("storageType"):
        rm["deletionVector"] = {k: v for k, v in add["deletionVector"].items() if v is not None}
    return rm


@pytest.mark.parametrize("op", ["optimize", "purge"])
def test_an_append_committed_mid_run_is_kept(table, op):
    storage, other, options = table
    before = our_rows(storage)
    appended: list[tuple] = []

    def writer(tasks: list[Any]) -> None:
        other_storage = other()
        ids = list(range(10_000, 10_007))
        data = pa.table({"id": pa.array(ids, pa.int64()), "value": [f"n{i}" for i in ids]})
        buf = io.BytesIO()
        pq.write_table(data, buf)
        key = f"part=a b/part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        other_storage.put_atomic(key, buf.getvalue())
        append_files(other_storage, [{
            "path": key.replace(" ", "%20"), "partitionValues": {"part": "a b"},
            "size": len(buf.getvalue()), "modificationTime": 1, "dataChange": True,
            "stats": orjson.dumps({"numRecords": len(ids)}).decode()}])
        appended.extend((i, f"n{i}", "a b") for i in ids)

    engine = _WriterBetween(writer)
    run = optimize if op == "optimize" else purge
    result = run(storage, target_size=TARGET, dry_run=False, engine=engine, bins_per_commit=1)
    assert engine.fired and result.failed == {} and result.bins_committed == result.bins > 0
    after = our_rows(storage)
    # Every row that was there keeps its values, row ID and row commit version.
    old = [r for r in after if r[0] < 10_000]
    assert old == before
    assert sorted(r[:3] for r in after if r[0] >= 10_000) == sorted(appended)
    _deltalake_agrees(storage, options, after)
    if op == "purge":
        assert all(a.get("deletionVector") is None for a in _live(storage).values())


@pytest.mark.parametrize("change", ["remove", "deletion vector"])
def test_a_delete_of_an_input_committed_mid_run_wins(table, change):
    storage, other, options = table
    before = our_rows(storage)
    gone: set[int] = set()
    hit: list[int] = []
    hit_part: list[str | None] = []

    def writer(tasks: list[Any]) -> None:
        other_storage = other()
        task = tasks[0]
        victim = task.bin.files[0]
        hit.append(task.bin.index)
        hit_part.append(dict(victim.partition_values).get("part"))
        add = _live(other_storage)[victim.path]
        txn = Transaction(other_storage, operation="DELETE")
        if change == "remove":
            gone.update(_file_rows(other_storage, add))
            txn.remove_files([_remove(add)])
        else:
            ids = sorted(_file_rows(other_storage, add))
            old = [r for r in before if r[0] in ids]  # live rows of the file
            physical = pq.read_table(other_storage.open_input(victim.key)).column("id")
            drop = {physical.to_pylist().index(r[0]) for r in old[:2]}
            gone.update(r[0] for r in old[:2])
            prior = set(range(len(physical))) - {physical.to_pylist().index(r[0]) for r in old}
            new = _body(add)
            new["deletionVector"] = inline_descriptor(sorted(prior | drop)).to_dict()
            txn.remove_files([_remove(add)]).add_files([new])
        txn.commit()

    engine = _WriterBetween(writer)
    result = optimize(storage, target_size=TARGET, dry_run=False, engine=engine)
    assert engine.fired and gone
    assert set(result.failed) == set(hit), result.failed
    assert "concurrent" in result.failed[hit[0]]
    assert result.bins_committed == result.bins - 1 >= 1
    after = our_rows(storage)
    # The deleted rows stay deleted; every other row is kept with its row ID and version.
    assert after == [r for r in before if r[0] not in gone]
    _deltalake_agrees(storage, options, after)
    # The failed bin's partition still holds its other inputs (nothing of the bin was
    # committed); every other partition is compacted to one file.
    parts: dict[str | None, int] = {}
    for add in _live(storage).values():
        p = dict(add["partitionValues"]).get("part")
        parts[p] = parts.get(p, 0) + 1
    assert parts.pop(hit_part[0]) == (2 if change == "remove" else 3)
    assert set(parts.values()) == {1}


def _every_file(storage: Storage) -> list[str]:
    return sorted(i.path for i in storage.walk("", follow_symlinks=False))


def test_a_batch_failed_by_a_corrupt_input_leaves_no_new_file(table):
    # On S3 the new files go through a scratch file and an upload: a batch that failed left
    # its other bins' uploads behind, named by no commit.
    from urllib.parse import unquote

    from delta_ops.errors import RewriteError

    storage, _, _ = table
    snap = load_snapshot(storage)
    bins = optimize(storage, target_size="64mb").plan["bin_details"]
    assert len(bins) >= 2
    last = bins[-1]["partition"]
    path = next(f["path"] for f in snap.files.to_pylist()
                if dict(f["partitionValues"]) == last)
    storage.put_atomic(unquote(path), b"garbage-not-parquet")
    before = _every_file(storage)
    with pytest.raises(RewriteError, match="does not read as Parquet") as err:
        optimize(storage, dry_run=False, target_size="64mb")
    assert err.value.file == storage.absolute_uri(unquote(path))
    assert _every_file(storage) == before
    assert load_snapshot(storage).version == snap.version

"""The layout plan (pure) and the gate: bins per partition, the size and ratio rules,
`min_files`, the partition predicate and its refusals, PURGE's choice, the dry run, and
features refused by name before anything is written."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from delta_ops import DeltaTable
from delta_ops.commit import Transaction
from delta_ops.errors import UnsupportedFeatureError
from delta_ops.layout.optimize import optimize
from delta_ops.layout.plan import (
    DEFAULT_TARGET_FILE_SIZE,
    InvalidPredicateError,
    parse_size,
    parse_where,
    plan_layout,
    target_file_size,
)
from delta_ops.layout.purge import purge
from delta_ops.log import load_snapshot
from delta_ops.protocol.filenames import LOG_DIR
from delta_ops_tests.support.dv_writer import inline_descriptor
from delta_ops_tests.support.layout_tables import LayoutSpec, build_layout_table

ROOT = "file:///t"


def _files(rows: list[dict]) -> pa.Table:
    out = []
    for r in rows:
        dv = None
        if r.get("deleted"):
            dv = inline_descriptor(range(r["deleted"])).to_dict()
        out.append({
            "path": r["path"],
            "partitionValues": list((r.get("pv") or {}).items()),
            "size": r["size"],
            "stats": json.dumps({"numRecords": r.get("rows", 100)}),
            "deletionVector": dv,
            "baseRowId": None,
            "defaultRowCommitVersion": None,
            "tags": None,
        })
    return pa.Table.from_pylist(out)


def _plan(rows, **kw):
    args = dict(root=ROOT, version=3, operation="optimize", partition_columns={"p": "p"},
                target_size=1000)
    args.update(kw)
    return plan_layout(_files(rows), **args)


def test_small_files_of_a_partition_make_one_bin_large_files_stay():
    plan = _plan([
        {"path": "p=a/1.parquet", "size": 100, "pv": {"p": "a"}},
        {"path": "p=a/2.parquet", "size": 200, "pv": {"p": "a"}},
        {"path": "p=a/big.parquet", "size": 5000, "pv": {"p": "a"}},
        {"path": "p=b/3.parquet", "size": 300, "pv": {"p": "b"}},
        {"path": "p=b/4.parquet", "size": 300, "pv": {"p": "b"}},
    ])
    assert [sorted(f.path for f in b.files) for b in plan.bins] == [
        ["p=a/1.parquet", "p=a/2.parquet"], ["p=b/3.parquet", "p=b/4.parquet"]]
    assert [b.directory for b in plan.bins] == ["p=a", "p=b"]
    assert (plan.num_files, plan.num_bytes, plan.files_considered) == (4, 900, 5)


def test_a_lone_small_file_is_left_and_min_files_holds_a_partition_back():
    rows = [{"path": "p=a/1.parquet", "size": 100, "pv": {"p": "a"}},
            {"path": "p=b/2.parquet", "size": 100, "pv": {"p": "b"}},
            {"path": "p=b/3.parquet", "size": 100, "pv": {"p": "b"}}]
    assert [len(b.files) for b in _plan(rows).bins] == [2]
    assert _plan(rows, min_files=3).bins == ()


def test_a_large_file_past_the_deleted_rows_ratio_is_rewritten():
    rows = [{"path": "p=a/big.parquet", "size": 5000, "pv": {"p": "a"}, "rows": 100,
             "deleted": 6},
            {"path": "p=a/ok.parquet", "size": 5000, "pv": {"p": "a"}, "rows": 100,
             "deleted": 5}]
    plan = _plan(rows)
    assert [[f.path for f in b.files] for b in plan.bins] == [["p=a/big.parquet"]]
    assert _plan(rows, max_deleted_rows_ratio=0.01).num_files == 2
    assert _plan(rows, max_deleted_rows_ratio=0.1).bins == ()


def test_purge_takes_every_file_with_a_deletion_vector_whatever_its_size():
    rows = [{"path": "a.parquet", "size": 5000, "deleted": 1},
            {"path": "b.parquet", "size": 10, "deleted": 0},
            {"path": "c.parquet", "size": 10, "deleted": 2}]
    plan = _plan(rows, operation="purge", partition_columns={})
    assert sorted(f.path for b in plan.bins for f in b.files) == ["a.parquet", "c.parquet"]


def test_bins_are_cut_at_the_bin_cap():
    rows = [{"path": f"{i}.parquet", "size": 400} for i in range(10)]
    plan = _plan(rows, partition_columns={}, max_bin_bytes=1000)
    assert [len(b.files) for b in plan.bins] == [2, 2, 2, 2, 2]
    assert all(b.input_bytes <= 1000 for b in plan.bins)


def test_where_selects_partitions():
    rows = [{"path": f"p={v}/{i}.parquet", "size": 10, "pv": {"p": v}}
            for v in ("a", "b", "it's") for i in range(2)]
    cols = ["p"]
    assert _plan(rows, where=parse_where("p = 'a'", cols)).num_files == 2
    assert _plan(rows, where=parse_where("p IN ('a', 'it''s')", cols)).num_files == 4
    assert _plan(rows, where=parse_where("p != 'a' AND p <> 'b'", cols)).num_files == 2
    assert _plan(rows, where=parse_where("p IS NOT NULL", cols)).num_files == 6
    assert _plan(rows, where=parse_where("P is null", cols)).num_files == 0


@pytest.mark.parametrize("where, message", [
    ("value = 1", "not a partition column"),
    ("p > 'a'", "is not one of"),
    ("p = 'a' OR p = 'b'", "is not one of"),
    ("p IN ()", "IN takes a list of literals"),
])
def test_where_refuses_what_it_cannot_apply(where, message):
    with pytest.raises(InvalidPredicateError, match=message):
        parse_where(where, ["p"], table=ROOT)


def test_where_on_an_unpartitioned_table_is_refused():
    with pytest.raises(InvalidPredicateError, match="not partitioned"):
        parse_where("p = 'a'", [])


def test_sizes_and_the_table_target():
    assert parse_size("256mb") == parse_size("256 MiB") == 256 * 1024**2
    assert parse_size(" 1g ") == 1024**3
    with pytest.raises(ValueError, match="number of bytes"):
        parse_size("lots")
    with pytest.raises(ValueError, match="at least 1"):
        parse_size("0")
    assert target_file_size({}) == DEFAULT_TARGET_FILE_SIZE == 256 * 1024**2
    assert target_file_size({"delta.targetFileSize": "1048576"}) == 1048576
    with pytest.raises(ValueError, match="delta.targetFileSize"):
        target_file_size({"delta.targetFileSize": "big"})


def _table(storage, **kw):
    spec = LayoutSpec(appends=(((3, 0), (4, 0), (5, 0)),), **kw)
    build_layout_table(storage, spec)
    return storage


def test_dry_run_writes_nothing_and_reports_the_plan(layout_storage):
    _table(layout_storage)
    before = sorted(p for p, _ in ((i.path, i) for i in layout_storage.walk("")))
    result = DeltaTable(layout_storage.root).optimize()
    assert result.dry_run and result.versions == ()
    assert (result.plan["bins"], result.plan["files"]) == (1, 3)
    assert sorted(i.path for i in layout_storage.walk("")) == before
    assert load_snapshot(layout_storage).version == 1


def test_the_table_target_size_is_used_and_a_rerun_has_nothing_to_do(layout_storage):
    _table(layout_storage)
    txn = Transaction(layout_storage, operation="SET TBLPROPERTIES")
    txn.update_configuration({"delta.targetFileSize": "1mb"}).commit()
    first = optimize(layout_storage, dry_run=False)
    assert first.target_size == 1024**2
    assert (first.files_removed, first.files_added, first.files_after) == (3, 1, 1)
    again = optimize(layout_storage, dry_run=False)
    assert again.bins == 0 and again.versions == ()


def test_commit_info_is_sparks(layout_storage):
    _table(layout_storage)
    result = optimize(layout_storage, dry_run=False, where=None)
    lines = [json.loads(x) for x in
             layout_storage.read_text(f"{LOG_DIR}/{result.versions[0]:020d}.json").splitlines()]
    info = lines[0]["commitInfo"]
    assert info["operation"] == "OPTIMIZE"
    assert info["operationParameters"] == {
        "predicate": "[]", "zOrderBy": "[]", "clusterBy": "[]", "auto": False}
    assert info["isolationLevel"] == "SnapshotIsolation"
    assert info["isBlindAppend"] is False
    metrics = info["operationMetrics"]
    assert set(metrics) == {"numAddedFiles", "numRemovedFiles", "numAddedBytes",
                            "numRemovedBytes", "minFileSize", "p25FileSize", "p50FileSize",
                            "p75FileSize", "maxFileSize", "numDeletionVectorsRemoved"}
    assert (metrics["numAddedFiles"], metrics["numRemovedFiles"]) == ("1", "3")
    removes = [a["remove"] for a in lines if "remove" in a]
    adds = [a["add"] for a in lines if "add" in a]
    assert len(removes) == 3 and len(adds) == 1
    assert all(r["dataChange"] is False and r["extendedFileMetadata"] is True
               and "size" in r and "partitionValues" in r for r in removes)
    add = adds[0]
    assert add["dataChange"] is False
    assert add["path"].startswith("part-00000-") and add["path"].endswith(
        "-c000.snappy.parquet")
    assert json.loads(add["stats"])["numRecords"] == 12


def test_purge_commit_is_a_reorg(layout_storage):
    spec = LayoutSpec(partitioned=True, appends=(((3, 0), (4, 0)),), deletes=((0, (1,)),))
    build_layout_table(layout_storage, spec)
    result = purge(layout_storage, dry_run=False, where="part = 'a b'")
    info = json.loads(layout_storage.read_text(
        f"{LOG_DIR}/{result.versions[0]:020d}.json").splitlines()[0])["commitInfo"]
    assert info["operation"] == "REORG"
    assert info["operationParameters"] == {"predicate": '["part = \'a b\'"]',
                                           "applyPurge": True}
    assert info["operationMetrics"]["numDeletionVectorsRemoved"] == "1"
    assert (result.files_removed, result.rows_deleted) == (1, 1)


@pytest.mark.parametrize("feature", ["clustering", "icebergCompatV2", "variantShredding"])
def test_features_this_writer_cannot_honour_are_refused_by_name(layout_storage, feature):
    _table(layout_storage)
    txn = Transaction(layout_storage, operation="UPGRADE PROTOCOL")
    txn.add_features([feature]).commit()
    version = load_snapshot(layout_storage).version
    for run in (optimize, purge):
        with pytest.raises(UnsupportedFeatureError, match=feature) as info:
            run(layout_storage, dry_run=False)
        assert feature in info.value.features
    assert load_snapshot(layout_storage).version == version


def test_collations_are_refused_by_the_commit_gate(table_copy):
    from delta_ops.storage import Storage

    storage = Storage.of(str(table_copy("golden__collations-table")))
    with pytest.raises(UnsupportedFeatureError, match="collations"):
        optimize(storage, dry_run=False)

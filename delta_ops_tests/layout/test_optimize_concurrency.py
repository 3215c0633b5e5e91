"""OPTIMIZE beside live writers (Spark's isolation for a rewrite that changes no data): a
concurrent append never conflicts; a concurrent remove of an input, or a new deletion
vector on one, fails that bin (its rows stay deleted) while the other bins commit; a change
of the table's metadata fails the batch. Driven through the steps (plan, rewrite, commit)
with the concurrent commit landing between rewrite and commit."""

from __future__ import annotations

import pyarrow.parquet as pq

from delta_ops.commit import Transaction, append_files
from delta_ops.layout.commit import commit_batch
from delta_ops.layout.plan import plan_layout
from delta_ops.layout.rewrite import RewriteTask, rewrite_bin
from delta_ops.layout.run import _file_schema, _partition_columns
from delta_ops.log import load_snapshot
from delta_ops_tests.support.dv_writer import inline_descriptor
from delta_ops_tests.support.layout_tables import LayoutSpec, build_layout_table, our_rows


def _planned(storage):
    from delta_ops.layout.rewrite import RewriteSettings

    spec = LayoutSpec(partitioned=True, row_tracking=True,
                      appends=(((3, 0), (4, 0), (5, 5), (2, 5)),))
    build_layout_table(storage, spec)
    snap = load_snapshot(storage)
    plan = plan_layout(snap.files, root=storage.root, version=snap.version,
                       operation="optimize", partition_columns=_partition_columns(snap),
                       target_size=10**6)
    cfg = snap.metadata.configuration
    rid = cfg["delta.rowTracking.materializedRowIdColumnName"]
    rcv = cfg["delta.rowTracking.materializedRowCommitVersionColumnName"]
    settings = RewriteSettings(
        table=storage.root, protocol=dict(snap.protocol), metadata=dict(snap.metadata.raw),
        file_schema=_file_schema(snap, rid, rcv), column_mapping_mode="none",
        row_id_column=rid, row_commit_version_column=rcv, compression="SNAPPY",
        target_size=10**6)
    outputs = [rewrite_bin(storage, RewriteTask(b, settings)) for b in plan.bins]
    return snap, plan, outputs


def _remove(add: dict) -> dict:
    return {"path": add["path"], "deletionTimestamp": 1, "dataChange": True,
            "partitionValues": dict(add["partitionValues"]), "size": add["size"]}


def test_a_concurrent_append_never_conflicts(layout_storage):
    snap, plan, outputs = _planned(layout_storage)
    extra = {"path": "extra.parquet", "partitionValues": {"part": "a b"}, "size": 1,
             "modificationTime": 1, "dataChange": True, "stats": '{"numRecords":0}'}
    pq.write_table(pq.read_table(layout_storage.open_input(plan.bins[0].files[0].key))
                   .slice(0, 0), layout_storage.root.removeprefix("file://") + "/extra.parquet")
    append_files(layout_storage, [extra])
    outcome = commit_batch(layout_storage, snap, plan.bins, outputs, operation="optimize",
                           predicate=None)
    assert outcome.failed == {} and len(outcome.committed) == 2
    paths = load_snapshot(layout_storage).files.column("path").to_pylist()
    assert "extra.parquet" in paths and len(paths) == 3


def test_a_concurrent_remove_fails_that_bin_only_and_its_rows_stay_deleted(layout_storage):
    snap, plan, outputs = _planned(layout_storage)
    victim = plan.bins[0].files[0]
    live = {a["path"]: a for a in snap.files.to_pylist()}
    Transaction(layout_storage, operation="DELETE").remove_files(
        [_remove(live[victim.path])]).commit()
    expected = our_rows(layout_storage)
    outcome = commit_batch(layout_storage, snap, plan.bins, outputs, operation="optimize",
                           predicate=None)
    assert set(outcome.failed) == {plan.bins[0].index}
    assert "removed or got a new deletion vector" in outcome.failed[plan.bins[0].index]
    assert outcome.committed == (plan.bins[1].index,)
    assert our_rows(layout_storage) == expected


def test_a_concurrent_deletion_vector_fails_that_bin(layout_storage):
    snap, plan, outputs = _planned(layout_storage)
    victim = plan.bins[1].files[0]
    add = {k: v for k, v in {a["path"]: a for a in snap.files.to_pylist()}[victim.path]
           .items() if v is not None}
    add["partitionValues"] = dict(add["partitionValues"])
    new = dict(add, deletionVector=inline_descriptor([0]).to_dict(), dataChange=True)
    Transaction(layout_storage, operation="DELETE").remove_files([_remove(add)]).add_files(
        [new]).commit()
    expected = our_rows(layout_storage)
    outcome = commit_batch(layout_storage, snap, plan.bins, outputs, operation="optimize",
                           predicate=None)
    assert set(outcome.failed) == {plan.bins[1].index}
    assert outcome.committed == (plan.bins[0].index,)
    assert our_rows(layout_storage) == expected


def test_a_metadata_change_fails_the_batch(layout_storage):
    snap, plan, outputs = _planned(layout_storage)
    Transaction(layout_storage, operation="SET TBLPROPERTIES").update_configuration(
        {"delta.targetFileSize": "1mb"}).commit()
    expected = our_rows(layout_storage)
    version = load_snapshot(layout_storage).version
    outcome = commit_batch(layout_storage, snap, plan.bins, outputs, operation="optimize",
                           predicate=None)
    assert outcome.version is None and set(outcome.failed) == {0, 1}
    assert "metadata changed" in outcome.failed[0]
    assert load_snapshot(layout_storage).version == version
    assert our_rows(layout_storage) == expected

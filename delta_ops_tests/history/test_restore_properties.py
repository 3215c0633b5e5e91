"""Restore property tests over generated histories (spec "Add File and Remove File",
"Deletion Vectors", "Row Tracking"): after `restore(version=N)` the table's state equals
version N's: the same files with the same deletion vectors, the same rows as deltalake reads
them, and, under row tracking, every file keeps the `baseRowId` and
`defaultRowCommitVersion` it had at N (so every row keeps its row ID)."""

from __future__ import annotations

import json

import deltalake
import pyarrow as pa
from deltalake import QueryBuilder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delta_ops.log import load_snapshot, read_commit
from delta_ops.maintenance.restore import restore
from delta_ops.protocol.deletion_vectors import unique_id_of
from delta_ops.storage import Storage
from delta_ops_tests.support.histories import build_history, histories


def _files(storage: Storage, version: int | None = None) -> dict[tuple, tuple]:
    """(path, DV unique id) -> (size, baseRowId, defaultRowCommitVersion) of live files."""
    snap = load_snapshot(storage, version)
    rows = snap.files.select(
        ["path", "deletionVector", "size", "baseRowId", "defaultRowCommitVersion"]
    ).to_pylist()
    return {
        (r["path"], unique_id_of(r["deletionVector"])):
            (r["size"], r["baseRowId"], r["defaultRowCommitVersion"])
        for r in rows
    }


def _rows(root: str, version: int | None = None) -> list[str]:
    """The rows deltalake reads (deletion vectors applied), sorted."""
    dt = deltalake.DeltaTable(root, version=version)
    batches = pa.table(QueryBuilder().register("t", dt).execute("select * from t").read_all())
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in batches.to_pylist())


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    spec=histories(max_steps=7, row_tracking=None, features=(
        "partitioned", "column_mapping", "in_commit_timestamps", "deletion_vectors",
    )),
    pick=st.integers(0, 1_000),
)
def test_restore_gives_the_state_of_the_version(tmp_path_factory, spec, pick) -> None:
    root = tmp_path_factory.mktemp("restore")
    storage = Storage.for_uri(str(root))
    built = build_history(storage, spec)
    latest = built.versions[-1]
    n = built.versions[pick % len(built.versions)]
    want_files = _files(storage, n)
    want_rows = _rows(storage.root, n)
    before_rows = _rows(storage.root)

    dry = restore(storage, version=n)
    assert dry.version is None and dry.dry_run
    assert load_snapshot(storage).version == latest  # a dry run commits nothing
    assert _rows(storage.root) == before_rows

    result = restore(storage, version=n, dry_run=False)
    if n == latest:
        assert result.version is None and load_snapshot(storage).version == latest
        return
    assert result.version == latest + 1
    # Files, deletion vectors and, under row tracking, row IDs as at version n.
    got = _files(storage)
    assert set(got) == set(want_files)
    for key, (size, base_row_id, commit_version) in want_files.items():
        assert got[key][0] == size
        if base_row_id is not None:
            assert got[key][1:] == (base_row_id, commit_version), key
        elif spec.row_tracking:
            raise AssertionError(f"a file of a row-tracking table without row IDs: {key}")
    assert _rows(storage.root) == want_rows
    # The commit is Spark's RESTORE.
    actions = read_commit(storage, result.version)
    raw = actions[0]["commitInfo"]
    assert raw["operation"] == "RESTORE"
    assert raw["operationParameters"] == {"version": n, "timestamp": None}
    metrics = raw["operationMetrics"]
    assert int(metrics["numOfFilesAfterRestore"]) == len(want_files)
    assert int(metrics["tableSizeAfterRestore"]) == sum(v[0] for v in want_files.values())
    assert int(metrics["numRestoredFiles"]) == len(result.restored_files)
    assert int(metrics["numRemovedFiles"]) == len(result.removed_files)
    # Every add and remove of the commit changes data; the metadata is version n's.
    file_actions = [a[k] for a in actions for k in ("add", "remove") if k in a]
    assert len(file_actions) == len(result.restored_files) + len(result.removed_files)
    assert all(f["dataChange"] is True for f in file_actions)
    assert load_snapshot(storage).metadata.raw["schemaString"] == \
        load_snapshot(storage, n).metadata.raw["schemaString"]

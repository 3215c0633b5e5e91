"""History and restore on an object store (a moto S3 server on 127.0.0.1): the log listed
once, commits read through ranged GETs, and the restore's file check answered by the
store (a deleted object refuses the restore, naming it)."""

from __future__ import annotations

import pytest

from delta_ops.errors import RestoreFilesMissingError
from delta_ops.log import load_snapshot
from delta_ops.maintenance.history import table_history
from delta_ops.maintenance.restore import restore
from delta_ops.storage import Storage
from delta_ops_tests.support.histories import HistorySpec, build_history, table_rows

pytestmark = pytest.mark.s3


def test_history_and_restore_on_s3(s3_server) -> None:
    storage = Storage.for_uri(s3_server.fresh_uri("restore"), s3_server.storage_options)
    build_history(storage, HistorySpec(
        deletion_vectors=True,
        steps=(("append", (3, 2), True), ("dv", 0, (0, 1)), ("remove", 1),
               ("append", (4,), True)),
    ))
    history = table_history(storage, limit=3)
    assert [e.version for e in history.entries] == [4, 3, 2]
    assert [e.operation for e in history.entries] == ["WRITE", "DELETE", "DELETE"]

    want = table_rows(storage, 2)
    result = restore(storage, version=2, dry_run=False)
    assert result.version == 5
    assert table_rows(storage) == want
    assert table_history(storage, limit=1).entries[0].operation == "RESTORE"

    # Delete a file restoring version 1 would re-add, then ask again.
    planned = restore(storage, version=1)
    assert planned.version is None and planned.restored_files
    gone = planned.restored_files[0]
    assert gone in load_snapshot(storage, 1).files.column("path").to_pylist()
    storage.delete(gone)
    with pytest.raises(RestoreFilesMissingError, match=gone):
        restore(storage, version=1)

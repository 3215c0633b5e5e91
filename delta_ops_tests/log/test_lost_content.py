"""Log files that lost their content must not read as "no change" or "no live files".

A 0-byte commit (a write that lost its content) read as an empty version, and a checkpoint
Parquet file without its `add` column read as a table without live files: `snapshot` and
`fsck` saw nothing wrong, and VACUUM then planned to delete the live files of the real
latest version. Now the empty commit is refused, naming it, and the checkpoint is unusable,
so readers go back to an older checkpoint or the commits.
"""

from __future__ import annotations

import glob

import pyarrow.parquet as pq
import pytest

from delta_ops.errors import CorruptLogError
from delta_ops.log import load_snapshot
from delta_ops.maintenance.vacuum import vacuum
from delta_ops.storage import Storage

NOW_MS = 2_000_000_000_000


def test_an_empty_latest_commit_is_refused_by_name(table_copy):
    root = table_copy("golden__commit-info-containing-arbitrary-operationParams-types")
    latest = sorted((root / "_delta_log").glob("*.json"))[-1]
    latest.write_bytes(b"")
    for read in (lambda: load_snapshot(Storage.for_uri(str(root))),
                 lambda: vacuum(str(root), retention_hours=0, force_retention=True,
                                now_ms=NOW_MS, dry_run=True)):
        with pytest.raises(CorruptLogError, match="empty") as info:
            read()
        assert info.value.file.endswith(latest.name)


@pytest.mark.parametrize(("name", "pattern"), [
    ("golden__dv-partitioned-with-checkpoint", "_delta_log/*.checkpoint.parquet"),
    ("golden__v2-checkpoint-parquet", "_delta_log/_sidecars/*.parquet"),
])
def test_a_checkpoint_file_without_add_is_not_read_as_no_files(table_copy, name, pattern):
    root = table_copy(name)
    storage = Storage.for_uri(str(root))
    before = load_snapshot(storage)
    want = sorted(before.files.column("path").to_pylist())
    plan = vacuum(str(root), retention_hours=0, force_retention=True, now_ms=NOW_MS,
                  dry_run=True)
    path = sorted(glob.glob(str(root / pattern)))[0]
    pq.write_table(pq.read_table(path).drop(["add"]), path)
    after = load_snapshot(storage)
    assert sorted(after.files.column("path").to_pylist()) == want
    assert after.version == before.version
    again = vacuum(str(root), retention_hours=0, force_retention=True, now_ms=NOW_MS,
                   dry_run=True)
    assert again.files == plan.files

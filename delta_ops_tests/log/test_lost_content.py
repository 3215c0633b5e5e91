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


def _commit_info_only(root, version: int) -> None:
    (root / "_delta_log" / f"{version:020d}.json").write_text(
        '{"commitInfo":{"timestamp":1,"operation":"VACUUM START"}}\n')


def test_an_empty_compaction_is_read_past_its_commits_say_what_it_holds(table_copy):
    # `compact` of commitInfo-only commits (deltalake's VACUUM START/END) writes an empty
    # file, as the spec's reconciliation gives; the reader refused it as lost content, so
    # every command refused the table from then on.
    from delta_ops.maintenance.compaction import compact_log

    root = table_copy("golden__commit-info-containing-arbitrary-operationParams-types")
    storage = Storage.for_uri(str(root))
    before = load_snapshot(storage)
    start = before.version + 1
    _commit_info_only(root, start)
    _commit_info_only(root, start + 1)
    result = compact_log(str(root), start=start, end=start + 1)
    assert result.num_actions == 0 and (root / result.file).stat().st_size == 0
    after = load_snapshot(storage)
    assert after.version == start + 1
    assert sorted(after.files.column("path").to_pylist()) == sorted(
        before.files.column("path").to_pylist())
    plan = vacuum(str(root), retention_hours=0, force_retention=True, now_ms=NOW_MS,
                  dry_run=True)
    assert plan.version == start + 1
    # An empty compaction over commits that held files, the commits gone: nothing says
    # what it held, so the table is refused rather than read as "no change" (VACUUM would
    # then delete the files those commits added).
    (root / "_delta_log" / f"{0:020d}.{1:020d}.compacted.json").write_bytes(b"")
    for v in (0, 1):
        (root / "_delta_log" / f"{v:020d}.json").unlink()
    with pytest.raises(CorruptLogError) as info:
        load_snapshot(Storage.for_uri(str(root)))
    assert "the compaction file is empty (0 bytes) and the commits it covers are gone" in (
        info.value.reason)
    assert info.value.file == f"_delta_log/{0:020d}.{1:020d}.compacted.json"

"""On the local file system a bin's new files are written in place, under their final
names (no temporary copy), in row groups of at most `ROW_GROUP_ROWS` rows (1Mi, what
pyarrow and parquet-rs write); a file being written when its bin fails is deleted."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from delta_ops.commit import create_table
from delta_ops.errors import RewriteError
from delta_ops.layout.rewrite import ROW_GROUP_ROWS
from delta_ops.layout.run import run_layout
from delta_ops.log import load_snapshot
from delta_ops.storage import Storage

BIG = ROW_GROUP_ROWS + 200_000


def _table(root, rows: list[int], *, wrong_count_of: int | None = None) -> Storage:
    """A table of one `id long` column, one file per entry of `rows` (ids consecutive)."""
    adds, first = [], 0
    for i, n in enumerate(rows):
        rel = f"part-{i:05d}.snappy.parquet"
        pq.write_table(pa.table({"id": pa.array(range(first, first + n), pa.int64())}),
                       root / rel)
        count = n + 1 if i == wrong_count_of else n
        stats = {"numRecords": count, "minValues": {"id": first},
                 "maxValues": {"id": first + n - 1}, "nullCount": {"id": 0}}
        adds.append({"path": rel, "partitionValues": {}, "size": (root / rel).stat().st_size,
                     "modificationTime": 1_700_000_000_000, "dataChange": True,
                     "stats": json.dumps(stats)})
        first += n
    storage = Storage.for_uri(str(root))
    create_table(storage, pa.schema([("id", pa.int64())]), [], adds=adds,
                 clock=lambda: 1_700_000_000_000)
    return storage


def _data_files(root) -> set[str]:
    return {p.name for p in root.iterdir() if p.is_file()}


def test_files_are_written_in_place_in_row_groups_of_at_most_1mi_rows(tmp_path):
    root = tmp_path / "t"
    root.mkdir()
    storage = _table(root, [BIG, 1_000])
    scratch = tmp_path / "scratch"
    scratch.mkdir()

    result = run_layout(storage, "optimize", target_size="1gb", dry_run=False,
                        scratch_dir=str(scratch))

    assert result.bins_committed == 1 and result.files_added == 1
    assert list(scratch.iterdir()) == []  # nothing went through a temporary file
    snap = load_snapshot(storage)
    (path,) = snap.files.column("path").to_pylist()
    md = pq.ParquetFile(root / path).metadata
    assert [md.row_group(i).num_rows for i in range(md.num_row_groups)] == [
        ROW_GROUP_ROWS, BIG + 1_000 - ROW_GROUP_ROWS]
    ids = pq.read_table(root / path).column("id").to_pylist()
    assert sorted(ids) == list(range(BIG + 1_000))
    # The in-place file is the only new file: no hidden or temporary leftovers.
    assert _data_files(root) == {"part-00000.snappy.parquet", "part-00001.snappy.parquet",
                                 path}


def test_a_failed_bin_deletes_the_file_it_was_writing(tmp_path):
    root = tmp_path / "t"
    root.mkdir()
    # The big input (read after the small one: a bin takes its smallest files first)
    # fills a row group, so the output file is open when that input turns out to hold
    # fewer rows than its stats say.
    storage = _table(root, [BIG, 1_000], wrong_count_of=0)
    before = _data_files(root)

    with pytest.raises(RewriteError, match="numRecords"):
        run_layout(storage, "optimize", target_size="1gb", dry_run=False)

    assert _data_files(root) == before
    assert load_snapshot(storage).version == 0

"""A new file written in place claims its name first (create-exclusive): when a file of
that name is already there, the bin is refused and that file is left byte for byte."""

from __future__ import annotations

import json
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import delta_ops.layout.rewrite as rewrite
from delta_ops.commit import create_table
from delta_ops.errors import RewriteError
from delta_ops.layout.run import run_layout
from delta_ops.log import load_snapshot
from delta_ops.storage import Storage

FIXED = uuid.UUID("00000000-0000-4000-8000-000000000001")


def _small_table(root) -> Storage:
    adds = []
    for i in range(3):
        rel = f"part-{i:05d}.snappy.parquet"
        pq.write_table(pa.table({"id": pa.array([i], pa.int64())}), root / rel)
        adds.append({"path": rel, "partitionValues": {}, "size": (root / rel).stat().st_size,
                     "modificationTime": 1_700_000_000_000, "dataChange": True,
                     "stats": json.dumps({"numRecords": 1})})
    storage = Storage.for_uri(str(root))
    create_table(storage, pa.schema([("id", pa.int64())]), [], adds=adds,
                 clock=lambda: 1_700_000_000_000)
    return storage


def test_a_name_collision_is_refused_and_the_existing_file_kept(tmp_path, monkeypatch):
    root = tmp_path / "t"
    root.mkdir()
    storage = _small_table(root)
    taken = root / f"part-00000-{FIXED}-c000.snappy.parquet"
    taken.write_bytes(b"someone else's bytes")
    monkeypatch.setattr(rewrite.uuid, "uuid5", lambda *_: FIXED)  # force the collision

    with pytest.raises(RewriteError, match="already exists") as info:
        run_layout(storage, "optimize", target_size="1gb", dry_run=False)

    assert str(taken) in str(info.value)
    assert taken.read_bytes() == b"someone else's bytes"
    assert load_snapshot(storage).version == 0


def test_without_a_collision_the_claimed_name_is_the_committed_file(tmp_path, monkeypatch):
    root = tmp_path / "t"
    root.mkdir()
    storage = _small_table(root)
    monkeypatch.setattr(rewrite.uuid, "uuid5", lambda *_: FIXED)

    result = run_layout(storage, "optimize", target_size="1gb", dry_run=False)

    assert result.files_added == 1
    paths = load_snapshot(storage).files.column("path").to_pylist()
    assert paths == [f"part-00000-{FIXED}-c000.snappy.parquet"]
    assert pq.read_table(root / paths[0]).column("id").to_pylist() == [0, 1, 2]

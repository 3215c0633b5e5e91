"""VACUUM `keep_versions` (`--keep-versions`, like deltalake's `vacuum(keep_versions=...)`):
every data file and deletion vector file a kept version needs survives whatever the
retention, and the kept versions still read in full with deltalake; an old version nobody
kept loses its files. The plan protects them (`log.kept_version_references`) and the proof
checks them again on its own: a plan that forgot them is refused. A kept version whose log
is gone is refused (spec "Add File and Remove File", "Deletion Vectors", "Metadata
Cleanup")."""

from __future__ import annotations

import json
import os
import time
import uuid
from datetime import timedelta
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
from deltalake import QueryBuilder

import delta_ops
from delta_ops.commit import Transaction, append_files
from delta_ops.errors import UnsafeDeletionError, VersionNotFoundError
from delta_ops.log import FileReferences
from delta_ops.log.read_options import VACUUM_PARTITION_FILES_ENV
from delta_ops.protocol.arrays import string_array
from delta_ops.protocol.deletion_vectors import RoaringBitmap64
from delta_ops.protocol.filenames import LOG_DIR, commit_name
from delta_ops.storage import Storage
from delta_ops_tests.support.dv_writer import encode_uuid_path, write_dv_file
from delta_ops_tests.support.histories import (
    HistorySpec,
    StepClock,
    build_history,
    new_table,
    write_data_file,
)


def _remove(add: dict, now: int, **extra) -> dict:
    return {"path": add["path"], "deletionTimestamp": now, "dataChange": True,
            "size": add["size"], "partitionValues": {}, **extra}


def _dv_table(root: Path) -> tuple[Storage, dict[str, str]]:
    """v1 adds z; v2 removes it; v3 adds a and b; v4 deletes rows of a through a DV file;
    v5 removes a and b; v6 adds c. Returns the storage and the file names by role."""
    storage = Storage.for_uri(str(root))
    clock = StepClock()
    new_table(storage, deletion_vectors=True, clock=clock)
    z = write_data_file(storage, rows=2, start_id=0, modification_time=clock())
    append_files(storage, [z], clock=clock)
    Transaction(storage, operation="DELETE", clock=clock).remove_files([_remove(z, clock())]) \
        .commit()
    a = write_data_file(storage, rows=4, start_id=10, modification_time=clock())
    b = write_data_file(storage, rows=3, start_id=20, modification_time=clock())
    append_files(storage, [a, b], clock=clock)
    data, [(offset, size)] = write_dv_file([RoaringBitmap64.from_ints([0, 3])])
    u = uuid.uuid4()
    dv_name = f"deletion_vector_{u}.bin"
    storage.put_atomic(dv_name, data)
    dv = {"storageType": "u", "pathOrInlineDv": encode_uuid_path(u), "offset": offset,
          "sizeInBytes": size, "cardinality": 2}
    Transaction(storage, operation="DELETE", clock=clock).remove_files([_remove(a, clock())]) \
        .add_files([{**a, "deletionVector": dv}]).commit()
    now = clock()
    Transaction(storage, operation="DELETE", clock=clock).remove_files(
        [_remove(a, now, deletionVector=dv), _remove(b, now)]
    ).commit()
    c = write_data_file(storage, rows=1, start_id=30, modification_time=clock())
    append_files(storage, [c], clock=clock)
    return storage, {"z": z["path"], "a": a["path"], "b": b["path"], "dv": dv_name,
                     "c": c["path"]}


def _rows(root: Path, version: int) -> list:
    dt = deltalake.DeltaTable(str(root), version=version)
    table = pa.table(QueryBuilder().register("t", dt).execute("select * from t").read_all())
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def _vacuum(storage: Storage, **kwargs):
    return delta_ops.vacuum(storage, retention=timedelta(0), force_retention=True, **kwargs)


@pytest.mark.parametrize("spilled", [False, True], ids=["in-memory", "spilled"])
def test_kept_versions_keep_their_files_and_dv_files(tmp_path: Path, monkeypatch,
                                                     spilled: bool) -> None:
    if spilled:  # the references spilled by bucket, as on a large table
        monkeypatch.setenv(VACUUM_PARTITION_FILES_ENV, "0")
    root = tmp_path / "t"
    storage, names = _dv_table(root)
    want_v4 = _rows(root, 4)
    assert [r["id"] for r in want_v4] == [11, 12, 20, 21, 22]  # rows 0 and 3 of a deleted
    unkept = _vacuum(storage)  # the dry run without keep_versions deletes them all
    assert {names["z"], names["a"], names["b"], names["dv"]} <= set(unkept.files)

    result = _vacuum(storage, keep_versions=[4], dry_run=False)
    assert set(result.files) == {names["z"]}
    assert any("version(s) 4" in m for m in result.messages)
    for role in ("a", "b", "dv", "c"):
        assert (root / names[role]).exists(), role
    assert not (root / names["z"]).exists()
    # The kept version reads in full; the unkept old one lost its file.
    assert _rows(root, 4) == want_v4
    # DataFusion's error comes as a plain Exception naming the missing object.
    with pytest.raises(Exception, match=names["z"].split(".")[0] + r".*not found"):
        _rows(root, 1)


def test_kept_versions_read_in_full_with_to_pyarrow_table(tmp_path: Path) -> None:
    storage = Storage.for_uri(str(tmp_path))
    clock = StepClock()
    new_table(storage, clock=clock)
    files = []
    for i in range(3):  # v1, v2, v3 add f1, f2, f3
        files.append(write_data_file(storage, rows=i + 2, start_id=10 * i,
                                     modification_time=clock()))
        append_files(storage, [files[-1]], clock=clock)
    now = clock()
    Transaction(storage, operation="DELETE", clock=clock).remove_files(
        [_remove(files[0], now), _remove(files[2], now)]
    ).commit()  # v4 removes f1 and f3
    append_files(storage, [write_data_file(storage, rows=1, start_id=99)], clock=clock)  # v5
    rows = {v: deltalake.DeltaTable(str(tmp_path), version=v).to_pyarrow_table().num_rows
            for v in (1, 2, 3)}
    assert rows == {1: 2, 2: 5, 3: 9}
    result = _vacuum(storage, keep_versions=(2,), dry_run=False)
    assert result.files == (files[2]["path"],)  # f1 is version 2's, f3 nobody kept
    for v in (1, 2):  # the kept version, and the older one whose file it shares
        assert deltalake.DeltaTable(str(tmp_path), version=v).to_pyarrow_table().num_rows \
            == rows[v]
    assert deltalake.DeltaTable(str(tmp_path)).to_pyarrow_table().num_rows == 4
    with pytest.raises(OSError):  # version 3 was not kept: f3 is gone
        deltalake.DeltaTable(str(tmp_path), version=3).to_pyarrow_table()
    # Keeping nothing now deletes what only version 2 needed.
    assert _vacuum(storage, dry_run=False).files == (files[0]["path"],)


def test_a_kept_version_whose_log_is_gone_is_refused(tmp_path: Path) -> None:
    storage = Storage.for_uri(str(tmp_path))
    build_history(storage, HistorySpec(steps=(("append", (1,), True),) * 5))
    table = delta_ops.DeltaTable(storage=storage)
    table.checkpoint(version=3)
    past = time.time() - 30 * 86400
    for v in range(6):
        os.utime(tmp_path / LOG_DIR / commit_name(v), (past, past))
    table.cleanup_metadata(retention=timedelta(hours=1), force_retention=True, dry_run=False)
    with pytest.raises(VersionNotFoundError, match="cannot keep version 1"):
        _vacuum(storage, keep_versions=[1, 4], dry_run=False)
    with pytest.raises(VersionNotFoundError, match="cannot keep version 9"):
        _vacuum(storage, keep_versions=[9])
    assert not _vacuum(storage, keep_versions=[3]).files  # the checkpoint reconstructs 3


def test_the_proof_refuses_a_plan_that_forgot_a_kept_version(tmp_path: Path,
                                                              monkeypatch) -> None:
    root = tmp_path / "t"
    storage, names = _dv_table(root)
    from delta_ops.maintenance.vacuum import plan

    def forgetful(storage, versions) -> FileReferences:  # a plan bug, planted
        empty = string_array([])
        return FileReferences(keep=empty, expired=empty, written=empty)

    monkeypatch.setattr(plan, "kept_version_references", forgetful)
    with pytest.raises(UnsafeDeletionError, match="refusing to VACUUM") as info:
        _vacuum(storage, keep_versions=[4], dry_run=False)
    assert info.value.file in {names["a"], names["b"], names["dv"]}
    for role in ("z", "a", "b", "dv"):
        assert (root / names[role]).exists(), role  # nothing was deleted


def test_cli_keep_versions(tmp_path: Path, capsys) -> None:
    import delta_ops.cli as cli

    root = tmp_path / "t"
    storage, names = _dv_table(root)
    code = cli.main([
        "vacuum", storage.root, "--retention-hours", "0", "--force-retention",
        "--keep-versions", "4,3", "--dry-run", "--json",
    ])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["files"] == [names["z"]]
    with pytest.raises(SystemExit):
        cli.main(["vacuum", storage.root, "--keep-versions", "4,x"])
    assert "--keep-versions takes versions" in capsys.readouterr().err

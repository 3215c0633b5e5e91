"""Restores that must not happen, and the ones around them (spec "Add File and Remove
File", "Deletion Vectors", "Metadata Cleanup"): a version whose data or DV file VACUUM (or a
hand) deleted is refused, naming the file, before anything is committed; a version whose
log cleanup removed is refused unless a checkpoint reconstructs it; a concurrent data
change makes the restore refuse; restoring by timestamp; the command line."""

from __future__ import annotations

import json
import os
import time
import uuid
from datetime import timedelta

import pytest

import delta_ops
from delta_ops.commit import Transaction, append_files
from delta_ops.errors import (
    CommitConflictError,
    RestoreFilesMissingError,
    VersionNotFoundError,
)
from delta_ops.log import load_snapshot, read_commit
from delta_ops.maintenance.restore import restore
from delta_ops.protocol.deletion_vectors import RoaringBitmap64
from delta_ops.protocol.filenames import LOG_DIR, commit_name
from delta_ops_tests.support.dv_writer import encode_uuid_path, write_dv_file
from delta_ops_tests.support.histories import (
    HistorySpec,
    StepClock,
    build_history,
    new_table,
    table_rows,
    write_data_file,
)


def _latest(storage) -> int:
    return load_snapshot(storage).version


def test_restore_past_a_vacuumed_version_is_refused_naming_the_file(new_storage, cli) -> None:
    storage = new_storage()
    # v1 adds a file, v2 removes it, v3 adds another.
    build_history(storage, HistorySpec(
        steps=(("append", (3,), True), ("remove", 0), ("append", (2,), True)),
    ))
    gone = load_snapshot(storage, 1).files.column("path").to_pylist()[0]
    vacuumed = delta_ops.vacuum(storage, retention=timedelta(0), force_retention=True,
                                dry_run=False)
    assert gone in vacuumed.files
    with pytest.raises(RestoreFilesMissingError, match=f"cannot restore version 1.*{gone}"
                       ) as info:
        restore(storage, version=1, dry_run=False)
    assert info.value.file == gone and info.value.version == 1
    assert _latest(storage) == 3  # nothing committed
    # The dry run refuses the same way, and so does the command line (exit 1, one line).
    with pytest.raises(RestoreFilesMissingError):
        restore(storage, version=1)
    code, _, err = cli("restore", storage.root, "--version", "1")
    assert code == 1 and gone in err and "cannot restore version 1" in err
    # A version whose files are all there still restores.
    assert restore(storage, version=0, dry_run=False).version == 4


def test_restore_needs_the_deletion_vector_file_too(new_storage, tmp_path) -> None:
    storage = new_storage("dv")
    clock = StepClock()
    new_table(storage, deletion_vectors=True, clock=clock)
    add = write_data_file(storage, rows=4, modification_time=clock())
    append_files(storage, [add], clock=clock)  # v1
    data, [(offset, size)] = write_dv_file([RoaringBitmap64.from_ints([1, 2])])
    u = uuid.uuid4()
    dv_name = f"deletion_vector_{u}.bin"
    storage.put_atomic(dv_name, data)
    with_dv = {**add, "deletionVector": {
        "storageType": "u", "pathOrInlineDv": encode_uuid_path(u), "offset": offset,
        "sizeInBytes": size, "cardinality": 2,
    }}
    now = clock()
    removed = {"path": add["path"], "deletionTimestamp": now, "dataChange": True,
               "size": add["size"], "partitionValues": {}}
    Transaction(storage, operation="DELETE", clock=clock).remove_files([removed]) \
        .add_files([with_dv]).commit()  # v2: rows 1 and 2 deleted through a DV file
    assert table_rows(storage, 2) == [(0, "v0"), (3, "v3")]
    removed_dv = {**removed, "deletionTimestamp": clock(),
                  "deletionVector": with_dv["deletionVector"]}
    Transaction(storage, operation="DELETE", clock=clock).remove_files([removed_dv]).commit()
    os.remove(tmp_path / "dv" / dv_name)
    with pytest.raises(RestoreFilesMissingError, match=dv_name) as info:
        restore(storage, version=2, dry_run=False)
    assert info.value.file == dv_name
    assert _latest(storage) == 3
    # Restoring version 1 needs no DV file: the file comes back whole.
    restore(storage, version=1, dry_run=False)
    assert table_rows(storage) == [(i, f"v{i}") for i in range(4)]


def test_a_version_whose_log_cleanup_removed_is_refused(new_storage, tmp_path) -> None:
    storage = new_storage("cleaned")
    build_history(storage, HistorySpec(steps=(("append", (1,), True),) * 5))
    table = delta_ops.DeltaTable(storage=storage)
    table.checkpoint(version=3)
    past = time.time() - 30 * 86400
    for v in range(6):
        os.utime(tmp_path / "cleaned" / LOG_DIR / commit_name(v), (past, past))
    table.cleanup_metadata(retention=timedelta(hours=1), force_retention=True, dry_run=False)
    with pytest.raises(VersionNotFoundError, match="cannot restore version 1"):
        table.restore(version=1, dry_run=False)
    assert _latest(storage) == 5
    # The checkpoint at 3 reconstructs version 3.
    want = table_rows(storage, 3)
    assert table.restore(version=3, dry_run=False).version == 6
    assert table_rows(storage) == want


def test_a_concurrent_data_change_refuses_the_restore(new_storage) -> None:
    storage = new_storage()
    build_history(storage, HistorySpec(steps=(("append", (2,), True), ("append", (3,), True))))
    calls = []

    def clock() -> int:
        calls.append(1)
        if len(calls) == 2:  # the restore's first commit attempt: another writer wins
            append_files(storage, [write_data_file(storage, rows=1, start_id=100)],
                         clock=StepClock())
        return 1_800_000_000_000 + len(calls)

    with pytest.raises(CommitConflictError):
        restore(storage, version=1, dry_run=False, clock=clock)
    assert _latest(storage) == 3  # the other writer's commit, and no restore
    assert read_commit(storage, 3)[0]["commitInfo"]["operation"] != "RESTORE"


def test_restore_by_timestamp(new_storage) -> None:
    storage = new_storage()
    build_history(storage, HistorySpec(
        in_commit_timestamps=True,
        steps=(("append", (2,), True), ("append", (3,), True), ("remove", 0)),
    ))
    ts = read_commit(storage, 2)[0]["commitInfo"]["inCommitTimestamp"]
    want = table_rows(storage, 2)
    result = restore(storage, timestamp=ts + 1, dry_run=False)
    assert result.restored_version == 2
    assert result.operation_parameters["version"] is None
    assert result.operation_parameters["timestamp"]
    assert table_rows(storage) == want
    with pytest.raises(ValueError, match="a version or a timestamp"):
        restore(storage, version=1, timestamp=ts)


def test_cli_restore(new_storage, cli) -> None:
    storage = new_storage()
    build_history(storage, HistorySpec(steps=(("append", (2,), True), ("remove", 0))))
    code, out, _ = cli("restore", storage.root, "--version", "1", "--dry-run", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["dry_run"] is True and doc["version"] is None
    assert doc["metrics"]["numRestoredFiles"] == 1
    assert _latest(storage) == 2
    code, out, _ = cli("restore", storage.root, "--version", "1")
    assert code == 0 and "restored version 1 as version 3" in out
    assert _latest(storage) == 3
    code, _, err = cli("restore", storage.root)
    assert code == 2 and "--version" in err


def test_restore_keeps_in_commit_timestamps_enabled_after_the_version(new_storage) -> None:
    storage = new_storage()
    build_history(storage, HistorySpec(
        steps=(("append", (2,), True), ("enable_ict",), ("append", (3,), True)),
    ))
    before = load_snapshot(storage).metadata.configuration
    assert before["delta.enableInCommitTimestamps"] == "true"
    want = table_rows(storage, 1)
    result = restore(storage, version=1, dry_run=False)
    after = load_snapshot(storage)
    # Version 1's metadata had no in-commit timestamps; the table keeps them (monotonic).
    for key in ("delta.enableInCommitTimestamps", "delta.inCommitTimestampEnablementVersion",
                "delta.inCommitTimestampEnablementTimestamp"):
        assert after.metadata.configuration[key] == before[key]
    ci = read_commit(storage, result.version)[0]["commitInfo"]
    prev = read_commit(storage, result.version - 1)[0]["commitInfo"]
    assert ci["inCommitTimestamp"] > prev["inCommitTimestamp"]
    assert table_rows(storage) == want
    assert result.protocol_upgraded is False


def test_restore_merges_the_versions_protocol_and_never_downgrades(new_storage) -> None:
    import orjson

    storage = new_storage()
    build_history(storage, HistorySpec(deletion_vectors=True, steps=(("append", (2,), True),)))
    # Version 2 as a DROP FEATURE leaves it: a legacy protocol without deletion vectors.
    md = dict(load_snapshot(storage).metadata.raw)
    md["configuration"] = {}
    actions = [
        {"commitInfo": {"timestamp": 1_700_000_100_000, "operation": "DROP FEATURE"}},
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {"metaData": md},
    ]
    storage.put_atomic(f"{LOG_DIR}/{commit_name(2)}",
                       b"\n".join(orjson.dumps(a) for a in actions) + b"\n")
    assert not load_snapshot(storage).table_configuration.is_feature_supported(
        "deletionVectors")
    result = restore(storage, version=1, dry_run=False)
    assert result.protocol_upgraded
    config = load_snapshot(storage).table_configuration
    assert config.is_feature_supported("deletionVectors")
    for name in ("appendOnly", "invariants"):  # what writer version 2 implied stays
        assert config.is_feature_supported(name)
    assert load_snapshot(storage).metadata.configuration == \
        load_snapshot(storage, 1).metadata.configuration


def test_a_column_mapping_mode_change_is_refused(new_storage) -> None:
    import orjson

    from delta_ops.errors import InvalidCommitError

    storage = new_storage()
    build_history(storage, HistorySpec(steps=(("append", (2,), True),)))
    # Version 2 turns on name mapping, as ALTER TABLE ... SET TBLPROPERTIES does.
    md = dict(load_snapshot(storage).metadata.raw)
    schema = json.loads(md["schemaString"])
    for i, f in enumerate(schema["fields"], 1):
        f["metadata"] = {"delta.columnMapping.id": i,
                         "delta.columnMapping.physicalName": f["name"]}
    md["schemaString"] = json.dumps(schema)
    md["configuration"] = {"delta.columnMapping.mode": "name",
                           "delta.columnMapping.maxColumnId": str(len(schema["fields"]))}
    actions = [
        {"commitInfo": {"timestamp": 1_700_000_100_000, "operation": "SET TBLPROPERTIES"}},
        {"protocol": {"minReaderVersion": 2, "minWriterVersion": 5}},
        {"metaData": md},
    ]
    storage.put_atomic(f"{LOG_DIR}/{commit_name(2)}",
                       b"\n".join(orjson.dumps(a) for a in actions) + b"\n")
    with pytest.raises(InvalidCommitError, match="column mapping mode is 'none'.*'name'"):
        restore(storage, version=1, dry_run=False)
    assert _latest(storage) == 2

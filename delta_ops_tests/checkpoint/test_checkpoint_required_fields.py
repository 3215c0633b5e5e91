"""A checkpoint never publishes a live file whose `add` lacks a field the protocol requires
(spec "Add File and Remove File": path, partitionValues, size, modificationTime,
dataChange). A commit from a faulty writer can hold one; our reader reconciles it, but a
checkpoint carrying it stops readers that load the table from the checkpoint (deltalake:
"Found unmasked nulls for non-nullable StructArray field"). Whatever path writes the
checkpoint (loaded, streamed, rebuilt by bucket, multi-part, V2 with sidecars, V2 JSON with
the actions embedded), it refuses, naming the file, the field, the table and the version,
and the log is left as it was.
"""

from __future__ import annotations

import json

import deltalake
import pytest

from delta_ops.errors import CorruptLogError
from delta_ops.maintenance.checkpoint import write_checkpoint
from delta_ops.protocol import filenames
from delta_ops.storage import Storage

CLASSIC = "golden__basic-with-inserts-deletes-checkpoint"
V2 = "golden__v2-checkpoint-parquet"

KINDS = {
    "classic": (CLASSIC, {}),
    "streamed": (CLASSIC, {"stream_threshold": 0}),
    "rebuilt": (CLASSIC, {"rebuild": True}),
    "multi-part": (CLASSIC, {"parts": 2}),
    "v2 sidecars": (V2, {"kind": "v2-uuid", "sidecar_actions": 1}),
    "v2 json embedded": (V2, {"kind": "v2-uuid", "fmt": "json", "sidecar_actions": 0}),
}


def _append_add(root, drop: str) -> int:
    log = root / "_delta_log"
    version = max(int(p.name[:20]) for p in log.glob("*.json") if p.name[:20].isdigit()) + 1
    add = {"path": "faulty-writer.parquet", "partitionValues": {}, "size": 123,
           "modificationTime": 1_700_000_000_000, "dataChange": True}
    add.pop(drop, None)
    (log / filenames.commit_name(version)).write_text(json.dumps({"add": add}) + "\n")
    return version


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("drop", ["size", "modificationTime", "dataChange"])
def test_a_live_file_without_a_required_field_is_not_published(table_copy, kind, drop):
    name, options = KINDS[kind]
    root = table_copy(name)
    version = _append_add(root, drop)
    before = sorted(str(p.relative_to(root)) for p in (root / "_delta_log").rglob("*"))

    with pytest.raises(CorruptLogError) as info:
        write_checkpoint(Storage.for_uri(str(root)), **options)

    err = info.value
    assert f"the live file 'faulty-writer.parquet' has no {drop}" in err.reason
    assert (err.table, err.version) == (Storage.for_uri(str(root)).root, version)
    # Nothing written, no sidecar either.
    assert sorted(str(p.relative_to(root)) for p in (root / "_delta_log").rglob("*")) == before


def test_the_same_table_with_the_field_given_checkpoints_and_deltalake_reads_it(table_copy):
    root = table_copy(CLASSIC)
    log = root / "_delta_log"
    version = _append_add(root, "stats")  # stats is optional: nothing required is missing
    result = write_checkpoint(Storage.for_uri(str(root)))
    assert result.version == version and not result.already_existed
    # Only the checkpoint is read from here: the commits before it are gone from the view.
    for p in log.glob("*.json"):
        p.rename(p.with_suffix(".json.hidden"))
    dt = deltalake.DeltaTable(str(root))
    assert dt.version() == version
    assert any(u.endswith("faulty-writer.parquet") for u in dt.file_uris())

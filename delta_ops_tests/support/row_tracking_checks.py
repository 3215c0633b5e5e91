"""What a row-tracking backfill must leave behind, checked (shared by the loaded and streamed
backfill tests)."""

from __future__ import annotations

import json

from delta_ops.commit.row_ids import (
    ENABLE_ROW_TRACKING,
    MATERIALIZED_ROW_COMMIT_VERSION_COLUMN,
    MATERIALIZED_ROW_ID_COLUMN,
    column_names,
    high_water_mark,
    max_assigned_row_id,
)
from delta_ops.log.snapshot.loaded_snapshot import Snapshot
from delta_ops.maintenance.row_tracking import (
    row_counts,
    verify_row_tracking,
)
from delta_ops.protocol import features


def file_state(snap: Snapshot) -> list[tuple]:
    """What must not change: every live file's path, size, partition values and DV."""
    rows = snap.files.select(["path", "size", "partitionValues", "deletionVector"]).to_pylist()
    return sorted(
        (r["path"], r["size"], sorted(r["partitionValues"] or []), json.dumps(r["deletionVector"]))
        for r in rows
    )


def assert_backfilled(snap: Snapshot) -> None:
    assert verify_row_tracking(snap) == []
    counts = row_counts(snap)
    assert high_water_mark(snap.domains) >= max_assigned_row_id(snap.files, counts=counts)
    assert snap.files.column("baseRowId").null_count == 0
    assert snap.files.column("defaultRowCommitVersion").null_count == 0
    config = snap.metadata.configuration
    assert config[ENABLE_ROW_TRACKING] == "true"
    names = [config[MATERIALIZED_ROW_ID_COLUMN], config[MATERIALIZED_ROW_COMMIT_VERSION_COLUMN]]
    assert len(set(names)) == 2
    assert not {n.lower() for n in names} & {c.lower() for c in column_names(snap.schema)}
    assert features.is_feature_enabled(snap.protocol, config, "rowTracking")
    assert features.is_feature_supported(snap.protocol, "domainMetadata")

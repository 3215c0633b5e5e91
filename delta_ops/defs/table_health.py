"""What the `delta_log` materialization shows of a table beyond its state: the health of its
data layout and the last maintenance commits of its history.

- `layout_health`: small files, the share of live files with a deletion vector, and the
  share whose statistics have `numRecords` (spec "Per-file Statistics", "Deletion
  Vectors"), from a loaded snapshot.
- `last_operations`: the newest OPTIMIZE, VACUUM and FSCK commits among the table's last
  `HISTORY_COMMITS` (`delta_ops.maintenance.history`, spec "Commit Provenance
  Information"), which the fleet overview lists too (`delta_ops.defs.overview`).
"""

from __future__ import annotations

from typing import Any


def layout_health(snap: Any, small_file_bytes: int) -> dict[str, Any]:
    """`small_files`, `deletion_vector_share` and `stats_coverage` of a loaded snapshot (the
    shares as fractions of the live files; 1.0 / 0.0 for a table without files)."""
    import pyarrow.compute as pc

    files = snap.files
    n = files.num_rows
    if n == 0:
        return {"small_files": 0, "deletion_vector_share": 0.0, "stats_coverage": 1.0}
    small = pc.sum(pc.less(files.column("size"), small_file_bytes)).as_py() or 0
    dvs = 0
    if "deletionVector" in files.column_names:
        dvs = n - files.column("deletionVector").null_count
    with_stats = 0
    if "stats" in files.column_names:
        stats = files.column("stats")
        with_stats = pc.sum(pc.match_substring(pc.fill_null(stats, ""), '"numRecords"')
                            ).as_py() or 0
    return {
        "small_files": int(small),
        "deletion_vector_share": round(dvs / n, 4),
        "stats_coverage": round(with_stats / n, 4),
    }


#: Commits `last_operations` reads, newest first (a bounded read on every log observation).
HISTORY_COMMITS = 50
#: The history's operations the `delta_log` asset and the fleet overview show the last of
#: (metadata key -> `commitInfo.operation` values).
HISTORY_OPERATIONS = {
    "last_optimize_commit": ("OPTIMIZE",),
    "last_vacuum_commit": ("VACUUM END", "VACUUM START"),
    "last_fsck_commit": ("FSCK",),
}


def last_operations(storage: Any) -> dict[str, Any]:
    """The newest OPTIMIZE, VACUUM and FSCK commits among the table's last
    `HISTORY_COMMITS` (`delta_ops.maintenance.history.table_history`, spec "Commit
    Provenance Information"): `last_optimize_commit` etc. as `"v<version> <UTC time>"`, empty when
    none is among them (VACUUM is in the history only when it records it:
    `vacuum.record_history`)."""
    import datetime as dt

    from delta_ops.maintenance.history import table_history

    history = table_history(storage, limit=HISTORY_COMMITS)
    out = {key: "" for key in HISTORY_OPERATIONS}
    for entry in history.entries:  # newest first
        for key, operations in HISTORY_OPERATIONS.items():
            if not out[key] and entry.operation in operations:
                when = dt.datetime.fromtimestamp(entry.timestamp / 1000, dt.UTC)
                out[key] = f"v{entry.version} {when:%Y-%m-%d %H:%M}"
    return out


__all__ = ["HISTORY_COMMITS", "HISTORY_OPERATIONS", "last_operations", "layout_health"]

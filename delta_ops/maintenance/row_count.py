"""How many rows a version holds, from its file statistics (spec "Per-file Statistics":
`numRecords`; "Deletion Vectors": `deletionVector.cardinality` rows removed from a file).

The count is known only when every live file's statistics give `numRecords`; it is then
their sum less the rows the files' deletion vectors remove. Each `stats` string is parsed
as JSON (its top-level `numRecords`, not a column of that name inside the bounds). No I/O:
the snapshot already holds the statistics.
"""

from __future__ import annotations

from typing import Any

import orjson


def _num_records(stats: str | None) -> int | None:
    if not stats:
        return None
    try:
        parsed = orjson.loads(stats)
    except orjson.JSONDecodeError:
        return None
    value = parsed.get("numRecords") if isinstance(parsed, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def live_row_count(snapshot: Any) -> int | None:
    """The rows of `snapshot`'s version (a loaded Snapshot: `files` is an Arrow table), or
    None when a live file's statistics lack `numRecords`. A table without files has 0."""
    if not snapshot.num_files:
        return 0
    files = snapshot.files
    rows = 0
    for stats in files.column("stats").to_pylist():
        count = _num_records(stats)
        if count is None:
            return None
        rows += count
    if "deletionVector" in files.column_names:
        for dv in files.column("deletionVector").to_pylist():
            rows -= (dv or {}).get("cardinality") or 0
    return rows


__all__ = ["live_row_count"]

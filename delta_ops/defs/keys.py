"""The asset keys of a registered table: one per maintenance component, and their lineage.

Each registered table `t` gets, in its group, the keys `[t, <component>]`:

    delta_log (observed: data version = table version)
      -> checkpoint -> metadata_cleanup
      -> version_checksum
      -> log_compaction
      -> vacuum
      -> row_tracking
      -> optimize
      -> stats

The components `delta_ops.maintenance.due` decides about keep its names.
"""

from __future__ import annotations

import functools

from dagster import AssetKey

from delta_ops.maintenance.due import CHECKPOINT, LOG_COMPACTION, VERSION_CHECKSUM

DELTA_LOG = "delta_log"
METADATA_CLEANUP = "metadata_cleanup"
VACUUM = "vacuum"
ROW_TRACKING = "row_tracking"
#: The data layout (`delta_ops.layout`): OPTIMIZE (with the purge of deletion vectors), and
#: statistics computed from the data.
OPTIMIZE = "optimize"
STATS = "stats"
#: Every component of a table, upstream first.
COMPONENTS = (
    DELTA_LOG, CHECKPOINT, VERSION_CHECKSUM, LOG_COMPACTION, METADATA_CLEANUP, VACUUM, ROW_TRACKING,
    OPTIMIZE, STATS,
)
#: Lineage inside one table: component -> the component it depends on.
UPSTREAM = {
    CHECKPOINT: DELTA_LOG,
    VERSION_CHECKSUM: DELTA_LOG,
    LOG_COMPACTION: DELTA_LOG,
    VACUUM: DELTA_LOG,
    ROW_TRACKING: DELTA_LOG,
    OPTIMIZE: DELTA_LOG,
    STATS: DELTA_LOG,
    METADATA_CLEANUP: CHECKPOINT,
}


@functools.lru_cache(maxsize=65536)
def asset_key(table: str, component: str) -> AssetKey:
    """`[table, component]` (kept: a sensor tick asks for thousands, an `AssetKey` is
    immutable and checking its parts costs more than looking one up)."""
    return AssetKey([table, component])


#: The first part of every key of the partitioned layout (`delta_ops.defs.fleet`), and its
#: group: `[delta_tables, component]`, one partition per table.
FLEET_PREFIX = "delta_tables"


@functools.lru_cache(maxsize=64)
def fleet_key(component: str) -> AssetKey:
    """`[delta_tables, component]`: the key of a component in the partitioned layout."""
    return AssetKey([FLEET_PREFIX, component])


def table_key(table: str, component: str, partitioned: bool) -> tuple[AssetKey, str | None]:
    """The key and partition a run records `table`'s `component` under: `[table,
    component]`, or in the partitioned layout the partition `table` of `[delta_tables,
    component]`."""
    if partitioned:
        return fleet_key(component), table
    return asset_key(table, component), None


__all__ = [
    "CHECKPOINT",
    "COMPONENTS",
    "DELTA_LOG",
    "FLEET_PREFIX",
    "LOG_COMPACTION",
    "METADATA_CLEANUP",
    "OPTIMIZE",
    "ROW_TRACKING",
    "STATS",
    "UPSTREAM",
    "VACUUM",
    "VERSION_CHECKSUM",
    "asset_key",
    "fleet_key",
    "table_key",
]

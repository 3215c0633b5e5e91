"""Sensors: one watches every registered table's log; one keeps the table partitions in sync;
one refreshes the discovery cache of a `DeltaMaintenanceComponent` that discovers tables.

`delta_tables_watch` lives in `delta_ops.defs.watch` (imported here): it reads every
table's log cheaply, reports health, observations and the fleet overview, and requests
maintenance runs of several tables each, bounded per tick.

`delta_tables_partitions` (running by default) adds a `delta_tables` partition for each
registered table and removes those of tables no longer registered, so the backfill launcher
of `row_tracking_backfill` offers exactly the registered tables.

`delta_tables_discovery` (running by default, every 10 minutes unless the component's
`discovery_interval_seconds` says otherwise; only where the component has `discover`
specs) lists the discovery prefixes and rewrites the discovery cache
(`delta_ops.defs.sources.refresh_discovery`): loading the definitions reads the cache and
never lists a bucket. Tables it adds or removes change the assets at the next reload of
the code location; its skip reason names them and says so (Dagster has no supported way
for a sensor to reload its own code location).

Protocol sections: see `delta_ops.log.segment.log_state` and `delta_ops.maintenance.due`.
"""

from typing import Any

from dagster import (
    DefaultSensorStatus,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from delta_ops.defs.jobs import TABLE_PARTITIONS
from delta_ops.defs.registry import Registry
from delta_ops.defs.resources import RegistryResource
from delta_ops.defs.sources import RegistrySource, refresh_discovery
from delta_ops.defs.watch import (
    DATA_VERSION_TAG,
    EVENTS_PER_TICK,
    WATCH_SENSOR,
    InFlight,
    WatchTick,
    evaluate_watch,
    log_observation,
    runs_in_flight,
    watch_sensor,
    watch_tick,
)
from delta_ops.defs.watch_cursor import dump_cursor, load_cursor

PARTITIONS_SENSOR = "delta_tables_partitions"
DISCOVERY_SENSOR = "delta_tables_discovery"


def discovery_sensor(source: RegistrySource, partitioned: bool = False):
    """Rescans the discovery prefixes into the cache (the only place a prefix is listed).
    `partitioned`: the definitions are in the partitioned layout (no reload needed)."""

    @sensor(
        name=DISCOVERY_SENSOR,
        minimum_interval_seconds=source.discovery_interval_seconds,
        default_status=DefaultSensorStatus.RUNNING,
        description="Lists the discovery prefixes for Delta tables and rewrites the "
        "discovery cache; new tables get their assets when the code location reloads (in "
        "the partitioned layout, their partitions at once).",
    )
    def delta_tables_discovery(context: SensorEvaluationContext) -> SkipReason:
        found = refresh_discovery(source)
        for line in found["errors"]:
            context.log.warning(line)
        for what in ("added", "removed"):
            names = found[what]
            for name in names[:MAX_NAMED]:
                context.log.info(f"discovery: {what} {name}")
            if len(names) > MAX_NAMED:
                context.log.info(f"discovery: ... and {len(names) - MAX_NAMED} more {what}")
        return SkipReason(discovery_message(found, partitioned))

    return delta_tables_discovery


#: Most table names a discovery message names (the tick's log lines, the skip reason).
MAX_NAMED = 20


def discovery_message(found: dict[str, Any], partitioned: bool = False) -> str:
    """What the discovery tick shows in the UI (its skip reason): how many tables, which
    are new or gone (at most `MAX_NAMED` named), that a reload adds or drops their assets
    (Dagster has no supported way for a sensor to reload its own code location), and the
    prefixes that failed."""

    def named(names: list[str]) -> str:
        shown = ", ".join(names[:5])
        return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "")

    parts = [f"{found['found']} discovered tables"]
    if found["added"]:
        parts.append(f"{len(found['added'])} new: {named(found['added'])}")
    if found["removed"]:
        parts.append(f"{len(found['removed'])} gone: {named(found['removed'])}")
    if (found["added"] or found["removed"]) and partitioned:
        parts.append("their partitions follow at the next tick of delta_tables_partitions")
    elif found["added"] or found["removed"]:
        parts.append("reload the code location (Deployment → Reload) to update their assets")
    if found["errors"]:
        parts.append(f"{len(found['errors'])} prefixes failed: {found['errors'][0]}")
    return "; ".join(parts)


def partitions_sensor(registry: Registry, backfill_job):
    """Keeps the table partitions equal to the tables: those the definitions loaded, or in the
    partitioned layout the registry as it is now (a table discovery adds gets its partition,
    and so its assets, without a reload)."""
    loaded = registry.names

    @sensor(
        name=PARTITIONS_SENSOR,
        job=backfill_job,
        minimum_interval_seconds=30,
        default_status=DefaultSensorStatus.RUNNING,
        description="Keeps the delta_tables partitions (row_tracking_backfill) equal to the "
        "registered tables.",
    )
    def delta_tables_partitions(
        context: SensorEvaluationContext, registry: RegistryResource
    ) -> SensorResult | SkipReason:
        current = registry.load()
        names = current.names if current.partitioned else loaded
        existing = set(context.instance.get_dynamic_partitions(TABLE_PARTITIONS.name))
        add = [n for n in names if n not in existing]
        remove = sorted(existing - set(names))
        if not add and not remove:
            return SkipReason(f"partitions already match the {len(names)} registered tables")
        context.log.info(
            f"partitions: adding {len(add)} ({', '.join(add[:MAX_NAMED])}"
            f"{' ...' if len(add) > MAX_NAMED else ''}), removing {len(remove)} "
            f"({', '.join(remove[:MAX_NAMED])}{' ...' if len(remove) > MAX_NAMED else ''})"
        )
        reqs = []
        if add:
            reqs.append(TABLE_PARTITIONS.build_add_request(add))
        if remove:
            reqs.append(TABLE_PARTITIONS.build_delete_request(remove))
        return SensorResult(dynamic_partitions_requests=reqs)

    return delta_tables_partitions


__all__ = [
    "DATA_VERSION_TAG",
    "EVENTS_PER_TICK",
    "InFlight",
    "runs_in_flight",
    "DISCOVERY_SENSOR",
    "MAX_NAMED",
    "PARTITIONS_SENSOR",
    "discovery_message",
    "WatchTick",
    "discovery_sensor",
    "log_observation",
    "watch_tick",
    "WATCH_SENSOR",
    "dump_cursor",
    "evaluate_watch",
    "load_cursor",
    "partitions_sensor",
    "watch_sensor",
]

"""Sensors: one watches every registered table's log; one keeps the table partitions in sync.

`delta_tables_watch` (stopped by default: turn it on in the UI's Automation tab) looks at
each table cheaply, with no snapshot replay and no Spark (`delta_ops.log.state`:
`_last_checkpoint`, a listing from the checkpoint it names, protocol and properties read
from new commits only), and requests a run of the `maintenance` job for each component
`delta_ops.maintenance.due` finds due (the same decisions as `delta-ops due`): a checkpoint
(commits since the last one reached the interval), a version checksum (the latest version
has no `.crc`) or log compaction (a window of the compaction policy has no file). A
component the table's protocol forbids is logged, never requested. Run keys are
`table:component:version`, so a request is made once per version whatever the tick rate.
The cursor (JSON, persisted by Dagster across restarts) keeps per table the version last
seen and the protocol and properties learned (`TableSettings.to_json`), so a quiet table
costs one small read and one short listing per tick.

`delta_tables_partitions` (running by default) adds a `delta_tables` partition for each
registered table and removes those of tables no longer registered, so the backfill launcher
of `row_tracking_backfill` offers exactly the registered tables.

Protocol sections: see `delta_ops.log.state` and `delta_ops.maintenance.due`.
"""


import json
from collections.abc import Callable
from typing import Any

from dagster import (
    DefaultSensorStatus,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from delta_ops.defs.jobs import TABLE_PARTITIONS
from delta_ops.defs.keys import asset_key
from delta_ops.defs.registry import Registry
from delta_ops.defs.resources import RegistryResource
from delta_ops.errors import DeltaOpsError, NotATableError
from delta_ops.log.state import TableSettings, inspect_log, read_settings
from delta_ops.maintenance.due import due

WATCH_SENSOR = "delta_tables_watch"
PARTITIONS_SENSOR = "delta_tables_partitions"
CURSOR_FORMAT = 1


def load_cursor(cursor: str | None) -> dict[str, dict[str, Any]]:
    """Per-table cursor entries; an absent or unreadable cursor starts afresh."""
    if not cursor:
        return {}
    try:
        obj = json.loads(cursor)
    except ValueError:
        return {}
    if not isinstance(obj, dict) or obj.get("format") != CURSOR_FORMAT:
        return {}
    tables = obj.get("tables")
    return tables if isinstance(tables, dict) else {}


def dump_cursor(tables: dict[str, dict[str, Any]]) -> str:
    return json.dumps({"format": CURSOR_FORMAT, "tables": tables}, sort_keys=True)


def evaluate_watch(
    registry: Registry, cursor: str | None, log: Callable[[str], None]
) -> tuple[list[RunRequest], str]:
    """One tick of the watch sensor: (run requests, new cursor). Never raises for one
    table's problem: a missing table or a broken log is logged and skipped."""
    previous = load_cursor(cursor)
    entries: dict[str, dict[str, Any]] = {}
    requests: list[RunRequest] = []
    for table in registry.tables:
        entry = dict(previous.get(table.name) or {})
        try:
            storage = table.storage()
            state = inspect_log(storage)
            settings = read_settings(
                storage, state, TableSettings.from_json(entry.get("settings"))
            )
        except NotATableError:
            log(f"{table.name}: no Delta table at {table.uri} yet")
            entries[table.name] = {"status": "missing"}
            continue
        except DeltaOpsError as exc:
            log(f"{table.name}: cannot inspect the log: {exc}")
            entries[table.name] = {**entry, "status": "error"}
            continue
        report = due(state, settings, table.policy.due_policy)
        # Unchanged since the last tick: the same run keys again (Dagster skips keys it has
        # seen), without repeating the log lines.
        changed = entry.get("version") != state.version
        for need in report.blocked if changed else ():
            log(f"{table.name}: {need.component} needed ({need.reason}) but the table uses "
                f"features delta_ops cannot maintain: {', '.join(need.blocked_by)}")
        for need in report.runnable:
            if changed:
                log(f"{table.name}: requesting {need.component} at version {need.version}: "
                    f"{need.reason}")
            requests.append(
                RunRequest(
                    run_key=f"{table.name}:{need.component}:{need.version}",
                    asset_selection=[asset_key(table.name, need.component)],
                    tags={
                        "delta_ops/table": table.name,
                        "delta_ops/component": need.component,
                        "delta_ops/version": str(need.version),
                    },
                )
            )
        entries[table.name] = {
            "status": "ok",
            "version": state.version,
            "settings": settings.to_json(),
        }
    return requests, dump_cursor(entries)


def watch_sensor(maintenance_job):
    @sensor(
        name=WATCH_SENSOR,
        job=maintenance_job,
        minimum_interval_seconds=60,
        default_status=DefaultSensorStatus.STOPPED,
        description="Watches every registered table's log (no replay, no Spark) and runs "
        "maintenance for a table that needs a checkpoint, a version checksum or log "
        "compaction.",
    )
    def delta_tables_watch(
        context: SensorEvaluationContext, registry: RegistryResource
    ) -> SensorResult:
        requests, cursor = evaluate_watch(registry.load(), context.cursor, context.log.info)
        if not requests:
            return SensorResult(
                skip_reason=SkipReason("no registered table needs maintenance"), cursor=cursor
            )
        return SensorResult(run_requests=requests, cursor=cursor)

    return delta_tables_watch


def partitions_sensor(registry: Registry, backfill_job):
    names = registry.names

    @sensor(
        name=PARTITIONS_SENSOR,
        job=backfill_job,
        minimum_interval_seconds=30,
        default_status=DefaultSensorStatus.RUNNING,
        description="Keeps the delta_tables partitions (row_tracking_backfill) equal to the "
        "registered tables.",
    )
    def delta_tables_partitions(context: SensorEvaluationContext) -> SensorResult | SkipReason:
        existing = set(context.instance.get_dynamic_partitions(TABLE_PARTITIONS.name))
        add = [n for n in names if n not in existing]
        remove = sorted(existing - set(names))
        if not add and not remove:
            return SkipReason(f"partitions already match the {len(names)} registered tables")
        context.log.info(f"partitions: adding {add or 'none'}, removing {remove or 'none'}")
        reqs = []
        if add:
            reqs.append(TABLE_PARTITIONS.build_add_request(add))
        if remove:
            reqs.append(TABLE_PARTITIONS.build_delete_request(remove))
        return SensorResult(dynamic_partitions_requests=reqs)

    return delta_tables_partitions


__all__ = [
    "PARTITIONS_SENSOR",
    "WATCH_SENSOR",
    "dump_cursor",
    "evaluate_watch",
    "load_cursor",
    "partitions_sensor",
    "watch_sensor",
]

"""Schedules: VACUUM and metadata cleanup of each table, on the cron its policy sets.

One schedule per table and operation, `<table>_vacuum` and `<table>_metadata_cleanup`,
each requesting a `maintenance` run of that one asset (`[table, vacuum]` or
`[table, metadata_cleanup]`). A policy cron of `null` means no schedule. Schedules are
stopped by default (they delete files): turn them on in the UI's Automation tab. Times are
UTC.

Protocol sections: "VACUUM Protocol Check", "Metadata Cleanup" (through the assets).
"""


from dagster import (
    DefaultScheduleStatus,
    RunRequest,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    schedule,
)

from delta_ops.defs.assets import METADATA_CLEANUP, VACUUM, asset_key
from delta_ops.defs.registry import RegisteredTable, Registry

#: Operation -> the policy section holding its cron.
SCHEDULED = {VACUUM: "vacuum", METADATA_CLEANUP: "cleanup"}


def schedule_name(table: str, component: str) -> str:
    return f"{table}_{component}"


def table_schedule(table: RegisteredTable, component: str, cron: str, job) -> ScheduleDefinition:
    name = table.name

    @schedule(
        name=schedule_name(name, component),
        cron_schedule=cron,
        job=job,
        execution_timezone="UTC",
        default_status=DefaultScheduleStatus.STOPPED,
        description=f"{component} of {name} ({cron}, UTC)",
        tags={"delta_ops/table": name, "delta_ops/component": component},
    )
    def _tick(context: ScheduleEvaluationContext) -> RunRequest:
        return RunRequest(
            run_key=f"{name}:{component}:{context.scheduled_execution_time.isoformat()}",
            asset_selection=[asset_key(name, component)],
            tags={"delta_ops/table": name, "delta_ops/component": component},
        )

    return _tick


def all_schedules(registry: Registry, job) -> list[ScheduleDefinition]:
    """Every table's vacuum and cleanup schedule whose cron is set."""
    out = []
    for table in registry.tables:
        for component, section in SCHEDULED.items():
            cron = getattr(table.policy, section).cron
            if cron is not None:
                out.append(table_schedule(table, component, cron, job))
    return out


__all__ = ["SCHEDULED", "all_schedules", "schedule_name", "table_schedule"]
